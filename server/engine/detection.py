"""The speech detector's work of every session in this process, in batches across sessions.

Each session hands its assistant frame to :meth:`Detection.run` as the episode core's steps
(:meth:`server.core.episode.EpisodeCore.feed_assistant_calls`) and awaits the result. The steps
of all sessions of an event loop are advanced together, on that loop: each to its next Silero
call, the calls of all of them run as one batch (:func:`server.core.detector.run_model_calls`,
one model call for all sessions with speech; a row costs about half as much in a batch of 16 as
alone), each handed its answer, and so on until every one is done. Nothing waits to fill a
batch: a lone session gets its call at once, and batches grow only as far as the sessions' work
overlaps — which is when the server is busy, and they save the most.

Where the model calls run:

* on the event loop (the default): one batch per loop turn, as a callback after the callbacks
  that were ready (every session woken in the same turn joins it);
* in one worker thread (``threaded``, settings.detector_worker): the loop hands the batch over
  and goes on; sessions that ask meanwhile join the next batch, which goes as soon as this one
  is back. onnxruntime releases the GIL, so the model runs beside the loop — on a machine with a
  core to spare. Only the model call leaves the loop (one GIL handoff per batch each way): the
  steps themselves (resampling, segmentation, the scheduler's decisions) stay on it.

The decisions are the episode core's, in the same order per session (each session awaits its
slot before the next), and a row's answer in a batch is the one it gets alone, bit for bit
(tests/test_detector.py), so a session fed here decides exactly what it decides when the core
calls the model itself.
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from server.core.detector import ModelAnswer, ModelCall, ModelSteps, run_model_calls


@dataclass(slots=True)
class _Job:
    steps: ModelSteps[Any]
    future: asyncio.Future
    call: ModelCall | None = None


@dataclass(slots=True)
class _LoopBatches:
    """One event loop's jobs waiting for the next batch, and whether a batch is on its way."""

    queued: list[_Job] = field(default_factory=list)
    busy: bool = False  # a batch is scheduled or (threaded) in the worker


class Detection:
    """Batches the detector's model calls of all sessions of each event loop, running them on the
    loop or (``threaded``) in one worker thread, started on first use."""

    def __init__(self, threaded: bool = False) -> None:
        self.threaded = threaded
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBatches] = weakref.WeakKeyDictionary()
        self._worker: ThreadPoolExecutor | None = None
        self.batches = 0  # model calls run (one per batch)
        self.rows = 0  # stream calls they answered

    def run(self, steps: ModelSteps[Any]) -> asyncio.Future:
        """Run ``steps``; the returned future (of the running loop) gets their result. Steps that
        need no model call (silence) end here, at once; the others go on from their first call in
        the next batch."""
        loop = asyncio.get_running_loop()
        job = _Job(steps, loop.create_future())
        done: list = []
        queued = self._loops.setdefault(loop, _LoopBatches()).queued
        _advance(job, None, queued, done)
        _set_results(done)
        self._next_batch(loop)
        return job.future

    def _next_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        state = self._loops[loop]
        if state.queued and not state.busy:
            state.busy = True
            loop.call_soon(self._start_batch, loop)

    def _start_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        state = self._loops[loop]
        jobs, state.queued = state.queued, []
        calls = [job.call for job in jobs]
        if not self.threaded:
            answers, exc = None, None
            try:
                answers = run_model_calls(calls)
            except BaseException as e:
                exc = e
            self._batch_done(loop, jobs, answers, exc)
            return
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="mpe-detection")
        handed = loop.run_in_executor(self._worker, run_model_calls, calls)
        handed.add_done_callback(lambda f: self._handed_back(loop, jobs, f))

    def _handed_back(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job], f: asyncio.Future) -> None:
        exc = asyncio.CancelledError() if f.cancelled() else f.exception()
        self._batch_done(loop, jobs, None if exc is not None else f.result(), exc)

    def _batch_done(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job], answers: list[ModelAnswer] | None,
                    exc: BaseException | None) -> None:
        state = self._loops[loop]
        state.busy = False
        done: list = []
        if exc is not None:  # the model failed: every session of the batch hears it
            done = [(job, None, exc) for job in jobs]
        else:
            self.batches += 1
            self.rows += len(jobs)
            for job, answer in zip(jobs, answers):
                _advance(job, answer, state.queued, done)
        _set_results(done)
        self._next_batch(loop)


def _advance(job: _Job, answer: Any, queued: list[_Job], done: list) -> None:
    """Take the steps to their next model call (queued for the next batch) or to their end (``done``)."""
    try:
        job.call = next(job.steps) if answer is None else job.steps.send(answer)
    except StopIteration as stop:
        done.append((job, stop.value, None))
    except BaseException as exc:
        done.append((job, None, exc))
    else:
        queued.append(job)


def _set_results(items: list[tuple[_Job, Any, BaseException | None]]) -> None:
    for job, result, exc in items:
        if job.future.done():  # cancelled
            continue
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)


ON_LOOP = Detection()  # the default
DETECTION = Detection(threaded=True)  # settings.detector_worker: the model calls in a worker thread
