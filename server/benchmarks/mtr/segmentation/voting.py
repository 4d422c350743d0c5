"""Voting over repeated proposals (pure): pool, cluster by IoU, median boundaries, keep by support.

The published method (MTR-DuplexBench, arXiv 2511.10262, its conversation-quality evaluation): the
transcript is segmented six times, candidate turns that overlap by at least 30 % are merged, and a merged turn takes the
median start and end. The paper says nothing more; where it is silent we choose, and say why:

* **Pooling and order.** All candidates of all runs are pooled and visited in time order (start,
  end, run, position), so the result does not depend on the order the runs came back in.
* **Joining a cluster.** A candidate joins the cluster whose current median interval it overlaps
  most, if that IoU is at least ``iou_min`` (0.3); an equal IoU goes to the earlier cluster. A
  cluster holds at most one candidate per run: a run's second candidate that fits a cluster its
  run is already in tries the next-best cluster, else starts its own. So one run is one vote.
  (The companion code of the same authors joins the *first* cluster over 0.3 and lets a run vote
  twice.)
* **Median.** Of the members' starts and of their ends, each on its own; with an even number the
  mean of the two middle values, rounded down to a whole sample.
* **Keeping.** A cluster is kept when a **strict majority** of the usable runs support it: more
  than n/2 (4 of 6; a 3-3 tie is dropped). A turn then appears in most segmentations, so one
  run's hallucinated or split turn cannot survive, and the rule needs no tuning with n. The
  companion code keeps clusters of at least 2 members (2 of 6); ``min_support=2`` gives that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from server.benchmarks.mtr.segmentation.schema import Candidate, Proposal, Span, Turn, Votes

IOU_MIN = 0.3  # the paper: candidates overlapping by >= 30 % are merged


def iou(a: Span, b: Span) -> Fraction:
    """Intersection over union of two intervals, exactly. Two empty intervals at one point: 1."""
    inter = max(0, min(a.end, b.end) - max(a.start, b.start))
    union = max(a.end, b.end) - min(a.start, b.start)
    if union == 0:
        return Fraction(1) if a == b else Fraction(0)
    return Fraction(inter, union)


def median_sample(values: Sequence[int]) -> int:
    """The median of whole samples; with an even count the mean of the middle two, rounded down."""
    if not values:
        raise ValueError("median of nothing")
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) // 2


@dataclass
class Cluster:
    members: list[Candidate] = field(default_factory=list)

    @property
    def span(self) -> Span:
        return Span(start=median_sample([m.turn.start for m in self.members]),
                    end=median_sample([m.turn.end for m in self.members]))

    @property
    def runs(self) -> set[int]:
        return {m.run for m in self.members}

    def votes(self) -> Votes:
        ms = sorted(self.members, key=lambda m: m.run)
        return Votes(runs=[m.run for m in ms], starts=[m.turn.start for m in ms], ends=[m.turn.end for m in ms],
                     support=len(self.runs), continuation_votes=sum(m.turn.continuation for m in ms))


def pool(proposals: Sequence[Proposal]) -> list[Candidate]:
    """Every proposed turn of the usable runs, in the order they are clustered (time, run, position)."""
    cands = [Candidate(run=p.run, index=i, turn=t) for p in proposals if p.usable for i, t in enumerate(p.turns)]
    return sorted(cands, key=lambda c: (c.turn.start, c.turn.end, c.run, c.index))


def cluster(candidates: Sequence[Candidate], iou_min: float = IOU_MIN) -> list[Cluster]:
    """Cluster candidates in the given order (see the module docstring for the rule)."""
    threshold = Fraction(str(iou_min))
    clusters: list[Cluster] = []
    for c in candidates:
        scored = [(iou(cl.span, c.turn.span), -i) for i, cl in enumerate(clusters) if c.run not in cl.runs]
        fits = [(v, neg_i) for v, neg_i in scored if v >= threshold]
        if fits:
            _, neg_i = max(fits)  # the largest IoU; on a tie the earliest cluster (largest -i)
            clusters[-neg_i].members.append(c)
        else:
            clusters.append(Cluster([c]))
    return clusters


def majority(usable_runs: int) -> int:
    """The support a cluster needs by default: a strict majority of the usable runs."""
    return usable_runs // 2 + 1


@dataclass(frozen=True)
class VoteResult:
    turns: list[Turn]  # kept clusters, in time order
    dropped: list[Turn]  # clusters without enough support
    min_support: int
    usable: int


def vote(proposals: Sequence[Proposal], *, iou_min: float = IOU_MIN, min_support: int | None = None) -> VoteResult:
    """The turns the proposals agree on (module docstring): kept clusters by start time, with votes."""
    usable = sum(p.usable for p in proposals)
    need = majority(usable) if min_support is None else min_support
    if need < 1:
        raise ValueError("min_support must be at least 1")
    clusters = sorted(cluster(pool(proposals), iou_min), key=lambda c: (c.span.start, c.span.end))
    kept = [c for c in clusters if len(c.runs) >= need]
    dropped = [c for c in clusters if len(c.runs) < need]

    def turns(cs: list[Cluster]) -> list[Turn]:
        return [Turn(index=i, start=c.span.start, end=c.span.end, votes=c.votes()) for i, c in enumerate(cs)]

    return VoteResult(turns(kept), turns(dropped), need, usable)
