"""The per-round rules of MTR-DuplexBench (DESIGN §12.4), pure: events + detector segments in,
one :class:`RoundResult` per live round out. The one place these rules are written: scoring,
the pages' outcomes, the demo and the tests read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from server.benchmarks.mtr.scheduler import RESPONSE_WINDOW_S
from server.core.events import Event
from server.core.spans import Span, active_at, clipped, total
from server.core.timebase import samples
from server.scoring.errors import BadBundle

TALK_OVER = samples(1.0)  # speech over a human turn counts from 1.0 s in total (shorter: a backchannel)
STOP_WITHIN = samples(1.0)  # interruption: the audible stop within 1.0 s of the barge-in's start
PAUSE_GRACE = samples(1.0)  # pause handling: the published +1.0 s after the pause
# pause handling: speech in [pause start, pause end + grace] fails from this much in total; shorter is
# tolerated as a backchannel, as the published rule counts "speaking" from >= 1.0 s of words (notes §2)
PAUSE_SPEECH = TALK_OVER
YIELD_GAP = samples(2.0)  # a silence longer than this is the end of a reply (the published 2.0 s)
BACKGROUND_SKIP = samples(0.3)  # background: the published rule starts 0.3 s into the voice
BACKCHANNEL_AFTER = samples(1.0)  # backchannel: the window runs 1.0 s past each backchannel
OWN_BACKCHANNEL_MAX = samples(1.0)  # the model's own backchannel: a segment under 1.0 s over the user
WINDOW = samples(RESPONSE_WINDOW_S)

Failure = Literal["talked_over", "no_response", "spoke_in_pause", "late_stop", "talked_over_barge_in",
                  "no_barge_in_response", "yielded_to_background", "yielded_to_backchannel"]
FAILURES: tuple[Failure, ...] = get_args(Failure)
#: the failures every feature of a round shares (its turn: not talked over, answered) and each feature's
#: own: a round that carries several features (an overlay round) gets one verdict per feature, the first
#: of these failures it has, in FAILURES order
TURN_FAILURES: tuple[Failure, ...] = ("talked_over", "no_response")
FEATURE_FAILURES: dict[str, tuple[Failure, ...]] = {
    "smooth": (), "pause": ("spoke_in_pause",),
    "interruption": ("late_stop", "talked_over_barge_in", "no_barge_in_response"),
    "background": ("yielded_to_background",), "backchannel": ("yielded_to_backchannel",)}


@dataclass
class LiveRound:
    """What the events say about one live round (stream samples)."""

    round: int
    feature: str
    start: int
    end: int | None = None
    features: tuple[str, ...] = ()  # every feature the round carries (empty: its feature alone)
    user: list[Span] = field(default_factory=list)
    pause: Span | None = None
    barge_in: Span | None = None
    background: Span | None = None
    backchannels: list[Span] = field(default_factory=list)

    @property
    def user_end(self) -> int:
        return self.user[-1][1]

    def spans(self) -> list[tuple[str, int, int, int]]:
        """(kind, round, start, end) of the round and of everything that played in it."""
        assert self.end is not None
        parts = [("round", (self.start, self.end))] + [("user", u) for u in self.user]
        parts += [(k, v) for k, v in (("pause", self.pause), ("barge_in", self.barge_in),
                                      ("background", self.background)) if v is not None]
        parts += [("backchannel", b) for b in self.backchannels]
        return [(kind, self.round, a, b) for kind, (a, b) in parts]


def live_rounds(events: Iterable[Event]) -> list[LiveRound]:
    """The live rounds of an episode's events (history rounds are not scored). Raises
    :class:`BadBundle` on events that do not describe whole rounds."""
    rounds: dict[int, LiveRound] = {}
    started: dict[int, dict[str, int]] = {}  # round -> span kind -> its start, while it is open
    for e in events:
        n = e.data.get("round")
        if e.type == "round.start" and e.data.get("live"):
            rounds[n] = LiveRound(round=n, feature=str(e.data["feature"]), start=e.t,
                                  features=tuple(e.data.get("features") or ()))
            started[n] = {}
            continue
        r = rounds.get(n)
        if r is None:
            continue
        kind = e.type.rpartition(".")[0]
        if e.type == "round.end":
            r.end = e.t
        elif e.type in ("user.start", "pause.end", "barge_in.start", "background.start", "backchannel.start"):
            started[n][kind if e.type != "pause.end" else "user"] = e.t
            if e.type == "pause.end":
                r.pause = (started[n].pop("pause"), e.t)
        elif e.type == "pause.start":
            r.user.append((started[n].pop("user"), e.t))
            started[n]["pause"] = e.t
        elif e.type in ("user.end", "barge_in.end", "background.end", "backchannel.end"):
            span = (started[n].pop(kind), e.t)
            if kind == "user":
                r.user.append(span)
            elif kind == "barge_in":
                r.barge_in = span
            elif kind == "background":
                r.background = span
            else:
                r.backchannels.append(span)
    out = sorted(rounds.values(), key=lambda r: r.round)
    for r in out:
        if r.end is None or not r.user:
            raise BadBundle(f"round {r.round} is not complete in the events")
    return out


@dataclass(frozen=True)
class Response:
    """The model's reply to something that ended at ``after`` (§12.4)."""

    after: int
    present: bool
    onset: int | None  # the reply's start (``after`` itself when speech was already running)
    already: bool

    @property
    def latency(self) -> int | None:
        return None if self.onset is None else self.onset - self.after


def response(segments: Sequence[Span], after: int) -> Response:
    """A reply: speech running at ``after``, or an onset within the response window."""
    if active_at(segments, after) is not None:
        return Response(after, True, after, True)
    onset = next((s for s, _ in segments if after < s <= after + WINDOW), None)
    return Response(after, onset is not None, onset, False)


def talked_over(segments: Sequence[Span], spans: Iterable[Span]) -> bool:
    """Speech over the spans of at least :data:`TALK_OVER` in total."""
    return sum(total(clipped(segments, a, b)) for a, b in spans) >= TALK_OVER


def long_silences(segments: Sequence[Span], start: int, end: int) -> list[Span]:
    """Silences longer than :data:`YIELD_GAP` between ``start`` and ``end`` (the last one runs
    on to ``end``; a reply that ended before ``end`` ends in a long silence)."""
    out: list[Span] = []
    cur = start
    for s, e in segments:
        if e <= cur:
            continue
        if s > cur and s - cur > YIELD_GAP:
            out.append((cur, s))
        cur = max(cur, e)
        if cur >= end:
            break
    if cur < end and end - cur > YIELD_GAP:
        out.append((cur, end))
    return out


def keeps_talking(segments: Sequence[Span], a: int, b: int, reply_start: int, round_end: int) -> bool:
    """No long silence of the reply overlaps ``[a, b]``: the model talked through it."""
    return not any(s < b and e > a for s, e in long_silences(segments, reply_start, round_end + YIELD_GAP + 1))


@dataclass(frozen=True)
class RoundResult:
    round: int
    feature: str
    ok: bool
    failure: Failure | None
    responded: bool
    latency: int | None  # user end -> onset (samples; 0 when already speaking)
    interrupted: bool | None = None  # interruption: speech running when the barge-in began
    stop_latency: int | None = None  # interruption: barge-in start -> the audible stop
    barge_in_latency: int | None = None  # interruption: barge-in end -> the reply's onset
    own_backchannels: int | None = 0  # the model's short segments over the user's speech (project rules)
    user_speech: int = 0  # samples of user speech in the round
    verdicts: dict[str, Failure | None] = field(default_factory=dict)  # per feature carried (overlay rounds only)
    own_backchannel_rate: float | None = None  # published rules: short segments per second of model speech


def _failures(r: LiveRound, segments: Sequence[Span], first: Response) -> tuple[list[Failure], dict]:
    """Every failure of the round in FAILURES order (an interruption's first failure only: its
    checks follow each other), and the interruption measures."""
    out: list[Failure] = []
    kw: dict = {}
    if talked_over(segments, r.user):
        out.append("talked_over")
    if r.pause is not None and total(clipped(segments, r.pause[0], r.pause[1] + PAUSE_GRACE)) >= PAUSE_SPEECH:
        out.append("spoke_in_pause")
    if not first.present:
        out.append("no_response")
    if r.barge_in is not None:
        b0, b1 = r.barge_in
        seg = active_at(segments, b0)
        stop = None if seg is None else seg[1] - b0
        again = response(segments, b1)
        kw = dict(interrupted=seg is not None, stop_latency=stop,
                  barge_in_latency=again.latency if again.present else None)
        if stop is not None and stop > STOP_WITHIN:
            out.append("late_stop")
        elif talked_over(segments, [(b0 + (stop or 0), b1)]):
            out.append("talked_over_barge_in")
        elif not again.present:
            out.append("no_barge_in_response")
    if first.present:
        onset = first.onset
        assert onset is not None
        if r.background is not None:
            a, b = r.background
            if not keeps_talking(segments, a + BACKGROUND_SKIP, b, onset, r.end):
                out.append("yielded_to_background")
        if any(not keeps_talking(segments, a, b + BACKCHANNEL_AFTER, onset, r.end) for a, b in r.backchannels):
            out.append("yielded_to_backchannel")
    return out, kw


def judge_round(r: LiveRound, segments: Sequence[Span]) -> RoundResult:
    """§12.4: one live round's verdict: its first failure; a round carrying several features also
    gets one verdict per feature (:data:`FEATURE_FAILURES`)."""
    assert r.end is not None
    first = response(segments, r.user_end)
    user_speech = total(r.user)
    own = sum(1 for s, e in segments if e - s < OWN_BACKCHANNEL_MAX and any(s < b and e > a for a, b in r.user))
    failures, kw = _failures(r, segments, first)
    verdicts: dict[str, Failure | None] = {}
    if len(r.features) > 1:
        for f in r.features:
            mine = TURN_FAILURES + FEATURE_FAILURES[f]
            verdicts[f] = next((x for x in failures if x in mine), None)
    failure = failures[0] if failures else None
    if failure in TURN_FAILURES or failure == "spoke_in_pause":
        kw = {}  # as a round that fails its turn: the barge-in's measures are not taken
    return RoundResult(r.round, r.feature, failure is None, failure, first.present, first.latency,
                       own_backchannels=own, user_speech=user_speech, verdicts=verdicts, **kw)


def judge_episode(events: Iterable[Event], segments: Iterable[Span]) -> list[RoundResult]:
    """Every live round's verdict."""
    return judge_rounds(live_rounds(events), segments)


def judge_rounds(rounds: Sequence[LiveRound], segments: Iterable[Span]) -> list[RoundResult]:
    segs = sorted((int(s), int(e)) for s, e in segments if e > s)
    return [judge_round(r, segs) for r in rounds]
