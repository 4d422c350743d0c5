"""The cascade's turn taking: a pure, clock-injected state machine over the room detector's events.

States (:class:`TurnState`, guarded transitions in :data:`TURN_TRANSITIONS`):

* ``listening``: nothing to say. When the room detector closes a human utterance (its offset, i.e.
  ``DetectorConfig.merge_pause_ms`` of silence after the speech: the **end-of-utterance** threshold,
  :data:`END_OF_UTTERANCE_MS` by default), the machine asks for it to be transcribed and decided on
  (:class:`Think`) and moves to ``thinking``.
* ``thinking``: waiting for the decision on the latest utterance. A newer utterance that ends
  meanwhile replaces it (the older reply is stale and dropped when it comes). A reply to stay
  silent, or one that comes while a human is talking, returns to ``listening``; a reply to speak
  starts ``speaking`` at once (:class:`StartSpeaking`).
* ``speaking``: the answer plays, one frame after another, until it ends (:class:`StopSpeaking`,
  ``done``). **Barge-in**: a human utterance heard while Aria talks stops her as soon as it has
  overlapped her speech for ``barge_in_ms`` — speech, its pauses not counted — (:class:`StopSpeaking`,
  ``barge-in``, at the end of the frame in which that became known); it is then transcribed and decided on like any other once
  it ends. Shorter speech (a backchannel: "mm-hm", "right") lets her go on; an utterance that began
  while she talked and is shorter than ``barge_in_ms`` in all is not transcribed (:class:`Ignored`),
  so a backchannel, or a scrap of her own voice that the echo guard left over, is never taken as a
  request. (One that began just before she finished and went on after is transcribed: it is a
  turn of its own.)

All times are integer stream samples (24 kHz). The machine never reads a clock: the bridge tells
it the time (the end of the frame just heard) with every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Mapping, Sequence

from server.core.states import advance
from server.core.timebase import STREAM_RATE, SpeechEvent

END_OF_UTTERANCE_MS = 400  # silence that ends a human utterance (the room detector's merge pause)
BARGE_IN_MS = 500  # human speech over Aria's that stops her


class TurnState(StrEnum):
    """Where the cascade is in its turn taking (module docstring)."""

    listening = "listening"
    thinking = "thinking"
    speaking = "speaking"


TURN_TRANSITIONS: Mapping[TurnState, frozenset[TurnState]] = {
    TurnState.listening: frozenset({TurnState.thinking}),
    TurnState.thinking: frozenset({TurnState.thinking, TurnState.speaking, TurnState.listening}),
    TurnState.speaking: frozenset({TurnState.listening}),
}


@dataclass(frozen=True)
class TurnConfig:
    """Turn-taking parameters, in milliseconds."""

    barge_in_ms: int = BARGE_IN_MS

    def __post_init__(self) -> None:
        if self.barge_in_ms <= 0:
            raise ValueError("barge_in_ms must be positive")

    @property
    def barge_in_samples(self) -> int:
        return self.barge_in_ms * STREAM_RATE // 1000


@dataclass(frozen=True)
class Utterance:
    """One human utterance the room detector closed: ``[start, end)``, known at ``seen_at``."""

    uid: int
    start: int
    end: int
    seen_at: int


@dataclass(frozen=True)
class Reply:
    """The decision on utterance ``uid``: speak ``n_samples`` of audio, or nothing (0)."""

    uid: int
    n_samples: int


@dataclass(frozen=True)
class Think:
    """Transcribe this utterance and decide on it (then call :meth:`TurnTaker.replied`)."""

    utterance: Utterance


@dataclass(frozen=True)
class StartSpeaking:
    """Play the reply to ``uid`` from stream time ``at`` on."""

    uid: int
    at: int
    n_samples: int


@dataclass(frozen=True)
class StopSpeaking:
    """Aria falls silent at ``at``: her answer ended, or a human barged in (speech from ``onset``)."""

    at: int
    reason: Literal["done", "barge-in"]
    onset: int | None = None


@dataclass(frozen=True)
class Ignored:
    """An utterance heard while Aria spoke that did not interrupt her: not transcribed."""

    utterance: Utterance


@dataclass(frozen=True)
class Dropped:
    """A reply not spoken: stale (a newer utterance ended meanwhile) or a human is talking."""

    uid: int
    why: Literal["stale", "human talking"]


Action = Think | StartSpeaking | StopSpeaking | Ignored | Dropped


@dataclass
class _Open:
    start: int
    over_speech: bool  # began (or was first heard) while Aria spoke
    barged: bool = False


class TurnTaker:
    """The state machine of the module docstring; one per episode (:meth:`reset`)."""

    def __init__(self, config: TurnConfig = TurnConfig()) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.state = TurnState.listening
        self._uid = 0
        self._pending: int | None = None  # the utterance whose decision is awaited
        self._open: _Open | None = None  # the human utterance in progress
        self._speech: tuple[int, int, int] | None = None  # (uid, start, n_samples) of the answer playing

    def _go(self, new: TurnState) -> None:
        self.state = advance(TURN_TRANSITIONS, self.state, new)

    @property
    def human_talking(self) -> bool:
        return self._open is not None

    def playing(self, frame_start: int) -> tuple[int, int] | None:
        """(uid, offset into its audio) of the answer sample that plays at ``frame_start``, or None."""
        if self.state is not TurnState.speaking or self._speech is None:
            return None
        uid, start, n = self._speech
        return (uid, frame_start - start) if 0 <= frame_start - start < n else None

    def hear(self, now: int, events: Sequence[SpeechEvent], speech_end: int | None) -> list[Action]:
        """The room detector's new ``events`` and, while a human utterance is open, how far its speech
        reaches (``speech_end``, :attr:`server.core.detector.SpeechDetector.speech_end`: pauses do not
        count), at stream time ``now`` (the end of the frame just heard)."""
        out: list[Action] = []
        for ev in events:
            if ev.kind == "onset":
                self._open = _Open(ev.at, over_speech=self.state is TurnState.speaking)
            elif self._open is not None:
                out += self._closed(Utterance(self._uid + 1, self._open.start, ev.at, ev.seen_at))
        out += self._barge_in(now, speech_end)
        if self.state is TurnState.speaking and self._speech is not None:
            _, start, n = self._speech
            if now >= start + n:
                self._go(TurnState.listening)
                self._speech = None
                out.append(StopSpeaking(start + n, "done"))
        return out

    def _closed(self, utt: Utterance) -> list[Action]:
        opened, self._open = self._open, None
        assert opened is not None
        self._uid = utt.uid
        if opened.over_speech and not opened.barged and utt.end - utt.start < self.config.barge_in_samples:
            return [Ignored(utt)]
        self._go(TurnState.thinking)
        self._pending = utt.uid
        return [Think(utt)]

    def _barge_in(self, now: int, speech_end: int | None) -> list[Action]:
        o = self._open
        if self.state is not TurnState.speaking or o is None or not o.over_speech or o.barged or speech_end is None:
            return []
        assert self._speech is not None
        overlap = speech_end - max(o.start, self._speech[1])
        if overlap < self.config.barge_in_samples:
            return []
        o.barged = True
        self._go(TurnState.listening)
        self._speech = None
        return [StopSpeaking(now, "barge-in", onset=o.start)]

    def replied(self, now: int, reply: Reply) -> list[Action]:
        """The decision on an utterance :class:`Think` asked for, at stream time ``now``."""
        if self.state is not TurnState.thinking or reply.uid != self._pending:
            return [Dropped(reply.uid, "stale")]
        self._pending = None
        if reply.n_samples <= 0:
            self._go(TurnState.listening)
            return []
        if self._open is not None:
            self._go(TurnState.listening)
            return [Dropped(reply.uid, "human talking")]
        self._go(TurnState.speaking)
        self._speech = (reply.uid, now, reply.n_samples)
        return [StartSpeaking(reply.uid, now, reply.n_samples)]
