"""The episode core's deferred detector work (EpisodeCore.feed_assistant_calls(defer=True), DESIGN §5,
in lockstep): a slot whose audio cannot make the detector report an event lets the next room frame be
planned before the model has run on it. Real speech through the real detector and the Duplex-MPE
scheduler, whose T wait follows the assistant's onsets and offsets: every room frame, event and
segment must be what the core decides with the model run first."""

from __future__ import annotations

import numpy as np
import pytest

from clients.codec import STREAM_RATE as RATE
from server.benchmarks.mpe.scheduler import EpisodePlan, Scheduler, TurnPlan
from server.core.detector import run_steps
from server.core.episode import FRAME, EpisodeCore
from server.core.schedule import PREAMBLE
from tests.support.audio import place, speech_cache_dir, synthesize, trim


@pytest.fixture(scope="module")
def answer(pytestconfig, tmp_path_factory):
    cache = speech_cache_dir(pytestconfig, tmp_path_factory)
    return trim(synthesize("The capital of France is Paris, as far as I know.", cache))


def core() -> EpisodeCore:
    turns = (TurnPlan(0, "N1", 2 * RATE, "A"), TurnPlan(1, "T", 2 * RATE, "B"), TurnPlan(2, "N2", 2 * RATE, "C"),
             TurnPlan(3, "T", 2 * RATE, "A"), TurnPlan(4, "N3", 2 * RATE, "B"))
    plan = EpisodePlan(preamble_samples=RATE, turns=turns)
    rng = np.random.default_rng(3)  # room audio: any, its own per clip
    clips = {PREAMBLE: rng.integers(-900, 900, RATE).astype(np.int16),
             **{t.idx: rng.integers(-900, 900, t.n_samples).astype(np.int16) for t in turns}}
    return EpisodeCore(Scheduler(plan, frame_samples=FRAME), clips)


def frame(track: np.ndarray, seq: int) -> np.ndarray:
    out = np.zeros(FRAME, np.int16)
    part = track[seq * FRAME : (seq + 1) * FRAME]
    out[: len(part)] = part
    return out


def play(track: np.ndarray, *, defer: bool) -> tuple[list, EpisodeCore, int]:
    """A lockstep episode's order of work: room frame n, the answer to it; with ``defer`` a slot's
    deferred detector work runs only after the next room frame has been planned."""
    c, rooms, later, deferred = core(), [], None, 0
    while (item := c.next_room()) is not None:
        rooms.append((item.seq, item.pcm.tobytes(), item.events))
        if later is not None:
            run_steps(later)
        fed = run_steps(c.feed_assistant_calls(frame(track, item.seq), defer=defer))
        later, deferred = fed.later, deferred + (fed.later is not None)
    if later is not None:
        run_steps(later)
    c.finish()
    return rooms, c, deferred


@pytest.mark.parametrize("placement", [
    (int(4.2 * RATE),),  # answers the first T during its wait
    (int(2.5 * RATE), int(8.2 * RATE)),  # talks over N1, then answers the second T
    (int(3.0 * RATE), int(4.6 * RATE), int(5.4 * RATE)),  # talks on through T and its wait, pauses under 800 ms
], ids=["answer", "over-and-answer", "talkative"])
def test_deferred_slots_decide_what_the_core_decides_with_the_model_first(answer, placement):
    track = place(20 * RATE, *((at, answer) for at in placement))
    first, c1, none = play(track, defer=False)
    later, c2, deferred = play(track, defer=True)
    assert none == 0 and 0 < deferred < len(later)  # some slots were deferred, some (onsets, offsets) were not
    assert [r[0] for r in later] == [r[0] for r in first]
    assert [r[2] for r in later] == [r[2] for r in first]  # the scheduler's decisions, in order
    assert [r[1] for r in later] == [r[1] for r in first]
    assert c2.detector.events == c1.detector.events and c2.detector.events  # the assistant was heard
    assert c2.detector.segments == c1.detector.segments
    assert c2.scheduler.end_sample == c1.scheduler.end_sample


def test_a_slot_waits_for_the_previous_slots_deferred_work(answer):
    track = place(6 * RATE, (RATE // 2, answer))
    c = core()
    c.next_room()
    fed = run_steps(c.feed_assistant_calls(frame(track, 0), defer=True))
    assert fed.later is not None  # silence: no event possible from two or three chunks
    c.next_room()
    with pytest.raises(RuntimeError, match="deferred"):
        run_steps(c.feed_assistant_calls(frame(track, 1), defer=True))


def test_finish_does_the_deferred_work_that_never_ran(answer):
    """An attempt that ends between a slot and its deferred work (e.g. the bridge left): the
    detector's own finish processes that slot's audio, so the segments are those of the track."""
    track = place(8 * RATE, (RATE, answer))
    c, n = core(), 0
    while True:  # past the speech's onset, up to a slot whose work is deferred, left undone
        c.next_room()
        later = run_steps(c.feed_assistant_calls(frame(track, n), defer=True)).later
        n += 1
        if later is not None and c.detector.events:
            break
        if later is not None:
            run_steps(later)
    c.finish()
    ref = core()
    for seq in range(n):
        ref.next_room()
        ref.feed_assistant(frame(track, seq))
    ref.finish()
    assert c.detector.segments == ref.detector.segments and c.detector.segments
    assert c.detector.events == ref.detector.events
