"""How natural an MTR suite's dialogues read: the wording block of ``mpe dataset stats``.

Measured on the suite's text alone (any generator, any import):

- **sentences** (:func:`server.datasets.realism.sentence_spread`): every spoken line of a dialogue
  (the user's turn and continuation, the ground-truth reply, the barge-in and its response, the
  background voice); listener backchannels are left out, being a handful of sounds on purpose;
- **re-ask share**: the rounds whose ground-truth reply says again what an earlier round's reply
  (or barge-in response) already said, i.e. the user asked the same thing again. A reply repeats
  an earlier one when at least :data:`REPEAT_MIN_SENTENCES` of its sentences of at least
  :data:`CONTENT_MIN_WORDS` words were said before in the dialogue (one shared sentence can be a
  stock phrase; two are the same answer). Also the dialogues where some round re-asks the round
  right before it;
- **barge-in spread**: how barge-ins open (their first :data:`OPENING_WORDS` words, case and
  punctuation dropped: "Actually, wait — can you" -> "actually wait"), the most frequent openings
  and their share of all barge-ins.

The published benchmark gives none of these figures for its dialogues.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from server.benchmarks.mtr.suite import Dialogue, Round
from server.datasets.realism import SentenceSpread, normalise, sentence_spread, split_sentences, top_share

CONTENT_MIN_WORDS = 4
REPEAT_MIN_SENTENCES = 2
OPENING_WORDS = 2


def spoken_lines(d: Dialogue) -> list[str]:
    """Every line spoken in ``d`` except the listener backchannels; a user's turn broken off by a
    pause is one line with its continuation (the pause falls inside a sentence, which is counted whole)."""
    lines: list[str] = []
    for r in d.rounds:
        user = r.user.text if r.pause is None else f"{r.user.text} {r.pause.continuation.text}"
        lines += [user, r.assistant.text]
        if r.barge_in is not None:
            lines += [r.barge_in.text, r.barge_in.response.text]
        if r.background is not None:
            lines.append(r.background.text)
    return lines


def _content(text: str) -> set[str]:
    keys = (normalise(s) for s in split_sentences(text))
    return {k for k in keys if len(k.split()) >= CONTENT_MIN_WORDS}


def _said(r: Round) -> set[str]:
    return _content(r.assistant.text) | (_content(r.barge_in.response.text) if r.barge_in is not None else set())


def reasked_rounds(d: Dialogue) -> list[tuple[int, bool]]:
    """(round, whether it re-asks the round right before) of every round of ``d`` whose reply
    repeats an earlier reply (see the module docstring)."""
    out: list[tuple[int, bool]] = []
    before: set[str] = set()
    previous: set[str] = set()
    for r in d.rounds:
        reply = _content(r.assistant.text)
        if len(reply & before) >= REPEAT_MIN_SENTENCES:
            out.append((r.round, len(reply & previous) >= REPEAT_MIN_SENTENCES))
        previous = _said(r)
        before |= previous
    return out


def opening(text: str) -> str:
    """How a line opens: its first :data:`OPENING_WORDS` words, lower case, no punctuation."""
    return " ".join(re.findall(r"[\w']+", text.lower())[:OPENING_WORDS])


@dataclass(frozen=True)
class Wording:
    sentences: SentenceSpread
    rounds: int
    reasked: int  # rounds re-asking an earlier round
    dialogues: int
    reask_previous: int  # dialogues with a round re-asking the round right before it
    barge_ins: int
    barge_in_openings: int  # distinct openings
    barge_in_top: list[tuple[str, int]]  # most frequent openings with their counts

    @property
    def reask_share(self) -> float:
        return self.reasked / self.rounds if self.rounds else 0.0

    @property
    def barge_in_max_share(self) -> float:
        return self.barge_in_top[0][1] / self.barge_ins if self.barge_in_top else 0.0

    def as_json(self) -> dict[str, object]:
        s = self.sentences
        return {
            "sentences": s.sentences, "distinct_sentences": s.distinct,
            "distinct_share": round(s.distinct_share, 4),
            "top_sentences": [{"sentence": c.sentence, "dialogues": c.scenes, "share": c.share} for c in s.top],
            "rounds": self.rounds, "reasked_rounds": self.reasked, "reask_share": round(self.reask_share, 4),
            "dialogues": self.dialogues, "dialogues_reasking_previous": self.reask_previous,
            "barge_ins": self.barge_ins, "barge_in_openings": self.barge_in_openings,
            "barge_in_max_share": round(self.barge_in_max_share, 4),
            "barge_in_top": [{"opening": o, "count": n} for o, n in self.barge_in_top],
        }


def wording(dialogues: Iterable[Dialogue], top: int = 10) -> Wording:
    ds = list(dialogues)
    reasks = [reasked_rounds(d) for d in ds]
    openings = [opening(r.barge_in.text) for d in ds for r in d.rounds if r.barge_in is not None]
    _, top_openings = top_share(openings, 5)
    return Wording(
        sentences=sentence_spread([spoken_lines(d) for d in ds], top=top),
        rounds=sum(len(d.rounds) for d in ds), reasked=sum(len(x) for x in reasks),
        dialogues=len(ds), reask_previous=sum(any(prev for _, prev in x) for x in reasks),
        barge_ins=len(openings), barge_in_openings=len(set(openings)), barge_in_top=top_openings)
