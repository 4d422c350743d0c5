"""Episode events (DESIGN §3): what happened on the stream timeline, with sample-exact times.

One type and one serialisation for every layer: the scheduler emits :class:`Event`, the
recorder stores ``to_json()`` rows, bundles carry them, scoring and the pages read them back
with :meth:`Event.from_json`. Which ``type`` values exist is the benchmark's business (its
scheduler emits them); the engine adds only :data:`TEXT` (model text, §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TEXT = "text"  # bridge→server ``text`` message, logged at its frame's start (§4)


@dataclass(frozen=True, slots=True)
class Event:
    """One episode event (§3): its ``type`` and ``data`` at stream time ``t`` (integer samples at 24 kHz)."""

    t: int  # stream time in samples at 24 kHz
    type: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "type": self.type, "data": dict(self.data)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Event:
        """Parse one stored event; raises ``ValueError`` on a malformed one."""
        t, type_, data = obj.get("t"), obj.get("type"), obj.get("data") or {}
        if not isinstance(t, int) or isinstance(t, bool):
            raise ValueError(f"event {type_!r} has no integer sample time")
        if not isinstance(type_, str) or not isinstance(data, dict):
            raise ValueError(f"malformed event {obj!r}")
        return cls(t, type_, data)
