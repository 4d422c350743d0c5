"""The option types every benchmark's ``mpe dataset`` commands share: the TTS engines and the script
generators (each benchmark declares its own options with them)."""

from __future__ import annotations

from enum import Enum

from server.tts import preferred_engine


class EngineName(str, Enum):
    """A TTS engine of :mod:`server.tts` (``--tts``)."""

    piper = "piper"
    espeak = "espeak"
    kokoro = "kokoro"


def default_engine() -> EngineName:
    """The best engine installed here (``--tts``'s default)."""
    return EngineName(preferred_engine())


class GeneratorName(str, Enum):
    """A script generator (``--generator``): the seeded procedural one, or Claude."""

    procedural = "procedural"
    anthropic = "anthropic"
    claude = "claude"  # the same as anthropic
