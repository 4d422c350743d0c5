"""Episode scheduler (DESIGN §3) as a pure, clock-injected (sans-I/O) state machine.

Its only clock is stream time in integer samples at the stream rate: room frame ``n``
covers ``[n*F, (n+1)*F)``. The caller plans frames in order with :meth:`next_frame` and,
between calls, hands over the speech detector's decisions about the assistant with
:meth:`observe`. The scheduler never reads a clock or a socket.

Timing conventions:

* Clip starts/ends and wait ends are sample-exact; a frame may hold the end of one clip
  and the start of the next.
* A transition at sample ``x`` is decided while planning the frame that contains ``x``,
  so observations delivered before that frame can still change it. The one exception is
  the episode end after a fixed silence, which may fall on the planned frame's end.
* Observations are consumed at the start of the next planned frame and logged there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from clients.codec import FRAME_SAMPLES
from server.benchmarks.mpe.speaking import HeardSpan, speaking_at
from server.core.events import Event
from server.core.schedule import PREAMBLE, FramePlan, Piece
from server.core.states import advance
from server.core.timebase import STREAM_RATE, SpeechEvent, samples

LABELS = frozenset({"T", "N1", "N2", "N3", "N4Q", "N4R"})

# §3's durations, the one place they are written (the window rules of §6 read them too)
GAP_S = 0.5  # silence after the preamble and after each clip
ONSET_WAIT_S = 5.0  # after T: wait up to 5 s for a fresh onset
CONFIRM_SILENCE_S = 2.0  # after T: the reply has ended after 2 s of confirmed silence
CAP_S = 60.0  # after T: the wait is capped at 60 s
N4_GAP_S = 3.0  # after N4Q: exactly 3 s of silence, then N4R


class Phase(Enum):
    INIT = "init"
    PREAMBLE = "preamble"
    GAP = "gap"  # §3: 0.5 s of silence after the preamble and after each clip
    CLIP = "clip"
    T_WAIT = "t_wait"  # §3: the wait after T
    N4_GAP = "n4_gap"  # §3: exactly 3 s after N4Q
    ENDED = "ended"


_NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.INIT: frozenset({Phase.PREAMBLE}),
    Phase.PREAMBLE: frozenset({Phase.GAP}),
    Phase.GAP: frozenset({Phase.CLIP, Phase.ENDED}),
    Phase.CLIP: frozenset({Phase.GAP, Phase.T_WAIT, Phase.N4_GAP}),
    Phase.T_WAIT: frozenset({Phase.CLIP, Phase.ENDED}),
    Phase.N4_GAP: frozenset({Phase.CLIP, Phase.ENDED}),
}


@dataclass(frozen=True)
class TurnPlan:
    idx: int  # turn index in the scenario
    label: str  # one of LABELS
    n_samples: int  # clip length in samples
    speaker: str = ""  # "A".."D", only copied into events


@dataclass(frozen=True)
class EpisodePlan:
    preamble_samples: int
    turns: tuple[TurnPlan, ...]


@dataclass
class _TWait:
    """State of the wait after T (§3)."""

    e_t: int  # end of the T clip
    present: bool = False  # speech present (fresh onset, or active at e_T)
    already: bool = False  # speech was active at e_T
    onset_at: int | None = None  # the fresh onset, if any
    cap: int = 0  # valid once present
    silence_end: int | None = None  # offset.at + confirm, while no newer onset


class Scheduler:
    context_frames = 0  # Duplex-MPE sends no assistant-context frames (every slot is live)
    context_turns = ()

    def __init__(
        self,
        plan: EpisodePlan,
        *,
        frame_samples: int = FRAME_SAMPLES,
        rate: int = STREAM_RATE,
        gap_s: float = GAP_S,
        onset_wait_s: float = ONSET_WAIT_S,
        confirm_silence_s: float = CONFIRM_SILENCE_S,
        cap_s: float = CAP_S,
        n4_gap_s: float = N4_GAP_S,
    ) -> None:
        if frame_samples <= 0 or rate <= 0:
            raise ValueError("frame_samples and rate must be positive")
        if plan.preamble_samples < 0:
            raise ValueError("preamble_samples must be >= 0")
        for turn in plan.turns:
            if turn.label not in LABELS:
                raise ValueError(f"unknown turn label {turn.label!r}")
            if turn.n_samples < 0:
                raise ValueError("n_samples must be >= 0")
        self.plan = plan
        self.frame_samples = frame_samples
        self.rate = rate
        # Integer samples inside, seconds only at the edges (§11).
        self.gap = samples(gap_s, rate)
        self.onset_wait = samples(onset_wait_s, rate)
        self.confirm = samples(confirm_silence_s, rate)
        self.cap = samples(cap_s, rate)
        self.n4_gap = samples(n4_gap_s, rate)
        if min(self.gap, self.onset_wait, self.confirm, self.cap, self.n4_gap) < 0:
            raise ValueError("durations must be >= 0")

        self._seq = 0
        self._pending: list[SpeechEvent] = []
        self._known_until = 0
        self._heard: list[HeardSpan] = []  # the detector's segments so far, the last open while speaking
        self._last_t = 0  # time of the last emitted event
        self._phase = Phase.INIT
        self._start = 0  # start of the current audio phase (preamble/clip)
        self._until = 0  # end of the current fixed silence (gap/n4_gap)
        self._next = 0  # index into plan.turns of the next clip to start
        self._clip: TurnPlan | None = None
        self._wait: _TWait | None = None
        self._end_sample: int | None = None

    # -- inputs ---------------------------------------------------------------------

    def observe(self, events: Iterable[SpeechEvent], known_until: int) -> None:
        """Detector decisions about the assistant's speech, and the stream time up to
        which the detector has processed audio. Consumed when the next frame is planned."""
        self._pending.extend(events)
        self._known_until = max(self._known_until, known_until)

    # -- outputs --------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._phase == Phase.ENDED

    @property
    def end_sample(self) -> int | None:
        return self._end_sample

    def next_frame(self) -> FramePlan | None:
        if self._phase == Phase.ENDED:
            return None
        start = self._seq * self.frame_samples
        stop = start + self.frame_samples
        events: list[Event] = []
        pieces: list[Piece] = []
        self._consume(start, events)
        cur = start
        while self._phase != Phase.ENDED:
            x, reason = self._due(cur)
            # A transition belongs to the frame holding its sample; the episode end
            # after a fixed silence may sit exactly on this frame's end (§3.3).
            if x > stop or (x == stop and not self._final_silence()):
                break
            self._play(cur, x, start, pieces)
            cur = x
            self._advance(x, reason, events)
        if self._phase != Phase.ENDED:
            self._play(cur, stop, start, pieces)
        # §3.3: the final frame is padded with silence (pieces just stop).
        plan = FramePlan(self._seq, tuple(pieces), tuple(events))
        self._seq += 1
        return plan

    def status(self) -> dict:
        """Human-readable state after the last planned frame, for live listeners."""
        now = self._seq * self.frame_samples
        phase = self._phase

        def s(n: int) -> float:
            return round(n / self.rate, 2)

        if phase in (Phase.INIT, Phase.PREAMBLE):
            return {"state": "preamble"}
        if phase == Phase.CLIP:
            assert self._clip is not None
            return {"state": "playing", "idx": self._clip.idx, "label": self._clip.label}
        if phase == Phase.GAP:
            return {"state": "gap"}
        if phase == Phase.N4_GAP:
            return {"state": "n4_gap", "remaining_s": s(max(0, self._until - now))}
        if phase == Phase.T_WAIT:
            w = self._wait
            assert w is not None
            if not w.present:
                deadline = w.e_t + self.onset_wait
                return {"state": "t_wait_onset", "remaining_s": s(max(0, deadline - now))}
            silence = 0
            if w.silence_end is not None:  # silence confirmed by the detector so far
                silence = max(0, self._known_until - (w.silence_end - self.confirm))
            return {
                "state": "t_wait_silence",
                "silence_s": s(silence),
                "need_s": s(self.confirm),
                "cap_left_s": s(max(0, w.cap - now)),
            }
        return {"state": "ended"}

    # -- internals ------------------------------------------------------------------

    def _emit(self, events: list[Event], t: int, type_: str, data: dict) -> None:
        events.append(Event(t, type_, data))
        self._last_t = t

    def _consume(self, start: int, events: list[Event]) -> None:
        # §3: log detector decisions as the scheduler saw them, at the frame start.
        t = max(start, self._last_t)
        pending, self._pending = self._pending, []
        for e in pending:
            self._emit(events, t, f"vad.{e.kind}", {"at": e.at, "seen_at": e.seen_at})
            self._hear(e)
            if self._phase == Phase.T_WAIT:
                self._react(e, t, events)

    def _hear(self, e: SpeechEvent) -> None:
        if e.kind == "onset":
            self._heard.append((e.at, None))
        elif self._heard and self._heard[-1][1] is None:
            self._heard[-1] = (self._heard[-1][0], e.at)

    def _react(self, e: SpeechEvent, t: int, events: list[Event]) -> None:
        w = self._wait
        assert w is not None
        if w.already and not speaking_at(self._heard, w.e_t):
            # §3/§6: the offset, confirmed only now (pauses < 800 ms are merged), puts the end of
            # the speech at or before e_T: it was not active at e_T after all, so the wait is the
            # onset wait of a model that was silent at e_T.
            w.present = w.already = False
            w.silence_end = None
            self._emit(events, t, "t_wait.revised", {"offset_at": e.at, "already_speaking": False})
            return
        if e.kind == "onset":
            if w.present:
                w.silence_end = None  # §3: new speech cancels the pending silence end
                return
            if speaking_at(self._heard, w.e_t):
                # §3: an onset confirmed late that began by e_T means speech was
                # already active at e_T; the cap counts from e_T.
                w.already = True
                w.cap = w.e_t + self.cap
            elif w.e_t < e.at <= w.e_t + self.onset_wait:
                # §3: fresh onset in (e_T, e_T + 5 s]; the cap counts from the onset.
                w.onset_at = e.at
                w.cap = e.at + self.cap
            else:
                return  # outside the onset window: not a fresh onset
            w.present = True
            self._emit(events, t, "t_wait.onset", {"at": e.at, "already_speaking": w.already})
        elif w.present:
            w.silence_end = e.at + self.confirm  # §3: 2 s of confirmed silence

    def _due(self, cur: int) -> tuple[int, str]:
        """Time at which the current phase ends (never before ``cur``), and why."""
        phase = self._phase
        if phase == Phase.INIT:
            x, reason = 0, ""
        elif phase == Phase.PREAMBLE:
            x, reason = self._start + self.plan.preamble_samples, ""
        elif phase == Phase.CLIP:
            assert self._clip is not None
            x, reason = self._start + self._clip.n_samples, ""
        elif phase in (Phase.GAP, Phase.N4_GAP):
            x, reason = self._until, ""
        else:  # t_wait
            w = self._wait
            assert w is not None
            if not w.present:
                x, reason = w.e_t + self.onset_wait, "no_response"  # §3: no onset by e_T+5 s
            elif w.silence_end is not None and w.silence_end <= w.cap:
                x, reason = w.silence_end, "silence"
            else:
                x, reason = w.cap, "cap"  # §3: the wait never outlasts the cap
        # §3: an end already in the past ends at the earliest sample not yet emitted.
        return max(x, cur), reason

    def _final_silence(self) -> bool:
        return self._phase in (Phase.GAP, Phase.N4_GAP) and self._next >= len(self.plan.turns)

    def _play(self, a: int, b: int, frame_start: int, pieces: list[Piece]) -> None:
        if b <= a:
            return
        if self._phase == Phase.PREAMBLE:
            source: str | int = PREAMBLE
        elif self._phase == Phase.CLIP:
            assert self._clip is not None
            source = self._clip.idx
        else:
            return  # silence
        pieces.append(Piece(source, a - self._start, a - frame_start, b - a))

    def _enter(self, phase: Phase) -> None:
        self._phase = advance(_NEXT, self._phase, phase)

    def _silence_until(self, phase: Phase, until: int) -> None:
        self._enter(phase)
        self._until = until
        if self._final_silence():
            self._end_sample = until  # §3.3: known as soon as the last silence starts

    def _advance(self, x: int, reason: str, events: list[Event]) -> None:
        phase = self._phase
        if phase == Phase.INIT:
            # §3.1: the duty preamble plays at stream time 0.
            self._emit(events, x, "preamble.start", {})
            self._enter(Phase.PREAMBLE)
            self._start = x
        elif phase == Phase.PREAMBLE:
            self._emit(events, x, "preamble.end", {})
            self._silence_until(Phase.GAP, x + self.gap)  # §3.1: then 0.5 s of silence
        elif phase == Phase.CLIP:
            turn = self._clip
            assert turn is not None
            self._emit(events, x, "clip.end", self._clip_data(turn))
            if turn.label == "T":
                already = speaking_at(self._heard, x)  # §3/§6: believed so far; settled by the offset
                self._wait = _TWait(e_t=x, present=already, already=already)
                if already:
                    self._wait.cap = x + self.cap  # §3: cap counts from e_T when already speaking
                self._enter(Phase.T_WAIT)
                self._emit(
                    events, x, "t_wait.start", {"idx": turn.idx, "already_speaking": already}
                )
            elif turn.label == "N4Q":
                # §3: exactly 3 s of silence, then N4R whatever the model is doing.
                self._emit(events, x, "n4_gap.start", {"idx": turn.idx})
                self._silence_until(Phase.N4_GAP, x + self.n4_gap)
            else:
                self._silence_until(Phase.GAP, x + self.gap)  # §3.2: 0.5 s after each clip
        elif phase == Phase.GAP:
            self._start_next(x, events)
        elif phase == Phase.N4_GAP:
            assert self._clip is not None
            self._emit(events, x, "n4_gap.end", {"idx": self._clip.idx})
            self._start_next(x, events)
        elif phase == Phase.T_WAIT:
            w = self._wait
            assert w is not None
            self._emit(
                events,
                x,
                "t_wait.end",
                {"reason": reason, "onset_at": w.onset_at, "already_speaking": w.already},
            )
            self._wait = None
            self._start_next(x, events)  # §3: the next clip starts when the wait ends

    def _start_next(self, x: int, events: list[Event]) -> None:
        if self._next < len(self.plan.turns):
            turn = self.plan.turns[self._next]
            self._next += 1
            self._enter(Phase.CLIP)
            self._clip, self._start = turn, x
            self._emit(events, x, "clip.start", self._clip_data(turn))
        else:
            # §3.3: after the last clip (and its silence) the episode ends.
            self._emit(events, x, "episode.end", {})
            self._enter(Phase.ENDED)
            self._end_sample = x

    @staticmethod
    def _clip_data(turn: TurnPlan) -> dict:
        return {"idx": turn.idx, "label": turn.label, "speaker": turn.speaker}
