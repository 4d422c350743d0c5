"""Unit tests for the episode scheduler (DESIGN §3), driven synchronously.

The fake clock is the frame loop itself: after room frame n is planned the scripted
assistant's detector has processed audio up to known_until = (n + 1 - lag) * 1920, and
every scripted SpeechEvent whose seen_at <= known_until is delivered once, in order.
All expected times are literal sample counts at 24 kHz.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from server.benchmarks.mpe.scheduler import (
    PREAMBLE,
    EpisodePlan,
    Event,
    FramePlan,
    Piece,
    Scheduler,
    TurnPlan,
)
from server.core.timebase import SpeechEvent

F = 1920
ONSET_LAT = 2880  # 120 ms: detector confirms an onset this long after it
OFFSET_LAT = 19200  # 800 ms: and an offset this long after it


def on(at: int, seen_at: int | None = None) -> SpeechEvent:
    return SpeechEvent("onset", at, at + ONSET_LAT if seen_at is None else seen_at)


def off(at: int, seen_at: int | None = None) -> SpeechEvent:
    return SpeechEvent("offset", at, at + OFFSET_LAT if seen_at is None else seen_at)


def plan(*labels: str, n: int = 50000, preamble: int = 30000, lengths=None) -> EpisodePlan:
    lengths = lengths or [n] * len(labels)
    speakers = "ABCD"
    turns = tuple(
        TurnPlan(i, label, length, speakers[i % 4])
        for i, (label, length) in enumerate(zip(labels, lengths))
    )
    return EpisodePlan(preamble, turns)


# Standard plan: preamble [0, 30000), gap, N1 [42000, 92000), gap, T [104000, 154000).
E_T = 154000
DEADLINE = E_T + 120000  # 274000
CAP = 1440000
PLAN_T = plan("N1", "T", "N2")


class Driver:
    """Plans frames one at a time and feeds the scripted detector decisions."""

    def __init__(
        self,
        ep: EpisodePlan,
        script: Sequence[SpeechEvent] = (),
        *,
        lag_frames: int = 0,
        every: int = 1,
        **kw,
    ) -> None:
        self.plan = ep
        self.sched = Scheduler(ep, **kw)
        self.f = kw.get("frame_samples", F)
        self.script = list(script)
        self.lag = lag_frames
        self.every = every
        self.frames: list[FramePlan] = []

    def step(self) -> FramePlan | None:
        fp = self.sched.next_frame()
        if fp is None:
            return None
        assert fp.seq == len(self.frames)
        self.frames.append(fp)
        if (fp.seq + 1) % self.every == 0:
            known = max(0, (fp.seq + 1 - self.lag) * self.f)
            batch = []
            while self.script and self.script[0].seen_at <= known:
                batch.append(self.script.pop(0))
            self.sched.observe(batch, known)
        return fp

    def step_to(self, seq: int) -> FramePlan:
        """Plan frames up to and including ``seq``."""
        while len(self.frames) <= seq:
            fp = self.step()
            assert fp is not None, "episode ended early"
        return self.frames[seq]

    def run(self, max_frames: int = 50000) -> Driver:
        for _ in range(max_frames):
            if self.step() is None:
                break
        else:
            pytest.fail("episode did not end")
        check_frames(self.frames, self.f)
        check_timeline(self.plan, self.frames, self.f)
        return self

    @property
    def events(self) -> list[Event]:
        return [e for fp in self.frames for e in fp.events]

    def of(self, type_: str) -> list[Event]:
        return [e for e in self.events if e.type == type_]

    def one(self, type_: str) -> Event:
        found = self.of(type_)
        assert len(found) == 1, (type_, found)
        return found[0]

    def starts(self) -> dict[int, int]:
        return {e.data["idx"]: e.t for e in self.of("clip.start")}

    def schedule(self) -> list[tuple[int, str]]:
        """(t, type) of every non-detector event."""
        return [(e.t, e.type) for e in self.events if not e.type.startswith("vad.")]

    def frame_at(self, t: int) -> FramePlan:
        return self.frames[t // F]


def check_frames(frames: list[FramePlan], f: int = F) -> None:
    """Events are in time order, each inside its frame; pieces stay in the frame."""
    last = 0
    for fp in frames:
        lo, hi = fp.seq * f, (fp.seq + 1) * f
        for e in fp.events:
            assert lo <= e.t <= hi, (fp.seq, e)
            assert e.t >= last, (fp.seq, e)
            if e.type != "episode.end":
                assert e.t < hi, (fp.seq, e)
            last = e.t
        cursor = 0
        for p in fp.pieces:
            assert p.length > 0 and p.dst_start >= cursor, (fp.seq, p)
            cursor = p.dst_start + p.length
            assert cursor <= f, (fp.seq, p)
    ends = [e for fp in frames for e in fp.events if e.type == "episode.end"]
    assert len(ends) == 1 and frames[-1].events[-1] is ends[0]
    # §3.3: the final frame is the one holding the episode's last sample.
    end = ends[0].t
    assert frames[-1].seq == max(0, (end - 1) // f) or end == frames[-1].seq * f


def check_timeline(ep: EpisodePlan, frames: list[FramePlan], f: int = F) -> None:
    """Every clip is played completely, once, contiguously, from its start event."""
    placed: dict[str | int, list[tuple[int, int, int]]] = {}
    for fp in frames:
        for p in fp.pieces:
            placed.setdefault(p.source, []).append((fp.seq * f + p.dst_start, p.src_start, p.length))
    events = [e for fp in frames for e in fp.events]
    starts = {PREAMBLE: [e.t for e in events if e.type == "preamble.start"]}
    ends = {PREAMBLE: [e.t for e in events if e.type == "preamble.end"]}
    for e in events:
        if e.type in ("clip.start", "clip.end"):
            d = starts if e.type == "clip.start" else ends
            d.setdefault(e.data["idx"], []).append(e.t)
    lengths = {PREAMBLE: ep.preamble_samples} | {t.idx: t.n_samples for t in ep.turns}
    assert set(starts) == set(lengths), "every clip starts"
    assert set(placed) <= set(lengths)
    for src, n in lengths.items():
        assert len(starts[src]) == 1 and len(ends[src]) == 1, src
        t0 = starts[src][0]
        assert ends[src][0] == t0 + n, src
        stream, offset = t0, 0
        for pos, src_start, length in placed.get(src, []):
            assert (pos, src_start) == (stream, offset), (src, pos, src_start)
            stream, offset = stream + length, offset + length
        assert offset == n, src
    # No two sources ever overlap on the stream.
    spans = sorted((s, s + n) for v in placed.values() for s, _, n in v)
    for (_, a_end), (b_start, _) in zip(spans, spans[1:]):
        assert a_end <= b_start


# -- preamble, gaps, plain sequence, end ---------------------------------------------


def test_preamble_gaps_and_plain_sequence_exact_times() -> None:
    d = Driver(plan("N1", "N2", "N3")).run()
    assert [(e.t, e.type, e.data) for e in d.events] == [
        (0, "preamble.start", {}),
        (30000, "preamble.end", {}),
        (42000, "clip.start", {"idx": 0, "label": "N1", "speaker": "A"}),
        (92000, "clip.end", {"idx": 0, "label": "N1", "speaker": "A"}),
        (104000, "clip.start", {"idx": 1, "label": "N2", "speaker": "B"}),
        (154000, "clip.end", {"idx": 1, "label": "N2", "speaker": "B"}),
        (166000, "clip.start", {"idx": 2, "label": "N3", "speaker": "C"}),
        (216000, "clip.end", {"idx": 2, "label": "N3", "speaker": "C"}),
        (228000, "episode.end", {}),
    ]
    # 228000 / 1920 = 118.75: frames 0..118, the last one padded with silence.
    assert len(d.frames) == 119
    assert d.frames[-1] == FramePlan(118, (), (Event(228000, "episode.end", {}),))
    assert d.sched.done and d.sched.end_sample == 228000
    assert d.sched.next_frame() is None
    assert d.sched.next_frame() is None
    assert d.sched.status() == {"state": "ended"}


def test_pieces_of_first_frames() -> None:
    d = Driver(plan("N1")).run()
    assert d.frames[0].pieces == (Piece(PREAMBLE, 0, 0, F),)
    # Frame 15 = [28800, 30720): the preamble's last 1200 samples, then silence.
    assert d.frames[15].pieces == (Piece(PREAMBLE, 28800, 0, 1200),)
    assert d.frames[15].events == (Event(30000, "preamble.end", {}),)
    assert d.frames[16].pieces == ()
    # Frame 21 = [40320, 42240): N1 starts at 42000.
    assert d.frames[21].pieces == (Piece(0, 0, 1680, 240),)
    assert d.frames[22].pieces == (Piece(0, 240, 0, F),)


def test_end_sample_known_once_last_silence_starts() -> None:
    d = Driver(plan("N1", "N2"))
    d.step_to(79)
    assert d.sched.end_sample is None
    d.step_to(80)  # [153600, 155520): N2 ends at 154000
    assert d.sched.end_sample == 166000 and not d.sched.done
    d.run()
    assert d.sched.end_sample == 166000 and d.sched.done


def test_frame_aligned_end_has_no_extra_frame() -> None:
    # 30000 + 12000 + 49680 + 12000 = 103680 = 54 * 1920.
    d = Driver(plan("N1", n=49680)).run()
    assert d.sched.end_sample == 103680
    assert len(d.frames) == 54
    assert d.frames[-1].events == (Event(103680, "episode.end", {}),)


def test_clip_end_and_next_start_in_one_frame() -> None:
    ep = plan("N1", "N2", "N3", n=1000, preamble=1000)
    d = Driver(ep, gap_s=0.01).run()  # gap = 240 samples
    assert d.starts() == {0: 1240, 1: 2480, 2: 3720}
    # Frame 1 = [1920, 3840): end of N1, gap, all of N2, gap, start of N3.
    assert d.frames[1].pieces == (Piece(0, 680, 0, 320), Piece(1, 0, 560, 1000), Piece(2, 0, 1800, 120))
    assert [(e.t, e.type) for e in d.frames[1].events] == [
        (2240, "clip.end"),
        (2480, "clip.start"),
        (3480, "clip.end"),
        (3720, "clip.start"),
    ]
    assert d.sched.end_sample == 4960


# -- T wait -----------------------------------------------------------------------------


def test_t_no_response_ends_exactly_at_e_t_plus_5s() -> None:
    d = Driver(PLAN_T).run()
    assert d.schedule() == [
        (0, "preamble.start"),
        (30000, "preamble.end"),
        (42000, "clip.start"),
        (92000, "clip.end"),
        (104000, "clip.start"),
        (154000, "clip.end"),
        (154000, "t_wait.start"),
        (274000, "t_wait.end"),
        (274000, "clip.start"),
        (324000, "clip.end"),
        (336000, "episode.end"),
    ]
    assert d.one("t_wait.start").data == {"idx": 1, "already_speaking": False}
    assert d.one("t_wait.end").data == {"reason": "no_response", "onset_at": None, "already_speaking": False}
    # Frame 80 = [153600, 155520) ends T; frame 142 = [272640, 274560) starts N2 at 274000.
    assert d.frames[80].pieces == (Piece(1, 49600, 0, 400),)
    assert d.frames[142].pieces == (Piece(2, 0, 1360, 560),)


def test_t_fresh_onset_then_silence_ends_at_offset_plus_2s() -> None:
    d = Driver(PLAN_T, [on(178000), off(250000)]).run()
    # onset seen at 180880 -> consumed with frame 95 (182400);
    # offset seen at 269200 -> consumed with frame 141 (270720).
    assert [(e.t, e.type, e.data) for e in d.events if e.t > E_T or e.type.startswith("t_wait")] == [
        (154000, "t_wait.start", {"idx": 1, "already_speaking": False}),
        (182400, "vad.onset", {"at": 178000, "seen_at": 180880}),
        (182400, "t_wait.onset", {"at": 178000, "already_speaking": False}),
        (270720, "vad.offset", {"at": 250000, "seen_at": 269200}),
        (298000, "t_wait.end", {"reason": "silence", "onset_at": 178000, "already_speaking": False}),
        (298000, "clip.start", {"idx": 2, "label": "N2", "speaker": "C"}),
        (348000, "clip.end", {"idx": 2, "label": "N2", "speaker": "C"}),
        (360000, "episode.end", {}),
    ]


def test_t_short_pause_then_more_speech_then_silence() -> None:
    script = [on(178000), off(200000), on(230000), off(260000)]
    d = Driver(PLAN_T, script).run()
    # The pending end at 248000 is cancelled by the onset consumed at 234240.
    assert [(e.t, e.type) for e in d.of("vad.onset") + d.of("vad.offset")] == [
        (182400, "vad.onset"),
        (234240, "vad.onset"),
        (220800, "vad.offset"),
        (280320, "vad.offset"),
    ]
    assert d.one("t_wait.onset").data == {"at": 178000, "already_speaking": False}
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (308000, {"reason": "silence", "onset_at": 178000, "already_speaking": False})
    assert d.starts()[2] == 308000


def test_t_new_onset_seen_after_pending_end_is_too_late() -> None:
    # offset at 200000 -> end at 248000; the onset at 247000 is only seen at 249880.
    d = Driver(PLAN_T, [on(178000), off(200000), on(247000), off(300000)]).run()
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"]) == (248000, "silence")
    assert d.starts()[2] == 248000
    assert [e.t for e in d.of("vad.onset")] == [182400, 251520]  # logged, no effect


def test_t_onset_confirmed_late_but_before_e_t_counts_as_already_speaking() -> None:
    # Onset at 153000 (< e_T) seen at 155880 (> e_T): the wait starts as "not speaking".
    d = Driver(PLAN_T, [on(153000), off(200000)]).run()
    assert d.one("t_wait.start").data == {"idx": 1, "already_speaking": False}
    ev = d.one("t_wait.onset")
    assert (ev.t, ev.data) == (157440, {"at": 153000, "already_speaking": True})
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (248000, {"reason": "silence", "onset_at": None, "already_speaking": True})


def test_t_onset_confirmed_late_caps_from_e_t() -> None:
    d = Driver(PLAN_T, [on(153000)]).run()
    end = d.one("t_wait.end")
    # Cap from e_T (154000 + 1440000), not from the onset (1593000).
    assert (end.t, end.data) == (1594000, {"reason": "cap", "onset_at": None, "already_speaking": True})


def test_t_speaking_at_e_t_continuous_speech_caps_60s_from_e_t() -> None:
    d = Driver(PLAN_T, [on(140000)]).run()
    assert d.one("t_wait.start").data == {"idx": 1, "already_speaking": True}
    assert d.of("t_wait.onset") == []
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (E_T + CAP, {"reason": "cap", "onset_at": None, "already_speaking": True})
    assert end.t == 1594000
    assert d.starts()[2] == 1594000
    assert d.sched.end_sample == 1656000


def test_t_speaking_at_e_t_then_silence() -> None:
    d = Driver(PLAN_T, [on(140000), off(160000)]).run()
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (208000, {"reason": "silence", "onset_at": None, "already_speaking": True})


def test_t_speaking_at_e_t_offset_before_e_t_seen_late() -> None:
    # Believed speaking at e_T; the offset (at 150000 < e_T) is seen at 169200: speech was not
    # active at e_T (§3/§6, server.benchmarks.mpe.speaking), so the 5 s onset wait runs on.
    d = Driver(PLAN_T, [on(140000), off(150000)]).run()
    assert d.one("t_wait.start").data == {"idx": 1, "already_speaking": True}
    rev = d.one("t_wait.revised")
    assert (rev.t, rev.data) == (170880, {"offset_at": 150000, "already_speaking": False})
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (DEADLINE, {"reason": "no_response", "onset_at": None, "already_speaking": False})


def test_t_fresh_onset_continuous_speech_caps_60s_from_onset() -> None:
    d = Driver(PLAN_T, [on(178000)]).run()
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (1618000, {"reason": "cap", "onset_at": 178000, "already_speaking": False})
    assert d.starts()[2] == 1618000


def test_t_cap_while_speech_resumes_and_pauses() -> None:
    # Pauses shorter than 2 s forever: the cap still ends the wait exactly.
    script = []
    for k in range(40):
        s = 178000 + k * 48000
        script += [on(s) if k == 0 else on(s, s + 2880), off(s + 30000)]
    d = Driver(PLAN_T, script).run()
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"]) == (1618000, "cap")


def test_t_silence_end_coinciding_with_cap_is_silence() -> None:
    d = Driver(PLAN_T, [on(178000), off(1618000 - 48000)]).run()
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"]) == (1618000, "silence")


# T of 50560 samples: e_T = 154560, e_T + 5 s = 274560 = frame 143's start.
PLAN_ALIGNED = plan("N1", "T", "N2", lengths=[50000, 50560, 50000])
DEADLINE_ALIGNED = 274560


def test_t_onset_exactly_at_e_t_plus_5s_is_in() -> None:
    d = Driver(PLAN_ALIGNED, [on(DEADLINE_ALIGNED, DEADLINE_ALIGNED), off(300000)]).run()
    ev = d.one("t_wait.onset")
    assert (ev.t, ev.data) == (274560, {"at": 274560, "already_speaking": False})
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (348000, {"reason": "silence", "onset_at": 274560, "already_speaking": False})


def test_t_onset_just_after_e_t_plus_5s_is_out() -> None:
    d = Driver(PLAN_ALIGNED, [on(DEADLINE_ALIGNED + 1), off(300000)]).run()
    assert d.of("t_wait.onset") == []
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"]) == (274560, "no_response")
    assert d.starts()[2] == 274560
    assert [e.t for e in d.of("vad.onset")] == [278400]


def test_t_onset_outside_window_ignored_even_if_delivered_in_time() -> None:
    # Not causal (seen_at < at), but it isolates the (e_T, e_T + 5 s] window check.
    d = Driver(PLAN_ALIGNED, [SpeechEvent("onset", DEADLINE_ALIGNED + 1, DEADLINE_ALIGNED)]).run()
    assert d.one("vad.onset").t == 274560
    assert d.of("t_wait.onset") == []
    assert d.one("t_wait.end").data["reason"] == "no_response"


def test_t_onset_inside_window_seen_after_deadline_is_no_response() -> None:
    d = Driver(PLAN_ALIGNED, [on(DEADLINE_ALIGNED - 1)]).run()
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"]) == (274560, "no_response")


def test_t_offset_observed_after_its_silence_end_passed() -> None:
    # offset at 200000 (end would be 248000) is seen at 260000 -> consumed at 261120.
    d = Driver(PLAN_T, [on(178000), off(200000, 260000)]).run()
    assert d.one("vad.offset").t == 261120
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"]) == (261120, "silence")
    assert d.frame_at(261120).pieces == (Piece(2, 0, 0, F),)
    assert d.starts()[2] == 261120


def test_t_already_speaking_offset_long_past() -> None:
    # The offset at 150000 (< e_T) is only seen at 210000: still inside the onset wait.
    d = Driver(PLAN_T, [on(140000), off(150000, 210000)]).run()
    assert d.one("t_wait.revised").t == 211200
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"], end.data["already_speaking"]) == (DEADLINE, "no_response", False)


# -- the 0.8 s edge: speech ending just before e_T (§3/§6, one rule with scoring) -------------


@pytest.mark.parametrize("before_s", [0.5, 1.0])
def test_t_speech_ending_before_e_t_is_not_speaking_at_e_t(before_s: float) -> None:
    # Speech [130000, e_T - before): the detector confirms the offset 0.8 s later, i.e. after
    # e_T for 0.5 s and before it for 1.0 s. Either way the model was silent at e_T and gets
    # the full 5 s onset wait: no response at e_T + 5 s (scoring agrees, test_scoring_windows).
    end_at = E_T - round(before_s * 24000)
    d = Driver(PLAN_T, [on(130000), off(end_at)]).run()
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (DEADLINE, {"reason": "no_response", "onset_at": None, "already_speaking": False})
    assert d.starts()[2] == DEADLINE


def test_t_speech_ending_before_e_t_then_fresh_onset_is_fresh() -> None:
    # Offset 0.5 s before e_T (seen 0.3 s after it), then a fresh onset at e_T + 1 s.
    d = Driver(PLAN_T, [on(130000), off(142000), on(178000), off(200000)]).run()
    assert d.one("t_wait.onset").data == {"at": 178000, "already_speaking": False}
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (248000, {"reason": "silence", "onset_at": 178000, "already_speaking": False})


def test_t_pause_shorter_than_merge_across_e_t_is_speaking_at_e_t() -> None:
    # A 0.4 s pause around e_T is merged by the detector (no offset): speech active at e_T.
    d = Driver(PLAN_T, [on(130000), off(200000)]).run()
    assert d.of("t_wait.revised") == []
    end = d.one("t_wait.end")
    assert (end.t, end.data) == (248000, {"reason": "silence", "onset_at": None, "already_speaking": True})


# -- observations lagging ---------------------------------------------------------------


def test_lagging_observations_same_outcome_when_still_in_time() -> None:
    d = Driver(PLAN_T, [on(178000), off(250000)], lag_frames=10).run()
    assert d.one("vad.onset").t == 201600
    assert d.one("t_wait.onset").t == 201600
    assert d.one("vad.offset").t == 289920
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"], end.data["onset_at"]) == (298000, "silence", 178000)


def test_lagging_offset_ends_wait_at_frame_start() -> None:
    d = Driver(PLAN_T, [on(178000), off(250000)], lag_frames=20).run()
    assert d.one("vad.offset").t == 309120
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"]) == (309120, "silence")


def test_lagging_onset_past_the_window_is_no_response() -> None:
    d = Driver(PLAN_T, [on(178000), off(250000)], lag_frames=60).run()
    end = d.one("t_wait.end")
    assert (end.t, end.data["reason"]) == (274000, "no_response")
    assert [e.t for e in d.of("vad.onset")] == [297600]


def test_batched_observations_every_5_frames_keep_order_and_stamp() -> None:
    d = Driver(PLAN_T, [on(178000), off(250000)], every=5).run()
    # known_until only moves every 5 frames: onset delivered after frame 94 (known 182400).
    assert [(e.t, e.type, e.data) for e in d.events if e.type.startswith("vad.")] == [
        (182400, "vad.onset", {"at": 178000, "seen_at": 180880}),
        (278400, "vad.offset", {"at": 250000, "seen_at": 269200}),
    ]
    assert d.one("t_wait.end").t == 298000


def test_several_decisions_in_one_batch_are_logged_in_order_at_the_frame_start() -> None:
    script = [on(100000, 150000), off(120000, 150000), on(160000, 170000)]
    d = Driver(PLAN_T, script).run()
    vad = [(e.t, e.type, e.data["at"]) for e in d.events if e.type.startswith("vad.")]
    assert vad == [
        (151680, "vad.onset", 100000),
        (151680, "vad.offset", 120000),
        (170880, "vad.onset", 160000),
    ]
    # Not speaking at e_T (offset seen before), onset at 160000 is fresh.
    assert d.one("t_wait.start").data["already_speaking"] is False
    assert d.one("t_wait.onset").data == {"at": 160000, "already_speaking": False}
    assert d.one("t_wait.end").data["reason"] == "cap"
    assert d.one("t_wait.end").t == 160000 + CAP


def test_onset_and_offset_in_one_batch_during_wait() -> None:
    d = Driver(PLAN_T, [on(178000, 240000), off(190000, 240000)]).run()
    # Both seen at 240000 = frame 125's start.
    assert d.one("t_wait.onset").t == 240000
    end = d.one("t_wait.end")
    # 190000 + 48000 = 238000 is already past at 240000.
    assert (end.t, end.data["reason"], end.data["onset_at"]) == (240000, "silence", 178000)


# -- N4 -------------------------------------------------------------------------------


PLAN_N4 = plan("N1", "T", "N4Q", "N4R", "N3")
N4_SCHEDULE = [
    (274000, "clip.start"),
    (324000, "clip.end"),
    (324000, "n4_gap.start"),
    (396000, "n4_gap.end"),
    (396000, "clip.start"),
    (446000, "clip.end"),
    (458000, "clip.start"),
    (508000, "clip.end"),
    (520000, "episode.end"),
]


def test_n4_silent_assistant_exact_3s_then_normal_gap() -> None:
    d = Driver(PLAN_N4).run()
    assert [x for x in d.schedule() if x[0] >= 274000 and x[1] != "t_wait.end"] == N4_SCHEDULE
    assert d.one("n4_gap.start").data == {"idx": 2}
    assert d.one("n4_gap.end").data == {"idx": 2}
    assert d.starts() == {0: 42000, 1: 104000, 2: 274000, 3: 396000, 4: 458000}


@pytest.mark.parametrize(
    "script",
    [
        [on(300000)],  # speaking through N4Q, the gap and N4R
        [on(330000)],  # starts in the gap, never stops
        [on(330000), off(340000)],  # stops inside the gap
        [on(300000), off(394000)],  # stops just before N4R
    ],
)
def test_n4r_starts_regardless_of_the_assistant(script) -> None:
    d = Driver(PLAN_N4, script).run()
    assert [x for x in d.schedule() if x[0] >= 274000 and x[1] != "t_wait.end"] == N4_SCHEDULE


def test_n4_gap_frame_pieces() -> None:
    d = Driver(PLAN_N4).run()
    # Frame 206 = [395520, 397440): N4R starts 480 samples in.
    assert d.frames[206].pieces == (Piece(3, 0, 480, 1440),)


# -- degenerate plans -------------------------------------------------------------------


def test_t_last_ends_at_wait_end_without_gap() -> None:
    d = Driver(plan("N1", "T")).run()
    assert d.schedule()[-3:] == [(154000, "t_wait.start"), (274000, "t_wait.end"), (274000, "episode.end")]
    assert d.sched.end_sample == 274000
    assert len(d.frames) == 143


def test_t_last_with_response() -> None:
    d = Driver(plan("N1", "T"), [on(178000), off(250000)]).run()
    assert d.schedule()[-2:] == [(298000, "t_wait.end"), (298000, "episode.end")]
    assert d.sched.end_sample == 298000


def test_n4q_last_ends_after_3s() -> None:
    d = Driver(plan("N1", "T", "N4Q")).run()
    assert d.schedule()[-4:] == [
        (324000, "clip.end"),
        (324000, "n4_gap.start"),
        (396000, "n4_gap.end"),
        (396000, "episode.end"),
    ]
    assert d.sched.end_sample == 396000
    assert len(d.frames) == 207


def test_empty_plan() -> None:
    d = Driver(plan()).run()
    assert d.schedule() == [(0, "preamble.start"), (30000, "preamble.end"), (42000, "episode.end")]
    assert len(d.frames) == 22


def test_empty_plan_without_preamble() -> None:
    d = Driver(plan(preamble=0)).run()
    assert d.schedule() == [(0, "preamble.start"), (0, "preamble.end"), (12000, "episode.end")]
    assert d.frames[0].pieces == ()
    assert len(d.frames) == 7


def test_zero_length_clip() -> None:
    d = Driver(plan("N1", "N2", lengths=[0, 50000])).run()
    assert d.starts() == {0: 42000, 1: 54000}
    assert [e.t for e in d.of("clip.end")] == [42000, 104000]


def test_t_first_turn_waits_from_preamble_gap() -> None:
    d = Driver(plan("T", "N1"), [on(20000)]).run()  # speaking since the preamble
    assert d.one("t_wait.start").t == 92000
    assert d.one("t_wait.end").data["already_speaking"] is True
    assert d.one("t_wait.end").t == 92000 + CAP


def test_custom_durations() -> None:
    d = Driver(plan("N1", "T", "N2"), gap_s=0.25, onset_wait_s=1.0, frame_samples=480).run()
    # preamble 30000, gap 6000: N1 [36000, 86000), T [92000, 142000), wait to 166000.
    assert d.starts() == {0: 36000, 1: 92000, 2: 166000}
    assert d.sched.end_sample == 222000


def test_bad_plans_rejected() -> None:
    with pytest.raises(ValueError):
        Scheduler(plan("X1"))
    with pytest.raises(ValueError):
        Scheduler(plan("N1", lengths=[-1]))
    with pytest.raises(ValueError):
        Scheduler(plan("N1"), frame_samples=0)


# -- status -----------------------------------------------------------------------------


def test_status_in_each_state() -> None:
    d = Driver(PLAN_N4, [on(178000), off(250000)])
    assert d.sched.status() == {"state": "preamble"}
    d.step_to(0)
    assert d.sched.status() == {"state": "preamble"}
    d.step_to(18)  # up to 36480: gap after the preamble
    assert d.sched.status() == {"state": "gap"}
    d.step_to(30)
    assert d.sched.status() == {"state": "playing", "idx": 0, "label": "N1"}
    d.step_to(80)  # up to 155520: T ended at 154000, deadline 274000
    assert d.sched.status() == {"state": "t_wait_onset", "remaining_s": 4.94}
    d.step_to(95)  # onset consumed at 182400; now 184320
    assert d.sched.status() == {
        "state": "t_wait_silence",
        "silence_s": 0.0,
        "need_s": 2.0,
        "cap_left_s": 59.74,  # (1618000 - 184320) / 24000
    }
    d.step_to(141)  # offset consumed at 270720; detector known to 272640
    assert d.sched.status() == {
        "state": "t_wait_silence",
        "silence_s": 0.94,  # (272640 - 250000) / 24000
        "need_s": 2.0,
        "cap_left_s": 56.06,
    }
    d.step_to(156)  # wait ended at 298000: N4Q plays
    assert d.sched.status() == {"state": "playing", "idx": 2, "label": "N4Q"}
    d.step_to(181)  # N4Q ended at 348000; now 349440, gap to 420000
    assert d.sched.status() == {"state": "n4_gap", "remaining_s": 2.94}
    d.run()
    assert d.sched.status() == {"state": "ended"}


def test_phases_are_guarded():
    """Phases are an enum with a transition table: the scheduler cannot jump, e.g. from the
    end back into a clip, or from the preamble straight into the wait after T."""
    from server.benchmarks.mpe.scheduler import _NEXT, Phase
    from server.core.states import IllegalTransition, advance

    assert advance(_NEXT, Phase.CLIP, Phase.T_WAIT) is Phase.T_WAIT
    for a, b in [(Phase.ENDED, Phase.CLIP), (Phase.PREAMBLE, Phase.T_WAIT), (Phase.T_WAIT, Phase.N4_GAP),
                 (Phase.INIT, Phase.CLIP)]:
        with pytest.raises(IllegalTransition):
            advance(_NEXT, a, b)
    # every phase but the end has a way forward, and the end has none
    assert set(_NEXT) == set(Phase) - {Phase.ENDED}
