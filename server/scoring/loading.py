"""Loading episodes to score: episode bundles (DESIGN §7) or completed attempts in the database.

Whatever the source, scoring sees one :class:`LoadedEpisode`: the episode document of §7, the
assistant track, and the speech segments to score with — a ``segments.json`` override, else
the live detector's segments when they were made by the detector version scoring runs, else
None (scoring replays the detector over the track, which gives the same segments, §5).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ValidationError

from server.core.benchmark import ViewT
from server.core.detector import DETECTOR_VERSION
from server.core.events import Event
from server.core.timebase import STREAM_RATE
from server.engine.bundles import EPISODE_FILE, EpisodeBundle, episode_document, load_track
from server.scoring.errors import BadBundle

SEGMENTS_FILE = "segments.json"
# where the segments scored with come from; "none": an episode decided on text (mpe reference), no audio
SegmentsSource = Literal["segments.json", "live", "replay", "none"]


@dataclass
class LoadedEpisode:
    doc: dict[str, Any]  # the episode document of §7 (episode.json)
    assistant: np.ndarray  # int16, 24 kHz
    segments: list[tuple[int, int]] | None  # what to score with; None: replay the detector
    source: str  # "db" or the bundle directory
    segments_source: SegmentsSource = "replay"

    @property
    def events(self) -> list[Event]:
        try:
            return [Event.from_json(e) for e in self.doc["events"]]
        except (ValueError, TypeError, AttributeError) as exc:
            raise BadBundle(f"{self.source}: bad event ({exc})") from None

    def view(self, model: type[ViewT]) -> ViewT:
        """The document as a benchmark's typed view of it (:class:`server.core.benchmark.EpisodeView`);
        :class:`BadBundle` naming the source and each bad field when it does not fit."""
        try:
            return model.model_validate(self.doc)
        except ValidationError as exc:
            raise _refused(f"{self.source}: not a {model.__name__} episode document", exc) from None


def live_segments(doc: dict[str, Any]) -> list[tuple[int, int]] | None:
    """The live detector's segments (§5), if the detector that made them is the one scoring
    runs (the attempt records its detector version in its stats)."""
    stats = doc.get("stats")
    if not isinstance(stats, dict) or stats.get("detector") != DETECTOR_VERSION:
        return None
    try:
        return [(int(g["start"]), int(g["end"])) for g in doc.get("live_segments") or []]
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:  # OverflowError: 1e999
        raise BadBundle(f"bad live_segments ({exc})") from None


def _with_segments(doc: dict[str, Any], assistant: np.ndarray, override: list[tuple[int, int]] | None,
                   source: str) -> LoadedEpisode:
    if override is not None:
        return LoadedEpisode(doc, assistant, override, source, SEGMENTS_FILE)
    live = live_segments(doc)
    return LoadedEpisode(doc, assistant, live, source, "replay" if live is None else "live")


def is_bundle(path: Path) -> bool:
    return (path / EPISODE_FILE).is_file()


def find_bundles(paths: list[Path]) -> list[Path]:
    """Bundle directories among ``paths``; a directory of bundles (an export) expands to them."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.is_dir():
            raise BadBundle(f"{p}: not a directory")
        if is_bundle(p):
            out.append(p)
            continue
        inner = sorted(d for d in p.iterdir() if d.is_dir() and is_bundle(d))
        if not inner:
            raise BadBundle(f"{p}: neither an episode bundle (episode.json) nor a directory of bundles")
        out.extend(inner)
    return out


def _problem(err: dict[str, object]) -> str:
    where = ".".join(str(x) for x in err.get("loc", ())) or "document"  # type: ignore[union-attr]
    return f"{where}: {err.get('msg')}"


def _refused(what: str, exc: ValidationError) -> BadBundle:
    """One error naming what was refused and each bad field (the first five)."""
    problems = [_problem(e) for e in exc.errors(include_url=False)]  # type: ignore[arg-type]
    return BadBundle(f"{what}: " + "; ".join(problems[:5])
                     + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""))


def _read_json(path: Path) -> dict[str, Any]:
    file = path / EPISODE_FILE
    try:
        doc = json.loads(file.read_text("utf-8"))
    except FileNotFoundError:
        raise BadBundle(f"{path}: {EPISODE_FILE} missing") from None
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise BadBundle(f"{file}: unreadable ({exc})") from None
    if not isinstance(doc, dict):
        raise BadBundle(f"{file}: not a JSON object")
    return doc


def _validated(doc: dict[str, Any], file: Path) -> EpisodeBundle:
    try:
        return EpisodeBundle.model_validate(doc)
    except ValidationError as exc:
        raise _refused(f"{file}: not an episode bundle", exc) from None
    except RecursionError:
        raise BadBundle(f"{file}: nested too deeply") from None


def read_bundle(path: Path) -> EpisodeBundle:
    """A bundle's ``episode.json`` as the :class:`EpisodeBundle` it must be, else :class:`BadBundle`
    naming the file and what is wrong (each field's problem, or a version newer than this reader)."""
    path = Path(path)
    return _validated(_read_json(path), path / EPISODE_FILE)


def read_episode_json(path: Path) -> dict[str, Any]:
    """A bundle's ``episode.json`` document as written, once :func:`read_bundle` accepts it (with its
    version and its episode id as the model reads them)."""
    path = Path(path)
    doc = _read_json(path)
    bundle = _validated(doc, path / EPISODE_FILE)
    return {**doc, "bundle_version": bundle.bundle_version, "episode_id": bundle.episode_id}


def load_bundle(path: Path) -> LoadedEpisode:
    import soundfile as sf

    path = Path(path)
    doc = read_episode_json(path)
    wav = path / "assistant.wav"
    try:
        pcm, rate = sf.read(str(wav), dtype="int16", always_2d=False)
    except Exception as exc:  # soundfile raises its own error types
        raise BadBundle(f"{wav}: cannot read ({type(exc).__name__})") from None
    if rate != STREAM_RATE or pcm.ndim != 1:
        raise BadBundle(f"{wav}: expected 24 kHz mono, got {rate} Hz with shape {pcm.shape}")
    seg_file = path / SEGMENTS_FILE
    override = _parse_segments(seg_file) if seg_file.is_file() else None
    return _with_segments(doc, pcm, override, str(path.resolve()))


def _parse_segments(path: Path) -> list[tuple[int, int]]:
    """segments.json: a list of ``{"start", "end"}`` or ``[start, end]`` in stream samples
    (or such a list under ``"segments"``)."""
    try:
        data = json.loads(path.read_text("utf-8"))
        if isinstance(data, dict):
            data = data["segments"]
        out = []
        for g in data:
            s, e = (g["start"], g["end"]) if isinstance(g, dict) else (g[0], g[1])
            if not isinstance(s, int) or not isinstance(e, int) or e < s:
                raise ValueError(f"bad segment {g!r}")
            out.append((s, e))
        return out
    except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
        raise BadBundle(f"{path}: not a list of segments in stream samples ({exc})") from None


def load_db_episode(db, episode_id: str, attempt_id: str) -> LoadedEpisode:
    doc = episode_document(db, episode_id, attempt_id)
    return _with_segments(doc, load_track(db, attempt_id, "assistant"), None, "db")
