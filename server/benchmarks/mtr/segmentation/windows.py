"""Response windows and continuations of a list of user turns (pure).

* **Window** of turn k (MTR-DuplexBench, arXiv 2511.10262; the published quality script takes turn K,
  1-based, as ``[filtered_turn[K-1].start, filtered_turn[K].end]``): from the start of user turn k to the
  end of user turn k + 1. The last turn's window ends with the recording (the script falls back to
  120 s, the length of its clips).
* **Continuation** of turn k: the model's reply to turn k runs on into turn k + 1 — a model speech
  segment of at least :data:`MIN_REPLY` that starts in ``[start of turn k, start of turn k + 1)`` is
  still running when turn k + 1 starts. Its end is the continuation's ``response_end``. The times
  come from the model's speech segments, as the companion code recomputes them; the flag is kept
  when a strict majority of the runs behind the turn set it.
"""

from __future__ import annotations

from collections.abc import Sequence

from server.benchmarks.mtr.rules import OWN_BACKCHANNEL_MAX
from server.benchmarks.mtr.segmentation.schema import Continuation, Span, Turn, Window
from server.benchmarks.mtr.segmentation.voting import majority

#: shorter model speech is a backchannel, not a reply: the model's own backchannel of DESIGN §12.4
MIN_REPLY = OWN_BACKCHANNEL_MAX


def response_windows(turns: Sequence[Span | Turn], n_samples: int) -> list[Window]:
    """One window per turn (turns in time order)."""
    out = []
    for k, t in enumerate(turns):
        end = turns[k + 1].end if k + 1 < len(turns) else max(n_samples, t.end)
        out.append(Window(turn=k, start=t.start, end=end))
    return out


def continuation_end(turn: Span | Turn, next_turn: Span | Turn, model: Sequence[Span]) -> int | None:
    """The end of the model's reply to ``turn`` when it runs on past the start of ``next_turn``, else None."""
    ends = [m.end for m in model if turn.start <= m.start < next_turn.start < m.end and m.length >= MIN_REPLY]
    return max(ends) if ends else None


def continuations(turns: Sequence[Turn], model: Sequence[Span]) -> list[Continuation]:
    """The continuations flagged by a strict majority of a turn's supporting runs, timed from the
    model's segments (``response_end`` null when the segments do not show the reply running on)."""
    out = []
    for k, t in enumerate(turns[:-1]):
        if t.votes.continuation_votes >= majority(t.votes.support):
            nxt = turns[k + 1]
            out.append(Continuation(turn=k, next_turn_start=nxt.start,
                                    response_end=continuation_end(t, nxt, model), votes=t.votes.continuation_votes))
    return out
