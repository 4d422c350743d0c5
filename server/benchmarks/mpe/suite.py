"""Suite manifests (DESIGN §2): loading, validation and deterministic writing.

A suite is a directory holding ``suite.json`` (name, version, generator, seed, voice map,
preamble), ``scenarios.jsonl`` (one scenario version per line) and ``clips/`` (24 kHz
mono 16-bit WAV or FLAC). :func:`check_suite` implements the rules of §2 (and, with
``strict``, the construction rules of the generators) and returns every
:class:`Problem` at once, each naming its file and line, scenario, turn and rule id
(:data:`RULES`), so ``mpe dataset validate`` can list them all; :func:`validate_suite`
gives the same problems as lines of text. A text-only suite (``"audio": "pending"`` in
suite.json) has clip paths but no audio yet.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from server.engine.suitedir import (
    SCENARIOS_FILE,
    SUITE_FILE,
    SuiteError,
    clip_path,
    clip_problems,
    content_hash_of,
    lines_to_bytes,
    load_clip,
    meta_to_bytes,
    read_suite_files,
    suite_root,
    write_suite_files,
)

LABELS: frozenset[str] = frozenset({"T", "N1", "N2", "N3", "N4Q", "N4R"})
SPEAKERS: frozenset[str] = frozenset({"A", "B", "C", "D"})
CONDITIONS: tuple[str, str] = ("explicit", "implicit")
#: What a turn is, as the paper's Table 19 groups the silence failures (optional in the
#: manifest; see docs/scenarios.md): a request or question to a device (another assistant, or
#: Aria in an N4 question), a request or question to the humans, a statement to the humans
#: (facts, remarks, replies, resolutions), and self-talk (nobody addressed).
UTTERANCE_TYPES: tuple[str, ...] = ("device_request", "human_request", "statement", "self_talk")
#: How a generated pair's versions may differ beyond T and the turn before it, as the paper's final
#: versions do (docs/scenarios.md): one more turn reworded, one turn said in one version only, one
#: N4 event in the explicit version only. Declared on both versions (``version_difference``).
VERSION_DIFFERENCES: tuple[str, ...] = ("reworded", "extra_turn", "n4_dropped")

# suite.json "audio": "pending" marks a text-only suite (generated with --no-audio).
AUDIO_PENDING = "pending"


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
    # one of UTTERANCE_TYPES (checked by validate_suite); left out of the manifest when not recorded
    utterance_type: str | None = Field(default=None, exclude_if=lambda v: v is None)


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
    # one of VERSION_DIFFERENCES where a generator made the versions differ on purpose; left out otherwise
    version_difference: str | None = Field(default=None, exclude_if=lambda v: v is None)

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
    benchmark: str = "duplex-mpe"  # the benchmark plug-in that owns the suite (server.benchmarks)
    name: str
    version: str
    generator: str
    seed: int
    voices: dict[str, str]
    preamble: Preamble
    held_out: bool = Field(default=False, exclude_if=lambda v: not v,
                           description="the script is for admin tokens only (server.engine.disclosure)")


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
        #: 1-based line in scenarios.jsonl of each scenario (loaded suites only).
        self.lines: list[int] = []

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(cls, path: Path | str) -> "Suite":
        """Load a suite directory (or its ``suite.json``).

        Raises SuiteError naming the file (and line for ``scenarios.jsonl``) on missing
        files, invalid JSON or schema errors.
        """
        root = suite_root(path)
        meta, scenarios, lines, meta_bytes, scen_bytes = read_suite_files(root, SuiteMeta, Scenario)
        suite = cls(root, meta, scenarios)
        suite._raw = (meta_bytes, scen_bytes)
        suite.lines = lines
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
        """Resolve a manifest clip path under the suite root (refusing escapes)."""
        return clip_path(self.root, rel)

    def load_clip(self, rel: str) -> np.ndarray:
        """Read a clip as int16 mono samples at 24 kHz."""
        return load_clip(self.root, rel)

    def content_hash(self) -> str:
        """sha256 over suite.json and scenarios.jsonl bytes: the identity of a suite version."""
        if self._raw is not None:  # loaded: the bytes as read
            meta_bytes, scen_bytes = self._raw
        else:  # built in memory: the bytes write_suite would write
            meta_bytes, scen_bytes = meta_to_bytes(self.meta), lines_to_bytes(self.scenarios)
        return content_hash_of(meta_bytes, scen_bytes)


# -------------------------------------------------------------------- validation

#: Stable rule ids with a one-line statement each (``mpe dataset validate --rules``).
#: The first group is DESIGN §2; the ``construction`` group is the addressing and
#: position convention of the scenario generators (checked with ``strict=True``).
RULES: dict[str, str] = {
    "suite-empty": "the suite has at least one scenario",
    "voice-map": "the voice map names speakers A-D and covers every speaker used",
    "unique-version": "each (scenario_id, condition) appears once",
    "turns-present": "a scenario has turns",
    "turn-idx": "turn idx runs 0..n-1 in order",
    "label-known": "labels are T, N1, N2, N3, N4Q, N4R",
    "utterance-type": "utterance_type, when given, is device_request, human_request, statement or self_talk",
    "speaker-known": "speakers are A-D",
    "text-present": "every turn has text",
    "one-t": "exactly one T",
    "t-not-first": "T is never the first turn",
    "t-not-last": "T is followed by at least one more turn",
    "n4q-then-n4r": "every N4Q is immediately followed by its N4R",
    "n4r-after-n4q": "every N4R immediately follows an N4Q",
    "n-speakers": "a scenario has 3 or 4 speakers, as n_speakers says",
    "gold-answer": "gold_answer is not empty",
    "answer-keys": "answer_keys, when given, is a non-empty list of non-empty alternatives",
    "pair-complete": "both conditions of a pair exist",
    "pair-gold": "both conditions of a pair share gold_answer",
    "audio-pending": "the suite's audio has been synthesised",
    "clip-path": "clip paths are relative and stay inside the suite",
    "clip-exists": "every clip exists and is readable audio",
    "clip-format": "clips are 24 kHz mono 16-bit WAV or FLAC",
    "clip-duration": "duration_s matches the clip's audio (within 1 ms)",
    # construction (strict)
    "attributes": "the five scene attributes are present",
    "t-bucket": "t_bucket is early-middle, middle or late-middle and matches T's position",
    "speakers-contiguous": "a scenario with n speakers uses exactly the first n of A-D",
    "explicit-names-aria": "the explicit T names Aria",
    "implicit-unnamed": "the implicit T does not name Aria",
    "n1-mentions-aria": "an N1 turn mentions Aria",
    "mention-label": "N2 and N3 turns do not mention Aria (a mention makes the turn N1)",
    "addressee": "a turn is not addressed to its own speaker; T and N4Q are addressed to Aria",
    "n4-after-t": "N4Q comes after T",
    "pair-n4": "both conditions of a pair have the same number of N4 events",
    "pair-turns": "both conditions of a pair have the same number of turns",
    "pair-labels": "both conditions of a pair have the same label sequence",
    "pair-speakers": "both conditions of a pair have the same speaker sequence",
    "pair-minimal": "the conditions differ in T's text and at most the turn just before T",
    "pair-difference": "a pair that declares a version_difference (reworded, extra_turn, n4_dropped) differs "
                       "exactly so, in both versions alike",
}
CONSTRUCTION_RULES: frozenset[str] = frozenset(
    {"attributes", "t-bucket", "n4-after-t", "pair-n4", "speakers-contiguous", "explicit-names-aria", "implicit-unnamed",
     "n1-mentions-aria", "mention-label", "addressee", "pair-turns", "pair-labels", "pair-speakers", "pair-minimal",
     "pair-difference"}
)

#: Position buckets of T (the issue's early-middle / middle / late-middle).
T_BUCKETS: tuple[str, str, str] = ("early-middle", "middle", "late-middle")
ATTRIBUTE_KEYS: tuple[str, ...] = ("setting", "activity", "relationship", "device_context", "register")
_ARIA_RE = re.compile(r"\baria\b", re.IGNORECASE)


def mentions_aria(text: str) -> bool:
    return _ARIA_RE.search(text) is not None


def bucket_of(t_idx: int, n_turns: int) -> str:
    """The position bucket of T at ``t_idx`` among ``n_turns`` turns.

    Relative position f = t_idx / (n_turns - 1): early-middle below 0.4, middle up to
    0.6, late-middle above (T is never first nor last, so 0 < f < 1).
    """
    if n_turns < 2:
        return T_BUCKETS[0]
    # Integer comparison of 5 * t_idx with 2 * (n - 1) and 3 * (n - 1): no float edges.
    five_t, span = 5 * t_idx, n_turns - 1
    if five_t < 2 * span:
        return "early-middle"
    if five_t <= 3 * span:
        return "middle"
    return "late-middle"


@dataclass(frozen=True)
class Problem:
    """One violation: where it is (file, line, scenario, turn), which rule, what is wrong."""

    rule: str
    message: str
    file: str = SCENARIOS_FILE
    line: int | None = None
    scenario: str | None = None  # "s0007/explicit"
    pair: str | None = None
    turn: int | None = None

    @property
    def construction(self) -> bool:
        return self.rule in CONSTRUCTION_RULES

    def location(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def scope(self) -> str:
        if self.scenario is not None:
            return self.scenario if self.turn is None else f"{self.scenario} turn {self.turn}"
        if self.pair is not None:
            return f"pair {self.pair}"
        return ""

    def __str__(self) -> str:
        scope = self.scope()
        return f"{self.location()}: {scope + ': ' if scope else ''}{self.message} [{self.rule}]"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "scenario": self.scenario, "pair": self.pair,
                "turn": self.turn, "rule": self.rule, "message": self.message}


def audio_pending(meta: SuiteMeta) -> bool:
    """A text-only suite (``"audio": "pending"`` in suite.json): no clips written yet."""
    return (meta.model_extra or {}).get("audio") == AUDIO_PENDING


class _Checker:
    """Collects problems for one suite; knows the manifest line of every scenario."""

    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self.problems: list[Problem] = []
        self._lines = {id(sc): line for sc, line in zip(suite.scenarios, suite.lines)} if suite.lines else {}

    def line_of(self, sc: Scenario) -> int | None:
        return self._lines.get(id(sc))

    def add(self, rule: str, message: str, sc: Scenario | None = None, turn: int | None = None, **kw: Any) -> None:
        if sc is not None:
            kw.setdefault("line", self.line_of(sc))
            kw.setdefault("scenario", f"{sc.scenario_id}/{sc.condition}")
        self.problems.append(Problem(rule=rule, message=message, turn=turn, **kw))

    # ------------------------------------------------------------ §2, per scenario

    def scenario(self, sc: Scenario) -> None:
        turns = sc.turns
        if not turns:
            self.add("turns-present", "has no turns", sc)
            return
        for i, t in enumerate(turns):
            if t.idx != i:
                self.add("turn-idx", f"has idx {t.idx} at position {i} (idx must be 0..n-1 in order)", sc, i)
            if t.label not in LABELS:
                self.add("label-known", f"unknown label {t.label!r} (allowed: {', '.join(sorted(LABELS))})", sc, i)
            if t.utterance_type is not None and t.utterance_type not in UTTERANCE_TYPES:
                self.add("utterance-type", f"unknown utterance_type {t.utterance_type!r} (allowed: "
                         f"{', '.join(UTTERANCE_TYPES)})", sc, i)
            if t.speaker not in SPEAKERS:
                self.add("speaker-known", f"speaker {t.speaker!r} (speakers are A-D)", sc, i)
            if not t.text.strip():
                self.add("text-present", "empty text", sc, i)

        # §2: exactly one T; never first; followed by at least one more turn.
        t_positions = [i for i, t in enumerate(turns) if t.label == "T"]
        if len(t_positions) != 1:
            self.add("one-t", f"has {len(t_positions)} T turns (exactly one required)", sc)
        if 0 in t_positions:
            self.add("t-not-first", "T is the first turn (T must never be first)", sc, 0)
        if len(turns) - 1 in t_positions:
            self.add("t-not-last", "T is the last turn (T must be followed by at least one turn)", sc, len(turns) - 1)

        # §2: every N4Q is immediately followed by its N4R (anywhere: the paper has N4 events before T).
        for i, t in enumerate(turns):
            if t.label == "N4Q":
                if i + 1 >= len(turns) or turns[i + 1].label != "N4R":
                    self.add("n4q-then-n4r", "N4Q is not immediately followed by N4R", sc, i)
            elif t.label == "N4R":
                if i == 0 or turns[i - 1].label != "N4Q":
                    self.add("n4r-after-n4q", "N4R is not immediately preceded by N4Q", sc, i)

        # §2: the scenario has 3 or 4 speakers.
        distinct = {t.speaker for t in turns}
        if sc.n_speakers not in (3, 4):
            self.add("n-speakers", f"n_speakers is {sc.n_speakers} (must be 3 or 4)", sc)
        if len(distinct) != sc.n_speakers:
            self.add("n-speakers", f"n_speakers is {sc.n_speakers} but turns use {len(distinct)} "
                     f"speakers ({', '.join(sorted(distinct))})", sc)

        if not sc.gold_answer.strip():
            self.add("gold-answer", "gold_answer is empty", sc)
        if sc.answer_keys is not None:
            if not sc.answer_keys:
                self.add("answer-keys", "answer_keys is an empty list (omit it or give alternatives)", sc)
            for k, alts in enumerate(sc.answer_keys):
                if not alts or any(not a.strip() for a in alts):
                    self.add("answer-keys", f"answer_keys[{k}] must be a non-empty list of non-empty strings", sc)

    # ------------------------------------------------------- construction, per scenario

    def construction(self, sc: Scenario) -> None:
        turns = sc.turns
        for key in ATTRIBUTE_KEYS:
            if not str(sc.attributes.get(key, "")).strip():
                self.add("attributes", f"attribute {key!r} is missing", sc)
        speakers = {t.speaker for t in turns}
        if sc.n_speakers in (3, 4) and speakers != set("ABCD"[: sc.n_speakers]):
            self.add("speakers-contiguous", f"uses speakers {', '.join(sorted(speakers))}; "
                     f"{sc.n_speakers} speakers must be {', '.join('ABCD'[: sc.n_speakers])}", sc)
        t_positions = [i for i, t in enumerate(turns) if t.label == "T"]
        for i, turn in enumerate(turns):
            # the generators place N4 events after T (the paper's suite does not always)
            if turn.label == "N4Q" and t_positions and i < t_positions[0]:
                self.add("n4-after-t", "N4Q comes before T", sc, i)
        if len(t_positions) == 1:
            t = t_positions[0]
            if sc.t_bucket not in T_BUCKETS:
                self.add("t-bucket", f"t_bucket {sc.t_bucket!r} is not one of {', '.join(T_BUCKETS)}", sc)
            elif bucket_of(t, len(turns)) != sc.t_bucket:
                self.add("t-bucket", f"T at turn {t} of {len(turns)} is {bucket_of(t, len(turns))}, "
                         f"not {sc.t_bucket}", sc, t)
            named = mentions_aria(turns[t].text)
            if sc.condition == "explicit" and not named:
                self.add("explicit-names-aria", "the explicit T does not name Aria", sc, t)
            if sc.condition == "implicit" and named:
                self.add("implicit-unnamed", "the implicit T names Aria", sc, t)
        for i, turn in enumerate(turns):
            if turn.label == "N1" and not mentions_aria(turn.text):
                self.add("n1-mentions-aria", "N1 turn does not mention Aria", sc, i)
            if turn.label in ("N2", "N3") and mentions_aria(turn.text):
                self.add("mention-label", f"{turn.label} turn mentions Aria (a mention makes it N1)", sc, i)
            if turn.addressee is not None and turn.addressee == turn.speaker:
                self.add("addressee", f"speaker {turn.speaker} addresses themselves", sc, i)
            if turn.label in ("T", "N4Q") and turn.addressee not in (None, "Aria"):
                self.add("addressee", f"{turn.label} is addressed to {turn.addressee!r}, not Aria", sc, i)

    def construction_pair(self, pair_id: str, ex: Scenario, im: Scenario) -> None:
        # The generators write both versions from one script: the same turns, labels and
        # speakers, differing only in T and at most the turn before it; or as the pair declares.
        line = self.line_of(im) or self.line_of(ex)
        if ex.version_difference is not None or im.version_difference is not None:
            self.declared_difference(pair_id, ex, im, line)
            return
        n4 = [sum(t.label == "N4Q" for t in sc.turns) for sc in (ex, im)]
        if n4[0] != n4[1]:
            self.add("pair-n4", f"explicit has {n4[0]} N4 events, implicit has {n4[1]}", pair=pair_id, line=line)
        if len(ex.turns) != len(im.turns):
            self.add("pair-turns", f"explicit has {len(ex.turns)} turns, implicit has {len(im.turns)}",
                     pair=pair_id, line=line)
            return
        if ex.labels != im.labels:
            self.add("pair-labels", f"label sequences differ (explicit {' '.join(ex.labels)} / "
                     f"implicit {' '.join(im.labels)})", pair=pair_id, line=line)
        diff_speakers = [i for i, (a, b) in enumerate(zip(ex.turns, im.turns)) if a.speaker != b.speaker]
        if diff_speakers:
            self.add("pair-speakers", f"speakers differ between conditions at turns {diff_speakers}",
                     pair=pair_id, line=line)
        try:
            t = ex.t_index
        except SuiteError:
            return
        allowed = {t, t - 1}
        diff = [i for i, (a, b) in enumerate(zip(ex.turns, im.turns)) if a.text != b.text]
        extra = [i for i in diff if i not in allowed]
        if extra:
            self.add("pair-minimal", f"texts differ at turns {extra}; only T (turn {t}) and the turn "
                     "just before it may differ", pair=pair_id, line=line)
        if t not in diff:
            self.add("pair-minimal", f"T (turn {t}) has the same text in both conditions", pair=pair_id, line=line)

    def declared_difference(self, pair_id: str, ex: Scenario, im: Scenario, line: int | None) -> None:
        problem = _declared_problem(ex.version_difference, im.version_difference, ex, im)
        if problem:
            self.add("pair-difference", problem, pair=pair_id, line=line)


def _without(sc: Scenario, drop: set[int]) -> list[tuple[str, str]]:
    return [(t.label, t.speaker) for i, t in enumerate(sc.turns) if i not in drop]


def _declared_problem(kind: str | None, other: str | None, ex: Scenario, im: Scenario) -> str | None:
    """What is wrong with a pair that declares a version difference (None: it differs as declared)."""
    if kind != other:
        return f"the versions declare different differences ({kind!r} / {other!r})"
    if kind not in VERSION_DIFFERENCES:
        return f"unknown version_difference {kind!r} (allowed: {', '.join(VERSION_DIFFERENCES)})"
    n4 = [sum(t.label == "N4Q" for t in sc.turns) for sc in (ex, im)]
    sizes = (len(ex.turns), len(im.turns))
    if kind == "reworded":
        if sizes[0] != sizes[1] or _without(ex, set()) != _without(im, set()):
            return "reworded: the versions must keep the same turns, labels and speakers"
        try:
            t = ex.t_index
        except SuiteError:
            return None
        extra = [i for i, (a, b) in enumerate(zip(ex.turns, im.turns)) if a.text != b.text and i not in (t, t - 1)]
        return None if len(extra) == 1 else f"reworded: {len(extra)} turns besides T and the one before it differ " \
                                           "(exactly one must)"
    if kind == "extra_turn":
        if abs(sizes[0] - sizes[1]) != 1 or n4[0] != n4[1]:
            return f"extra_turn: the versions must differ by one turn with the same N4 events ({sizes[0]} / " \
                   f"{sizes[1]} turns)"
        long, short = (ex, im) if sizes[0] > sizes[1] else (im, ex)
        if not any(_without(long, {i}) == _without(short, set()) for i in range(len(long.turns))):
            return "extra_turn: the longer version is not the shorter one with one more turn"
        return None
    if n4[0] != n4[1] + 1 or sizes[0] != sizes[1] + 2:  # n4_dropped
        return f"n4_dropped: the implicit version must lack one N4 event of the explicit one ({n4[0]} / {n4[1]} " \
               f"N4 events, {sizes[0]} / {sizes[1]} turns)"
    qs = [i for i, t in enumerate(ex.turns) if t.label == "N4Q"]
    if not any(_without(ex, {q, q + 1}) == _without(im, set()) for q in qs):
        return "n4_dropped: the implicit version is not the explicit one without one N4 event"
    return None


def _check_clip(ck: _Checker, rel: str, duration_s: float, sc: Scenario | None, turn: int | None) -> None:
    kw: dict[str, Any] = {} if sc is not None else {"file": SUITE_FILE, "scenario": "preamble"}
    for rule, message in clip_problems(ck.suite.root, rel, duration_s):
        ck.add(rule, message, sc, turn, **kw)


def check_suite(suite: Suite, *, check_audio: bool = True, strict: bool = False) -> list[Problem]:
    """Check the rules of DESIGN §2 (and, with ``strict``, the construction rules).

    Returns every problem found, each naming its file, line, scenario, turn and rule.
    A text-only suite (audio pending) yields one ``audio-pending`` problem instead of a
    missing-clip problem per turn when ``check_audio`` is set.
    """
    ck = _Checker(suite)
    meta = suite.meta

    for spk in meta.voices:
        if spk not in SPEAKERS:
            ck.add("voice-map", f"voice map has speaker {spk!r} (speakers are A-D)", file=SUITE_FILE)
    if not suite.scenarios:
        ck.add("suite-empty", "the suite has no scenarios")

    seen: set[tuple[str, str]] = set()
    for sc in suite.scenarios:
        key = (sc.scenario_id, sc.condition)
        if key in seen:
            ck.add("unique-version", "appears more than once", sc)
        seen.add(key)
        ck.scenario(sc)
        if strict:
            ck.construction(sc)
        for spk in sorted({t.speaker for t in sc.turns} - set(meta.voices)):
            if spk in SPEAKERS:
                ck.add("voice-map", f"speaker {spk} has no voice in suite.json", sc)

    # §2: both conditions of a pair exist and share the task and the gold answer.
    by_pair: dict[str, list[Scenario]] = defaultdict(list)
    for sc in suite.scenarios:
        by_pair[sc.pair_id].append(sc)
    for pair_id, members in by_pair.items():
        conds: dict[str, Scenario] = {}
        for sc in members:
            conds.setdefault(sc.condition, sc)
        line = ck.line_of(members[-1])
        for cond in CONDITIONS:
            if cond not in conds:
                ck.add("pair-complete", f"the {cond} condition is missing", pair=pair_id, line=line)
        if len(conds) < 2:
            continue
        ex, im = conds["explicit"], conds["implicit"]
        line = ck.line_of(im)
        # §2: the versions may differ (turn and N4 counts included, as in the paper's suite); T and
        # the N4 events are paired by label and order, never by position. Equal structure is a
        # construction rule (strict).
        if ex.gold_answer != im.gold_answer:
            ck.add("pair-gold", f"gold_answer differs between conditions ({ex.gold_answer!r} / "
                   f"{im.gold_answer!r})", pair=pair_id, line=line)
        if strict:
            ck.construction_pair(pair_id, ex, im)

    if check_audio:
        if audio_pending(meta):
            ck.add("audio-pending", "the audio has not been synthesised yet "
                   "(run: mpe dataset synthesize DIR)", file=SUITE_FILE)
        else:
            _check_clip(ck, meta.preamble.clip, meta.preamble.duration_s, None, None)
            for sc in suite.scenarios:
                for t in sc.turns:
                    _check_clip(ck, t.clip, t.duration_s, sc, t.idx)
    return ck.problems


def validate_suite(suite: Suite, *, check_audio: bool = True, strict: bool = False) -> list[str]:
    """Check the rules of DESIGN §2; returns human-readable problems (empty = valid).

    Each line reads ``FILE:LINE: SCOPE: MESSAGE [RULE]`` (see :func:`check_suite`).
    """
    return [str(p) for p in check_suite(suite, check_audio=check_audio, strict=strict)]


# ---------------------------------------------------------------------- writing


def write_suite(root: Path, meta: SuiteMeta, scenarios: list[Scenario]) -> None:
    """Write suite.json and scenarios.jsonl, byte-deterministic (see :func:`write_suite_files`)."""
    write_suite_files(root, meta, scenarios)
