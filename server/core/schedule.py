"""The contract between a benchmark's scheduler and the engine (DESIGN §3, §11).

A scheduler is a pure, clock-injected state machine: the engine asks it for the next room
frame (:class:`FramePlan`: which pieces of which clips go where, and the events decided on
the way) and hands it the detector's decisions about the assistant in between. It never
reads a clock or a socket.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from clients.messages import ContextTurn
from server.core.events import Event
from server.core.timebase import SpeechEvent

PREAMBLE = "preamble"  # clip key of a suite's spoken duty preamble


@dataclass(frozen=True)
class Piece:
    """Place ``length`` samples of one clip, from ``src_start``, at ``dst_start`` in the frame."""

    source: str | int  # a clip key: PREAMBLE or a turn idx
    src_start: int
    dst_start: int
    length: int


@dataclass(frozen=True)
class FramePlan:
    """Room frame ``seq``: the clip pieces it plays (the rest is digital silence) and the events
    decided while producing it (§3); pieces that overlap add up (clipped to 16 bits).

    ``context``: teacher forcing (docs/protocol.md §5.1). None: slot ``seq`` has no context
    frame. A tuple (possibly empty): the bridge is sent an assistant-context frame mixing these
    pieces (silence elsewhere) right before the room frame, and it stands for the model's own
    output in this slot. Exactly the first ``Scheduler.context_frames`` slots have one.
    """

    seq: int
    pieces: tuple[Piece, ...]  # everything not covered is digital silence
    events: tuple[Event, ...]  # decided while producing this frame, in time order
    context: tuple[Piece, ...] | None = None


class Scheduler(Protocol):
    """What the engine needs from a benchmark's scheduler."""

    @property
    def end_sample(self) -> int | None: ...

    @property
    def context_frames(self) -> int:
        """How many initial slots (seq 0 … n−1) carry an assistant-context frame, known before the
        first frame (``episode.start`` says it); 0: none (a Duplex-MPE episode)."""

    @property
    def context_turns(self) -> tuple[ContextTurn, ...]:
        """The words of the history the context frames belong to, in time order (docs/protocol.md
        §5.2; ``episode.start`` carries them); empty: none, or the benchmark has no transcript."""

    def next_frame(self) -> FramePlan | None:
        """The plan of the next room frame, or None once the episode has ended."""

    def observe(self, events: Iterable[SpeechEvent], known_until: int) -> None:
        """Detector decisions about the assistant, consumed when the next frame is planned."""

    def status(self) -> dict[str, Any]:
        """Human-readable state for live listeners."""
