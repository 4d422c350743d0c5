"""The semantic path with the offline backends (faster-whisper tiny.en + rule judge) on real
synthesised speech, the caches, and the backend error paths."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from sqlalchemy import func, select

from server.benchmarks.mpe.scoring import score_episode
from server.db import TranscriptRow, VerdictRow
from server.scoring.asr import ASRBackend, ASRResult, FasterWhisperASR, NoASR, join_fragments, make_asr
from server.scoring.errors import BackendUnavailable
from server.scoring.judges import AnswerInput, RuleJudge, SilenceInput, make_judge, normalize
from server.scoring.store import Cache
from tests.audio_fixtures import place
from tests.scoring_support import R, event_t, sec, simulate

TURNS = [("N2", "Did you book the table for Friday?", 2.5), ("N1", "Aria picked that place last time.", 2.5),
         ("T", "Aria, which place is cheaper per person?", 2.0), ("N3", "Hmm, where are my keys?", 2.0),
         ("N4Q", "Aria, do they deliver?", 1.5), ("N4R", "They do, I checked.", 1.5), ("N2", "Great.", 1.5)]
GOLD, KEYS = "The noodle bar, eleven dollars each.", [["noodle"], ["eleven", "11"]]


@pytest.fixture(scope="module")
def asr():
    return FasterWhisperASR()


def episode(say, answer: str, *, extra=()):
    """Speech: "Okay." in the N2 window, "Nine dollars." in the N1 window, the answer 0.3 s after T,
    and (second pass) a hold-on in the N4 gap that stops shortly after N4R starts."""
    parts = [(sec(2.0), say("Okay.")), (sec(5.0), say("Nine dollars.")), (sec(9.8), say(answer)), *extra]
    first = simulate(TURNS, place(sec(40), *parts), gold=GOLD, answer_keys=KEYS)
    q_end, t_r = event_t(first.doc, "clip.end", 4), event_t(first.doc, "clip.start", 5)
    hold = say("Sure, let me look that up for you, one moment, I am checking the details right now.")
    assert len(hold) > t_r + sec(0.5) - (q_end + sec(0.4))
    hold = hold[: t_r + sec(0.5) - (q_end + sec(0.4))]
    ep = simulate(TURNS, place(sec(40), *parts, (q_end + sec(0.4), hold)), gold=GOLD, answer_keys=KEYS)
    # The scheduler's decisions before N4 do not depend on what came later.
    assert event_t(ep.doc, "clip.start", 4) == event_t(first.doc, "clip.start", 4)
    return ep


def test_offline_semantic_path_on_real_speech(say, asr):
    ep = episode(say, "The noodle bar, eleven dollars each.")
    cache = Cache()
    e = score_episode(ep, asr, RuleJudge(), cache)
    t = e.t
    assert t.fresh and t.present and not t.already_speaking
    assert "noodle" in t.transcript.lower()
    assert t.correct is True and t.verdict == "CORRECT"
    w = {x.turn_idx: x for x in e.silence_windows}
    assert w[0].verdict == "BACKCHANNEL" and w[0].passed and w[0].speech_ms > 0
    assert w[1].verdict == "SUBSTANTIVE_INTRUSION" and not w[1].passed
    assert "9" in normalize(w[1].transcript)
    assert w[3].passed and w[3].transcript is None and w[3].reason == "no_speech"  # nothing in N3
    assert w[6].passed
    (n4,) = e.n4
    assert n4.category == "fresh_onset" and n4.eligible and n4.outcome == "pass"
    # Only detected speech was transcribed: three windows, three ASR calls, two judge calls + one answer.
    assert cache.calls["asr"] == 3 and cache.calls["judge"] == 3


def test_wrong_answer_is_incorrect(say, asr):
    e = score_episode(episode(say, "The burger place, fourteen dollars."), asr, RuleJudge(), Cache())
    assert e.t.present and e.t.correct is False and e.t.verdict == "INCORRECT"


def test_fragments_of_one_window_are_joined_and_transcribed_together(say, asr):
    # Two fragments 1.5 s apart inside the N2 window: one transcript holding both.
    parts = [(sec(1.6), say("Mm-hmm.")), (sec(3.1), say("Nine dollars."))]
    ep = simulate(TURNS, place(sec(40), *parts), gold=GOLD, answer_keys=KEYS)
    cache = Cache()
    e = score_episode(ep, asr, RuleJudge(), cache)
    w0 = e.silence_windows[0]
    assert len(w0.fragments) == 2 and cache.calls["asr"] == 1
    assert "9" in normalize(w0.transcript) and not w0.passed


class EmptyASR(ASRBackend):
    """Stand-in for an ASR that hears nothing in the detected speech (the real one cannot be made to)."""

    name = "empty"

    def describe(self):
        return {"backend": "empty"}

    def transcribe(self, pcm):
        return ASRResult("", {})


def test_empty_transcript_is_incorrect_and_fails(say):
    e = score_episode(episode(say, "The noodle bar, eleven dollars each."), EmptyASR(), RuleJudge(), Cache())
    assert e.t.present and e.t.correct is False and e.t.reason == "empty_transcript"
    assert e.t.verdict is None
    w0 = e.silence_windows[0]
    assert not w0.passed and w0.reason == "empty_transcript"


def test_without_asr_speech_fails_and_accuracy_is_not_judged(say):
    e = score_episode(episode(say, "The noodle bar, eleven dollars each."), NoASR(), RuleJudge(), Cache())
    assert e.t.present and e.t.correct is None and e.t.reason == "no_asr"
    assert [w.passed for w in e.silence_windows] == [False, False, True, True]


def test_rescoring_makes_no_new_calls_and_keeps_provenance(db, say, asr):
    ep = episode(say, "The noodle bar, eleven dollars each.")
    first = Cache(db)
    e1 = score_episode(ep, asr, RuleJudge(), first)
    assert first.calls["asr"] == 3 and first.calls["judge"] == 3
    again = Cache(db)  # a new process would start with an empty memory: only the database remains
    e2 = score_episode(ep, asr, RuleJudge(), again)
    assert again.calls["asr"] == 0 and again.calls["judge"] == 0
    assert again.calls["asr_hits"] == 3 and again.calls["judge_hits"] == 3
    assert e1 == e2
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(TranscriptRow)) == 3
        t = s.scalar(select(TranscriptRow).where(TranscriptRow.id == e1.t.transcript_id))
        v = s.scalar(select(VerdictRow).where(VerdictRow.id == e1.t.verdict_id))
    assert t.backend == "faster-whisper" and "tiny.en" in t.model and "Aria" in t.config["initial_prompt"]
    assert t.config["compute_type"] == "int8" and t.config["beam_size"] == 5 and t.text == e1.t.transcript
    assert (v.task, v.backend, v.prompt_version, v.label) == ("answer", "rule", "rule-answer-v2", "CORRECT")
    assert v.raw_reply and v.inputs["gold_answer"] == GOLD


def test_join_fragments():
    track = np.arange(100, dtype=np.int16)
    out = join_fragments(track, [(10, 20), (50, 55)])
    assert len(out) == 10 + R * 3 // 10 + 5 and out[0] == 10 and out[-1] == 54
    assert len(join_fragments(track, [])) == 0


class TestRuleJudge:
    j = RuleJudge()

    def answer(self, text, gold=GOLD, keys=KEYS):
        return self.j.judge_answer(AnswerInput(gold_answer=gold, answer_keys=keys, transcript=text)).label

    def silence(self, text, ms=600):
        return self.j.judge_silence(SilenceInput(transcript=text, speech_ms=ms, overlap_ms=0)).label

    def test_answer_keys(self):
        assert self.answer("Um, the noodle bar, $11 each, I think.") == "CORRECT"
        assert self.answer("Noodle bar, eleven.") == "CORRECT"
        assert self.answer("The noodle bar.") == "INCORRECT"  # the price key is missing
        assert self.answer("The burger place, 14 dollars.") == "INCORRECT"
        keys = [["nine fifteen", "9:15", "915"]]
        for t in ("The 9:15 train.", "the nine fifteen", "Take the 9.15."):
            assert self.answer(t, "The nine fifteen train.", keys) == "CORRECT", t
        assert self.answer("The nine fifty train.", "The nine fifteen train.", keys) == "INCORRECT"
        ramble = "So I was thinking about the weekend and the lake and the weather " * 5 + "noodle bar, 11"
        assert self.answer(ramble) == "INCORRECT"  # a monologue that happens to contain the keys

    def test_keys_derived_from_the_gold_answer(self):
        assert self.answer("Two kilometers.", "Two kilometres", None) == "CORRECT"  # spelling variant
        assert self.answer("Three kilometres.", "Two kilometres", None) == "INCORRECT"  # numbers must match
        assert self.answer("9 in the evening", "Nine in the evening", None) == "CORRECT"

    def test_backchannel_lexicon_and_length(self):
        assert self.silence("Okay.") == "BACKCHANNEL"
        assert self.silence("Mm-hmm, I see.") == "BACKCHANNEL"
        assert self.silence("nine dollars") == "SUBSTANTIVE_INTRUSION"  # short, but an answer
        assert self.silence("$9.") == "SUBSTANTIVE_INTRUSION"
        assert self.silence("okay okay okay okay okay") == "SUBSTANTIVE_INTRUSION"  # too many words
        assert self.silence("Okay.", ms=2500) == "SUBSTANTIVE_INTRUSION"  # too long

    def test_normalize(self):
        assert normalize("Twenty-one, 1,000 and the 11th at 9:05") == ["21", "1000", "and", "the", "11", "at", "9", "5"]
        assert normalize("one hundred and five") == ["105"]


class TestBackendErrors:
    def test_transformers_needs_local_weights(self, tmp_path):
        with pytest.raises(BackendUnavailable, match="local weights"):
            make_asr("transformers")
        with pytest.raises(BackendUnavailable, match="never downloads"):
            make_asr(f"transformers:{tmp_path / 'missing'}")
        (tmp_path / "w").mkdir()
        (tmp_path / "w" / "config.json").write_text('{"model_type": "whisper"}')
        if importlib.util.find_spec("transformers") is None:
            with pytest.raises(BackendUnavailable, match="pip install transformers"):
                make_asr(f"transformers:{tmp_path / 'w'}")
        else:  # installed: the backend builds (weights load lazily) and describes itself
            assert make_asr(f"transformers:{tmp_path / 'w'}").describe()["model_type"] == "whisper"

    def test_unknown_names_and_bad_model_dirs(self, tmp_path):
        with pytest.raises(BackendUnavailable, match="unknown ASR"):
            make_asr("whisperx")
        with pytest.raises(BackendUnavailable, match="model.bin"):
            make_asr(f"faster-whisper:{tmp_path}")
        with pytest.raises(BackendUnavailable, match="unknown judge"):
            make_judge("gpt")

    def test_claude_needs_a_key(self, monkeypatch):
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        with pytest.raises(BackendUnavailable, match="ANTHROPIC_API_KEY"):
            make_judge("claude")


class CountingASR(EmptyASR):
    """Records what it is asked to transcribe."""

    name = "counting"

    def __init__(self):
        self.lengths = []

    def transcribe(self, pcm):
        self.lengths.append(len(pcm))
        return ASRResult("okay", {})


def test_rule_judge_decides_long_speech_on_duration_without_asr(say):
    judge = RuleJudge()
    assert judge.decide_on_duration("silence", 2000) is None
    assert judge.decide_on_duration("silence", 2001).label == "SUBSTANTIVE_INTRUSION"
    assert judge.decide_on_duration("answer", 30_000) is None
    assert judge.decide_on_duration("answer", 30_001).label == "INCORRECT"
    long_talk = say("Well, I was just thinking about the weekend and all the things we still need to do.")
    ep = simulate(TURNS, place(sec(40), (sec(2.0), long_talk), (sec(9.8), say("Eleven dollars."))),
                  gold=GOLD, answer_keys=KEYS)
    asr = CountingASR()
    e = score_episode(ep, asr, judge, Cache())
    spoken = [w for w in e.silence_windows if w.speech_ms > 0]
    assert any(w.speech_ms > 2000 for w in spoken)
    for w in spoken:
        if w.speech_ms > 2000:  # decided by length: no transcript needed, none made
            assert w.reason == "duration" and w.transcript is None and not w.passed
            assert w.verdict == "SUBSTANTIVE_INTRUSION" and w.verdict_note
        else:
            assert w.transcript == "okay"
    assert e.t.transcript == "okay"  # a short answer is still transcribed
    assert len(asr.lengths) == 1 + sum(1 for w in spoken if w.speech_ms <= 2000)
