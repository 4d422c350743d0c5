"""Suites and clip audio as running episodes read them: cached, and pinned to their content.

A run records its suite's content hash and each episode the hash of the audio it plays when
the run is created; an attempt refuses to start (:class:`SuiteChanged`) if the suite on disk
no longer matches, so a suite rebuilt under a queued run never changes what the run measures.
Caches are keyed by the files' size and modification time, so an edit is always seen.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from clients.errors import MPEError
from server.core.benchmark import Benchmark, SuiteLike
from server.core.episode import EpisodeCore
from server.engine.registry import benchmark_name_of_suite, get_benchmark


class SuiteChanged(MPEError):
    """The suite on disk is not the one the run was created with."""

    code = "suite_changed"


@dataclass(frozen=True)
class LoadedSuite:
    """A suite as its benchmark loaded it, with that benchmark and the directory it came from."""

    benchmark: Benchmark
    suite: SuiteLike
    path: str


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=8)
def _load_suite(path: str, _stamp: tuple) -> LoadedSuite:
    bench = get_benchmark(benchmark_name_of_suite(path))
    return LoadedSuite(bench, bench.load_suite(path), path)


def load_suite(path: str | Path) -> LoadedSuite:
    """The suite in directory ``path``, loaded by the benchmark it names; cached until ``suite.json``
    or ``scenarios.jsonl`` changes."""
    root = Path(path)
    try:
        stamp = tuple(_stamp(root / name) for name in ("suite.json", "scenarios.jsonl"))
    except OSError:
        stamp = ()  # the benchmark's loader reports the missing file
    return _load_suite(str(root), stamp)


@lru_cache(maxsize=4096)
def _clip(path: str, _stamp: tuple[int, int], suite: SuiteLike, rel: str) -> tuple[str, np.ndarray]:
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    pcm = suite.load_clip(rel)
    pcm.setflags(write=False)
    return digest, pcm


def episode_audio(loaded: LoadedSuite, scenario: BaseModel) -> tuple[dict[str | int, np.ndarray], str]:
    """Every clip the episode may play, by clip key, and the hash that pins them (``scenario``: the
    episode's snapshot, its benchmark's ``scenario_model``)."""
    h = hashlib.sha256()
    clips: dict[str | int, np.ndarray] = {}
    for key, rel in loaded.benchmark.clip_refs(loaded.suite, scenario).items():
        path = loaded.suite.clip_path(rel)
        try:
            stamp = _stamp(path)
        except OSError:
            stamp = (0, 0)  # load_clip reports the missing clip
        digest, clips[key] = _clip(str(path), stamp, loaded.suite, rel)
        h.update(f"{key}\0{digest}\0".encode())
    return clips, h.hexdigest()


def open_episode(suite_path: str, scenario: BaseModel, *, suite_hash: str | None,
                 audio_hash: str | None) -> EpisodeCore:
    """The pure core of one attempt, after checking the suite is still the run's (§8). Whatever
    keeps it from being so -- files changed, moved, removed or unreadable -- is :class:`SuiteChanged`,
    with a message that names no server path (runs and attempts store it; the cause is chained)."""
    try:
        loaded = load_suite(suite_path)
        if suite_hash and loaded.suite.content_hash() != suite_hash:
            raise SuiteChanged("the suite changed on disk since the run was created")
        clips, digest = episode_audio(loaded, scenario)
    except SuiteChanged:
        raise
    except (MPEError, OSError) as exc:  # a suite error names its files; the run's record must not
        raise SuiteChanged("the suite can no longer be read on the server (moved, removed or damaged "
                           "since the run was created)") from exc
    if audio_hash and digest != audio_hash:
        raise SuiteChanged("the clips of this episode changed on disk since the run was created")
    scheduler = loaded.benchmark.scheduler(scenario, {k: len(v) for k, v in clips.items()})
    return EpisodeCore(scheduler, clips)
