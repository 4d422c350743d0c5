"""§6 window rules on hand-built timelines (literal sample times, no audio)."""

from __future__ import annotations

import pytest

from server.benchmarks.mpe.rules import episode_windows
from server.benchmarks.mpe.rules import parse_timeline as _parse_timeline
from server.core.events import Event
from server.scoring.errors import BadBundle
from tests.support.scoring import R, events_for, sec


def parse_timeline(events, *args):
    return _parse_timeline([Event.from_json(e) for e in events], *args)


def windows(clips, segments, *, end=None, t_wait=None, n_samples=None):
    end = end if end is not None else clips[-1][3] + R // 2
    tl = parse_timeline(events_for(clips, end=end, t_wait=t_wait), n_samples if n_samples is not None else end + 1920)
    return episode_windows(tl, segments)


# A scenario: N2 [2,4) s, T [4.5,6.5) s, wait to 11.5 s, N1 [11.5,13) s, episode end 13.5 s.
T_CLIPS = [(0, "N2", sec(2), sec(4)), (1, "T", sec(4.5), sec(6.5)), (2, "N1", sec(11.5), sec(13))]
T_WAIT = (sec(6.5), sec(11.5), "silence")


class TestT:
    def test_fresh_onset_and_response_span(self):
        w = windows(T_CLIPS, [(sec(7), sec(8)), (sec(8.5), sec(9.5))], t_wait=T_WAIT)
        assert w.t.fresh and w.t.present and not w.t.already_speaking
        assert w.t.onset == sec(7)
        assert w.t.response == ((sec(7), sec(8)), (sec(8.5), sec(9.5)))  # all fragments up to the wait's end

    def test_response_stops_at_the_end_of_the_wait(self):
        w = windows(T_CLIPS, [(sec(7), sec(12))], t_wait=T_WAIT)
        assert w.t.response == ((sec(7), sec(11.5)),)

    def test_onset_exactly_at_e_t_plus_5s_is_fresh_one_sample_later_is_not(self):
        w = windows(T_CLIPS, [(sec(6.5) + 5 * R, sec(12))], t_wait=T_WAIT)
        assert w.t.fresh and w.t.present
        w = windows(T_CLIPS, [(sec(6.5) + 5 * R + 1, sec(12))], t_wait=T_WAIT)
        assert not w.t.fresh and not w.t.present and w.t.response == ()

    def test_speech_starting_exactly_at_e_t_counts_as_already_active(self):
        w = windows(T_CLIPS, [(sec(6.5), sec(8))], t_wait=T_WAIT)
        assert not w.t.fresh and w.t.present and w.t.already_speaking
        assert w.t.response == ((sec(6.5), sec(8)),)

    def test_already_speaking_response_starts_no_earlier_than_t(self):
        # Speaking since 3 s (before T began at 4.5 s) and through e_T.
        w = windows(T_CLIPS, [(sec(3), sec(9))], t_wait=T_WAIT)
        assert w.t.present and not w.t.fresh
        assert w.t.response == ((sec(4.5), sec(9)),)
        # A segment that started during T: from its own start.
        w = windows(T_CLIPS, [(sec(5), sec(9))], t_wait=T_WAIT)
        assert w.t.response == ((sec(5), sec(9)),)

    def test_speech_during_t_that_ended_before_e_t_is_no_response(self):
        w = windows(T_CLIPS, [(sec(5), sec(6))], t_wait=T_WAIT)
        assert not w.t.present and not w.t.fresh

    @pytest.mark.parametrize("before_s", [0.5, 1.0])
    def test_speech_ending_before_e_t_is_no_response_at_the_merge_edge(self, before_s):
        # The scheduler's side of the same rule: test_scheduler's 0.8 s edge tests.
        w = windows(T_CLIPS, [(sec(4), sec(6.5 - before_s))], t_wait=(sec(6.5), sec(11.5), "no_response"))
        assert not w.t.present and not w.t.fresh and not w.t.already_speaking

    def test_speech_running_through_e_t_is_present(self):
        w = windows(T_CLIPS, [(sec(4), sec(6.5) + 1)], t_wait=T_WAIT)
        assert w.t.present and w.t.already_speaking

    def test_request_time_is_input_timing(self):
        w = windows(T_CLIPS, [], t_wait=T_WAIT)
        assert w.request_time == sec(4.5) - sec(2)


class TestSilenceWindows:
    CLIPS = [(0, "N2", sec(2), sec(4)), (1, "T", sec(4.5), sec(6.5)), (2, "N3", sec(11.5), sec(13))]

    def test_window_runs_to_next_clip_start_half_open(self):
        # Ends exactly at the window start (2 s) / starts exactly at the next clip (4.5 s): no overlap.
        w = windows(self.CLIPS, [(sec(1), sec(2)), (sec(4.5), sec(5))], t_wait=T_WAIT)
        assert not w.silence[0].has_speech
        w = windows(self.CLIPS, [(sec(4.4), sec(5))], t_wait=T_WAIT)
        assert w.silence[0].speech == ((sec(4.4), sec(4.5)),)  # clipped to the window

    def test_last_clip_window_runs_to_episode_end(self):
        w = windows(self.CLIPS, [(sec(13.2), sec(13.4))], t_wait=T_WAIT, end=sec(13.5))
        last = w.silence[-1]
        assert last.label == "N3" and last.end == sec(13.5)
        assert last.speech == ((sec(13.2), sec(13.4)),)

    def test_overlap_with_human_speech(self):
        # Speech 3.5-4.3 s inside the N2 window: 0.5 s over the N2 clip (ends 4 s), 0.3 s in the gap.
        w = windows(self.CLIPS, [(sec(3.5), sec(4.3))], t_wait=T_WAIT)
        sw = w.silence[0]
        assert sw.speech_samples == sec(0.8) and sw.overlap_human == sec(0.5)

    def test_t_and_n4_turns_are_not_silence_windows(self):
        w = windows(self.CLIPS, [], t_wait=T_WAIT)
        assert [s.label for s in w.silence] == ["N2", "N3"]


def n4(segments, *, r_len=2.0, after=True, n_samples=None):
    """T [1,2) s, wait to 4 s; N4Q [4,6) s; 3 s gap; N4R [9, 9+r_len) s; (an N2 after it)."""
    q_end = sec(6)
    t_r = q_end + 3 * R
    r_end = t_r + sec(r_len)
    clips = [(0, "T", sec(1), sec(2)), (1, "N4Q", sec(4), q_end), (2, "N4R", t_r, r_end)]
    end = r_end + R // 2
    if after:
        clips.append((3, "N2", end, end + R))
        end = end + R + R // 2
    w = windows(clips, segments, end=end, t_wait=(sec(2), sec(4), "no_response"), n_samples=n_samples)
    assert len(w.n4) == 1
    return w.n4[0]


T_R = sec(9)


class TestN4:
    def test_already_speaking_when_n4q_began(self):
        e = n4([(sec(3.5), sec(12))])
        assert e.category == "already_speaking" and e.window_response
        assert not e.eligible and e.outcome is None and e.speaking_at_t_r

    def test_started_during_n4q(self):
        e = n4([(sec(5), sec(10))])
        assert e.category == "started_during_q" and e.window_response and not e.eligible and e.outcome is None

    def test_onset_exactly_at_end_of_n4q_counts_as_during(self):
        e = n4([(sec(6), sec(10))])
        assert e.category == "started_during_q" and not e.eligible

    def test_fresh_onset_eligible_pass(self):
        e = n4([(sec(6.5), T_R + R)])
        assert e.category == "fresh_onset" and e.eligible and e.outcome == "pass"
        assert e.t_r == T_R and e.deadline == T_R + 2 * R

    def test_fresh_onset_still_voicing(self):
        e = n4([(sec(6.5), T_R + sec(2.5))])
        assert e.eligible and e.outcome == "still_voicing"

    def test_fresh_onset_resumed_before_t_e(self):
        # N4R lasts 3.5 s: t_E = t_R + 4 s. Stops at t_R + 1 s, speaks again at t_R + 2.5 s.
        e = n4([(sec(6.5), T_R + R), (T_R + sec(2.5), T_R + sec(3))], r_len=3.5)
        assert e.t_e == T_R + 4 * R
        assert e.eligible and e.outcome == "resumed"

    def test_speech_after_t_e_does_not_count(self):
        e = n4([(sec(6.5), T_R + R), (T_R + sec(4.2), T_R + sec(5))], r_len=3.5)
        assert e.outcome == "pass"

    def test_fresh_onset_that_stopped_before_t_r_is_not_eligible(self):
        e = n4([(sec(6.5), sec(8))])
        assert e.category == "fresh_onset" and e.window_response and not e.speaking_at_t_r
        assert not e.eligible and e.outcome is None

    def test_no_speech(self):
        e = n4([])
        assert e.category == "no_speech" and not e.window_response and not e.eligible

    def test_window_response_closed_at_end_of_gap(self):
        assert n4([(T_R, T_R + R)]).window_response  # starts exactly at end of N4Q + 3 s
        e = n4([(T_R + 1, T_R + R)])
        assert not e.window_response and e.category == "no_speech"

    def test_short_n4r_checks_at_t_r_plus_2s_not_at_t_e(self):
        # N4R of 1 s: t_E = t_R + 1.5 s comes before the deadline t_R + 2 s.
        e = n4([(sec(6.5), T_R + sec(1.8))], r_len=1.0)
        assert e.t_e == T_R + sec(1.5) and e.deadline == T_R + 2 * R
        assert e.outcome == "pass"  # still talking at t_E, but silent by the deadline
        e = n4([(sec(6.5), T_R + sec(2.2))], r_len=1.0)
        assert e.outcome == "still_voicing"  # the check is at t_R + 2 s, not at t_E
        # Stopped before t_E, started again after t_E, talking at the deadline: still voicing.
        e = n4([(sec(6.5), T_R + sec(1.2)), (T_R + sec(1.7), T_R + sec(2.4))], r_len=1.0)
        assert e.outcome == "still_voicing"

    def test_recording_ending_before_the_deadline(self):
        # N4R (1 s) is the last turn: the recording ends at t_R + 1.5 s (+ frame padding).
        n = T_R + sec(1.5) + 960
        e = n4([(sec(6.5), n)], r_len=1.0, after=False, n_samples=n)
        assert e.censored and e.outcome == "still_voicing"
        e = n4([(sec(6.5), T_R + sec(1.0))], r_len=1.0, after=False, n_samples=n)
        assert e.censored and e.outcome == "pass"


class TestTimelineErrors:
    def test_missing_clip_end(self):
        ev = [e for e in events_for(T_CLIPS, end=sec(14)) if not (e["type"] == "clip.end" and e["data"]["idx"] == 2)]
        with pytest.raises(BadBundle, match="clip.end"):
            parse_timeline(ev, sec(14))

    def test_two_t_turns(self):
        clips = [(0, "T", 0, R), (1, "T", 2 * R, 3 * R)]
        with pytest.raises(BadBundle, match="T clips"):
            episode_windows(parse_timeline(events_for(clips, end=4 * R), 4 * R), [])

    def test_n4q_without_n4r(self):
        clips = [(0, "T", 0, R), (1, "N4Q", 2 * R, 3 * R), (2, "N2", 6 * R, 7 * R)]
        with pytest.raises(BadBundle, match="N4R"):
            episode_windows(parse_timeline(events_for(clips, end=8 * R), 8 * R), [])

    def test_no_clips(self):
        with pytest.raises(BadBundle):
            parse_timeline([{"t": 0, "type": "episode.end", "data": {}}], 100)
