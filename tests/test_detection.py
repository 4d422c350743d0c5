"""The detector's work of many sessions batched, on the loop or in a worker thread (server.engine.detection):
each session gets exactly what its own detector decides alone, in order, and its own failures."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from server.core.detector import SpeechDetector, detect_events
from server.engine.detection import Detection

try:
    from tests.audio_fixtures import place, speech_cache_dir, synthesize, trim
except ImportError:  # tests/ is not a package: pytest put tests/ itself on sys.path
    from audio_fixtures import place, speech_cache_dir, synthesize, trim

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

