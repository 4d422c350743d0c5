"""One place per rule: the pages' live outcome and scoring agree on the same recorded episodes.

Each episode is played through the real scheduler and the real detector (``simulate``), then
judged twice: as the pages do (the benchmark's live outcome from the events and the live
segments) and as ``mpe score`` does (the scoring entry, without ASR, read back as an outcome).
With no semantic exemption both must say the same about T, the N1-N3 windows and N4.
"""

from __future__ import annotations

import pytest

from server.benchmarks.mpe import BENCHMARK
from server.benchmarks.mpe.judging import RuleJudge
from server.core.events import Event
from server.scoring.asr import NoASR
from server.scoring.loading import live_segments
from server.scoring.store import Cache
from tests.support.audio import place
from tests.support.scoring import event_t, sec, simulate

TURNS = [("N2", "Did you book the table for Friday?", 2.5), ("T", "Aria, which place is cheaper?", 2.0),
         ("N1", "Aria picked it last time.", 2.0), ("N4Q", "Aria, do they deliver?", 1.5),
         ("N4R", "They do, I checked.", 1.5), ("N3", "Hmm, where are my keys?", 2.0)]
LONG = "Sure, let me look that up for you, one moment, I am checking all the details right now, it takes a second."


def both(ep):
    """(page outcome, scoring outcome) of one simulated episode."""
    events = [Event.from_json(e) for e in ep.doc["events"]]
    live = live_segments(ep.doc)
    assert live is not None  # the simulated attempt records its detector version
    page = BENCHMARK.live_outcome(events, live, len(ep.assistant))
    entry = BENCHMARK.score_episode(ep, NoASR(), RuleJudge(), Cache())
    return page, BENCHMARK.scored_outcome(entry), entry


def assert_agree(page, scored):
    assert page is not None and page.source == "live" and scored.source == "score"
    assert (page.t, page.silence, page.n4) == (scored.t, scored.silence, scored.n4)
    # Without ASR, speech in a silence window fails in both (named by its source).
    assert [f.replace("speech_in_silence", "intrusion") for f in page.failures] == scored.failures


def n4_times(say, speech=()):
    first = simulate(TURNS, place(sec(40), *speech))
    return event_t(first.doc, "clip.start", 3), event_t(first.doc, "clip.end", 3), event_t(first.doc, "clip.start", 4)


@pytest.mark.parametrize("case", ["silent", "answers", "n4_yields", "already_speaking_through_n4q", "intrudes"])
def test_pages_and_scoring_agree(say, case):
    answer = (sec(7.3), say("The noodle bar, eleven dollars."))
    if case == "silent":
        ep = simulate(TURNS, place(sec(40)))
    elif case == "answers":
        ep = simulate(TURNS, place(sec(40), answer))
    elif case == "intrudes":
        ep = simulate(TURNS, place(sec(40), answer, (sec(2.2), say("The one on Main Street is nicer."))))
    else:
        q_start, q_end, t_r = n4_times(say, [answer])
        if case == "n4_yields":  # §6: a fresh onset in the N4 gap, silent again within 2 s of t_R
            start, stop = q_end + sec(0.4), t_r + sec(0.5)
        else:  # talking from before N4Q starts until well after N4R starts: not eligible (§6)
            start, stop = q_start - sec(0.3), t_r + sec(3.0)
        hold = say(LONG + " " + LONG)
        assert len(hold) >= stop - start
        ep = simulate(TURNS, place(sec(40), answer, (start, hold[: stop - start])))
    page, scored, entry = both(ep)
    assert_agree(page, scored)
    if case == "silent":
        assert page.failures == ["no_response"] and page.n4 == ["not_eligible"]
    elif case == "answers":
        assert page.ok and page.t == "fresh"
    elif case == "intrudes":
        assert page.failures == ["speech_in_silence"] and scored.failures == ["intrusion"]
    elif case == "n4_yields":
        assert page.n4 == ["pass"] and entry.n4[0].category == "fresh_onset"
    else:
        # The case the pages used to call a failure (n4_still_voicing) while scoring excluded it.
        assert entry.n4[0].category == "already_speaking"
        assert page.n4 == ["not_eligible"] and "n4_still_voicing" not in page.failures


def test_live_segments_equal_the_replay(say):
    """§5: scoring may reuse the live segments because replaying the track gives the same ones."""
    from server.core.detector import detect_segments

    ep = simulate(TURNS, place(sec(40), (sec(7.3), say("The noodle bar, eleven dollars."))))
    assert live_segments(ep.doc) == [(g.start, g.end) for g in detect_segments(ep.assistant)]
    assert live_segments({**ep.doc, "stats": {"detector": "silero-vad-0.0-other"}}) is None  # other version: replay


def test_pair_with_unequal_n4_counts_and_n4_before_t_scores(say):
    """§2/§6: the versions of a pair may differ in their N4 events, and an N4 event may come
    before T (as in the paper's suite); each window is scored on its own, and the run's
    quantities count every N4 event of either version."""
    from server.benchmarks.mpe.metrics import compute_metrics
    from server.benchmarks.mpe.stats import analyses, n4_breakdown

    before = [("N2", "Did you book the table for Friday?", 2.5), ("N4Q", "Aria, do they deliver?", 1.5),
              ("N4R", "They do, I checked.", 1.5), ("T", "Which place is cheaper, Aria?", 2.0),
              ("N1", "Aria picked it last time.", 2.0), ("N4Q", "Aria, is it open late?", 1.5),
              ("N4R", "Until ten, it says.", 1.5), ("N3", "Hmm, where are my keys?", 2.0)]
    first = simulate(before, place(sec(40)), condition="implicit", episode_id="e2")
    q_end, t_r = event_t(first.doc, "clip.end", 1), event_t(first.doc, "clip.start", 2)
    e_t = event_t(first.doc, "clip.end", 3)
    # yields in the N4 event before T, then answers T
    track = place(sec(40), (q_end + sec(0.4), say(LONG)[: t_r + sec(0.5) - q_end - sec(0.4)]),
                  (e_t + sec(0.3), say("The noodle bar, eleven dollars.")))
    im = simulate(before, track, condition="implicit", episode_id="e2")
    ex = simulate(TURNS, place(sec(40), (sec(7.3), say("The noodle bar, eleven dollars."))))
    page, scored, entry = both(im)
    assert_agree(page, scored)
    assert [n.q_idx for n in entry.n4] == [1, 5]
    assert entry.n4[0].category == "fresh_onset" and entry.n4[0].outcome == "pass" and entry.t.present
    ex_entry = both(ex)[2]
    entries = [ex_entry, entry]
    metrics = compute_metrics(entries)["m"]
    assert metrics["implicit"]["window_response"]["den"] == 2 and metrics["explicit"]["window_response"]["den"] == 1
    assert n4_breakdown(entries)  # counts both versions' events
    assert analyses(entries, compute_metrics(entries))["paired_addressing"]["m"]["n_pairs"] == 1
