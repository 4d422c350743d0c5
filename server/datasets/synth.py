"""The synthesis driver every benchmark voices its suites with: clips in parallel, cached, resumable.

* One job per distinct (voice, text): a clip shared by both conditions of a pair, or a
  line that recurs across scenarios with the same voice, is synthesised once.
* Jobs already in the clip cache (``<data_dir>/tts-cache``, keyed by engine, engine
  version, voice and text) are skipped, so an interrupted run resumes where it stopped
  and a rerun is free.
* Missing jobs run in worker processes (one single-threaded engine each), progress is
  reported after every clip.
* Only when every clip is in the cache are the suite's WAV files written (each atomically); the
  benchmark then updates its manifest (durations, voices, ``"audio"``), scenarios.jsonl first and
  suite.json last: a crash never leaves a manifest that claims audio it lacks.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import numpy as np
import soundfile as sf

from server.files import create_temp_file
from server.tts import OUTPUT_RATE, ClipCache, TTSEngine, get_engine

Progress = Callable[[int, int], None]


@dataclass
class SynthReport:
    engine: str
    engine_version: str
    clips: int  # clip files in the suite
    jobs: int  # distinct (voice, text) pairs
    synthesized: int  # jobs run now
    cached: int  # jobs found in the cache
    audio_s: float  # audio produced now (seconds)
    synth_wall_s: float  # wall time of the synthesis phase
    wall_s: float  # whole call
    workers: int

    @property
    def speed(self) -> float | None:
        """Audio seconds per wall second of the synthesis phase."""
        return self.audio_s / self.synth_wall_s if self.synth_wall_s > 0 and self.synthesized else None


# ------------------------------------------------------------------ worker processes

_worker: dict = {}


def _init_worker(engine_name: str, data_dir: str, threads: int) -> None:
    # Ctrl-C is the parent's to handle: it stops submitting, lets running clips finish
    # (each lands in the cache atomically) and exits; workers print no tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker["engine"] = get_engine(engine_name, threads=threads)
    _worker["cache"] = ClipCache(data_dir)


def _run_job(voice: str, text: str) -> int:
    engine, cache = _worker["engine"], _worker["cache"]
    audio = engine.synthesize(text, voice)
    cache.put(engine, text, voice, audio)
    return len(audio)


# ------------------------------------------------------------------------ the driver


@dataclass
class FilledCache:
    todo: list[tuple[str, str]]  # the jobs that were missing from the cache (now synthesised)
    samples: int  # audio samples produced now
    wall_s: float
    workers: int


def fill_cache(jobs: list[tuple[str, str]], *, cache: ClipCache, data_dir: Path | str, name: str, version: str,
               engine: TTSEngine | None = None, workers: int | None = None,
               progress: Progress | None = None) -> FilledCache:
    """Synthesise every (voice, text) job missing from ``cache``: with ``engine`` in this
    process, else with engine ``name`` in worker processes (default: one per CPU core).
    ``progress(done, total)`` counts cached jobs as done."""
    todo = [j for j in jobs if not cache.path_for(ClipCache.key(name, version, j[0], j[1])).is_file()]
    done = len(jobs) - len(todo)
    total = len(jobs)
    if progress is not None:
        progress(done, total)

    audio_samples = 0
    t_synth = time.perf_counter()
    n_workers = 1
    if todo:
        if engine is not None:
            for voice, text in todo:
                audio_samples += len(cache.synthesize(engine, text, voice))
                done += 1
                if progress is not None:
                    progress(done, total)
        else:
            n_workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
            threads = max(1, (os.cpu_count() or 1) // n_workers)
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(n_workers, mp_context=ctx, initializer=_init_worker,
                                     initargs=(name, str(data_dir), threads)) as pool:
                pending: set[Future] = set()
                it = iter(todo)
                try:
                    # A bounded window of submitted jobs keeps an interrupt quick to honour.
                    for job in it:
                        pending.add(pool.submit(_run_job, *job))
                        if len(pending) >= 4 * n_workers:
                            break
                    while pending:
                        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for f in finished:
                            audio_samples += f.result()
                            done += 1
                            if progress is not None:
                                progress(done, total)
                            nxt = next(it, None)
                            if nxt is not None:
                                pending.add(pool.submit(_run_job, *nxt))
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
    return FilledCache(todo=todo, samples=audio_samples, wall_s=time.perf_counter() - t_synth, workers=n_workers)


def write_wav(path: Path, audio) -> None:
    """Write int16 samples as a 24 kHz mono 16-bit WAV, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            sf.write(f, audio, OUTPUT_RATE, format="WAV", subtype="PCM_16")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def voice_clips(clips: dict[str, tuple[str, str]], clip_path: Callable[[str], Path], *, data_dir: Path | str,
                local: TTSEngine, engine: TTSEngine | None, workers: int | None, progress: Progress | None,
                t_start: float, post: Callable[[str, np.ndarray], np.ndarray] | None = None
                ) -> tuple[dict[str, float], SynthReport]:
    """Voice every clip (path -> (voice, text)): fill the clip cache (``engine`` in this process, else
    ``local.name`` in worker processes), then write each clip from the cache (``post(path, audio)``
    may change it first). Returns each clip's duration in seconds, and the report."""
    name, version = local.name, local.version
    jobs = sorted(set(clips.values()))
    cache = ClipCache(data_dir)
    filled = fill_cache(jobs, cache=cache, data_dir=data_dir, name=name, version=version, engine=engine,
                        workers=workers, progress=progress)
    # The cache finds a clip by engine name and version only.
    key_engine = engine if engine is not None else SimpleNamespace(name=name, version=version)
    durations: dict[str, float] = {}
    for rel, (voice, text) in clips.items():
        audio = cache.get(key_engine, text, voice)  # type: ignore[arg-type]
        if audio is None:  # an unreadable cache file: synthesise it again here
            audio = cache.synthesize(local, text, voice)
        if post is not None:
            audio = post(rel, audio)
        write_wav(clip_path(rel), audio)
        durations[rel] = round(len(audio) / OUTPUT_RATE, 3)
    report = SynthReport(engine=name, engine_version=version, clips=len(clips), jobs=len(jobs),
                         synthesized=len(filled.todo), cached=len(jobs) - len(filled.todo),
                         audio_s=filled.samples / OUTPUT_RATE, synth_wall_s=filled.wall_s,
                         wall_s=time.perf_counter() - t_start, workers=filled.workers)
    return durations, report


__all__ = ["FilledCache", "Progress", "SynthReport", "fill_cache", "voice_clips", "write_wav"]
