"""The typed inputs and outputs of turn segmentation.

Times are integer sample counts at the stream rate (24 kHz, :data:`server.core.timebase.STREAM_RATE`)
from the start of the recording; the JSON output adds seconds next to them (``*_s``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from server.core.timebase import STREAM_RATE

Channel = Literal["user", "model"]
SCHEMA_VERSION = "segment-v1"


def seconds(samples: int) -> float:
    """Stream samples as seconds (ms precision), for the JSON output and prompts."""
    return round(samples / STREAM_RATE, 3)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Interval(_Frozen):
    """An interval ``[start, end)`` of stream samples; the JSON adds it in seconds."""

    start: int = Field(ge=0)
    end: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self):
        if self.end < self.start:
            raise ValueError(f"interval ends before it starts ({self.start} > {self.end})")
        return self

    @computed_field
    @property
    def start_s(self) -> float:
        return seconds(self.start)

    @computed_field
    @property
    def end_s(self) -> float:
        return seconds(self.end)

    @property
    def length(self) -> int:
        return self.end - self.start


class Span(_Interval):
    """An interval ``[start, end)`` of stream samples: a speech segment, a turn as voted on."""


def span(start: int, end: int) -> Span:
    return Span(start=start, end=end)


class Utterance(_Frozen):
    """What ASR heard in one speech segment of a channel (times: the segment's)."""

    channel: Channel
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    text: str


class SegmentInput(_Frozen):
    """A recording as segmentation sees it: its length, the speech segments of each channel (the
    speech detector's, §5) and, optionally, transcripts of those segments."""

    n_samples: int = Field(ge=0, description="length of the recording")
    user: list[Span] = Field(description="the user channel's speech segments, in time order")
    model: list[Span] = Field(description="the model channel's speech segments, in time order")
    utterances: list[Utterance] = Field(default_factory=list, description="ASR of the segments (optional)")
    source: str = ""

    @model_validator(mode="after")
    def _sorted(self) -> "SegmentInput":
        for name in ("user", "model"):
            segs = getattr(self, name)
            if any(b.start < a.start for a, b in zip(segs, segs[1:])):
                raise ValueError(f"{name} segments are not in time order")
        return self


class ProposedTurn(_Frozen):
    """One user turn as a backend proposes it; ``continuation``: the model's reply to this turn runs
    on into the next user turn."""

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    continuation: bool = False

    @property
    def span(self) -> Span:
        return Span(start=self.start, end=self.end)


class Proposal(_Frozen):
    """One run of a backend: its turns (empty when it gave none it could use), the raw replies of
    every attempt, and why it is unusable when it is."""

    run: int = Field(ge=0)
    turns: list[ProposedTurn]
    usable: bool = True
    raw: list[str] = Field(default_factory=list, description="the backend's raw replies, one per attempt")
    error: str | None = None
    cached: int = Field(default=0, description="attempts answered from the cache")


class Candidate(_Frozen):
    """A proposed turn inside the pool voted on: which run proposed it, and its position there."""

    run: int
    index: int
    turn: ProposedTurn


class Votes(_Frozen):
    """The votes behind one turn: the candidates of its cluster (one per run at most), the boundary
    each proposed, and how many runs support it."""

    runs: list[int]
    starts: list[int]
    ends: list[int]
    support: int
    continuation_votes: int = 0


class Turn(_Interval):
    """A user turn of the result: the median boundaries of its cluster and the votes behind them."""

    index: int
    votes: Votes


class Window(_Interval):
    """The response window of turn k: from its start to the end of turn k + 1 (the last turn's: to the
    end of the recording)."""

    turn: int


class Continuation(_Frozen):
    """The model's reply to ``turn`` runs on into the next user turn: it is still speaking when the
    next turn starts, until ``response_end`` (from the model's speech segments; null when the
    segments do not show it)."""

    turn: int
    next_turn_start: int
    response_end: int | None
    votes: int


class BackendInfo(_Frozen):
    name: str
    model: str
    version: str
    deterministic: bool
    temperature: float | None = None


class Segmentation(_Frozen):
    """The result of ``mpe segment``: turns, windows, continuations, the votes and the proposals."""

    schema_version: str = SCHEMA_VERSION
    source: str
    sample_rate: int = STREAM_RATE
    n_samples: int
    backend: BackendInfo
    n: int = Field(description="proposals asked for")
    usable: int = Field(description="proposals that could be used (the votes are counted among these)")
    min_support: int = Field(description="runs a cluster needs to be kept")
    iou_min: float
    turns: list[Turn]
    windows: list[Window]
    continuations: list[Continuation]
    dropped: list[Turn] = Field(description="clusters without enough support, with their votes")
    proposals: list[Proposal]
    segments: SegmentInput
