"""The offline backend: user turns from the two channels' speech segments alone, by fixed rules.

No transcript, no model, no network; deterministic, so its n runs are identical and the voting
only passes its proposal through (the voting matters for the LLM backends). The rules, applied
to the user channel's speech segments in time order (durations in stream samples):

1. **Backchannel.** A user segment shorter than :data:`BACKCHANNEL_MAX` (1.0 s) that lies at least
   half inside the model's speech is a backchannel ("mm-hmm" while the model talks): no turn.
2. **Overheard speech.** A user segment that starts while the model is replying — inside a model
   segment that began after the last turn ended — and that the model talks through (that segment
   goes on for at least :data:`YIELD_WITHIN`, 1.0 s, after the user segment's start) is speech the
   model rightly ignores: a background voice, a TV. No turn. (A model that did not reply to the
   last turn, or that is interrupted and stops, makes it a turn: a barge-in.)
3. **Pause.** A user segment that follows the current turn by less than :data:`PAUSE_MAX` (4.0 s,
   above the suites' 1.5–3.0 s pauses) with no model reply (a model segment of at least 1.0 s)
   starting in between continues that turn: the user paused mid-utterance.
4. Anything else starts a new turn. The detector has already joined speech across pauses under
   0.8 s (DESIGN §5).
5. **Continuation**: flagged where the model's speech that starts in turn k is still running when
   turn k + 1 starts (:func:`.windows.continuation_end`).

What it cannot do: it hears no words, so it cannot tell a background voice from a barge-in when
the model talks through both (rule 2 counts a talked-through voice as overheard only while the
model is replying; a model that talks all the time makes every voice a turn), it takes a long
backchannel ("oh, I see, right") for a turn, a pause longer than 4 s (or one the model fills with
a reply) for a turn boundary, and two turns of the user without a model reply between them, less
than 4 s apart, for one turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from server.benchmarks.mtr.segmentation.proposer import Proposer
from server.benchmarks.mtr.segmentation.schema import Proposal, ProposedTurn, SegmentInput, Span
from server.benchmarks.mtr.segmentation.windows import MIN_REPLY, continuation_end
from server.core.timebase import STREAM_RATE

BACKCHANNEL_MAX = STREAM_RATE  # 1.0 s: DESIGN §12.4's backchannel tolerance
YIELD_WITHIN = STREAM_RATE  # 1.0 s: a model that yields stops within 1.0 s (DESIGN §12.4, interruption)
PAUSE_MAX = 4 * STREAM_RATE  # 4.0 s
OFFLINE_VERSION = "offline-rules-v1"


def _overlap(a: Span, segs: Sequence[Span]) -> int:
    return sum(max(0, min(a.end, m.end) - max(a.start, m.start)) for m in segs)


def _covering(t: int, segs: Sequence[Span]) -> Span | None:
    return next((m for m in segs if m.start <= t < m.end), None)


def offline_turns(user: Sequence[Span], model: Sequence[Span]) -> list[Span]:
    """The user turns by the rules of the module docstring."""
    turns: list[list[int]] = []
    for u in user:
        if u.length < BACKCHANNEL_MAX and 2 * _overlap(u, model) >= u.length:
            continue  # rule 1: a backchannel
        m = _covering(u.start, model)
        replying = m is not None and bool(turns) and m.start >= turns[-1][1]
        if replying and m.end >= u.start + YIELD_WITHIN:
            continue  # rule 2: overheard speech the model talks through
        if turns and u.start - turns[-1][1] < PAUSE_MAX and not any(
                turns[-1][1] <= r.start < u.start and r.length >= MIN_REPLY for r in model):
            turns[-1][1] = max(turns[-1][1], u.end)  # rule 3: a pause inside the turn
            continue
        turns.append([u.start, u.end])
    return [Span(start=s, end=e) for s, e in turns]


class OfflineProposer(Proposer):
    """The rules of the module docstring (``--backend offline``)."""

    name = "offline"
    model = "rules"
    version = OFFLINE_VERSION
    deterministic = True

    def propose(self, inp: SegmentInput, run: int) -> Proposal:
        turns = offline_turns(inp.user, inp.model)
        flags = [k + 1 < len(turns) and continuation_end(t, turns[k + 1], inp.model) is not None
                 for k, t in enumerate(turns)]
        return Proposal(run=run, turns=[ProposedTurn(start=t.start, end=t.end, continuation=f)
                                        for t, f in zip(turns, flags)])
