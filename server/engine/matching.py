"""What work matches a bridge, and why none does (docs/protocol.md §4.5 ``status``).

A bridge is given episodes of the runs :func:`server.engine.leasing.bridge_runs` selects that
are active and use one of its clocks (§10). When none is queued, the ``status`` message says the
nearest reason — the runs exist for other clocks, they have all ended, or there is no run for
this model name, or its queued episodes need assistant-context frames that it did not accept —
looking only at the token's team (an admin token: every team), so that no other team's runs are
revealed. :func:`context_note` tells whoever creates a run that needs context frames when no
connected bridge accepts them.
"""

from __future__ import annotations

import difflib

from sqlalchemy import func, not_, or_, select

from clients.messages import Status, WorkReason
from server.core.status import ACTIVE_RUN, EpisodeStatus
from server.db import BridgeRow, Database, Episode, Run
from server.engine.leasing import bridge_runs, context_episodes
from server.engine.registry import get_benchmark

#: how a note or hint names the hello field a bridge sets to be given context episodes (§5.1)
ACCEPTS_CONTEXT = '"accepts_context": true in hello'


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def bridge_work(db: Database, *, team: str, admin: bool, model: str, clocks: list[str],
                accepts_context: bool = False, check: bool = False) -> Status:
    """The ``status`` message for a bridge of ``model`` with ``clocks`` and a token of ``team``
    (``accepts_context``: its ``hello.accepts_context``)."""
    mine = bridge_runs(team=team, admin=admin, model=model, check=check)
    scope = "in any team" if admin else f"in team '{team}'"
    with db.session() as s:
        runs = s.execute(select(Run.status, Run.clock, func.count()).where(*mine)
                         .group_by(Run.status, Run.clock)).all()
        matching = sum(n for status, clock, n in runs if status in ACTIVE_RUN and clock in clocks)
        active = [*mine, Run.status.in_(ACTIVE_RUN), Run.clock.in_(clocks)]
        waiting = (select(Episode.condition, func.count()).select_from(Episode).join(Run, Run.id == Episode.run_id)
                   .where(*active, Episode.status == EpisodeStatus.queued).group_by(Episode.condition))
        held: list = []  # (condition, n) of queued episodes this bridge may not take: they need context
        if accepts_context:
            queued = sum(n for _, n in s.execute(waiting))
        else:
            needs = context_episodes()
            queued = sum(n for _, n in s.execute(waiting.where(not_(needs))))
            held = sorted(s.execute(waiting.where(needs)).all())
        names = [] if runs else s.scalars(select(Run.model_name).distinct().where(
            Run.status.in_(ACTIVE_RUN), *([] if admin else [Run.team == team]))).all()
    other_clocks = sorted({clock for status, clock, _ in runs if status in ACTIVE_RUN and clock not in clocks})
    if queued:
        reason = WorkReason.queued
        hint = f"{_plural(queued, 'episode')} queued in {_plural(matching, 'run')} for model '{model}'"
    elif held:
        reason = WorkReason.needs_context
        hint = (f"the {_plural(sum(n for _, n in held), 'queued episode')} for model '{model}' (condition "
                f"{', '.join(c for c, _ in held)}) start with assistant-context frames (teacher forcing), given only "
                f"to bridges that send {ACCEPTS_CONTEXT}; this bridge did not, and the runs' other episodes "
                "are done or running")
    elif matching:
        reason = WorkReason.busy
        hint = (f"no queued episode: the open episodes of the {_plural(matching, 'run')} for model '{model}' "
                "are running on other bridges (a failed attempt comes back to the queue)")
    elif other_clocks:
        reason = WorkReason.other_clocks
        hint = (f"no run for model '{model}' {scope} uses this bridge's clocks ({', '.join(clocks)}): "
                f"its active runs use {', '.join(other_clocks)}; announce that clock in hello.clocks "
                f"or create a run with --clock {clocks[0]}")
    elif runs:
        reason = WorkReason.ended
        ended = ", ".join(f"{n} {status}" for status, n in _count_by_status(runs))
        hint = f"no more work: every run for model '{model}' {scope} has ended ({ended})"
    else:
        reason = WorkReason.no_run
        team_opt = "" if admin else f"--team {team} "
        hint = f"no run for model '{model}' {scope}; create one with: mpe run create {team_opt}--model {model} ..."
        close = _close_names(model, names)
        if close:
            hint += f" (runs exist for {', '.join(repr(n) for n in close)}: a different model name)"
    n_waiting = queued + sum(n for _, n in held)  # §4.5: every episode waiting, those it may not take too
    return Status(matching_runs=matching, queued_episodes=n_waiting, reason=reason.value, hint=hint)


def _count_by_status(runs) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for status, _, n in runs:
        counts[str(status)] = counts.get(str(status), 0) + n
    return sorted(counts.items())


def _close_names(model: str, names: list[str]) -> list[str]:
    """Model names of active runs that look like ``model`` (case, a suffix, a typo)."""
    by_lower = {n.lower(): n for n in names}
    hits = difflib.get_close_matches(model.lower(), list(by_lower), n=3, cutoff=0.6)
    if len(model) >= 3:
        hits += [k for k in by_lower if k not in hits and len(k) >= 3 and (model.lower() in k or k in model.lower())]
    return [by_lower[k] for k in hits[:3]]


def context_note(db: Database, run_id: str) -> str | None:
    """For whoever creates a run: a line saying that the run's episodes of some conditions start with
    assistant-context frames (§5.1) and that no connected bridge of its model accepts them; None when
    the run has no such episodes or such a bridge is connected."""
    with db.session() as s:
        run = s.get(Run, run_id)
        conds = sorted(set(run.conditions) & get_benchmark(run.benchmark).context_conditions)
        if not conds:
            return None
        n = s.scalar(select(func.count()).select_from(Episode).where(Episode.run_id == run_id,
                                                                       Episode.condition.in_(conds)))
        ready = s.scalars(select(BridgeRow.clocks).where(
            BridgeRow.model_name == run.model_name, BridgeRow.disconnected_at.is_(None), BridgeRow.accepts_context,
            or_(BridgeRow.team == run.team, BridgeRow.admin))).all()
    if not n or any(run.clock in clocks for clocks in ready):
        return None
    return (f"note: {_plural(n, 'episode')} of this run (condition {', '.join(conds)}) start with assistant-context "
            f"frames (teacher forcing) and are given only to bridges that send {ACCEPTS_CONTEXT}; no connected "
            f"bridge of model '{run.model_name}' does yet. Bridges without it serve the run's other episodes")
