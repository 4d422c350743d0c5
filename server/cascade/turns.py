"""The cascade's turn taking: a pure, clock-injected state machine over the room detector's events.

States (:class:`TurnState`, guarded transitions in :data:`TURN_TRANSITIONS`):

* ``listening``: nothing to say. When the room detector closes a human utterance (its offset, i.e.
  ``DetectorConfig.merge_pause_ms`` of silence after the speech: the **end-of-utterance** threshold,
  :data:`END_OF_UTTERANCE_MS` by default; the defaults and their published sources: :mod:`.defaults`), the machine asks for it to be transcribed and decided on
  (:class:`Think`) and moves to ``thinking``.
* ``thinking``: waiting for the decision on the latest utterance. A newer utterance that ends
  meanwhile replaces it (the older reply is stale and dropped when it comes). A reply to stay
  silent, or one that comes while a human is talking, returns to ``listening``; a reply to speak
  starts ``speaking`` at once (:class:`StartSpeaking`) — or, with a **hold** (``hold_ms`` > 0), once
  ``hold_ms`` have passed since the utterance ended: a human who resumes before then (a pause
  mid-utterance, then its continuation) drops the held reply, and the continuation is decided on
  when it ends.
* ``speaking``: the answer plays, one frame after another, until it ends (:class:`StopSpeaking`,
  ``done``). A streamed answer (``Reply.final=False``) starts with its first sentence; later ones are
  appended as they come (:meth:`TurnTaker.more`), with silence while the next is not ready, and it
  ends after the last. **Barge-in**: a human utterance heard while Aria talks stops her as soon as it has
  overlapped her speech for ``barge_in_ms`` — speech, its pauses not counted — (:class:`StopSpeaking`,
  ``barge-in``, at the end of the frame in which that became known); it is then transcribed and decided on like any other once
  it ends. Shorter speech (a backchannel: "mm-hm", "right") lets her go on; an utterance that began
  while she talked and is shorter than ``barge_in_ms`` in all is not transcribed (:class:`Ignored`),
  so a backchannel, or a scrap of her own voice that the echo guard left over, is never taken as a
  request. (One that began just before she finished and went on after is transcribed: it is a
  turn of its own.)

**Background voices**: the bridge may tell the machine that the open utterance is not a person
speaking to Aria (``foreground=False``: the optional broadcast guard, off by default): such an
utterance never barges in and is never transcribed (:class:`Ignored`), whenever it happens.

All times are integer stream samples (24 kHz). The machine never reads a clock: the bridge tells
it the time (the end of the frame just heard) with every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Mapping, Sequence

from server.cascade.defaults import BARGE_IN_MS, HOLD_MS
from server.core.states import advance
from server.core.timebase import STREAM_RATE, SpeechEvent


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
    hold_ms: int = HOLD_MS

    def __post_init__(self) -> None:
        if self.barge_in_ms <= 0:
            raise ValueError("barge_in_ms must be positive")
        if self.hold_ms < 0:
            raise ValueError("hold_ms must be non-negative")

    @property
    def barge_in_samples(self) -> int:
        return self.barge_in_ms * STREAM_RATE // 1000

    @property
    def hold_samples(self) -> int:
        return self.hold_ms * STREAM_RATE // 1000


@dataclass(frozen=True)
class Utterance:
    """One human utterance the room detector closed: ``[start, end)``, known at ``seen_at``."""

    uid: int
    start: int
    end: int
    seen_at: int


@dataclass(frozen=True)
class Reply:
    """The decision on utterance ``uid``: speak ``n_samples`` of audio, or nothing (0); ``final=False``:
    more audio follows (:meth:`TurnTaker.more`, a streamed answer's later sentences)."""

    uid: int
    n_samples: int
    final: bool = True


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
    """An utterance not transcribed: heard while Aria spoke without interrupting her, or a background voice."""

    utterance: Utterance
    why: Literal["short", "background"] = "short"


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
    background: bool = False  # the bridge said it is no person speaking to Aria


class TurnTaker:
    """The state machine of the module docstring; one per episode (:meth:`reset`)."""

    def __init__(self, config: TurnConfig = TurnConfig()) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.state = TurnState.listening
        self._uid = 0
        self._pending: tuple[int, int] | None = None  # (uid, end) of the utterance whose decision is awaited
        self._held: tuple[int, int, int] | None = None  # (uid, n_samples, start at) of a reply on hold
        self._open: _Open | None = None  # the human utterance in progress
        self._speech: tuple[int, int, int] | None = None  # (uid, start, n_samples) of the answer playing
        self._streaming: int | None = None  # uid of the reply whose later audio is still to come

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

    @property
    def open_since(self) -> int | None:
        """Where the human utterance in progress began (None: none is)."""
        return None if self._open is None else self._open.start

    def hear(self, now: int, events: Sequence[SpeechEvent], speech_end: int | None, *,
             foreground: bool = True) -> list[Action]:
        """The room detector's new ``events`` and, while a human utterance is open, how far its speech
        reaches (``speech_end``, :attr:`server.core.detector.SpeechDetector.speech_end`: pauses do not
        count), at stream time ``now`` (the end of the frame just heard). ``foreground=False``: the
        utterance open before these events is a background voice (module docstring)."""
        out: list[Action] = []
        if not foreground and self._open is not None:
            self._open.background = True
        for ev in events:
            if ev.kind == "onset":
                self._open = _Open(ev.at, over_speech=self.state is TurnState.speaking)
                if self._held is not None:  # the human goes on: the held reply is not said
                    out.append(Dropped(self._held[0], "human talking"))
                    self._held = None
                    self._go(TurnState.listening)
            elif self._open is not None:
                out += self._closed(Utterance(self._uid + 1, self._open.start, ev.at, ev.seen_at))
        out += self._barge_in(now, speech_end)
        if self._held is not None and now >= self._held[2]:
            uid, n, _ = self._held
            self._held = None
            out += self._speak(now, uid, n)
        if self.state is TurnState.speaking and self._speech is not None:
            uid, start, n = self._speech
            if now >= start + n and self._streaming != uid:  # a streamed answer waits for its next sentence
                self._go(TurnState.listening)
                self._speech = None
                out.append(StopSpeaking(start + n, "done"))
        return out

    def _closed(self, utt: Utterance) -> list[Action]:
        opened, self._open = self._open, None
        assert opened is not None
        self._uid = utt.uid
        if opened.background:
            return [Ignored(utt, "background")]
        if opened.over_speech and not opened.barged and utt.end - utt.start < self.config.barge_in_samples:
            return [Ignored(utt)]
        self._go(TurnState.thinking)
        self._pending = (utt.uid, utt.end)
        return [Think(utt)]

    def _barge_in(self, now: int, speech_end: int | None) -> list[Action]:
        o = self._open
        if (self.state is not TurnState.speaking or o is None or not o.over_speech or o.barged or o.background
                or speech_end is None):
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
        if self.state is not TurnState.thinking or self._pending is None or reply.uid != self._pending[0]:
            return [Dropped(reply.uid, "stale")]
        _, end = self._pending
        self._pending = None
        self._streaming = None if reply.final else reply.uid
        if reply.n_samples <= 0:
            self._go(TurnState.listening)
            return []
        if self._open is not None:
            self._go(TurnState.listening)
            return [Dropped(reply.uid, "human talking")]
        if now < end + self.config.hold_samples:
            self._held = (reply.uid, reply.n_samples, end + self.config.hold_samples)
            return []
        return self._speak(now, reply.uid, reply.n_samples)

    def more(self, now: int, uid: int, n_samples: int, final: bool) -> list[Action]:
        """``n_samples`` more of reply ``uid``'s audio (a streamed answer's next sentence); ``final``: the
        last. Audio for a reply that is no longer playing or held is not spoken."""
        if self._streaming == uid and final:
            self._streaming = None
        if self._held is not None and self._held[0] == uid:
            self._held = (uid, self._held[1] + n_samples, self._held[2])
        elif self._speech is not None and self._speech[0] == uid:
            self._speech = (uid, self._speech[1], self._speech[2] + n_samples)
        return []

    def _speak(self, now: int, uid: int, n_samples: int) -> list[Action]:
        self._go(TurnState.speaking)
        self._speech = (uid, now, n_samples)
        return [StartSpeaking(uid, now, n_samples)]
