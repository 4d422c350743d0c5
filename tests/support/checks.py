"""Recorded check attempts built from literal figures, for the bridge check's pure judgement
(server.bridgecheck.evaluate)."""

from __future__ import annotations

from clients.codec import FRAME_SAMPLES as FRAME
from server.bridgecheck.evaluate import (
    AnswerFrame,
    BridgeSeen,
    CheckRun,
    RecordedAttempt,
    RoomFrame,
    evaluate,
)
from server.core.events import Event
from server.core.status import AttemptStatus, RunStatus


def check_events(preamble_end: int, t_end: int) -> tuple[Event, ...]:
    """A check episode's events: the preamble, then N2, T (ending at ``t_end``), N4Q and N4R."""
    ev = [Event(0, "preamble.start"), Event(preamble_end, "preamble.end")]
    t = preamble_end
    for idx, label, end in ((0, "N2", t_end - 60_000), (1, "T", t_end), (2, "N4Q", t_end + 200_000),
                            (3, "N4R", t_end + 300_000)):
        ev += [Event(t, "clip.start", {"idx": idx, "label": label}), Event(end, "clip.end", {"idx": idx})]
        t = end + 12_000
    return (*ev, Event(t_end + 312_000, "episode.end"))


def attempt(clock="lockstep", *, episode=0, status=AttemptStatus.completed, code=None, message=None, n=300,
            lateness=0, missing=0, turnaround_us=2_000, speech=(), bridge="b1", silent=True) -> RecordedAttempt:
    room = tuple(RoomFrame(i, i * 80_000) for i in range(n))
    answers = tuple(AnswerFrame(i, i + lateness, i * 80_000 + turnaround_us, silent) for i in range(n - missing))
    return RecordedAttempt(clock=clock, episode=episode, status=status, error_code=code, error_message=message,
                           bridge_id=bridge, bridge_rate=24000, room=room, answers=answers,
                           segments=tuple(speech), events=check_events(48_000, 200_000), end_sample=n * FRAME)


def judge(*attempts, clocks=("lockstep",), bridges=("lockstep", "realtime")):
    runs = [CheckRun(c, f"run-{c}", RunStatus.finished, 2) for c in clocks]
    return evaluate("m", runs, attempts, [BridgeSeen("b1", "", 24000, bridges, True)])


ANSWERED = [(210_000, 230_000)]  # an onset 10,000 samples after T ended; stops 0.75 s into N4Q
