"""The detector's work of many sessions batched, on the loop or in a worker thread (server.engine.detection):
each session gets exactly what its own detector decides alone, in order, and its own failures."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import uvloop

from server.core.detector import SpeechDetector, detect_events, run_model_calls, run_steps
from server.engine.detection import BATCH_ROWS, LEAD_S, Detection
from tests.support.audio import place, speech_cache_dir, synthesize, trim

RATE = 24_000
FRAME = 1920


@pytest.fixture(scope="module")
def tracks(pytestconfig, tmp_path_factory):
    cache = speech_cache_dir(pytestconfig, tmp_path_factory)
    a = trim(synthesize("Aria, what is the capital of France?", cache))
    b = trim(synthesize("I think it might rain later this afternoon.", cache))
    return [place(6 * RATE, (RATE // 3, a)), place(6 * RATE, (RATE, b), (4 * RATE, a)), place(6 * RATE, (0, b))]


@pytest.mark.parametrize("threaded", [False, True], ids=["on-loop", "worker"])
def test_sessions_batched_decide_what_they_decide_alone(tracks, threaded):
    detection = Detection(threaded=threaded)

    async def session(track: np.ndarray) -> list:
        det, events = SpeechDetector(), []
        for i in range(0, len(track), FRAME):
            events += await detection.run(det.push_calls(track[i : i + FRAME]))
        return events + det.finish()

    async def main() -> list[list]:
        return await asyncio.gather(*(session(t) for t in tracks * 2))

    results = asyncio.run(main())
    assert results == [detect_events(t) for t in tracks * 2]
    assert results[0] and results[1] != results[0]  # real decisions, one per stream
    # the six sessions advance in step, so their calls share batches
    assert detection.rows >= 3 * detection.batches > 0


@pytest.mark.parametrize("threaded", [False, True], ids=["on-loop", "worker"])
def test_a_failing_session_fails_alone(tracks, threaded):
    detection = Detection(threaded=threaded)

    def broken():
        yield from SpeechDetector().push_calls(tracks[0][RATE // 2 : RATE // 2 + FRAME])  # speech: model calls
        raise ValueError("this session's own fault")

    async def main():
        good = SpeechDetector()
        bad = detection.run(broken())
        fine = detection.run(good.push_calls(tracks[0][RATE // 2 : RATE // 2 + FRAME]))
        with pytest.raises(ValueError, match="own fault"):
            await bad
        return await fine, good.known_until

    events, known = asyncio.run(main())
    assert events == [] and known > 0


def _speech_frame(tracks) -> tuple[np.ndarray, int]:
    """A frame inside speech (every chunk needs the model) and how many model calls it takes alone."""
    frame, calls = tracks[0][RATE // 2 : RATE // 2 + FRAME], []
    run_steps(SpeechDetector().push_calls(frame), lambda c: calls.append(c) or run_model_calls(c))
    return frame, len(calls)


@pytest.mark.parametrize("threaded", [False, True], ids=["on-loop", "worker"])
def test_sessions_that_may_wait_share_a_batch(tracks, threaded):
    """Frames that may wait are batched with those asked for later; the batch goes LEAD_S before the
    earliest need, or when a session needs its result now."""
    detection = Detection(threaded=threaded)
    frame, calls = _speech_frame(tracks)

    async def main() -> list:
        first = detection.run(SpeechDetector().push_calls(frame), wait_s=0.2)
        await asyncio.sleep(0.05)  # long enough for a batch of one to have run, were it sent at once
        second = detection.run(SpeechDetector().push_calls(frame), wait_s=30)
        assert not first.done() and not second.done()
        urgent = detection.run(SpeechDetector().push_calls(frame))  # needed now: everyone goes with it
        async with asyncio.timeout(10):
            return await asyncio.gather(first, second, urgent)

    assert calls >= 1
    assert asyncio.run(main()) == [[], [], []]
    assert (detection.batches, detection.rows) == (calls, 3 * calls)  # one batch per call, all three in each


def test_a_batch_goes_when_its_time_comes_or_when_it_is_full(tracks):
    detection = Detection()
    frame, calls = _speech_frame(tracks)

    async def main() -> None:
        alone = detection.run(SpeechDetector().push_calls(frame), wait_s=0.05)
        async with asyncio.timeout(10):
            await alone  # nobody joined: it went on its own, LEAD_S before it was due
        assert (detection.batches, detection.rows) == (calls, calls)
        full = [detection.run(SpeechDetector().push_calls(frame), wait_s=3600) for _ in range(BATCH_ROWS)]
        async with asyncio.timeout(10):
            await asyncio.gather(*full)  # BATCH_ROWS waiting: they did not wait for their time

    asyncio.run(main())
    assert (detection.batches, detection.rows) == (2 * calls, (1 + BATCH_ROWS) * calls)


LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}  # `mpe serve` runs on uvloop


@pytest.mark.parametrize("loop", LOOPS)
def test_a_batch_due_within_a_millisecond(tracks, loop):
    """uvloop answers a call_at under a millisecond away with a plain handle (no ``when()``): the time
    a batch waits for is Detection's own, and a session asking meanwhile joins that batch."""
    detection = Detection()
    frame, calls = _speech_frame(tracks)

    async def main() -> list:
        soon = detection.run(SpeechDetector().push_calls(frame), wait_s=LEAD_S + 0.0004)
        later = detection.run(SpeechDetector().push_calls(frame), wait_s=30)
        async with asyncio.timeout(10):
            return await asyncio.gather(soon, later)

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        assert runner.run(main()) == [[], []]
    assert (detection.batches, detection.rows) == (calls, 2 * calls)
