"""Sentence-level wording measures shared by every benchmark's ``mpe dataset stats``.

A suite whose turns are all different strings can still be built from a handful of stock
sentences. These measures look one level down:

* :func:`split_sentences` cuts a spoken line into sentences at ``.``, ``?`` or ``!`` followed
  by a space (an ellipsis or a decimal point does not end a sentence);
* :func:`sentence_spread` counts, over the scenes of a suite (each scene a list of lines),
  how many sentences there are, how many different ones, and in how many scenes the most
  widespread sentences occur. A sentence is compared after :func:`normalise` (case, the
  spacing and the closing punctuation do not make two sentences different).

Lines that every scene says on purpose (a spoken preamble) are left out by the caller.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=\S)")
_PUNCT = re.compile(r"[^\w' ]+")


def split_sentences(text: str) -> list[str]:
    """The sentences of one spoken line, in order (empty pieces dropped)."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def normalise(sentence: str) -> str:
    """The form two sentences are compared in: lower case, punctuation and spacing dropped."""
    return " ".join(_PUNCT.sub(" ", sentence.lower()).split())


@dataclass(frozen=True)
class SentenceCount:
    sentence: str  # as first seen
    scenes: int  # scenes it occurs in
    share: float  # scenes / all scenes


@dataclass(frozen=True)
class SentenceSpread:
    scenes: int
    sentences: int
    distinct: int
    top: tuple[SentenceCount, ...]  # by scene count, most widespread first

    @property
    def distinct_share(self) -> float:
        return self.distinct / self.sentences if self.sentences else 0.0

    @property
    def max_scene_share(self) -> float:
        return self.top[0].share if self.top else 0.0


def sentence_spread(scenes: Sequence[Iterable[str]], top: int = 10) -> SentenceSpread:
    """Sentence counts over ``scenes`` (each the lines of one scene); ``top`` most widespread."""
    if top < 0:
        raise ValueError("top must be zero or more")
    total = 0
    seen: Counter[str] = Counter()
    first: dict[str, str] = {}
    for lines in scenes:
        in_scene: set[str] = set()
        for line in lines:
            for s in split_sentences(line):
                key = normalise(s)
                if not key:
                    continue
                total += 1
                first.setdefault(key, s)
                in_scene.add(key)
        seen.update(in_scene)
    n = len(scenes)
    distinct = len(first)
    ranked = sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return SentenceSpread(
        scenes=n, sentences=total, distinct=distinct,
        top=tuple(SentenceCount(first[k], c, round(c / n, 4) if n else 0.0) for k, c in ranked),
    )


def top_share(items: Iterable[str], k: int) -> tuple[float, list[tuple[str, int]]]:
    """The share of ``items`` taken by the ``k`` most frequent (compared after
    :func:`normalise`), and those ``k`` with their counts."""
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    n = 0
    for it in items:
        key = normalise(it)
        first.setdefault(key, it)
        counts[key] += 1
        n += 1
    most = counts.most_common(k)
    return (round(sum(c for _, c in most) / n, 4) if n else 0.0), [(first[key], c) for key, c in most]
