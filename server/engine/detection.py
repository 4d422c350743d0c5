"""The speech detector's work of every session in this process, off the event loop, in batches.

Each session hands its assistant frame to :meth:`Detection.run` as the episode core's steps
(:meth:`server.core.episode.EpisodeCore.feed_assistant_calls`) and awaits the result; the
event loop meanwhile keeps every other session's deadlines. One worker thread runs the steps
of all sessions: it advances each to its next Silero call, runs the calls of all of them as
one batch (:func:`server.core.detector.run_model_calls`, one model call for all sessions with
speech), hands each its answer, and repeats until every one is done; sessions that ask
meanwhile join the next batch. Nothing waits to fill a batch: a lone session gets its call at
once, and batches grow only as far as the sessions' work overlaps, which is when they save the
most. onnxruntime and soxr release the GIL, so the model runs beside the loop.

The decisions are the episode core's, in the same order per session (each session awaits its
slot before the next), and a row's answer in a batch is the one it gets alone, bit for bit
(tests/test_detector.py), so a session fed here decides exactly what it decides when the core
calls the model itself.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from server.core.detector import ModelCall, ModelSteps, run_model_calls


@dataclass(slots=True)
class _Job:
    steps: ModelSteps[Any]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    call: ModelCall | None = None


class Detection:
    """One worker thread batching the detector's model calls of all sessions (started on first use)."""

    def __init__(self, threaded: bool = True) -> None:
        self.threaded = threaded  # False: every call runs here, on the loop, one by one (no worker)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queued: list[_Job] = []
        self._thread: threading.Thread | None = None
        self.batches = 0  # model calls run (one per batch)
        self.rows = 0  # stream calls they answered

    def run(self, steps: ModelSteps[Any]) -> asyncio.Future:
        """Run ``steps``; the returned future (of the running loop) gets their result. They start
        here, on the loop: steps that need no model call (silence) end at once, without the
        worker; the others go on in the worker from their first call."""
        loop = asyncio.get_running_loop()
        job = _Job(steps, loop.create_future(), loop)
        done: list = []
        self._advance(job, None, [], done)
        if done:
            _set_results(done)
            return job.future
        if not self.threaded:
            while not done:
                self._advance(job, run_model_calls([job.call])[0], [], done)
            _set_results(done)
            return job.future
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="mpe-detection", daemon=True)
                self._thread.start()
            self._queued.append(job)
            self._wake.notify()
        return job.future

    def _work(self) -> None:
        active: list[_Job] = []
        calls = answers = job = None
        while True:
            with self._lock:
                while not self._queued and not active:
                    self._wake.wait()
                fresh, self._queued = self._queued, []
            done: list[tuple[_Job, Any, BaseException | None]] = []
            active += fresh  # each at its first model call (run() took it there)
            if active:
                calls, active = active, []
                try:
                    answers = run_model_calls([job.call for job in calls])
                except BaseException as exc:  # the model failed: every session of the batch hears it
                    done += [(job, None, exc) for job in calls]
                else:
                    self.batches += 1
                    self.rows += len(calls)
                    for job, answer in zip(calls, answers):
                        self._advance(job, answer, active, done)
            self._deliver(done)
            fresh = done = calls = answers = job = None  # type: ignore[assignment]  # hold no stream while idle

    @staticmethod
    def _advance(job: _Job, answer: Any, active: list[_Job], done: list) -> None:
        """Take the steps to their next model call (queued in ``active``) or to their end (``done``)."""
        try:
            job.call = next(job.steps) if answer is None else job.steps.send(answer)
        except StopIteration as stop:
            done.append((job, stop.value, None))
        except BaseException as exc:
            done.append((job, None, exc))
        else:
            active.append(job)

    @staticmethod
    def _deliver(done: list[tuple[_Job, Any, BaseException | None]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for item in done:
            by_loop.setdefault(item[0].loop, []).append(item)
        for loop, items in by_loop.items():  # one wake-up of each loop for all of its results
            try:
                loop.call_soon_threadsafe(_set_results, items)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass


def _set_results(items: list[tuple[_Job, Any, BaseException | None]]) -> None:
    for job, result, exc in items:
        if job.future.done():  # cancelled
            continue
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)


DETECTION = Detection()  # this process's worker
INLINE = Detection(threaded=False)  # on the loop (settings.detector_worker off, the default)
