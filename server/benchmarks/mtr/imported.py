"""Scoring a folder of recordings made elsewhere (``mpe score DIR --suite SUITE``): each file
replayed as a ``gt`` episode (:mod:`.recordings`), written as an episode bundle (DESIGN §7)
under ``<data_dir>/imports/recordings/``, and scored as bundles are, by the same entry point
and rules as live episodes. The model's name carries :data:`~.recordings.IMPORTED` so every
report labels these scores. The folder itself is only read.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile as sf

from server.benchmarks.mtr.recordings import IMPORTED, Replayed, match_files, recording_files, replay
from server.benchmarks.mtr.suite import AUDIO_PENDING, BENCHMARK_NAME, Suite
from server.core.timebase import STREAM_RATE
from server.db import Database
from server.engine.bundles import BUNDLE_VERSION
from server.files import atomic_write_bytes
from server.scoring.errors import BadRecording
from server.scoring.runner import ScoreOptions, ScoringResult, score_bundles

Progress = Callable[[int, int], None]


def imported_name(model: str) -> str:
    """The model name reports show for recordings scored this way."""
    return f"{model} {IMPORTED}"


def _document(r: Replayed, label: str, suite: Suite, swap: bool, episode_id: str, count_moved: bool) -> dict:
    sc = r.scenario
    return {"bundle_version": BUNDLE_VERSION, "episode_id": episode_id, "attempt_id": None, "run_id": None,
            "benchmark": BENCHMARK_NAME, "scenario_id": sc.scenario_id, "pair_id": sc.pair_id,
            "condition": sc.condition, "round": sc.round, "dialogue": sc.dialogue.model_dump(mode="json"),
            "model": {"name": label, "revision": ""},
            "suite": {"name": suite.meta.name, "version": suite.meta.version, "content_hash": suite.content_hash()},
            "turns": [], "events": r.events, "stats": {},
            "recording": {"file": str(r.matched.name.path.resolve()), "sha256": r.sha256, "sample_rate": r.rate,
                          "swap": swap, "index": r.matched.name.index, "name": r.matched.name.shown,
                          "moved": r.moved, "count_moved": count_moved}}


def _wav_bytes(pcm: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, pcm.astype(np.int16, copy=False), STREAM_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def write_bundles(replayed: list[Replayed], root: Path, label: str, suite: Suite, swap: bool,
                  count_moved: bool = False) -> list[Path]:
    """One bundle per file under ``root`` (the audio first, ``episode.json`` last: a crash leaves no
    bundle that looks whole)."""
    out = []
    for r in replayed:
        key = f"{r.sha256}:{suite.content_hash()}:{r.scenario.scenario_id}:{swap}:{label}"
        if count_moved:  # another choice, another episode (earlier ids unchanged)
            key += ":count-moved"
        eid = "rec-" + hashlib.sha256(key.encode()).hexdigest()[:24]
        d = root / f"{r.scenario.scenario_id}-{eid}"
        atomic_write_bytes(d / "assistant.wav", _wav_bytes(r.track))
        atomic_write_bytes(d / "episode.json", json.dumps(_document(r, label, suite, swap, eid, count_moved), indent=1).encode())
        out.append(d)
    return out


def score_recordings(db: Database, folder: Path, suite_path: Path, opts: ScoreOptions, *, data_dir: Path,
                     swap: bool = False, index_base: int = 1, model: str | None = None,
                     count_moved: bool = False, progress: Progress | None = None) -> ScoringResult:
    """Score the published-named recordings in ``folder`` against ``suite_path`` (module docstring).
    A round whose parts the file has elsewhere than the replay placed them is left out of the
    feature scores (counted as excluded, with the reason) unless ``count_moved``."""
    folder = Path(folder).resolve()
    suite = Suite.load(suite_path)
    if suite.meta.benchmark != BENCHMARK_NAME:  # pragma: no cover - Suite.load checks the schema
        raise BadRecording(f"{suite_path}: not an MTR-DuplexBench suite")
    if suite.meta.audio == AUDIO_PENDING:
        raise BadRecording(f"{suite_path}: a text-only suite; replaying a recording needs its clips "
                           f"(mpe dataset synthesize {suite_path})")
    matched = match_files(suite, recording_files(folder), index_base=index_base)
    label = imported_name(model or folder.name)
    replayed = []
    for i, m in enumerate(matched, start=1):
        replayed.append(replay(suite.root, m, swap=swap))
        if progress:
            progress(i, len(matched))
    digest = hashlib.sha256(("\n".join(sorted(f"{r.sha256}:{r.scenario.scenario_id}" for r in replayed))
                             + (":count-moved" if count_moved else "")).encode()).hexdigest()[:16]
    root = (Path(data_dir) / "imports" / "recordings" / f"{suite.meta.name}-{digest}").resolve()
    if root.is_relative_to(folder):
        raise BadRecording(f"the data directory {data_dir} lies inside {folder}; recordings are never written "
                           "next to: set MPE_DATA_DIR elsewhere")
    res = score_bundles(db, write_bundles(replayed, root, label, suite, swap, count_moved), opts, progress)
    fate = ("counted anyway (--count-moved)" if count_moved else
            "left out of the feature scores (counted as excluded; --count-moved counts it)")
    moved = [f"{r.matched.name.shown}: the {', '.join(r.moved)} is not where the live scheduler would have "
             "placed it after this model's onset: the recording's system reacted differently; that round's verdict "
             f"is not comparable with live episodes, and is {fate}" for r in replayed if r.moved]
    res.warnings = moved + res.warnings
    return res
