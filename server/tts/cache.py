"""Synthesised clips cached on disk, and ``speak``: one line of text in one voice, cached."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from server.files import atomic_write_bytes
from server.tts.base import OUTPUT_RATE, TTSEngine
from server.tts.engines import get_engine, voice_engine


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
