"""The engines by name and their fixed speaker voices."""

from __future__ import annotations

from typing import Any

from server.tts.base import TTSEngine, TTSUnavailable
from server.tts.espeak import EspeakEngine
from server.tts.kokoro import KokoroEngine, kokoro_available
from server.tts.piper import PiperEngine

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


def preferred_engine() -> str:
    """The engine that voices suites by default: Kokoro when it can run, else piper."""
    return "kokoro" if kokoro_available() else "piper"
