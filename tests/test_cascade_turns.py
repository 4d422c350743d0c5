"""The cascade's turn taking (server/cascade/turns.py) on literal detector events: end of utterance,
the barge-in policy (stop on a real interruption, go on over a backchannel), what is heard while
Aria speaks, stale replies; and the echo guard on constructed audio."""

from __future__ import annotations

import numpy as np
import pytest

from server.cascade.echo import EchoGuard
from server.cascade.turns import (
    Dropped,
    Ignored,
    Reply,
    StartSpeaking,
    StopSpeaking,
    Think,
    TurnConfig,
    TurnState,
    TurnTaker,
    Utterance,
)
from server.core.detector import DetectorConfig, Segmenter
from server.core.states import IllegalTransition
from server.core.timebase import SpeechEvent

F = 1920  # one 80 ms frame at 24 kHz
MS = 24  # samples per millisecond


def onset(at: int, seen: int) -> SpeechEvent:
    return SpeechEvent("onset", at, seen)


def offset(at: int, seen: int) -> SpeechEvent:
    return SpeechEvent("offset", at, seen)


def speaking(tt: TurnTaker, t: int = 100 * F, n: int = 100 * F) -> int:
    """Bring ``tt`` to speaking an ``n``-sample answer from ``t`` (an utterance, then a reply)."""
    (think,) = tt.hear(t, [onset(t - 40 * F, t - 38 * F), offset(t - 10 * F, t)], t)
    assert isinstance(think, Think)
    assert tt.replied(t, Reply(think.utterance.uid, n)) == [StartSpeaking(think.utterance.uid, t, n)]
    return t


def test_an_ended_utterance_is_thought_about_and_a_reply_is_spoken_then_ends():
    tt = TurnTaker()
    assert tt.hear(F, [onset(0, F)], F) == [] and tt.human_talking
    (a,) = tt.hear(30 * F, [offset(20 * F, 30 * F)], 30 * F)
    assert a == Think(Utterance(1, 0, 20 * F, 30 * F)) and tt.state is TurnState.thinking
    assert tt.replied(30 * F, Reply(1, 5 * F)) == [StartSpeaking(1, 30 * F, 5 * F)]
    assert tt.playing(29 * F) is None  # the frame in which it was decided is already out
    assert tt.playing(30 * F) == (1, 0) and tt.playing(34 * F) == (1, 4 * F)
    assert tt.hear(34 * F, [], 34 * F) == []
    assert tt.hear(35 * F, [], 35 * F) == [StopSpeaking(35 * F, "done")]
    assert tt.state is TurnState.listening and tt.playing(35 * F) is None


def test_a_silent_decision_returns_to_listening():
    tt = TurnTaker()
    tt.hear(30 * F, [onset(0, F), offset(20 * F, 30 * F)], 30 * F)
    assert tt.replied(30 * F, Reply(1, 0)) == [] and tt.state is TurnState.listening


def test_barge_in_stops_aria_once_the_human_has_overlapped_her_for_barge_in_ms():
    tt = TurnTaker(TurnConfig(barge_in_ms=500))
    t = speaking(tt)
    h = t + 20 * F  # a human starts 1.6 s into her answer
    assert tt.hear(h + 3 * F, [onset(h, h + 2 * F)], h + 2 * F) == []  # onset known, 160 ms of overlap
    assert tt.hear(h + 6 * F, [], h + 500 * MS - 1) == []  # one sample short of 500 ms
    assert tt.hear(h + 7 * F, [], h + 500 * MS) == [StopSpeaking(h + 7 * F, "barge-in", onset=h)]
    assert tt.state is TurnState.listening and tt.playing(h + 7 * F) is None
    # the interruption, once it ends, is decided on like any utterance
    (a,) = tt.hear(h + 40 * F, [offset(h + 30 * F, h + 40 * F)], h + 40 * F)
    assert a == Think(Utterance(2, h, h + 30 * F, h + 40 * F))


def test_a_backchannel_while_aria_speaks_lets_her_go_on_and_is_not_transcribed():
    tt = TurnTaker(TurnConfig(barge_in_ms=500))
    t = speaking(tt)
    h = t + 20 * F
    tt.hear(h + 3 * F, [onset(h, h + 2 * F)], h + 2 * F)
    assert tt.hear(h + 9 * F, [], h + 300 * MS) == []  # "mm-hm", 300 ms of speech, then a pause that does not count
    (a,) = tt.hear(h + 10 * F, [offset(h + 300 * MS, h + 300 * MS + 400 * MS)], None)
    assert a == Ignored(Utterance(2, h, h + 300 * MS, h + 700 * MS))
    assert tt.state is TurnState.speaking and tt.playing(h + 10 * F) == (1, h + 10 * F - t)


def test_an_utterance_that_began_as_she_finished_and_went_on_is_a_turn_of_its_own():
    tt = TurnTaker(TurnConfig(barge_in_ms=500))
    t = speaking(tt, n=10 * F)
    h = t + 6 * F  # 320 ms before her answer ends
    assert tt.hear(h + 2 * F, [onset(h, h + 2 * F)], h + 2 * F) == []
    assert tt.hear(t + 10 * F, [], h + 2 * F) == [StopSpeaking(t + 10 * F, "done")]
    (a,) = tt.hear(h + 40 * F, [offset(h + 30 * F, h + 40 * F)], None)
    assert a == Think(Utterance(2, h, h + 30 * F, h + 40 * F))


def test_overlap_counts_from_the_start_of_her_speech_when_the_human_began_just_before():
    tt = TurnTaker(TurnConfig(barge_in_ms=500))
    t = speaking(tt)
    assert tt.hear(t + 2 * F, [onset(t - 10 * F, t + F)], t + F) == []  # began 0.8 s before she did
    assert tt.hear(t + 6 * F, [], t + 499 * MS) == []
    assert tt.hear(t + 7 * F, [], t + 500 * MS) == [StopSpeaking(t + 7 * F, "barge-in", onset=t - 10 * F)]


def test_a_newer_utterance_makes_the_pending_reply_stale():
    tt = TurnTaker()
    tt.hear(30 * F, [onset(0, F), offset(20 * F, 30 * F)], 30 * F)
    (a,) = tt.hear(60 * F, [onset(35 * F, 37 * F), offset(50 * F, 60 * F)], 60 * F)
    assert a == Think(Utterance(2, 35 * F, 50 * F, 60 * F)) and tt.state is TurnState.thinking
    assert tt.replied(61 * F, Reply(1, 10 * F)) == [Dropped(1, "stale")]
    assert tt.replied(62 * F, Reply(2, 10 * F)) == [StartSpeaking(2, 62 * F, 10 * F)]


def test_a_reply_that_comes_while_a_human_talks_is_not_spoken():
    tt = TurnTaker()
    tt.hear(30 * F, [onset(0, F), offset(20 * F, 30 * F)], 30 * F)
    tt.hear(33 * F, [onset(31 * F, 33 * F)], 33 * F)
    assert tt.replied(34 * F, Reply(1, 10 * F)) == [Dropped(1, "human talking")]
    assert tt.state is TurnState.listening


def test_the_detector_reports_how_far_the_open_speech_reaches_without_its_pause():
    seg = Segmenter(DetectorConfig(merge_pause_ms=400))
    c = 768
    assert seg.speech_end is None
    for i in range(6):
        seg.step(0.9, i * c, (i + 1) * c)
    assert seg.active and seg.speech_end == 6 * c
    for i in range(6, 10):
        seg.step(0.1, i * c, (i + 1) * c)  # a pause: the speech still ends where it did
    assert seg.speech_end == 6 * c
    for i in range(10, 20):
        seg.step(0.1, i * c, (i + 1) * c)
    assert not seg.active and seg.speech_end is None


def test_guarded_transitions_and_bad_config():
    tt = TurnTaker()
    with pytest.raises(IllegalTransition):
        tt._go(TurnState.speaking)  # listening -> speaking skips thinking
    with pytest.raises(ValueError):
        TurnConfig(barge_in_ms=0)


def speechlike(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 4000 * (1 + np.sin(np.arange(n) / 300))).astype(np.int16)


def test_the_echo_guard_removes_a_delayed_scaled_copy_of_arias_voice_and_keeps_a_human():
    g = EchoGuard(F, tail_ms=500)
    voice = speechlike(40 * F, 1)
    human = speechlike(40 * F, 2) // 2
    delay = 3 * F + 517  # 0.26 s
    echo_energy, left, kept = [], [], []
    for n in range(40):  # the bridge's order: the room frame is cleaned, then her frame is played
        a, b = n * F - delay, (n + 1) * F - delay
        room_echo = (voice[max(a, 0):b] * 0.6).astype(np.int16) if a >= 0 else np.zeros(F, np.int16)
        if n >= 10:
            r = g.clean(room_echo)
            echo_energy.append(float(np.sum(room_echo.astype(float) ** 2)))
            left.append(float(np.sum(r.astype(float) ** 2)))
            both = (room_echo.astype(np.int32) + human[n * F:(n + 1) * F]).astype(np.int16)
            kept.append(float(np.corrcoef(g.clean(both).astype(float), human[n * F:(n + 1) * F])[0, 1]))
        g.played(voice[n * F:(n + 1) * F])
    assert sum(left) < 0.01 * sum(echo_energy)  # the echo is gone (> 20 dB)
    assert min(kept) > 0.95  # a human talking over it stays


def test_the_echo_guard_passes_the_room_through_while_aria_has_been_silent():
    g = EchoGuard(F, tail_ms=500)
    room = speechlike(F, 3)
    g.played(speechlike(F, 4))
    for _ in range(7):
        g.played(None)
    assert g.clean(room) is not room  # her voice is still within the tail
    g.played(None)
    assert g.clean(room) is room  # 0.5 s + a frame of silence: nothing to take out


def test_the_cascade_refuses_options_it_does_not_take(tmp_path):
    from server.cli.bridges import BridgeConfigError, create_bridge

    with pytest.raises(BridgeConfigError, match="llmm"):
        create_bridge("cascade", data_dir=str(tmp_path), llmm="rule")
    with pytest.raises(BridgeConfigError, match="decider"):  # objects only from code, never from --opt
        create_bridge("cascade", data_dir=str(tmp_path), decider="rule")


def test_a_held_reply_waits_out_the_hold_and_a_continuation_drops_it():
    """Two-party end of utterance: the reply to a first part starts only ``hold_ms`` after its end;
    the continuation's onset within the hold drops it, and the whole is decided on when it ends."""
    tt = TurnTaker(TurnConfig(hold_ms=3000))
    tt.hear(F, [onset(0, F)], F)
    (a,) = tt.hear(30 * F, [offset(20 * F, 30 * F)], 30 * F)
    assert tt.replied(30 * F, Reply(a.utterance.uid, 5 * F)) == []  # held: 3 s from 20 F = 57.5 F
    assert tt.state is TurnState.thinking and tt.playing(31 * F) is None
    assert tt.hear(50 * F, [onset(48 * F, 50 * F)], 50 * F) == [Dropped(1, "human talking")]
    assert tt.state is TurnState.listening
    (b,) = tt.hear(80 * F, [offset(70 * F, 80 * F)], 80 * F)
    assert b == Think(Utterance(2, 48 * F, 70 * F, 80 * F))
    assert tt.replied(80 * F, Reply(2, 5 * F)) == []
    assert tt.hear(107 * F, [], 107 * F) == []  # 70 F + 3 s = 107.5 F: not yet
    assert tt.hear(108 * F, [], 108 * F) == [StartSpeaking(2, 108 * F, 5 * F)]
    assert tt.state is TurnState.speaking


def test_a_background_voice_never_barges_in_and_is_not_transcribed():
    tt = TurnTaker()
    t = speaking(tt)
    assert tt.hear(t + F, [onset(t, t + F)], t + F) == [] and tt.open_since == t
    assert tt.hear(t + 20 * F, [], t + 20 * F, foreground=False) == []  # 1.6 s over her: no barge-in
    (a,) = tt.hear(t + 30 * F, [offset(t + 25 * F, t + 30 * F)], t + 30 * F)
    assert a == Ignored(Utterance(2, t, t + 25 * F, t + 30 * F), "background")
    # while she is silent too: a background utterance is never decided on
    tt = TurnTaker()
    tt.hear(F, [onset(0, F)], F, foreground=False)  # judged on the utterance open before the events: none
    tt.hear(2 * F, [], 2 * F, foreground=False)
    (b,) = tt.hear(30 * F, [offset(20 * F, 30 * F)], 30 * F)
    assert isinstance(b, Ignored) and b.why == "background" and tt.state is TurnState.listening


def test_the_broadcast_guard_hears_a_band_limited_voice():
    from server.cascade.broadcast import LOW_HZ, band_limited

    t = np.arange(24_000) / 24_000
    low = 3000 * np.sin(2 * np.pi * 120 * t) + 2000 * np.sin(2 * np.pi * 1000 * t)  # a voice's fundamental
    band = 3000 * np.sin(2 * np.pi * 600 * t) + 2000 * np.sin(2 * np.pi * 1000 * t)  # nothing below LOW_HZ
    assert LOW_HZ < 300 and band_limited(band.astype(np.int16)) and not band_limited(low.astype(np.int16))
    assert not band_limited(band[:2400].astype(np.int16))  # too little to judge: a person
    assert not band_limited(np.zeros(24_000, np.int16))


def test_the_broadcast_guard_on_real_speech(say):
    from server.benchmarks.mtr.dataset.voices import broadcast_filter
    from server.cascade.broadcast import band_limited

    voice = say("And now the weather: sunny skies this afternoon.")[:24_000]
    assert not band_limited(voice) and band_limited(broadcast_filter(voice))
