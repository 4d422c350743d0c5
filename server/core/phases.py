"""Where in the frame period each realtime session of a server process keeps its deadlines.

A realtime session sends room frame ``n`` at ``t0 + n · period`` (DESIGN §4), so its deadlines
fall at one phase of the period, ``t0 mod period``. Sessions whose phases coincide all wake at
once, every period, and the last of them sends late by the work of all the others; sessions
started together (a run's first episodes, bridges that connect at once) would do that for their
whole episode. :class:`FramePhases` gives each starting session the middle of the widest gap
between the phases already taken, so the process's deadlines stay spread over the period: 2ᵏ
sessions started at one instant are spaced exactly ``period / 2ᵏ`` apart.

Pure: the caller passes in its clock's time and waits the returned delay itself.
"""

from __future__ import annotations

from clients.codec import FRAME_MS


class FramePhases:
    """The phases (seconds in ``[0, period)``) that a process's running realtime sessions hold."""

    def __init__(self, period: float = FRAME_MS / 1000):
        self.period = period
        self.taken: list[float] = []

    def reserve(self, now: float) -> tuple[float, float]:
        """A phase for a session starting at ``now`` or later: ``(delay, phase)``, where ``now +
        delay`` is the first instant at that phase (the session's t0). The phase is held until
        :meth:`release`; with none held it is ``now``'s own (no delay)."""
        here = now % self.period
        if not self.taken:
            phase = here
        else:
            ordered = sorted(self.taken)
            gaps = [(b - a, a) for a, b in zip(ordered, ordered[1:] + [ordered[0] + self.period])]
            width, start = max(gaps)
            phase = (start + width / 2) % self.period
        self.taken.append(phase)
        return (phase - here) % self.period, phase

    def release(self, phase: float) -> None:
        """The session holding ``phase`` has ended."""
        self.taken.remove(phase)
