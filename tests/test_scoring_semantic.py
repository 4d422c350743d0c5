"""The semantic path with the offline backends (faster-whisper tiny.en + rule judge) on real
synthesised speech, the caches, and the backend error paths."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from sqlalchemy import func, select

from server.benchmarks.mpe.judging import AnswerInput, RuleJudge, SilenceInput, make_judge
from server.benchmarks.mpe.scoring import score_episode
from server.db import TranscriptRow, VerdictRow
from server.scoring.asr import (
    FRAGMENT_PAD,
    NO_ASR_NOTE,
    ASRBackend,
    ASRResult,
    FasterWhisperASR,
    NoASR,
    join_fragments,
    make_asr,
    pad_fragments,
)
from server.scoring.errors import BackendUnavailable
from server.scoring.judges import merge_numbers, normalize
from server.scoring.runner import scoring_config
from server.scoring.store import Cache
from tests.support.audio import place
from tests.support.scoring import R, event_t, sec, simulate

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
    assert (v.task, v.backend, v.prompt_version, v.label) == ("answer", "rule", "rule-answer-v3", "CORRECT")
    assert v.raw_reply and v.inputs["gold_answer"] == GOLD


def test_join_fragments():
    track = np.arange(100, dtype=np.int16)
    out = join_fragments(track, [(10, 20), (50, 55)])
    assert len(out) == 10 + R * 3 // 10 + 5 and out[0] == 10 and out[-1] == 54
    assert len(join_fragments(track, [])) == 0


def test_pad_fragments():
    segs = [(100, 200), (230, 400), (1000, 1100)]
    # Widened where the detector's segment begins and ends, never into other speech or past the track.
    assert pad_fragments([(100, 200)], segs, 2000, pad=50) == [(50, 230)]
    assert pad_fragments([(1000, 1100)], segs, 1120, pad=50) == [(950, 1120)]
    assert pad_fragments([(100, 200)], segs, 2000, pad=0) == [(100, 200)]
    # A window boundary that cut a segment stays where it is (the neighbour's words stay out).
    assert pad_fragments([(300, 400)], segs, 2000, pad=50) == [(300, 450)]
    assert pad_fragments([(230, 350)], segs, 2000, pad=50) == [(200, 350)]
    # Fragments that come to touch are merged, so no audio is transcribed twice.
    assert pad_fragments([(100, 200), (230, 400)], segs, 2000, pad=50) == [(50, 450)]
    assert pad_fragments([(0, 10)], [(0, 10)], 2000, pad=50) == [(0, 60)]
    assert FRAGMENT_PAD == R // 5


def test_the_asr_hears_each_fragment_with_its_padding(say):
    answer = say("Eleven dollars.")
    ep = simulate(TURNS, place(sec(40), (sec(9.8), answer)), gold=GOLD, answer_keys=KEYS)
    asr = CountingASR()
    e = score_episode(ep, asr, RuleJudge(), Cache())
    ((s, end),) = e.t.fragments
    assert asr.lengths == [end - s + 2 * FRAGMENT_PAD]  # silence around it: the full 0.2 s on both sides
    assert [it.fragments for it in e.judged()] == [[(s - FRAGMENT_PAD, end + FRAGMENT_PAD)]]  # what the audit plays


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
        assert normalize("Four hundred and eighty dollars") == normalize("$480") == ["480", "dollars"]
        assert normalize("$4.80") == ["4", "80", "dollars"] and merge_numbers(["4", "80", "dollars"]) == ["480", "dollars"]
        assert normalize("half past seven") == normalize("7:30") == normalize("seven thirty") == ["7", "30"]
        assert normalize("quarter to one") == ["12", "45"]
        assert normalize("eleven o'clock") == normalize("11:00") == ["11", "0"]
        assert normalize("2½ hours") == normalize("2.5 hours") == normalize("two and a half hours")
        assert normalize("10%") == normalize("ten percent") == ["10", "percent"]
        assert normalize("on the fifth") == ["on", "the", "5"] and normalize("the second") == ["the", "2"]
        assert normalize("one second") == ["1", "second"]  # the unit of time stays a word
        assert merge_numbers(["9", "5"]) == ["905"] and merge_numbers(["150", "5"]) == ["150", "5"]

    def test_numbers_spoken_or_written_any_way(self):
        keys = [["four hundred and eighty", "480"]]
        gold = "Four hundred and eighty dollars over the year."
        for heard in ("$480 over the year.", "Four eighty dollars.", "It's $4.80 a year.", "4 80 dollars",
                      "four hundred eighty"):
            assert self.answer(heard, gold, keys) == "CORRECT", heard
        for heard in ("$408 over the year.", "Forty-eight dollars.", "Four hundred dollars.", "$4.08"):
            assert self.answer(heard, gold, keys) == "INCORRECT", heard
        times = [["7:30", "7.30", "730", "seven thirty", "half past seven"]]
        for heard in ("At 7:30.", "seven thirty", "Half past seven.", "at 730"):
            assert self.answer(heard, "At seven thirty.", times) == "CORRECT", heard
        assert self.answer("At 7:13.", "At seven thirty.", times) == "INCORRECT"
        half = [["two and a half", "2 and a half", "2.5", "2½"]]
        for heard in ("About 2.5 hours.", "2½ hours", "two and a half hours"):
            assert self.answer(heard, "About two and a half hours.", half) == "CORRECT", heard
        assert self.answer("About two hours.", "About two and a half hours.", half) == "INCORRECT"
        assert self.answer("8 onions", "You need eight onions.", [["eight", "8"]]) == "CORRECT"
        assert self.answer("Eight onions", "You need 8 onions.", None) == "CORRECT"  # derived keys

    def test_number_homophones_where_a_number_belongs(self):
        four = [["four", "4"]]
        assert self.answer("For dollars.", "Four dollars.", four) == "CORRECT"  # the "for dollars"
        assert self.answer("It's for dollars.", "Four dollars.", None) == "CORRECT"
        assert self.answer("You need ate onions.", "You need eight onions.", [["eight", "8"]]) == "CORRECT"
        assert self.answer("About to and a half hours.", "About two and a half hours.",
                           [["two and a half", "2 and a half"]]) == "CORRECT"
        assert self.answer("At for thirty.", "At four thirty.", [["4:30", "four thirty"]]) == "CORRECT"
        # Not where no number belongs: "for" and "to" stay words.
        assert self.answer("Three for each.", "Four dollars.", four) == "INCORRECT"
        assert self.answer("You need to buy onions.", "You need two onions.", [["two", "2"]]) == "INCORRECT"
        assert self.answer("Good for you.", "Four dollars.", four) == "INCORRECT"

    def test_compounds_and_near_names(self):
        house = [["guesthouse"]]
        assert self.answer("The guest house near the beach.", "The guesthouse near the beach.", house) == "CORRECT"
        assert self.answer("The stopover one.", "The one with the stop over.", [["stop over"]]) == "CORRECT"
        assert self.answer("Leto, with 50 points.", "Leo, with fifty points.", [["Leo"]]) == "CORRECT"
        assert self.answer("Fin, with 50 points.", "Finn, with fifty points.", [["Finn"]]) == "CORRECT"
        assert self.answer("Then, with 50 points.", "Finn, with fifty points.", [["Finn"]]) == "INCORRECT"
        assert self.answer("Dan, with 50 points.", "Finn, with fifty points.", [["Finn"]]) == "INCORRECT"
        assert self.answer("Sunday.", "Saturday.", [["Saturday"]]) == "INCORRECT"
        assert self.answer("The hotel.", "The guesthouse.", house) == "INCORRECT"


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


def long_talk_episode(say):
    long_talk = say("Well, I was just thinking about the weekend and all the things we still need to do.")
    return simulate(TURNS, place(sec(40), (sec(2.0), long_talk), (sec(9.8), say("Eleven dollars."))),
                    gold=GOLD, answer_keys=KEYS)


def test_silence_windows_are_judged_on_transcripts_by_default(say):
    judge = RuleJudge()
    assert judge.decide_on_duration("silence", 60_000) is None and judge.decide_on_duration("answer", 90_000) is None
    asr = CountingASR()
    e = score_episode(long_talk_episode(say), asr, judge, Cache())
    spoken = [w for w in e.silence_windows if w.speech_ms > 0]
    assert any(w.speech_ms > 2000 for w in spoken)
    for w in spoken:  # every window with speech was transcribed and judged, long ones too
        assert w.reason == "judged" and w.transcript == "okay"
        assert w.passed == (w.speech_ms <= 2000)  # lexicon words, but a 2 s backchannel limit
    assert len(asr.lengths) == 1 + len(spoken)


def test_deciding_long_speech_on_duration_is_an_explicit_speed_option(say):
    judge = make_judge("rule:fast")
    assert isinstance(judge, RuleJudge) and judge.fast_duration
    assert judge.decide_on_duration("silence", 2000) is None
    assert judge.decide_on_duration("silence", 2001).label == "SUBSTANTIVE_INTRUSION"
    assert judge.decide_on_duration("answer", 30_000) is None
    assert judge.decide_on_duration("answer", 30_001).label == "INCORRECT"
    asr = CountingASR()
    e = score_episode(long_talk_episode(say), asr, judge, Cache())
    spoken = [w for w in e.silence_windows if w.speech_ms > 0]
    for w in spoken:
        if w.speech_ms > 2000:  # decided by length: no transcript needed, none made
            assert w.reason == "duration" and w.transcript is None and not w.passed
            assert w.verdict == "SUBSTANTIVE_INTRUSION" and w.verdict_note
        else:
            assert w.transcript == "okay"
    assert e.t.transcript == "okay"  # a short answer is still transcribed
    assert len(asr.lengths) == 1 + sum(1 for w in spoken if w.speech_ms <= 2000) < 1 + len(spoken)
    # The option is part of the scoring's settings, so its scorings are kept apart.
    (fast, fast_hash), (plain, plain_hash) = scoring_config("none", "rule:fast"), scoring_config("none", "rule")
    assert fast["judge"]["decide_on_duration"] is True and plain["judge"]["decide_on_duration"] is False
    assert fast_hash != plain_hash
    with pytest.raises(BackendUnavailable, match="unknown judge"):
        make_judge("rule:slow")


def test_without_asr_the_cli_says_answer_accuracy_is_not_computed(db, say, tmp_path, monkeypatch):
    import soundfile as sf
    from typer.testing import CliRunner

    from server.cli import app

    ep = episode(say, "The noodle bar, eleven dollars each.")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "episode.json").write_text(json.dumps(ep.doc))
    sf.write(str(bundle / "assistant.wav"), ep.assistant, R, subtype="PCM_16")
    monkeypatch.setenv("DATABASE_URL", db.url)
    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path / "data"))
    r = CliRunner().invoke(app, ["score", str(bundle), "--asr", "none", "--workers", "1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["metrics"]["m"]["explicit"]["answer_accuracy"]["den"] == 0
    assert NO_ASR_NOTE in " ".join(r.stderr.split())
    r = CliRunner().invoke(app, ["report", out["scoring_id"], "--html", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    assert NO_ASR_NOTE in " ".join(r.stderr.split())
    assert "answer accuracy is not computed" in (tmp_path / "r.html").read_text()
    # With ASR the note is absent.
    r = CliRunner().invoke(app, ["score", str(bundle), "--asr", "faster-whisper", "--workers", "1", "--json"])
    assert r.exit_code == 0 and "not computed" not in r.stderr


class TestQwen3ASR:
    """The paper's ASR through transformers' own Qwen3-ASR classes (tiny random weights)."""

    def test_transcribes_through_the_processors_request(self, tmp_path, say):
        pytest.importorskip("transformers")
        from server.scoring.asr import Qwen3ASR
        from tests.support.qwen3_asr import FIRST, build_tiny_qwen3_asr

        d = build_tiny_qwen3_asr(tmp_path / "q3")
        for spec in (f"qwen3-asr:{d}", f"transformers:{d}"):  # the generic path finds the model class too
            asr = make_asr(spec, device="cpu")
            assert isinstance(asr, Qwen3ASR) and asr.describe()["model_type"] == "qwen3_asr"
        asr.max_new_tokens = 5
        res = asr.transcribe(say("The meeting is at four."))
        # greedy over a zero head: the model's own five tokens, the prefilled "language English<asr_text>" not repeated
        assert res.text == FIRST * 5 and res.raw["new_tokens"] == 5
        assert asr.transcribe(np.zeros(0, dtype=np.int16)).text == ""

    def test_refuses_another_model_type(self, tmp_path):
        pytest.importorskip("transformers")
        (tmp_path / "config.json").write_text('{"model_type": "whisper"}')
        with pytest.raises(BackendUnavailable, match="not Qwen3-ASR"):
            make_asr(f"qwen3-asr:{tmp_path}")
