"""The cascade's turn-taking defaults, each taken verbatim from a published voice-agent framework.

None of them is read off the suites the cascade is scored on: they are the defaults of LiveKit
Agents, an open-source framework for cascaded (VAD → STT → LLM → TTS) voice agents, with Silero VAD
as its voice-activity detector — the same detector family as the room detector here. Every one is
overridable as a bridge option (``eou_ms``, ``hold_ms``, ``barge_in_ms``, ``broadcast_guard``).
``tests/test_cascade_defaults.py`` lists them beside the generators' ranges and fails when one sits
just above a generator bound without being the published value it cites.

Upstream, at livekit/agents commit ``da6af86ac640a3bc54585764e64321d7048c1c16``:

* end of utterance — ``livekit-plugins/livekit-plugins-silero/livekit/plugins/silero/vad.py:64``,
  ``VAD.load(min_silence_duration=0.55)``: the silence after which Silero's end of speech fires;
* hold — ``livekit-agents/livekit/agents/voice/turn.py:137`` (``_ENDPOINTING_DEFAULTS``,
  ``min_delay: 0.5``, "minimum time since last detected speech before declaring the user's turn
  complete"), counted from the end of the speech (``voice/audio_recognition.py:1720-1722``:
  ``extra_sleep = endpointing_delay + last_speaking_time - time.time()``), as the hold here is;
* barge-in — ``livekit-agents/livekit/agents/voice/turn.py:193`` (``_INTERRUPTION_DEFAULTS``,
  ``min_duration: 0.5``, "minimum speech length to register as an interruption");
* background voices — neither LiveKit's VAD path nor Pipecat's filters them: a voice is a voice.
  The cascade's broadcast guard (:mod:`.broadcast`) is therefore off unless asked for.

All three lie on or just above two 0.5 s bounds of the generators (the Duplex-MPE scheduler's gap
after each clip, the earliest MTR background onset): a coincidence of round numbers, allowed by the
test because each is its source's value unchanged. The first has an effect the suites show: turns
of the built-in Duplex-MPE suites that follow each other after 0.5 s are one utterance to the
cascade.

For comparison, Pipecat (pipecat-ai/pipecat ``acead05``, ``src/pipecat/audio/vad/vad_analyzer.py:27``)
ends speech after ``VAD_STOP_SECS = 0.2`` and leaves the end of the turn to a turn model; with no such
model, LiveKit's VAD-only settings are the ones that apply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    """A default and where it comes from: ``value_ms`` is ``upstream_s`` in milliseconds, unchanged."""

    name: str
    value_ms: int
    upstream_s: float
    source: str  # repository@commit:file:line and the upstream setting

    def __post_init__(self) -> None:
        if round(self.upstream_s * 1000) != self.value_ms:
            raise ValueError(f"{self.name}: {self.value_ms} ms is not the published {self.upstream_s} s")


LIVEKIT = "livekit/agents@da6af86"

END_OF_UTTERANCE = Published(
    "end of utterance", 550, 0.55,
    f"{LIVEKIT}:livekit-plugins/livekit-plugins-silero/livekit/plugins/silero/vad.py:64 min_silence_duration")
HOLD = Published(
    "hold", 500, 0.5, f"{LIVEKIT}:livekit-agents/livekit/agents/voice/turn.py:137 endpointing min_delay")
BARGE_IN = Published(
    "barge-in", 500, 0.5, f"{LIVEKIT}:livekit-agents/livekit/agents/voice/turn.py:193 interruption min_duration")

#: every timing default of the cascade (the test lists these)
TIMING: tuple[Published, ...] = (END_OF_UTTERANCE, HOLD, BARGE_IN)

END_OF_UTTERANCE_MS = END_OF_UTTERANCE.value_ms  # silence that ends a human utterance (the room detector's merge pause)
HOLD_MS = HOLD.value_ms  # from the end of an utterance's speech until a reply to it may start
BARGE_IN_MS = BARGE_IN.value_ms  # human speech over Aria's that stops her
#: the broadcast guard (:mod:`.broadcast`) is a named option, off: no published agent filters voices by band
BROADCAST_GUARD = False
