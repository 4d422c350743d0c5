"""The speech detector's work of every session in this process, in batches across sessions.

Each session hands its assistant frame to :meth:`Detection.run` as the episode core's steps
(:meth:`server.core.episode.EpisodeCore.feed_assistant_calls`), says how long the result may
wait, and awaits it. The steps of all sessions of an event loop are advanced together, on that
loop: each to its next Silero call, the calls of all of them run as one batch
(:func:`server.core.detector.run_model_calls`, one model call for all sessions with speech), each
handed its answer, and so on until every one is done.

When a batch goes: as soon as a session needs its result within ``LEAD_S`` (lockstep: at once),
or once ``BATCH_ROWS`` sessions wait, and otherwise ``LEAD_S`` before the earliest time a waiting
session needs its result; every session waiting then joins. A realtime session's frame is final
well before it must be decided on (its answer arrives some 70 ms before the session's next
deadline, §4), so with many sessions batches fill, and a row in a batch of 16 costs about half
of a call alone (docs/benchmarks.md "Detector batches that wait"). Batches stop growing at
``BATCH_ROWS``: a batch holds the loop for its model calls (about 1 ms per call at 16 rows).

Where the model calls run:

* on the event loop (the default);
* in one worker thread (``threaded``, settings.detector_worker): the loop hands the batch over and
  goes on; onnxruntime releases the GIL, so the model runs beside the loop — on a machine with a
  core to spare. Only the model call leaves the loop (one GIL handoff per batch each way): the
  steps themselves (resampling, segmentation, the scheduler's decisions) stay on it.

Either way a batch's steps' next calls (a frame takes 2–3) queue again under the same rule, so
that on the loop they go after the callbacks ready meanwhile: a room frame due then is not held
behind a whole frame's calls of 16 sessions.

The decisions are the episode core's, in the same order per session (each session awaits its
slot before the next), and a row's answer in a batch is the one it gets alone, bit for bit
(tests/test_detector.py), so a session fed here decides exactly what it decides when the core
calls the model itself; when its batch ran changes nothing but when it hears.
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from server.core.detector import ModelAnswer, ModelCall, ModelSteps, run_model_calls

BATCH_ROWS = 16  # a batch goes once this many sessions wait
LEAD_S = 0.02  # ... or this long before the earliest time a waiting session needs its result


@dataclass(slots=True)
class _Job:
    steps: ModelSteps[Any]
    future: asyncio.Future
    due: float  # the loop's time by which the session needs the result
    call: ModelCall | None = None


@dataclass(slots=True)
class _LoopBatches:
    """One event loop's jobs waiting for the next batch, and when that batch goes."""

    queued: list[_Job] = field(default_factory=list)
    busy: bool = False  # a batch is on its way (scheduled to run now, or in the worker)
    timer: asyncio.Handle | None = None  # the batch waits for its time ...
    timer_at: float = 0.0  # ... which is this (uvloop's handle for a time under 1 ms away has no when())


class Detection:
    """Batches the detector's model calls of all sessions of each event loop, running them on the
    loop or (``threaded``) in one worker thread, started on first use."""

    def __init__(self, threaded: bool = False) -> None:
        self.threaded = threaded
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBatches] = weakref.WeakKeyDictionary()
        self._worker: ThreadPoolExecutor | None = None
        self.batches = 0  # model calls run (one per batch)
        self.rows = 0  # stream calls they answered

    def run(self, steps: ModelSteps[Any], wait_s: float = 0.0) -> asyncio.Future:
        """Run ``steps``; the returned future (of the running loop) gets their result, at the latest
        ``wait_s`` from now (unless the model is slower). Steps that need no model call (silence)
        end here, at once; the others go on from their first call in a batch."""
        loop = asyncio.get_running_loop()
        job = _Job(steps, loop.create_future(), loop.time() + max(wait_s, 0.0))
        done: list = []
        state = self._loops.setdefault(loop, _LoopBatches())
        _advance(job, None, state.queued, done)
        _set_results(done)
        self._next_batch(loop)
        return job.future

    def _next_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule the next batch: now (a session needs its result within LEAD_S, or BATCH_ROWS
        wait), else LEAD_S before the earliest due."""
        state = self._loops[loop]
        if not state.queued or state.busy:
            return
        at = min(job.due for job in state.queued) - LEAD_S
        now = len(state.queued) >= BATCH_ROWS or at <= loop.time()
        if state.timer is not None:
            if not now and state.timer_at <= at:
                return  # the batch's time stands
            state.timer.cancel()
            state.timer = None
        if now:
            state.busy = True
            loop.call_soon(self._start_batch, loop)  # after the callbacks ready now: they may join
        else:
            state.timer, state.timer_at = loop.call_at(at, self._its_time, loop), at

    def _its_time(self, loop: asyncio.AbstractEventLoop) -> None:
        state = self._loops[loop]
        state.timer = None
        state.busy = True
        self._start_batch(loop)

    def _start_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        state = self._loops[loop]
        jobs, state.queued = state.queued, []
        calls = [job.call for job in jobs]
        if self.threaded:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="mpe-detection")
            handed = loop.run_in_executor(self._worker, run_model_calls, calls)
            handed.add_done_callback(lambda f: self._handed_back(loop, jobs, f))
            return
        answers, exc = None, None
        try:
            answers = run_model_calls(calls)
        except BaseException as e:
            exc = e
        self._batch_done(loop, jobs, answers, exc)

    def _handed_back(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job], f: asyncio.Future) -> None:
        exc = asyncio.CancelledError() if f.cancelled() else f.exception()
        self._batch_done(loop, jobs, None if exc is not None else f.result(), exc)

    def _batch_done(self, loop: asyncio.AbstractEventLoop, jobs: list[_Job], answers: list[ModelAnswer] | None,
                    exc: BaseException | None) -> None:
        """Each job of the batch goes on to its next call (queued again, under the same rule) or to
        its end."""
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
