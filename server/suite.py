"""Suite manifests (DESIGN §2): loading, validation and deterministic writing.

A suite is a directory holding ``suite.json`` (name, version, generator, seed, voice map,
preamble), ``scenarios.jsonl`` (one scenario version per line) and ``clips/`` (24 kHz
mono 16-bit WAV or FLAC). :func:`validate_suite` implements the rules of §2 and returns
human-readable problems rather than raising, so ``mpe dataset validate`` can list them
all at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections import defaultdict
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterable, Literal

import numpy as np
import soundfile as sf
from pydantic import BaseModel, ConfigDict, ValidationError

CLIP_RATE = 24_000
SUITE_FILE = "suite.json"
SCENARIOS_FILE = "scenarios.jsonl"

LABELS: frozenset[str] = frozenset({"T", "N1", "N2", "N3", "N4Q", "N4R"})
SPEAKERS: frozenset[str] = frozenset({"A", "B", "C", "D"})
CONDITIONS: tuple[str, str] = ("explicit", "implicit")

# §2: "clip durations match the audio" -- tolerance of one millisecond.
DURATION_TOLERANCE_S = 0.001


class SuiteError(ValueError):
    """A suite cannot be read or a clip path/clip is unusable."""


class _Manifest(BaseModel):
    # Later issues add fields; unknown keys are kept and written back unchanged.
    model_config = ConfigDict(extra="allow")


class Turn(_Manifest):
    idx: int
    speaker: str  # A-D; checked by validate_suite so all problems are reported at once
    label: str  # one of LABELS; checked by validate_suite
    text: str
    clip: str
    duration_s: float
    addressee: str | None = None


class Scenario(_Manifest):
    scenario_id: str
    pair_id: str
    condition: Literal["explicit", "implicit"]
    n_speakers: int
    t_bucket: str
    attributes: dict[str, str]
    gold_answer: str
    answer_keys: list[list[str]] | None = None
    turns: list[Turn]

    @property
    def labels(self) -> list[str]:
        return [t.label for t in self.turns]

    @property
    def t_index(self) -> int:
        """Position of the (single) T turn; raises SuiteError if there is not exactly one."""
        found = [i for i, t in enumerate(self.turns) if t.label == "T"]
        if len(found) != 1:
            raise SuiteError(f"scenario {self.scenario_id}/{self.condition} has {len(found)} T turns")
        return found[0]


class Preamble(_Manifest):
    text: str
    clip: str
    duration_s: float


class SuiteMeta(_Manifest):
    name: str
    version: str
    generator: str
    seed: int
    voices: dict[str, str]
    preamble: Preamble


def _format_validation_error(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        parts.append(f"{loc}: {e['msg']}")
    more = len(err.errors()) - 5
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts)


class Suite:
    """A suite: metadata, scenarios and access to its clips.

    Treat it as immutable once built: the scenario index and the content hash of a
    loaded suite are taken at load time.
    """

    def __init__(self, root: Path | str, meta: SuiteMeta, scenarios: list[Scenario]) -> None:
        self.root = Path(root)
        self.meta = meta
        self.scenarios = scenarios
        self._index: dict[tuple[str, str], Scenario] = {}
        for sc in scenarios:
            self._index.setdefault((sc.scenario_id, sc.condition), sc)
        self._raw: tuple[bytes, bytes] | None = None

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(cls, path: Path | str) -> "Suite":
        """Load a suite directory (or its ``suite.json``).

        Raises SuiteError naming the file (and line for ``scenarios.jsonl``) on missing
        files, invalid JSON or schema errors.
        """
        path = Path(path)
        root = path.parent if path.name == SUITE_FILE and path.is_file() else path
        suite_file = root / SUITE_FILE
        scen_file = root / SCENARIOS_FILE
        try:
            meta_bytes = suite_file.read_bytes()
        except FileNotFoundError:
            raise SuiteError(f"{suite_file}: not found (is {root} a suite directory?)") from None
        except OSError as e:
            raise SuiteError(f"{suite_file}: cannot read: {e.strerror}") from None
        try:
            scen_bytes = scen_file.read_bytes()
        except FileNotFoundError:
            raise SuiteError(f"{scen_file}: not found") from None
        except OSError as e:
            raise SuiteError(f"{scen_file}: cannot read: {e.strerror}") from None

        try:
            meta_obj = json.loads(meta_bytes.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise SuiteError(f"{suite_file}: not UTF-8 ({e.reason})") from None
        except json.JSONDecodeError as e:
            raise SuiteError(
                f"{suite_file}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}"
            ) from None
        try:
            meta = SuiteMeta.model_validate(meta_obj)
        except ValidationError as e:
            raise SuiteError(f"{suite_file}: schema error: {_format_validation_error(e)}") from None

        try:
            scen_text = scen_bytes.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SuiteError(f"{scen_file}: not UTF-8 ({e.reason})") from None
        scenarios: list[Scenario] = []
        for lineno, line in enumerate(scen_text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise SuiteError(
                    f"{scen_file}:{lineno}:{e.colno}: invalid JSON: {e.msg}"
                ) from None
            try:
                scenarios.append(Scenario.model_validate(obj))
            except ValidationError as e:
                raise SuiteError(
                    f"{scen_file}:{lineno}: schema error: {_format_validation_error(e)}"
                ) from None

        suite = cls(root, meta, scenarios)
        suite._raw = (meta_bytes, scen_bytes)
        return suite

    # ---------------------------------------------------------------- access

    def scenario(self, scenario_id: str, condition: str) -> Scenario:
        try:
            return self._index[(scenario_id, condition)]
        except KeyError:
            raise SuiteError(
                f"suite {self.meta.name!r} has no scenario {scenario_id!r} in condition {condition!r}"
            ) from None

    def pairs(self) -> dict[str, dict[str, Scenario]]:
        """pair_id -> {condition: scenario} (first occurrence wins on duplicates)."""
        out: dict[str, dict[str, Scenario]] = defaultdict(dict)
        for sc in self.scenarios:
            out[sc.pair_id].setdefault(sc.condition, sc)
        return dict(out)

    def clip_path(self, rel: str) -> Path:
        """Resolve a manifest clip path under the suite root.

        Rejects absolute paths, '..' components and paths that resolve outside the root
        (e.g. through a symlink).
        """
        if not isinstance(rel, str) or not rel.strip():
            raise SuiteError(f"clip path {rel!r} is empty")
        if "\x00" in rel:
            raise SuiteError(f"clip path {rel!r} contains a NUL byte")
        posix, win = PurePosixPath(rel), PureWindowsPath(rel)
        if posix.is_absolute() or win.is_absolute() or win.drive or rel.startswith(("/", "\\")):
            raise SuiteError(f"clip path {rel!r} is absolute; clip paths are relative to the suite")
        if ".." in posix.parts or ".." in win.parts:
            raise SuiteError(f"clip path {rel!r} escapes the suite directory")
        root = self.root.resolve()
        resolved = (root / posix).resolve()
        if not resolved.is_relative_to(root):
            raise SuiteError(f"clip path {rel!r} resolves outside the suite directory")
        return resolved

    def load_clip(self, rel: str) -> np.ndarray:
        """Read a clip as int16 mono samples at 24 kHz."""
        path = self.clip_path(rel)
        try:
            data, rate = sf.read(str(path), dtype="int16", always_2d=True)
        except FileNotFoundError:
            raise SuiteError(f"clip {rel!r} not found") from None
        except (sf.LibsndfileError, RuntimeError, OSError) as e:
            if not path.exists():
                raise SuiteError(f"clip {rel!r} not found") from None
            raise SuiteError(f"clip {rel!r} is not readable audio: {e}") from None
        if rate != CLIP_RATE:
            raise SuiteError(f"clip {rel!r} is {rate} Hz; clips must be {CLIP_RATE} Hz")
        if data.shape[1] != 1:
            raise SuiteError(f"clip {rel!r} has {data.shape[1]} channels; clips must be mono")
        return np.ascontiguousarray(data[:, 0])

    def content_hash(self) -> str:
        """sha256 over suite.json and scenarios.jsonl bytes: the identity of a suite version."""
        if self._raw is not None:  # loaded: the bytes as read
            meta_bytes, scen_bytes = self._raw
        else:  # built in memory: the bytes write_suite would write
            meta_bytes, scen_bytes = meta_to_bytes(self.meta), scenarios_to_bytes(self.scenarios)
        return content_hash_of(meta_bytes, scen_bytes)


def content_hash_of(meta_bytes: bytes, scen_bytes: bytes) -> str:
    h = hashlib.sha256()
    # Length-prefixed so the boundary between the two files is unambiguous.
    for name, data in ((SUITE_FILE, meta_bytes), (SCENARIOS_FILE, scen_bytes)):
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


# -------------------------------------------------------------------- validation


def _check_clip(
    suite: Suite, rel: str, duration_s: float, where: str, problems: list[str]
) -> None:
    try:
        path = suite.clip_path(rel)
    except SuiteError as e:
        problems.append(f"{where}: {e}")
        return
    if not path.is_file():
        problems.append(f"{where}: clip {rel!r} does not exist")
        return
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        problems.append(f"{where}: clip {rel!r} is not readable audio ({e})")
        return
    if info.format not in ("WAV", "FLAC"):
        problems.append(f"{where}: clip {rel!r} is {info.format}; clips must be WAV or FLAC")
    if info.subtype != "PCM_16":
        problems.append(f"{where}: clip {rel!r} is {info.subtype}; clips must be 16-bit PCM")
    if info.samplerate != CLIP_RATE:
        problems.append(f"{where}: clip {rel!r} is {info.samplerate} Hz; clips must be {CLIP_RATE} Hz")
        return
    if info.channels != 1:
        problems.append(f"{where}: clip {rel!r} has {info.channels} channels; clips must be mono")
    actual = info.frames / info.samplerate
    if abs(actual - duration_s) > DURATION_TOLERANCE_S:
        problems.append(
            f"{where}: duration_s {duration_s:.3f} does not match clip {rel!r} "
            f"({actual:.3f} s)"
        )


def _validate_scenario(sc: Scenario, problems: list[str]) -> None:
    where = f"{sc.scenario_id}/{sc.condition}"
    turns = sc.turns
    if not turns:
        problems.append(f"{where}: has no turns")
        return

    for i, t in enumerate(turns):
        if t.idx != i:
            problems.append(f"{where}: turn at position {i} has idx {t.idx} (idx must be 0..n-1 in order)")
        if t.label not in LABELS:
            problems.append(f"{where}: turn {i} has unknown label {t.label!r} (allowed: {', '.join(sorted(LABELS))})")
        if t.speaker not in SPEAKERS:
            problems.append(f"{where}: turn {i} has speaker {t.speaker!r} (speakers are A-D)")
        if not t.text.strip():
            problems.append(f"{where}: turn {i} has empty text")

    # §2: exactly one T; never first; followed by at least one more turn.
    t_positions = [i for i, t in enumerate(turns) if t.label == "T"]
    if len(t_positions) != 1:
        problems.append(f"{where}: has {len(t_positions)} T turns (exactly one required)")
    if t_positions:
        first_t = t_positions[0]
        if 0 in t_positions:
            problems.append(f"{where}: T is the first turn (T must never be first)")
        if len(turns) - 1 in t_positions:
            problems.append(f"{where}: T is the last turn (T must be followed by at least one turn)")
    else:
        first_t = None

    # §2: every N4Q is immediately followed by its N4R and comes after T.
    for i, t in enumerate(turns):
        if t.label == "N4Q":
            if i + 1 >= len(turns) or turns[i + 1].label != "N4R":
                problems.append(f"{where}: N4Q at turn {i} is not immediately followed by N4R")
            if first_t is None or i < first_t:
                problems.append(f"{where}: N4Q at turn {i} comes before T")
        elif t.label == "N4R":
            if i == 0 or turns[i - 1].label != "N4Q":
                problems.append(f"{where}: N4R at turn {i} is not immediately preceded by N4Q")

    # §2: the scenario has 3 or 4 speakers.
    distinct = {t.speaker for t in turns}
    if sc.n_speakers not in (3, 4):
        problems.append(f"{where}: n_speakers is {sc.n_speakers} (must be 3 or 4)")
    if len(distinct) != sc.n_speakers:
        problems.append(
            f"{where}: n_speakers is {sc.n_speakers} but turns use {len(distinct)} "
            f"speakers ({', '.join(sorted(distinct))})"
        )

    if not sc.gold_answer.strip():
        problems.append(f"{where}: gold_answer is empty")
    if sc.answer_keys is not None:
        if not sc.answer_keys:
            problems.append(f"{where}: answer_keys is an empty list (omit it or give alternatives)")
        for k, alts in enumerate(sc.answer_keys):
            if not alts or any(not a.strip() for a in alts):
                problems.append(f"{where}: answer_keys[{k}] must be a non-empty list of non-empty strings")


def validate_suite(suite: Suite, *, check_audio: bool = True) -> list[str]:
    """Check the rules of DESIGN §2; returns human-readable problems (empty = valid)."""
    problems: list[str] = []
    meta = suite.meta

    for spk in meta.voices:
        if spk not in SPEAKERS:
            problems.append(f"suite.json: voice map has speaker {spk!r} (speakers are A-D)")
    if not suite.scenarios:
        problems.append("scenarios.jsonl: the suite has no scenarios")

    seen: set[tuple[str, str]] = set()
    for sc in suite.scenarios:
        key = (sc.scenario_id, sc.condition)
        if key in seen:
            problems.append(f"{sc.scenario_id}/{sc.condition}: appears more than once")
        seen.add(key)
        _validate_scenario(sc, problems)
        missing_voices = sorted({t.speaker for t in sc.turns} - set(meta.voices))
        for spk in missing_voices:
            if spk in SPEAKERS:
                problems.append(f"{sc.scenario_id}/{sc.condition}: speaker {spk} has no voice in suite.json")

    # §2: both conditions of a pair exist and share the task and the gold answer.
    by_pair: dict[str, list[Scenario]] = defaultdict(list)
    for sc in suite.scenarios:
        by_pair[sc.pair_id].append(sc)
    for pair_id, members in by_pair.items():
        conds = {sc.condition: sc for sc in members}
        for cond in CONDITIONS:
            if cond not in conds:
                problems.append(f"pair {pair_id}: the {cond} condition is missing")
        if len(conds) < 2:
            continue
        ex, im = conds["explicit"], conds["implicit"]
        if len(ex.turns) != len(im.turns):
            problems.append(
                f"pair {pair_id}: explicit has {len(ex.turns)} turns, implicit has {len(im.turns)}"
            )
        elif ex.labels != im.labels:
            problems.append(
                f"pair {pair_id}: label sequences differ "
                f"(explicit {' '.join(ex.labels)} / implicit {' '.join(im.labels)})"
            )
        if ex.gold_answer != im.gold_answer:
            problems.append(
                f"pair {pair_id}: gold_answer differs between conditions "
                f"({ex.gold_answer!r} / {im.gold_answer!r})"
            )

    if check_audio:
        _check_clip(suite, meta.preamble.clip, meta.preamble.duration_s, "suite.json preamble", problems)
        for sc in suite.scenarios:
            for t in sc.turns:
                _check_clip(
                    suite, t.clip, t.duration_s, f"{sc.scenario_id}/{sc.condition} turn {t.idx}", problems
                )
    return problems


# ---------------------------------------------------------------------- writing


def meta_to_bytes(meta: SuiteMeta) -> bytes:
    return (json.dumps(meta.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def scenarios_to_bytes(scenarios: Iterable[Scenario]) -> bytes:
    lines = [
        json.dumps(sc.model_dump(mode="json"), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        for sc in scenarios
    ]
    return ("".join(line + "\n" for line in lines)).encode("utf-8")


def create_temp_file(path: Path) -> tuple[int, str]:
    """Open a fresh temporary file next to ``path`` (mode 0666 less the umask, unlike
    ``tempfile.mkstemp``'s 0600, so the final file has ordinary permissions)."""
    while True:
        tmp = str(path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_suite(root: Path, meta: SuiteMeta, scenarios: list[Scenario]) -> None:
    """Write suite.json (indent 2) and scenarios.jsonl (sorted keys), byte-deterministic.

    scenarios.jsonl is written first and suite.json last, each atomically, so a reader
    never sees a suite.json whose scenarios are still being written.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(root / SCENARIOS_FILE, scenarios_to_bytes(scenarios))
    atomic_write_bytes(root / SUITE_FILE, meta_to_bytes(meta))

