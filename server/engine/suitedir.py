"""A suite directory's files, whatever its benchmark (DESIGN §2).

Every suite is ``suite.json`` (the benchmark's metadata model) plus ``scenarios.jsonl`` (one
item of the benchmark's line model per line) plus ``clips/`` (24 kHz mono 16-bit WAV or FLAC).
This module reads and writes those files with errors that name the file and line, keeps clip
paths inside the suite, reads clips, checks a clip against its manifest duration, and gives the
content hash that pins a suite version (§8). The benchmarks define what the lines mean.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeVar

import numpy as np
import soundfile as sf
from pydantic import BaseModel, ValidationError

from clients.codec import STREAM_RATE
from clients.errors import MPEError
from server.files import atomic_write_bytes

CLIP_RATE = STREAM_RATE  # clips are at the stream rate
SUITE_FILE = "suite.json"
SCENARIOS_FILE = "scenarios.jsonl"
#: §2: "clip durations match the audio" -- tolerance of one millisecond
DURATION_TOLERANCE_S = 0.001

M = TypeVar("M", bound=BaseModel)
L = TypeVar("L", bound=BaseModel)


class SuiteError(MPEError, ValueError):
    """A suite cannot be read or a clip path/clip is unusable."""

    code = "bad_suite"


def format_validation_error(err: ValidationError) -> str:
    """The first five errors of a pydantic validation, on one line."""
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        parts.append(f"{loc}: {e['msg']}")
    more = len(err.errors()) - 5
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL, and (in a str from JSON) unpaired surrogates


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is too large")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # more digits than int() takes (4300)
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits is too long") from None


def _unstorable(value: Any) -> str | None:
    """What in a parsed JSON document no database text and no UTF-8 document can hold."""
    if isinstance(value, str):
        m = _UNSTORABLE.search(value)
        return None if m is None else "a NUL character" if m.group() == "\x00" else "an unpaired surrogate"
    if isinstance(value, dict):
        return next(filter(None, (_unstorable(k) or _unstorable(v) for k, v in value.items())), None)
    if isinstance(value, list):
        return next(filter(None, map(_unstorable, value)), None)
    return None


def parse_json(text: str) -> Any:
    """One JSON document of a suite file, as strict as storing it needs: no ``NaN`` or ``Infinity``,
    no number too large for a float or an integer of more digits than ``int()`` takes, no string
    with a NUL or an unpaired surrogate (a database cannot keep them, nor can UTF-8), nesting
    within the recursion limit. Raises ValueError (:class:`json.JSONDecodeError`, with the position,
    for bad syntax) saying what is wrong."""
    try:
        obj = json.loads(text, parse_constant=_no_constant, parse_float=_finite, parse_int=_integer)
        bad = _unstorable(obj)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if bad is not None:
        raise ValueError(f"{bad} in a string (suite files hold text only)")
    return obj


def manifest_lines(text: str) -> Iterator[tuple[int, str]]:
    """The non-blank lines of ``scenarios.jsonl`` with their 1-based numbers. A line ends at a
    newline only: JSON text may hold U+2028, U+0085 and the other separators ``str.splitlines``
    splits on (the suite writer writes them as they are)."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield lineno, line


def _json_error(file: Path, e: ValueError, line: int | None = None) -> SuiteError:
    """The SuiteError of a :func:`parse_json` failure in ``file`` (at ``line`` of scenarios.jsonl)."""
    if isinstance(e, json.JSONDecodeError):
        return SuiteError(f"{file}:{line or e.lineno}:{e.colno}: invalid JSON: {e.msg}")
    return SuiteError(f"{file}{'' if line is None else f':{line}'}: invalid JSON: {e}")


def suite_root(path: Path | str) -> Path:
    """The suite directory of ``path`` (the directory itself, or its ``suite.json``)."""
    path = Path(path)
    return path.parent if path.name == SUITE_FILE and path.is_file() else path


def suite_inside(root: Path, base: Path) -> bool:
    """Whether the suite directory ``root`` and its manifest files (``suite.json``,
    ``scenarios.jsonl``), every symlink resolved, all lie inside the directory ``base`` (a suites
    root). Its clips are kept inside ``root`` by :func:`clip_path`."""
    base = base.resolve()
    return all(p.resolve().is_relative_to(base) for p in (root, root / SUITE_FILE, root / SCENARIOS_FILE))


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SuiteError(f"{path}: not found{what}") from None
    except OSError as e:
        raise SuiteError(f"{path}: cannot read: {e.strerror}") from None


def read_suite_files(root: Path, meta_model: type[M], line_model: type[L]) -> tuple[M, list[L], list[int], bytes, bytes]:
    """Parse ``suite.json`` and ``scenarios.jsonl`` of ``root``: the metadata, the lines, each
    line's 1-based number, and the raw bytes of both files. Raises :class:`SuiteError` naming
    the file (and line) on missing files, invalid JSON or schema errors."""
    suite_file, scen_file = root / SUITE_FILE, root / SCENARIOS_FILE
    meta_bytes = _read(suite_file, f" (is {root} a suite directory?)")
    scen_bytes = _read(scen_file, "")
    try:
        meta_obj = parse_json(meta_bytes.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SuiteError(f"{suite_file}: not UTF-8 ({e.reason})") from None
    except ValueError as e:
        raise _json_error(suite_file, e) from None
    try:
        meta = meta_model.model_validate(meta_obj)
    except ValidationError as e:
        raise SuiteError(f"{suite_file}: schema error: {format_validation_error(e)}") from None
    try:
        text = scen_bytes.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SuiteError(f"{scen_file}: not UTF-8 ({e.reason})") from None
    items: list[L] = []
    lines: list[int] = []
    for lineno, line in manifest_lines(text):
        try:
            obj = parse_json(line)
        except ValueError as e:
            raise _json_error(scen_file, e, lineno) from None
        try:
            items.append(line_model.model_validate(obj))
        except ValidationError as e:
            raise SuiteError(f"{scen_file}:{lineno}: schema error: {format_validation_error(e)}") from None
        lines.append(lineno)
    return meta, items, lines, meta_bytes, scen_bytes


def meta_to_bytes(meta: BaseModel) -> bytes:
    """suite.json's bytes: indented JSON."""
    return (json.dumps(meta.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def lines_to_bytes(items: Iterable[BaseModel]) -> bytes:
    """scenarios.jsonl's bytes: one compact JSON object with sorted keys per line."""
    lines = [json.dumps(x.model_dump(mode="json"), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
             for x in items]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def write_suite_files(root: Path, meta: BaseModel, items: Iterable[BaseModel]) -> None:
    """Write suite.json (indent 2) and scenarios.jsonl (sorted keys), byte-deterministic.

    scenarios.jsonl is written first and suite.json last, each atomically, so a reader never
    sees a suite.json whose scenarios are still being written.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(root / SCENARIOS_FILE, lines_to_bytes(items))
    atomic_write_bytes(root / SUITE_FILE, meta_to_bytes(meta))


def content_hash_of(meta_bytes: bytes, scen_bytes: bytes) -> str:
    """sha256 over suite.json and scenarios.jsonl: the identity of a suite version (§8)."""
    h = hashlib.sha256()
    # Length-prefixed so the boundary between the two files is unambiguous.
    for name, data in ((SUITE_FILE, meta_bytes), (SCENARIOS_FILE, scen_bytes)):
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def clip_path(root: Path, rel: str) -> Path:
    """Resolve a manifest clip path under the suite root.

    Rejects absolute paths, '..' components and paths that resolve outside the root (e.g.
    through a symlink).
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
    resolved_root = root.resolve()
    try:
        resolved = (resolved_root / posix).resolve()
        resolved.exists()  # raises for a name the filesystem refuses (too long), unlike a missing file
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop
        why = getattr(e, "strerror", None) or "a symlink loop"
        raise SuiteError(f"clip path {rel!r} is not usable ({why})") from None
    if not resolved.is_relative_to(resolved_root):
        raise SuiteError(f"clip path {rel!r} resolves outside the suite directory")
    return resolved


def load_clip(root: Path, rel: str) -> np.ndarray:
    """Read a clip as int16 mono samples at 24 kHz."""
    path = clip_path(root, rel)
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


def clip_problems(root: Path, rel: str, duration_s: float) -> list[tuple[str, str]]:
    """What is wrong with one manifest clip, as (rule id, message) pairs (§2 rules ``clip-path``,
    ``clip-exists``, ``clip-format``, ``clip-duration``); empty when it is usable."""
    try:
        path = clip_path(root, rel)
    except SuiteError as e:
        return [("clip-path", str(e))]
    if not path.is_file():
        return [("clip-exists", f"clip {rel!r} does not exist")]
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        return [("clip-exists", f"clip {rel!r} is not readable audio ({e})")]
    out: list[tuple[str, str]] = []
    if info.format not in ("WAV", "FLAC"):
        out.append(("clip-format", f"clip {rel!r} is {info.format}; clips must be WAV or FLAC"))
    if info.subtype != "PCM_16":
        out.append(("clip-format", f"clip {rel!r} is {info.subtype}; clips must be 16-bit PCM"))
    if info.samplerate != CLIP_RATE:
        out.append(("clip-format", f"clip {rel!r} is {info.samplerate} Hz; clips must be {CLIP_RATE} Hz"))
        return out
    if info.channels != 1:
        out.append(("clip-format", f"clip {rel!r} has {info.channels} channels; clips must be mono"))
    actual = info.frames / info.samplerate
    if abs(actual - duration_s) > DURATION_TOLERANCE_S:
        out.append(("clip-duration", f"duration_s {duration_s:.3f} does not match clip {rel!r} ({actual:.3f} s)"))
    return out


def write_text_suite_files(out: Path, meta: BaseModel, items: list[BaseModel], *, same: Callable[[Path], bool],
                           force: bool = False) -> str:
    """Write a text-only suite to ``out``: "written", or "kept" when ``same(out)`` says the same
    text is there already (audio included). A directory holding something else is replaced only
    with ``force`` (its manifest files and clips go); otherwise :class:`SuiteError`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SuiteError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if same(out):
            return "kept"
        if not force:
            raise SuiteError(f"{out} is not empty and holds a different suite (use --force to replace it)")
        for name in (SUITE_FILE, SCENARIOS_FILE):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "clips", ignore_errors=True)
    write_suite_files(out, meta, items)
    return "written"
