"""espeak-ng (the Debian program, run as a subprocess): voice ids ``espeak:<language>+<variant>[@<wpm>]``."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np

from clients.pcm import pcm16_to_float
from server.tts.base import ESPEAK_INSTALL_HINT, OUTPUT_RATE, TTSUnavailable, float_to_int16

#: Speaker -> voice of the espeak-ng engine (two male, two female variants).
ESPEAK_VOICES: dict[str, str] = {
    "A": "espeak:en-us+m3",
    "B": "espeak:en-us+m5",
    "C": "espeak:en-us+f2",
    "D": "espeak:en-us+f4",
}



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
            pcm = pcm16_to_float(np.frombuffer(body[: len(body) // 2 * 2], dtype="<i2"))
            return rate, pcm
        pos += 8 + size + (size & 1)
    raise RuntimeError("espeak-ng output has no audio data")


