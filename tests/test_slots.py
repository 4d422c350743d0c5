"""Realtime slot placement (DESIGN §4 ``realtime`` clock), driven synchronously.

Literal arrival sequences on a fake clock: ``t0 = 100.0`` s, 80 ms slots, so an arrival at
``100.05`` is in slot 0, ``100.13`` in slot 1, ``100.45`` in slot 5. Each frame's payload
is a tiny array holding its seq, so the tests can see which frame feeds which slot.
"""

from __future__ import annotations

import numpy as np
import pytest

from clients.errors import CLOSE_PROTOCOL_ERROR, ProtocolError
from server.core.slots import SlotFrame, SlotPlacer, SlotStats

T0 = 100.0
PERIOD = 0.08


def pcm(seq: int) -> np.ndarray:
    return np.full(4, seq, dtype=np.int16)


def placer(grace: int = 25) -> SlotPlacer:
    return SlotPlacer(T0, PERIOD, grace)


def feed(p: SlotPlacer, arrivals: list[tuple[int, float, int]]) -> list[int]:
    """(seq, arrival time, room frames sent) in order -> the slot of each."""
    return [p.arrive(seq, pcm(seq), t, room_sent) for seq, t, room_sent in arrivals]


def timeline(frames: list[SlotFrame]) -> list[tuple[int, int | None]]:
    """(slot, seq) per fed slot; also checks each payload is its own frame's (or None)."""
    for f in frames:
        assert (f.pcm is None) == (f.seq is None) == (f.arrived is None) == f.silent
        if f.pcm is not None:
            assert f.pcm.tolist() == [f.seq] * 4
    return [(f.slot, f.seq) for f in frames]


def test_slot_starts_are_absolute_deadlines():
    p = placer()
    assert p.start(0) == T0
    assert p.start(1) == T0 + PERIOD
    assert p.start(1250) == T0 + 1250 * PERIOD  # n·period from t0, not a sum of periods


def test_on_time_frames_sit_at_their_own_seq():
    p = placer()
    slots = feed(p, [(0, 100.05, 1), (1, 100.13, 2), (2, 100.21, 3), (3, 100.29, 4)])
    assert slots == [0, 1, 2, 3]
    frames = p.due(4)
    assert timeline(frames) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert [f.arrived for f in frames] == [100.05, 100.13, 100.21, 100.29]
    assert p.stats == SlotStats(late_frames=0, max_lateness_frames=0, missing_slots=0)


def test_frame_before_t0_goes_to_slot_zero():
    p = placer()
    assert feed(p, [(0, 99.99, 1)]) == [0]
    assert timeline(p.due(1)) == [(0, 0)]


def test_late_frame_shifts_the_ones_queued_behind_it():
    p = placer()
    # seq 1 arrives in slot 3; seqs 2 and 3 arrive right after, in slot 3 too, and queue.
    slots = feed(p, [(0, 100.05, 1), (1, 100.25, 4), (2, 100.26, 4), (3, 100.27, 4),
                     (4, 100.45, 6)])  # seq 4 arrives in slot 5: still queued behind seq 3
    assert slots == [0, 3, 4, 5, 6]
    assert timeline(p.due(7)) == [(0, 0), (1, None), (2, None), (3, 1), (4, 2), (5, 3), (6, 4)]
    assert p.stats == SlotStats(late_frames=4, max_lateness_frames=2, missing_slots=2)


def test_burst_after_stall_within_grace_queues_into_following_slots():
    p = placer(grace=3)
    # stall after seq 0, then seqs 1..4 all arrive in slot 5: slots 5..8, the last exactly
    # grace slots after its arrival slot
    slots = feed(p, [(0, 100.05, 1), (1, 100.45, 6), (2, 100.45, 6), (3, 100.45, 6), (4, 100.45, 6)])
    assert slots == [0, 5, 6, 7, 8]
    # a frame arriving in slot 9 is on time again: no queue left
    assert feed(p, [(5, 100.77, 10)]) == [9]
    assert timeline(p.due(10)) == [(0, 0), (1, None), (2, None), (3, None), (4, None),
                                   (5, 1), (6, 2), (7, 3), (8, 4), (9, 5)]
    assert p.stats == SlotStats(late_frames=5, max_lateness_frames=4, missing_slots=4)


def test_a_queue_beyond_grace_is_lateness_not_bad_seq():
    p = placer(grace=3)
    # the server's loop stalled: it sent room frames 0..5 on time but read the bridge's prompt
    # answers only in slot 5, all at once; they queue to slots 5..10, 5 past their arrival slot
    slots = feed(p, [(k, 100.45, 6) for k in range(6)])
    assert slots == [5, 6, 7, 8, 9, 10]
    # the bridge keeps answering one frame per room frame: the shift stays, and is recorded
    assert feed(p, [(6, 100.49, 7), (7, 100.57, 8)]) == [11, 12]
    assert timeline(p.due(13)) == [(0, None), (1, None), (2, None), (3, None), (4, None),
                                   (5, 0), (6, 1), (7, 2), (8, 3), (9, 4), (10, 5), (11, 6), (12, 7)]
    assert p.stats == SlotStats(late_frames=8, max_lateness_frames=5, missing_slots=5)


def test_a_bridge_can_never_send_more_than_grace_frames_beyond_the_room_stream():
    p = placer(grace=3)
    # six room frames out: seqs up to 8 (< 6 + 3) are taken, however fast they come
    assert feed(p, [(k, 100.45, 6) for k in range(9)]) == list(range(5, 14))
    with pytest.raises(ProtocolError) as exc:
        p.arrive(9, pcm(9), 100.45, 6)  # its tenth frame with six room frames sent
    assert exc.value.code == "bad_seq" and exc.value.close_code == CLOSE_PROTOCOL_ERROR
    assert str(exc.value) == "assistant frame seq 9 is ahead of the room stream"
    assert p.arrive(9, pcm(9), 100.49, 7) == 14  # once the next room frame is out it may come


@pytest.mark.parametrize("seq, message", [(3, "assistant frame seq 3 not after 3"),
                                          (1, "assistant frame seq 1 not after 3")])
def test_repeated_or_older_seq_is_bad_seq(seq, message):
    p = placer()
    assert feed(p, [(0, 100.05, 1), (3, 100.13, 4)]) == [0, 1]  # gaps in seq are allowed
    with pytest.raises(ProtocolError) as exc:
        p.arrive(seq, pcm(seq), 100.21, 4)
    assert exc.value.code == "bad_seq" and str(exc.value) == message
    assert timeline(p.due(3)) == [(0, 0), (1, 3), (2, None)]


def test_seq_too_far_ahead_of_the_room_stream_is_bad_seq():
    p = placer(grace=25)
    # one room frame is out: seq must stay below 1 + 25
    assert p.arrive(25, pcm(25), 100.05, 1) == 0
    q = placer(grace=25)
    with pytest.raises(ProtocolError) as exc:
        q.arrive(26, pcm(26), 100.05, 1)
    assert exc.value.code == "bad_seq" and str(exc.value) == "assistant frame seq 26 is ahead of the room stream"
    assert timeline(q.due(1)) == [(0, None)]


def test_gaps_are_fed_as_silence_and_counted_once():
    p = placer()
    assert timeline(p.due(2)) == [(0, None), (1, None)]
    assert p.due(2) == []  # already handed out: nothing twice
    assert p.stats.missing_slots == 2
    feed(p, [(2, 100.21, 3)])  # slot 2
    frames = p.due(5)
    assert timeline(frames) == [(2, 2), (3, None), (4, None)]
    assert frames[1] == SlotFrame(3, None, None, None)
    assert p.stats == SlotStats(late_frames=0, max_lateness_frames=0, missing_slots=4)
    assert p.stats.to_json() == {"late_frames": 0, "max_lateness_frames": 0, "missing_slots": 4}


def test_lateness_counts_only_slots_handed_out():
    p = placer()
    # seq 0 one slot late, seq 1 three slots late, seq 2 queued behind it at slot 5
    assert feed(p, [(0, 100.09, 1), (1, 100.33, 4), (2, 100.34, 5)]) == [1, 4, 5]
    p.due(5)  # the timeline closes at slot 5: seq 2 is discarded, not counted
    assert p.stats == SlotStats(late_frames=2, max_lateness_frames=3, missing_slots=3)
    assert p.stats.to_json() == {"late_frames": 2, "max_lateness_frames": 3, "missing_slots": 3}
