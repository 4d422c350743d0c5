"""One segmentation: n proposals from a backend, voted on, with windows and continuations."""

from __future__ import annotations

from collections.abc import Callable

from server.benchmarks.mtr.segmentation.proposer import Proposer
from server.benchmarks.mtr.segmentation.schema import Segmentation, SegmentInput
from server.benchmarks.mtr.segmentation.voting import IOU_MIN, vote
from server.benchmarks.mtr.segmentation.windows import continuations, response_windows
from server.scoring.errors import ScoringError

DEFAULT_N = 6  # the paper: the transcript is segmented six times


def segment(inp: SegmentInput, proposer: Proposer, *, n: int = DEFAULT_N, min_support: int | None = None,
            iou_min: float = IOU_MIN, progress: Callable[[int, int], None] | None = None) -> Segmentation:
    """Ask ``proposer`` ``n`` times, vote (:func:`.voting.vote`), and derive the windows and the
    continuations (flagged by a strict majority of a turn's supporting runs, :mod:`.windows`)."""
    if n < 1:
        raise ValueError("n must be at least 1")
    proposals = []
    for run in range(n):
        proposals.append(proposer.propose(inp, run))
        if progress:
            progress(run + 1, n)
    if not any(p.usable for p in proposals):
        errors = sorted({p.error or "unusable" for p in proposals})
        raise ScoringError(f"{proposer.name}: none of the {n} proposals could be used ({'; '.join(errors)})")
    result = vote(proposals, iou_min=iou_min, min_support=min_support)
    return Segmentation(source=inp.source, n_samples=inp.n_samples, backend=proposer.info(), n=n,
                        usable=result.usable, min_support=result.min_support, iou_min=iou_min, turns=result.turns,
                        windows=response_windows(result.turns, inp.n_samples),
                        continuations=continuations(result.turns, inp.model),
                        dropped=result.dropped, proposals=proposals, segments=inp)
