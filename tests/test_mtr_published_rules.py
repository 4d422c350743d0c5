"""The two rule sets on hand-made rounds: the ``published`` rules (the published scripts' definitions,
on Whisper words) and the ``project`` rules (detector segments) differ exactly where docs/mtr.md
("Rule sets") says they differ, one test per rule. Each round is literal: its events, and the model's
speech as Whisper would give it (segments with word timestamps); the project rules see each segment
as one detector segment. The published verdicts are the ones the published scripts give these
inputs (read from their source, cited in :mod:`server.benchmarks.mtr.published`)."""

from __future__ import annotations

from server.benchmarks.mtr import published
from server.benchmarks.mtr.rules import judge_rounds, live_rounds
from server.core.events import Event
from server.scoring.asr import TimedSegment, TimedWord

S = 24_000
REPLY_S = 4.0  # the ground-truth reply's length
BARGE_REPLY_S = 3.0  # the ground-truth answer to the barge-in's


def ev(t: float, type_: str, **data) -> Event:
    return Event(round(t * S), type_, data)


def base(feature: str, *parts: Event, user_end: float = 3.0, end: float = 20.0) -> list[Event]:
    """A live round: the user speaks 1 s to ``user_end``, then the feature's parts; it ends at ``end``."""
    return sorted([ev(1, "round.start", round=1, feature=feature, live=True), ev(1, "user.start", round=1, part=1),
                   ev(user_end, "user.end", round=1), *parts, ev(end, "round.end", round=1)], key=lambda e: e.t)


def say(start: float, *words: str, dur: float = 0.3, gap: float = 0.05) -> TimedSegment:
    """One Whisper segment: ``words`` from ``start``, each ``dur`` long, ``gap`` apart."""
    out, t = [], start
    for w in words:
        out.append(TimedWord(round(t, 3), round(t + dur, 3), f" {w}"))
        t += dur + gap
    return TimedSegment(out[0].start, out[-1].end, " " + " ".join(words), tuple(out))


def reply(start: float, seconds: float) -> TimedSegment:
    """A fluent reply of ``seconds``: words of 0.3 s, 0.05 s apart."""
    n = max(1, round((seconds + 0.05) / 0.35))
    return say(start, *(f"w{i}" for i in range(n)))


def both(events: list[Event], *segments: TimedSegment):
    """(published, project) verdicts of the one live round."""
    (r,) = live_rounds(events)
    w = published.windows(r, REPLY_S, BARGE_REPLY_S if r.barge_in else None)
    pub = published.judge_round(r, w, list(segments), published.frequency(segments))
    (proj,) = judge_rounds([r], [(round(s.start * S), round(s.end * S)) for s in segments])
    return pub, proj


def test_a_response_is_one_second_of_words_or_more_than_three_words_in_the_ground_truth_window():
    events = base("smooth")
    (r,) = live_rounds(events)
    w = published.windows(r, REPLY_S, None)
    assert (w.model_start, w.model_end) == (3.6, 7.6)  # the ground truth's place: 0.6 s after the user, 4 s long
    # "Yes, sure." 0.3 s after the user: two words, 0.65 s of speech. The published rule (E1 lines 58-62)
    # needs >= 1 s of words or > 3 words in the ground-truth window [3.6, 7.6]; the project rules take any
    # detected speech in the 15 s response window
    pub, proj = both(events, say(3.3, "Yes,", "sure."))
    assert (pub.ok, pub.failure) == (False, "no_response") and proj.ok
    # four words in under a second: a reply for both
    pub, proj = both(events, say(3.7, "Yes", "sure", "I", "can", dur=0.2))
    assert pub.ok and proj.ok
    # a fluent reply that starts after the ground-truth window: the published rule sees no reply in it
    pub, proj = both(events, reply(8.0, 3.0))
    assert (pub.failure, proj.ok) == ("no_response", True)
    assert both(events, reply(3.3, 3.0))[0].ok


def test_talking_over_the_user_is_counted_per_segment_in_words():
    events = base("smooth")
    # four quick words (0.6 s) over the user's turn, then the reply: more than 3 words inside the user's
    # window is "speaking" (E1 lines 154-158); the project rules tolerate under 1.0 s of speech over it
    pub, proj = both(events, say(1.5, "oh", "yes", "I", "see", dur=0.15), reply(3.4, 3.0))
    assert (pub.failure, proj.ok) == ("talked_over", True)
    # 1.2 s of speech over the user: both fail
    pub, proj = both(events, say(1.5, "so", "what", "I", dur=0.35), reply(3.4, 3.0))
    assert pub.failure == proj.failure == "talked_over"


def test_a_missing_latency_counts_as_zero():
    events = base("smooth")
    pub, proj = both(events)
    assert pub.failure == proj.failure == "no_response"
    assert pub.latency == 0 and proj.latency is None  # E1 line 93: no later segment gives 0
    pub, proj = both(events, reply(3.5, 3.0))
    assert pub.latency == proj.latency == round(0.5 * S)


def test_interruption_latency_runs_from_the_barge_ins_end():
    parts = (ev(4.5, "barge_in.start", round=1, speaking=True), ev(6.0, "barge_in.end", round=1))
    events = base("interruption", *parts)
    first, again = reply(3.5, 1.3), reply(6.5, 2.5)
    pub, proj = both(events, first, again)
    assert pub.ok and proj.ok
    assert pub.latency == round(0.5 * S)  # E2 line 45: from the barge-in's end (6.0 -> 6.5)
    assert proj.latency == round(0.5 * S) and proj.barge_in_latency == round(0.5 * S)
    # the project's main latency is the user's end -> the first reply; the published one the barge-in's end
    pub, proj = both(events, reply(3.2, 1.5), reply(6.8, 2.5))
    assert pub.latency == round(0.8 * S) and proj.latency == round(0.2 * S)


def test_interruption_stop_is_words_not_seconds():
    parts = (ev(4.5, "barge_in.start", round=1, speaking=True), ev(6.0, "barge_in.end", round=1))
    events = base("interruption", *parts)
    # the reply stops 0.6 s into the barge-in but says five short words in it: "speaking" over the barge-in
    # (E2 line 42); the project rules ask for the audible stop within 1.0 s, met
    talk = say(3.5, *(f"w{i}" for i in range(11)), dur=0.12, gap=0.04)  # four of them from 4.5 s
    pub, proj = both(events, talk, reply(6.5, 2.5))
    assert talk.end - 4.5 < 1.0
    assert (pub.failure, proj.ok) == ("talked_over_barge_in", True)


def test_pause_window_runs_one_second_past_the_pause_and_counts_words():
    parts = (ev(2, "pause.start", round=1), ev(4, "pause.end", round=1), ev(4, "user.start", round=1, part=2))
    events = base("pause", *parts, user_end=5.0)
    # four quick words (0.6 s) in the pause: > 3 words is "speaking" (PH line 30 with E1's test); the
    # project rules fail a pause only from 1.0 s of speech
    pub, proj = both(events, say(2.3, "uh", "huh", "go", "on", dur=0.12), reply(5.4, 3.0))
    assert (pub.failure, proj.ok) == ("spoke_in_pause", True)
    # no reply at all: the published pause rule asks for none (PH lines 32-36); the project's does
    pub, proj = both(events)
    assert pub.ok and proj.failure == "no_response"


def test_background_needs_one_segment_of_words_through_the_voice():
    parts = (ev(5.0, "background.start", round=1), ev(7.0, "background.end", round=1))
    events = base("background", *parts)
    # the reply is two segments with a 0.6 s gap in the voice: no single segment covers [5.3, 7.0] (BG lines
    # 72-126); the project rules only fail a silence over 2.0 s
    pub, proj = both(events, reply(3.4, 2.5), reply(6.5, 3.0))
    assert (pub.failure, proj.ok) == ("yielded_to_background", True)
    # one segment running through it: both pass; the latency is E1's from the user's end (the script's own is
    # always 0, BG line 22)
    pub, proj = both(events, reply(3.4, 6.0))
    assert pub.ok and proj.ok and pub.latency == round(0.4 * S)
    # silence through the voice fails (BG lines 50-67), after a reply too short to reach it
    pub, proj = both(events, reply(3.4, 1.0))
    assert pub.failure == "yielded_to_background"


def test_own_backchannel_rate_is_short_segments_per_second_of_model_speech():
    segs = [say(1.5, "mhm", dur=0.4), reply(3.4, 6.95), say(12.0, "Okay.", dur=0.5), say(14.0, "a", "b", "c")]
    # short (< 3 s) segments of <= 2 words: "mhm" and "Okay." (E1 lines 120-130), over 0.4 + 6.95 + 0.5 + 1.0 s
    assert abs(published.frequency(segs) - 2 / 8.85) < 1e-9
    pub, proj = both(base("smooth"), *segs)
    assert pub.own_backchannel_rate == published.frequency(segs) and pub.own_backchannels is None
    assert proj.own_backchannels == 1 and proj.own_backchannel_rate is None  # the project's: under 1 s, over the user
    assert published.frequency([]) == 0.0


def test_backchannel_rounds_are_judged_by_the_smooth_rule():
    parts = (ev(5.0, "backchannel.start", round=1, i=0), ev(5.4, "backchannel.end", round=1, i=0))
    events = base("backchannel", *parts)
    # the model stops 2.5 s at the backchannel and goes on: the project rules fail a yield to a backchannel;
    # the published scripts have no backchannel rule, E1 decides: a reply in the window, none over the user
    pub, proj = both(events, reply(3.7, 1.5), reply(7.5, 3.0))
    assert pub.ok and proj.failure == "yielded_to_backchannel"


def test_a_barge_in_or_voice_that_never_played_fails_as_no_response():
    # the live scheduler places the barge-in and the background voice after the model's onset: a model that
    # never replies never hears them. The published timeline plays them anyway, and silence there fails
    # (E2 lines 33-34, BG lines 50-67)
    for feature in ("interruption", "background"):
        pub, proj = both(base(feature))
        assert pub.failure == proj.failure == "no_response" and pub.latency == 0 and proj.latency is None


def overlay(*parts: Event, features: tuple[str, ...], end: float = 20.0) -> list[Event]:
    """A live overlay round carrying ``features`` (its main feature first), the user speaking 1-3 s."""
    start = ev(1, "round.start", round=1, feature=features[0], features=list(features), live=True)
    return sorted([start, ev(1, "user.start", round=1, part=1), ev(3.0, "user.end", round=1), *parts,
                   ev(end, "round.end", round=1)], key=lambda e: e.t)


def test_a_combination_round_has_one_published_verdict_dispatched_on_its_label():
    # smooth + pause + background (E4 lines 20-30): E1 decides, the background check ANDed in, one verdict for
    # every feature; the project rules judge each feature apart
    parts = (ev(1.8, "pause.start", round=1), ev(2.4, "pause.end", round=1), ev(2.4, "user.start", round=1, part=2),
             ev(6.0, "background.start", round=1), ev(9.0, "background.end", round=1))
    events = overlay(*parts, features=("smooth", "pause", "background"))
    # a fluent reply from 3.7 s through the voice: every feature passes under both sets
    pub, proj = both(events, reply(3.7, 6.0))
    assert pub.ok and pub.verdicts == {"smooth": None, "pause": None, "background": None}
    assert proj.ok
    # the reply stops at 6.5 s, inside the voice: the one published verdict fails for all three features;
    # the project rules fail background alone
    pub, proj = both(events, reply(3.7, 2.8))
    assert pub.verdicts == dict.fromkeys(("smooth", "pause", "background"), "yielded_to_background")
    assert proj.verdicts["background"] is not None and proj.verdicts["smooth"] is None


def test_a_combination_with_a_barge_in_that_never_played_fails():
    # interruption + pause + background without a barge-in (E4 line 42: no interruption_start fails)
    parts = (ev(6.0, "background.start", round=1), ev(9.0, "background.end", round=1))
    pub, _ = both(overlay(*parts, features=("interruption", "pause", "background")), reply(3.7, 6.0))
    assert not pub.ok and set(pub.verdicts.values()) == {"no_response"}
