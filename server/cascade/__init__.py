"""The cascaded baseline bridge ``cascade`` (detector → ASR → decider → TTS): :mod:`.turns` (the pure
turn-taking state machine), :mod:`.echo` (the echo guard), :mod:`.prompt` and :mod:`.deciders`
(who decides and what Aria says), :mod:`.bridge` (the bridge that wires them)."""
