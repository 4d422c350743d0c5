"""The MTR-DuplexBench round scheduler (DESIGN §12.2, §12.3): pure and clock-injected.

Like the Duplex-MPE scheduler, its only clock is stream time in integer samples; the caller
plans room frames in order with :meth:`RoundScheduler.next_frame` and hands over the speech
detector's decisions with :meth:`RoundScheduler.observe` in between.

* ``gt`` mode, live round k: rounds 1…k−1 are a fixed **history** (:func:`history_layout`):
  the user side in the room, the ground-truth replies as assistant-context pieces; the history
  ends on a frame boundary, so exactly its frames carry context. Then round k runs live.
* ``free`` mode: every round runs live, one after the other.

A live round plays the user's turn (a pause round: first part, the pause, the continuation),
waits for the model's onset, places the feature's clips relative to that onset (barge-in,
background voice, backchannels), and ends once a confirmed silence follows the reply and every
placed clip has finished. Every decision is logged as an event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from clients.messages import MAX_TURN_TEXT, ContextTurn
from server.benchmarks.mtr.suite import Dialogue, Round, key
from server.core.episode import FRAME
from server.core.events import Event
from server.core.schedule import FramePlan, Piece
from server.core.states import advance
from server.core.timebase import STREAM_RATE, SpeechEvent, samples

# §12.3 constants (the design doc gives the reasons).
LEAD_IN_S = 0.5
RESPONSE_WINDOW_S = 15.0
CONFIRM_SILENCE_S = 2.0
RESPONSE_CAP_S = 40.0
ROUND_GAP_S = 1.0
# §12.2 history layout
HISTORY_REPLY_DELAY_S = 0.6
HISTORY_STOP_S = 0.4


class Phase(Enum):
    INIT = "init"
    HISTORY = "history"  # gt: the fixed ground-truth rounds before the live one
    GAP = "gap"  # the lead-in, and the silence after each round
    USER = "user"  # the user's clip (or a part of it)
    PAUSE = "pause"  # the pause inside a pause round's utterance
    WAIT = "wait"  # waiting for the model's onset
    RESPONDING = "responding"  # the model is answering; placed clips may play
    BARGE = "barge"  # the barge-in clip is playing
    ENDED = "ended"


_NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.INIT: frozenset({Phase.HISTORY, Phase.GAP}),
    Phase.HISTORY: frozenset({Phase.USER}),
    Phase.GAP: frozenset({Phase.USER, Phase.ENDED}),
    Phase.USER: frozenset({Phase.PAUSE, Phase.WAIT}),
    Phase.PAUSE: frozenset({Phase.USER}),
    Phase.WAIT: frozenset({Phase.RESPONDING, Phase.GAP}),
    Phase.RESPONDING: frozenset({Phase.BARGE, Phase.GAP}),
    Phase.BARGE: frozenset({Phase.WAIT}),
}


@dataclass(frozen=True)
class Play:
    """``length`` samples of clip ``key`` from its start, placed at stream time ``start``."""

    key: str
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True)
class History:
    """The fixed part of a ``gt`` episode: what plays in the room, what goes to the model as its
    own output (context), the events, where it ends (a frame boundary), and the words of its
    dialogue turns (the user's lines and the ground-truth replies, docs/protocol.md §5.2)."""

    room: tuple[Play, ...]
    context: tuple[Play, ...]
    events: tuple[Event, ...]
    end: int
    turns: tuple[ContextTurn, ...] = ()


def _turn(role: str, text: str, play: Play, frame: int, full: int | None = None) -> ContextTurn:
    """The §5.2 record of one dialogue line laid out at ``play`` (``full``: the clip's whole length
    when only part of it plays)."""
    return ContextTurn(role=role, text=text[:MAX_TURN_TEXT], start_seq=play.start // frame, end_seq=-(-play.end // frame),
                       played=1.0 if not full or play.length >= full else play.length / full)


def _frame_ceil(x: int, frame: int) -> int:
    return -(-x // frame) * frame


def history_layout(dialogue: Dialogue, live_round: int, lengths: Mapping[str | int, int], *,
                   frame: int = FRAME, rate: int = STREAM_RATE) -> History:
    """§12.2: rounds 1…live_round−1 laid out with the ground truth, after the lead-in."""
    delay, stop, gap = samples(HISTORY_REPLY_DELAY_S, rate), samples(HISTORY_STOP_S, rate), samples(ROUND_GAP_S, rate)
    room: list[Play] = []
    ctx: list[Play] = []
    events: list[Event] = [Event(0, "history.start", {"rounds": live_round - 1})]
    turns: list[tuple[int, ContextTurn]] = []
    t = samples(LEAD_IN_S, rate)
    for r in dialogue.rounds[: live_round - 1]:
        n = r.round
        events.append(Event(t, "round.start", {"round": n, **_features(r), "live": False}))
        u = Play(key(n, "user"), t, lengths[key(n, "user")])
        room.append(u)
        turns.append((u.start, _turn("user", r.user.text, u, frame)))
        events.append(Event(u.start, "user.start", {"round": n, "part": 1}))
        user_end = u.end
        if r.pause:
            events.append(Event(u.end, "pause.start", {"round": n}))
            c = Play(key(n, "continuation"), u.end + samples(r.pause.length_s, rate), lengths[key(n, "continuation")])
            events.append(Event(c.start, "pause.end", {"round": n}))
            room.append(c)
            turns.append((c.start, _turn("user", r.pause.continuation.text, c, frame)))
            user_end = c.end
        events.append(Event(user_end, "user.end", {"round": n}))
        a0 = user_end + delay
        reply_len = lengths[key(n, "assistant")]
        ends = [a0 + reply_len]
        if r.barge_in:
            b = Play(key(n, "barge_in"), a0 + samples(r.barge_in.after_onset_s, rate), lengths[key(n, "barge_in")])
            reply_len = min(reply_len, b.start + stop - a0)  # the reply stops after the barge-in starts
            resp = Play(key(n, "barge_in_response"), b.end + delay, lengths[key(n, "barge_in_response")])
            room.append(b)
            ctx.append(resp)
            turns += [(b.start, _turn("user", r.barge_in.text, b, frame)),
                      (resp.start, _turn("assistant", r.barge_in.response.text, resp, frame))]
            events += [Event(b.start, "barge_in.start", {"round": n}), Event(b.end, "barge_in.end", {"round": n}),
                       Event(resp.start, "context.start", {"round": n, "part": "barge_in_response"}),
                       Event(resp.end, "context.end", {"round": n, "part": "barge_in_response"})]
            ends = [resp.end]
        reply = Play(key(n, "assistant"), a0, reply_len)
        ctx.append(reply)
        turns.append((reply.start, _turn("assistant", r.assistant.text, reply, frame, lengths[key(n, "assistant")])))
        events += [Event(reply.start, "context.start", {"round": n, "part": "assistant"}),
                   Event(reply.end, "context.end", {"round": n, "part": "assistant"})]
        for i, (part, offset_s) in enumerate(_placed(r)):
            p = Play(key(n, part), a0 + samples(offset_s, rate), lengths[key(n, part)])
            room.append(p)
            kind = "background" if part == "background" else "backchannel"
            data = {"round": n} if kind == "background" else {"round": n, "i": i - (1 if r.background else 0)}
            events += [Event(p.start, f"{kind}.start", data), Event(p.end, f"{kind}.end", data)]
            ends.append(p.end)
        end = max(ends)
        events.append(Event(end, "round.end", {"round": n}))
        t = end + gap
    end = _frame_ceil(t, frame)
    events.append(Event(end, "history.end", {}))
    events.sort(key=lambda e: e.t)  # stable: same-time events keep their order
    turns.sort(key=lambda t: t[0])  # stable: a reply cut by a barge-in comes before it
    return History(tuple(room), tuple(ctx), tuple(events), end, tuple(t for _, t in turns))


def _features(r: Round) -> dict[str, Any]:
    """The feature fields of a round's ``round.start`` event: its feature, and every feature it
    carries when it carries several (an overlay round)."""
    return {"feature": r.feature, **({"features": list(r.features)} if r.overlay else {})}


def _placed(r: Round) -> list[tuple[str, float]]:
    """The clips a round places relative to the model's onset, besides the barge-in."""
    out: list[tuple[str, float]] = []
    if r.background:
        out.append(("background", r.background.after_onset_s))
    out += [(f"backchannel{i}", b.after_onset_s) for i, b in enumerate(r.backchannels)]
    return out


@dataclass
class _Wait:
    """Waiting for, then following, one reply (after the user's turn or after the barge-in)."""

    start: int  # the end of what the model replies to
    after: str  # "user" | "barge_in"
    present: bool = False
    already: bool = False  # speech was active at ``start``
    onset: int | None = None
    cap: int = 0
    silence_end: int | None = None


@dataclass
class _Live:
    """State of the live round."""

    round: Round
    part: int = 1
    wait: _Wait | None = None
    barge_at: int | None = None  # when the barge-in is due (interruption, after the first onset)
    placed_end: int = 0  # the end of every clip placed so far
    timed: list[Event] = field(default_factory=list)  # events at known future times


class RoundScheduler:
    """The scheduler of one MTR episode (see the module docstring)."""

    def __init__(self, dialogue: Dialogue, mode: str, live_round: int | None, lengths: Mapping[str | int, int], *,
                 frame_samples: int = FRAME, rate: int = STREAM_RATE) -> None:
        if mode not in ("gt", "free"):
            raise ValueError(f"unknown history mode {mode!r}")
        if mode == "gt" and not (live_round and 1 <= live_round <= len(dialogue.rounds)):
            raise ValueError(f"gt mode needs a live round in 1..{len(dialogue.rounds)}")
        self.dialogue = dialogue
        self.mode = mode
        self.frame_samples = frame_samples
        self.rate = rate
        self.lengths = lengths
        self.window = samples(RESPONSE_WINDOW_S, rate)
        self.confirm = samples(CONFIRM_SILENCE_S, rate)
        self.cap = samples(RESPONSE_CAP_S, rate)
        self.gap = samples(ROUND_GAP_S, rate)
        # gt round 1 has no history: it runs exactly as round 1 of a free episode
        self.history = (history_layout(dialogue, live_round, lengths, frame=frame_samples, rate=rate)
                        if mode == "gt" and live_round > 1 else None)
        self.rounds: list[Round] = [dialogue.rounds[live_round - 1]] if mode == "gt" else list(dialogue.rounds)
        self.plays: list[Play] = list(self.history.room) if self.history else []
        self._seq = 0
        self._pending: list[SpeechEvent] = []
        self._known_until = 0
        self._speaking = False
        self._speech_start = 0  # start of the speech running now (valid while speaking)
        self._last_t = 0
        self._phase = Phase.INIT
        self._until = 0  # end of the current fixed phase (history, gap, user clip, pause, barge-in)
        self._next = 0  # index into self.rounds of the next round to start
        self._live: _Live | None = None
        self._history_events = list(self.history.events) if self.history else []
        self._end_sample: int | None = None

    # -- the engine's contract ------------------------------------------------------------

    @property
    def end_sample(self) -> int | None:
        return self._end_sample

    @property
    def context_frames(self) -> int:
        """Slots 0…n−1 carry an assistant-context frame (the gt history)."""
        return self.history.end // self.frame_samples if self.history else 0

    @property
    def context_turns(self) -> tuple[ContextTurn, ...]:
        """The history's dialogue lines with their slots (docs/protocol.md §5.2)."""
        return self.history.turns if self.history else ()

    @property
    def done(self) -> bool:
        return self._phase == Phase.ENDED

    def observe(self, events: Iterable[SpeechEvent], known_until: int) -> None:
        self._pending.extend(events)
        self._known_until = max(self._known_until, known_until)

    def next_frame(self) -> FramePlan | None:
        if self._phase == Phase.ENDED:
            return None
        start = self._seq * self.frame_samples
        stop = start + self.frame_samples
        events: list[Event] = []
        self._consume(start, events)
        cur = start
        while self._phase != Phase.ENDED:
            x, reason = self._due(cur)
            if x > stop or (x == stop and not self._final_gap()):
                break
            self._timed_until(x, events, inclusive=False)
            cur = x
            self._advance(x, reason, events)
        self._timed_until(stop, events, inclusive=False)
        context = None
        if self.history and start < self.history.end:
            context = tuple(self._pieces(self.history.context, start, stop))
        plan = FramePlan(self._seq, tuple(self._pieces(self.plays, start, stop)), tuple(events), context=context)
        self._seq += 1
        return plan

    def status(self) -> dict[str, Any]:
        live = self._live
        out: dict[str, Any] = {"state": self._phase.value}
        if live is not None:
            out.update(round=live.round.round, feature=live.round.feature)
        return out

    # -- internals ------------------------------------------------------------------------

    @staticmethod
    def _pieces(plays: Iterable[Play], a: int, b: int) -> list[Piece]:
        out = []
        for p in plays:
            lo, hi = max(a, p.start), min(b, p.end)
            if lo < hi:
                out.append(Piece(p.key, lo - p.start, lo - a, hi - lo))
        return out

    def _emit(self, events: list[Event], t: int, type_: str, data: dict[str, Any]) -> None:
        events.append(Event(t, type_, data))
        self._last_t = max(self._last_t, t)

    def _timed_until(self, x: int, events: list[Event], *, inclusive: bool) -> None:
        """Emit the fixed-time events (history, placed clips) before ``x``."""
        queues = [self._history_events] + ([self._live.timed] if self._live else [])
        for q in queues:
            while q and (q[0].t < x or (inclusive and q[0].t == x)):
                e = q.pop(0)
                self._emit(events, e.t, e.type, e.data)

    def _consume(self, start: int, events: list[Event]) -> None:
        t = max(start, self._last_t)
        pending, self._pending = self._pending, []
        for e in pending:
            self._emit(events, t, f"vad.{e.kind}", {"at": e.at, "seen_at": e.seen_at})
            if e.kind == "onset":
                self._speaking, self._speech_start = True, e.at
            else:
                self._speaking = False
            live = self._live
            if live is not None and live.wait is not None and self._phase in (Phase.WAIT, Phase.RESPONDING):
                self._react(live, live.wait, e, t, events)

    def _react(self, live: _Live, w: _Wait, e: SpeechEvent, t: int, events: list[Event]) -> None:
        if e.kind == "onset":
            if w.present:
                w.silence_end = None  # new speech cancels the pending silence end
                return
            if e.at <= w.start or e.at > w.start + self.window:
                return  # began before the wait (handled at its start) or after the window
            self._respond(live, w, e.at, False, t, events)
        elif w.present:
            w.silence_end = e.at + self.confirm

    def _respond(self, live: _Live, w: _Wait, onset: int, already: bool, t: int, events: list[Event]) -> None:
        """The model's reply began at ``onset``: place the feature's clips relative to it."""
        w.present, w.already, w.onset, w.cap = True, already, onset, max(onset, w.start) + self.cap
        self._phase = advance(_NEXT, self._phase, Phase.RESPONDING)
        self._emit(events, t, "response.onset", {"round": live.round.round, "at": onset, "already_speaking": already,
                                                 "after": w.after})
        if w.after != "user":
            return
        r = live.round
        # §12.3: placed from the reply's onset (speech already running at the user's end: its start); where
        # the first part would fall before now, every part moves later together (their spacing kept), the
        # first starting now: never inside the user's turn
        offsets = [samples(o, self.rate) for o in ([r.barge_in.after_onset_s] if r.barge_in else [])
                   + [o for _, o in _placed(r)]]
        base = max(onset, t - min(offsets)) if offsets else onset
        if r.barge_in:
            live.barge_at = max(base + samples(r.barge_in.after_onset_s, self.rate), t)
        i_bc = 0
        for part, offset_s in _placed(r):
            p = Play(key(r.round, part), max(base + samples(offset_s, self.rate), t), self.lengths[key(r.round, part)])
            self.plays.append(p)
            live.placed_end = max(live.placed_end, p.end)
            if part == "background":
                data: dict[str, Any] = {"round": r.round}
                kind = "background"
            else:
                data, kind = {"round": r.round, "i": i_bc}, "backchannel"
                i_bc += 1
            live.timed += [Event(p.start, f"{kind}.start", data), Event(p.end, f"{kind}.end", data)]
        live.timed.sort(key=lambda e: e.t)

    def _due(self, cur: int) -> tuple[int, str]:
        phase = self._phase
        if phase == Phase.INIT:
            return cur, ""
        if phase in (Phase.HISTORY, Phase.GAP, Phase.USER, Phase.PAUSE, Phase.BARGE):
            return max(self._until, cur), ""
        live = self._live
        assert live is not None and live.wait is not None
        w = live.wait
        if phase == Phase.WAIT:
            return max(w.start + self.window, cur), "no_response"
        # RESPONDING
        if live.barge_at is not None:
            return max(live.barge_at, cur), "barge_in"
        if w.silence_end is not None and w.silence_end <= w.cap:
            return max(w.silence_end, live.placed_end, cur), "silence"
        return max(w.cap, live.placed_end, cur), "cap"

    def _final_gap(self) -> bool:
        return self._phase == Phase.GAP and self._next >= len(self.rounds)

    def _enter(self, phase: Phase, until: int = 0) -> None:
        self._phase = advance(_NEXT, self._phase, phase)
        self._until = until

    def _play(self, part: str, at: int) -> Play:
        live = self._live
        assert live is not None
        p = Play(key(live.round.round, part), at, self.lengths[key(live.round.round, part)])
        self.plays.append(p)
        return p

    def _advance(self, x: int, reason: str, events: list[Event]) -> None:
        phase = self._phase
        if phase == Phase.INIT:
            if self.history:
                self._enter(Phase.HISTORY, self.history.end)
            else:
                self._enter(Phase.GAP, samples(LEAD_IN_S, self.rate))
            return
        if phase in (Phase.HISTORY, Phase.GAP):
            self._timed_until(x, events, inclusive=True)  # history.end and the history's last events
            self._start_round(x, events)
            return
        live = self._live
        assert live is not None
        r = live.round
        if phase == Phase.USER:
            if r.pause and live.part == 1:
                self._emit(events, x, "pause.start", {"round": r.round})
                self._enter(Phase.PAUSE, x + samples(r.pause.length_s, self.rate))
                return
            self._emit(events, x, "user.end", {"round": r.round})
            self._wait(live, x, "user", events)
        elif phase == Phase.PAUSE:
            self._emit(events, x, "pause.end", {"round": r.round})
            live.part = 2
            p = self._play("continuation", x)
            self._emit(events, x, "user.start", {"round": r.round, "part": 2})
            self._enter(Phase.USER, p.end)
        elif phase == Phase.WAIT:
            self._emit(events, x, "response.end", {"round": r.round, "reason": "no_response", "after": live.wait.after})
            self._end_round(x, events)
        elif phase == Phase.RESPONDING:
            if reason == "barge_in":
                live.barge_at = None
                p = self._play("barge_in", x)
                live.placed_end = max(live.placed_end, p.end)
                self._emit(events, x, "barge_in.start", {"round": r.round, "speaking": self._speaking})
                self._enter(Phase.BARGE, p.end)
                return
            self._emit(events, x, "response.end", {"round": r.round, "reason": reason, "after": live.wait.after})
            self._end_round(x, events)
        elif phase == Phase.BARGE:
            self._emit(events, x, "barge_in.end", {"round": r.round})
            self._wait(live, x, "barge_in", events)

    def _wait(self, live: _Live, x: int, after: str, events: list[Event]) -> None:
        live.wait = _Wait(start=x, after=after)
        self._enter(Phase.WAIT)
        self._emit(events, x, "wait.start", {"round": live.round.round, "after": after})
        if self._speaking:  # already talking when the user (or the barge-in) ends
            self._respond(live, live.wait, self._speech_start, True, x, events)

    def _start_round(self, x: int, events: list[Event]) -> None:
        if self._next >= len(self.rounds):
            self._emit(events, x, "episode.end", {})
            self._enter(Phase.ENDED)
            self._end_sample = x
            return
        r = self.rounds[self._next]
        self._next += 1
        self._live = _Live(round=r)
        self._emit(events, x, "round.start", {"round": r.round, **_features(r), "live": True})
        p = self._play("user", x)
        self._emit(events, x, "user.start", {"round": r.round, "part": 1})
        self._enter(Phase.USER, p.end)

    def _end_round(self, x: int, events: list[Event]) -> None:
        live = self._live
        assert live is not None
        self._timed_until(x, events, inclusive=True)  # the placed clips' last events
        self._emit(events, x, "round.end", {"round": live.round.round})
        self._enter(Phase.GAP, x + self.gap)
        if self._next >= len(self.rounds):
            self._end_sample = x + self.gap
