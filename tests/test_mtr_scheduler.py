"""The MTR round scheduler on literal inputs (DESIGN §12.2, §12.3): every feature's sequence of
events, placement relative to the model's actual onset, the gt history layout and its context."""

from __future__ import annotations

import pytest

from server.benchmarks.mtr.scheduler import FRAME, RoundScheduler, history_layout
from server.benchmarks.mtr.suite import Dialogue, key
from server.core.timebase import SpeechEvent

S = 24_000  # samples per second


def clip(name: str, dur: float, **kw) -> dict:
    return {"text": name, "clip": f"clips/{name}.wav", "duration_s": dur, **kw}


def rnd(n: int, feature: str, **parts) -> dict:
    return {"round": n, "feature": feature, "user": clip(f"u{n}", 2.0), "assistant": clip(f"a{n}", 8.0), **parts}


ROUNDS = {
    "smooth": lambda n: rnd(n, "smooth"),
    "pause": lambda n: rnd(n, "pause", pause={"length_s": 2.0, "continuation": clip(f"c{n}", 1.0)}),
    "interruption": lambda n: rnd(n, "interruption", barge_in=clip(f"b{n}", 1.5, after_onset_s=1.0,
                                                                   response=clip(f"br{n}", 4.0))),
    "background": lambda n: rnd(n, "background", background=clip(f"g{n}", 2.0, kind="broadcast", after_onset_s=1.0)),
    "backchannel": lambda n: rnd(n, "backchannel", backchannels=[clip(f"k{n}a", 0.5, after_onset_s=1.0),
                                                                 clip(f"k{n}b", 0.5, after_onset_s=3.0)]),
}


def dialogue(*features: str) -> Dialogue:
    return Dialogue.model_validate({"dialogue_id": "d1", "set": "mixed", "topic": "t",
                                    "rounds": [ROUNDS[f](i) for i, f in enumerate(features, start=1)]})


def lengths(d: Dialogue) -> dict[str, int]:
    return {k: round(c.duration_s * S) for r in d.rounds for k, c in r.clips()}


class Model:
    """A scripted model: speech spans (stream samples) decided when the scheduler asks, reported
    to the scheduler with a fixed detector lag, like the detector would."""

    def __init__(self, sched: RoundScheduler, react, lag: int = 2 * FRAME):
        self.sched, self.react, self.lag = sched, react, lag
        self.spans: list[list[int]] = []  # [start, end]
        self.reported: set[tuple[str, int]] = set()

    def run(self, max_frames: int = 20_000) -> list:
        events = []
        for _ in range(max_frames):
            plan = self.sched.next_frame()
            if plan is None:
                return events
            events += plan.events
            for e in plan.events:
                self.react(self, e)
            now = (plan.seq + 1) * FRAME
            out = []
            for s, e in self.spans:
                for kind, at in (("onset", s), ("offset", e)):
                    if at + self.lag <= now and (kind, at) not in self.reported:
                        self.reported.add((kind, at))
                        out.append(SpeechEvent(kind, at, at + self.lag))
            out.sort(key=lambda x: x.at)
            self.sched.observe(out, now)
        raise AssertionError("episode did not end")


def types(events, *wanted) -> list[tuple[str, int]]:
    return [(e.type, e.t) for e in events if e.type in wanted]


def ideal(model: Model, e) -> None:
    """Answers 0.3 s after each wait starts for 4 s; stops 0.4 s into a barge-in."""
    if e.type == "wait.start":
        model.spans.append([e.t + int(0.3 * S), e.t + int(4.3 * S)])
    if e.type == "barge_in.start" and "speaking" in e.data:  # a live barge-in (not the history's)
        model.spans[-1][1] = min(model.spans[-1][1], e.t + int(0.4 * S))


def silent(model: Model, e) -> None:
    pass


def test_smooth_round_waits_for_the_reply_then_confirmed_silence():
    d = dialogue("smooth")
    sched = RoundScheduler(d, "free", None, lengths(d))
    ev = Model(sched, ideal).run()
    lead = int(0.5 * S)
    user_end = lead + 2 * S
    onset = user_end + int(0.3 * S)
    reply_end = onset + 4 * S
    assert types(ev, "round.start", "user.start", "user.end", "wait.start", "response.onset", "response.end",
                 "round.end", "episode.end") == [
        ("round.start", lead), ("user.start", lead), ("user.end", user_end), ("wait.start", user_end),
        ("response.onset", next(e.t for e in ev if e.type == "response.onset")),
        ("response.end", reply_end + 2 * S), ("round.end", reply_end + 2 * S),
        ("episode.end", reply_end + 3 * S)]
    onset_ev = next(e for e in ev if e.type == "response.onset")
    assert onset_ev.data == {"round": 1, "at": onset, "already_speaking": False, "after": "user"}
    assert sched.end_sample == reply_end + 3 * S
    assert sched.context_frames == 0


def test_no_response_ends_the_round_after_the_window_and_skips_the_feature_clips():
    d = dialogue("background", "smooth")
    sched = RoundScheduler(d, "free", None, lengths(d))
    ev = Model(sched, silent).run()
    user_end = int(0.5 * S) + 2 * S
    ends = [e for e in ev if e.type == "response.end"]
    assert ends[0].t == user_end + 15 * S and ends[0].data["reason"] == "no_response"
    assert not [e for e in ev if e.type.startswith("background")]
    assert [e.data["round"] for e in ev if e.type == "round.start"] == [1, 2]
    assert next(e.t for e in ev if e.type == "round.start" and e.data["round"] == 2) == user_end + 16 * S


def test_pause_round_inserts_the_pause_then_the_continuation():
    d = dialogue("pause")
    sched = RoundScheduler(d, "free", None, lengths(d))
    plays = []
    model = Model(sched, ideal)
    ev = model.run()
    plays = sched.plays
    lead = int(0.5 * S)
    assert types(ev, "user.start", "pause.start", "pause.end", "user.end", "wait.start") == [
        ("user.start", lead), ("pause.start", lead + 2 * S), ("pause.end", lead + 4 * S),
        ("user.start", lead + 4 * S), ("user.end", lead + 5 * S), ("wait.start", lead + 5 * S)]
    assert [(p.key, p.start, p.length) for p in plays] == [(key(1, "user"), lead, 2 * S),
                                                           (key(1, "continuation"), lead + 4 * S, S)]


def test_interruption_places_the_barge_in_after_the_actual_onset_and_waits_for_the_new_reply():
    d = dialogue("interruption")
    sched = RoundScheduler(d, "free", None, lengths(d))
    ev = Model(sched, ideal).run()
    user_end = int(0.5 * S) + 2 * S
    onset = user_end + int(0.3 * S)
    barge = onset + S  # after_onset_s = 1.0 from the model's actual onset
    assert types(ev, "barge_in.start", "barge_in.end") == [("barge_in.start", barge),
                                                          ("barge_in.end", barge + int(1.5 * S))]
    assert next(e for e in ev if e.type == "barge_in.start").data["speaking"] is True
    waits = [e.data["after"] for e in ev if e.type == "wait.start"]
    assert waits == ["user", "barge_in"]
    onsets = [e.data["at"] for e in ev if e.type == "response.onset"]
    assert onsets == [onset, barge + int(1.5 * S) + int(0.3 * S)]


def test_a_model_that_talks_through_the_barge_in_is_already_speaking_when_it_ends():
    def stubborn(model: Model, e) -> None:
        if e.type == "wait.start" and e.data["after"] == "user":
            model.spans.append([e.t + int(0.3 * S), e.t + int(10 * S)])

    d = dialogue("interruption")
    sched = RoundScheduler(d, "free", None, lengths(d))
    ev = Model(sched, stubborn).run()
    second = [e for e in ev if e.type == "response.onset"][1]
    assert second.data["already_speaking"] is True and second.data["after"] == "barge_in"


@pytest.mark.parametrize("feature,kinds", [("background", ["background"]), ("backchannel", ["backchannel"] * 2)])
def test_feature_clips_are_placed_relative_to_the_onset_and_the_round_waits_for_them(feature, kinds):
    d = dialogue(feature)
    lag_model = []

    def late(model: Model, e) -> None:  # answers 1.7 s after the user: placement follows the real onset
        if e.type == "wait.start":
            model.spans.append([e.t + int(1.7 * S), e.t + int(2.2 * S)])  # and stops early
        lag_model.append(e)

    sched = RoundScheduler(d, "free", None, lengths(d))
    ev = Model(sched, late).run()
    onset = int(0.5 * S) + 2 * S + int(1.7 * S)
    starts = [e for e in ev if e.type.endswith(".start") and e.type.split(".")[0] in ("background", "backchannel")]
    offsets = [1.0] if feature == "background" else [1.0, 3.0]
    assert [e.type.split(".")[0] for e in starts] == kinds
    assert [e.t for e in starts] == [onset + int(o * S) for o in offsets]
    last_end = max(e.t for e in ev if e.type.endswith(".end") and e.type.split(".")[0] in kinds)
    round_end = next(e.t for e in ev if e.type == "round.end")
    assert round_end == max(last_end, onset + int(0.5 * S) + 2 * S)


def test_gt_history_layout_is_fixed_and_ends_on_a_frame_boundary():
    d = dialogue("smooth", "interruption", "background", "smooth")
    ln = lengths(d)
    h = history_layout(d, 4, ln)
    assert h.end % FRAME == 0
    lead = int(0.5 * S)
    a1 = lead + 2 * S + int(0.6 * S)
    ctx = [(p.key, p.start, p.length) for p in h.context]
    assert ctx[0] == (key(1, "assistant"), a1, 8 * S)
    r2 = a1 + 8 * S + S  # round 2 starts after round 1's reply and the 1 s gap
    a2 = r2 + 2 * S + int(0.6 * S)
    barge = a2 + S
    # round 2: the reply is cut 0.4 s after the barge-in starts; the barge-in answer follows it
    assert (key(2, "barge_in_response"), barge + int(1.5 * S) + int(0.6 * S), 4 * S) in ctx
    assert (key(2, "assistant"), a2, S + int(0.4 * S)) in ctx
    room = [(p.key, p.start) for p in h.room]
    assert (key(2, "barge_in"), barge) in room
    r3 = barge + int(1.5 * S) + int(0.6 * S) + 4 * S + S
    assert (key(3, "background"), r3 + 2 * S + int(0.6 * S) + S) in room
    assert [e.data["live"] for e in h.events if e.type == "round.start"] == [False] * 3


def test_gt_episode_sends_context_for_exactly_the_history_then_runs_the_live_round():
    d = dialogue("smooth", "pause", "smooth")
    sched = RoundScheduler(d, "gt", 3, lengths(d))
    h = sched.history
    plans = []
    while (plan := sched.next_frame()) is not None:
        plans.append(plan)
        sched.observe([], (plan.seq + 1) * FRAME)
    with_ctx = [p.seq for p in plans if p.context is not None]
    assert with_ctx == list(range(h.end // FRAME)) == list(range(sched.context_frames))
    # the context frames carry exactly the ground-truth replies, sample for sample
    covered = sum(pc.length for p in plans if p.context for pc in p.context)
    assert covered == sum(c.length for c in h.context)
    ev = [e for p in plans for e in p.events]
    live = [e for e in ev if e.type == "round.start" and e.data["live"]]
    assert [(e.data["round"], e.t) for e in live] == [(3, h.end)]
    assert next(e.t for e in ev if e.type == "history.end") == h.end
    assert ev.index(next(e for e in ev if e.type == "history.end")) < ev.index(live[0])


def test_event_times_never_go_backwards():
    d = dialogue("smooth", "interruption", "pause", "background", "backchannel")
    for mode, live in (("free", None), ("gt", 5)):
        sched = RoundScheduler(d, mode, live, lengths(d))
        ev = Model(sched, ideal).run()
        ts = [e.t for e in ev if not e.type.startswith("vad.")]
        assert ts == sorted(ts), mode


def test_bad_mode_and_round_are_refused():
    d = dialogue("smooth")
    with pytest.raises(ValueError):
        RoundScheduler(d, "both", None, lengths(d))
    with pytest.raises(ValueError):
        RoundScheduler(d, "gt", 2, lengths(d))


def test_gt_round_one_has_no_history_and_runs_as_free_round_one():
    d = dialogue("smooth", "pause")
    gt = RoundScheduler(d, "gt", 1, lengths(d))
    assert gt.history is None and gt.context_frames == 0
    ev_gt = Model(gt, ideal).run()
    ev_free = Model(RoundScheduler(d, "free", None, lengths(d)), ideal).run()
    def upto_round_end(events):
        out = [(e.type, e.t, e.data) for e in events]
        return out[: out.index(next(x for x in out if x[0] == "round.end")) + 1]

    assert upto_round_end(ev_gt) == upto_round_end(ev_free)
    assert ev_gt[-1].type == "episode.end" and ev_gt[-1].t == next(e.t for e in ev_gt if e.type == "round.end") + S


@pytest.mark.parametrize("feature,kind", [("interruption", "barge_in"), ("background", "background"),
                                          ("backchannel", "backchannel")])
def test_a_reply_already_running_at_the_turn_end_places_the_clips_from_its_onset(feature, kind):
    """§12.3: speech already active at the user's end counts, onset = its start, and the feature's parts
    are placed at that onset + ``after_onset_s`` (not from the turn's end)."""
    d = dialogue(feature)

    def early(model: Model, e) -> None:  # starts 1.5 s into the 2 s user turn, talks for 8 s
        if e.type == "user.start":
            model.spans.append([e.t + int(1.5 * S), e.t + int(9.5 * S)])

    sched = RoundScheduler(d, "free", None, lengths(d))
    ev = Model(sched, early).run()
    onset = int(0.5 * S) + int(1.5 * S)
    first = next(e for e in ev if e.type == "response.onset")
    assert first.data["at"] == onset and first.data["already_speaking"] is True
    starts = [e.t for e in ev if e.type == f"{kind}.start"]
    assert starts == [onset + int(o * S) for o in ([1.0, 3.0] if feature == "backchannel" else [1.0])]


@pytest.mark.parametrize("feature,kind,offsets", [("background", "background", [0.0]),
                                                   ("backchannel", "backchannel", [0.0, 2.0])])
def test_clips_due_before_the_turn_end_move_together_to_start_at_it(feature, kind, offsets):
    """An onset so early that onset + ``after_onset_s`` falls inside the user's turn: the parts move later
    together, the first starting at the turn's end, their spacing kept (nothing placed in the past, no
    two backchannels at once)."""
    d = dialogue(feature)

    def early(model: Model, e) -> None:  # starts 0.2 s into the user turn
        if e.type == "user.start":
            model.spans.append([e.t + int(0.2 * S), e.t + int(9.5 * S)])

    sched = RoundScheduler(d, "free", None, lengths(d))
    ev = Model(sched, early).run()
    user_end = int(0.5 * S) + 2 * S
    assert [e.t for e in ev if e.type == f"{kind}.start"] == [user_end + int(o * S) for o in offsets]


def test_gt_history_lists_its_dialogue_lines_with_words_and_slots():
    """The words of the history (docs/protocol.md §5.2): each user line and ground-truth reply in time
    order with the slots its audio spans; the reply cut by the barge-in says how much of it plays;
    background voices and backchannels are not lines of the dialogue."""
    d = dialogue("pause", "interruption", "backchannel", "smooth")
    ln = lengths(d)
    sched = RoundScheduler(d, "gt", 4, ln)
    turns = sched.context_turns
    assert [(t.role, t.text) for t in turns] == [
        ("user", "u1"), ("user", "c1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"),
        ("user", "b2"), ("assistant", "br2"), ("user", "u3"), ("assistant", "a3")]
    plays = {p.key: p for p in sched.history.room + sched.history.context}
    for t, k in zip(turns, ["r01.user", "r01.continuation", "r01.assistant", "r02.user", "r02.assistant",
                            "r02.barge_in", "r02.barge_in_response", "r03.user", "r03.assistant"]):
        assert (t.start_seq, t.end_seq) == (plays[k].start // FRAME, -(-plays[k].end // FRAME))
        assert t.played == (plays[k].length / ln[k] if k == "r02.assistant" else 1.0)
    assert turns[4].played == (S + int(0.4 * S)) / (8 * S) and turns[-1].end_seq <= sched.context_frames
    assert RoundScheduler(d, "gt", 1, ln).context_turns == () == RoundScheduler(d, "free", None, ln).context_turns
