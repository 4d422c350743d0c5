"""What work matches a bridge, and why none does (docs/protocol.md §4.5 ``status``).

A bridge is given episodes of the runs :func:`server.engine.leasing.bridge_runs` selects that
are active and use one of its clocks (§10). When none is queued, the ``status`` message says the
nearest reason — the runs exist for other clocks, they have all ended, or there is no run for
this model name — looking only at the token's team (an admin token: every team), so that no
other team's runs are revealed.
"""

from __future__ import annotations

import difflib

from sqlalchemy import func, select

from clients.messages import Status, WorkReason
from server.core.status import ACTIVE_RUN, EpisodeStatus
from server.db import Database, Episode, Run
from server.engine.leasing import bridge_runs


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def bridge_work(db: Database, *, team: str, admin: bool, model: str, clocks: list[str]) -> Status:
    """The ``status`` message for a bridge of ``model`` with ``clocks`` and a token of ``team``."""
    mine = bridge_runs(team=team, admin=admin, model=model)
    scope = "in any team" if admin else f"in team '{team}'"
    with db.session() as s:
        runs = s.execute(select(Run.status, Run.clock, func.count()).where(*mine)
                         .group_by(Run.status, Run.clock)).all()
        matching = sum(n for status, clock, n in runs if status in ACTIVE_RUN and clock in clocks)
        queued = s.scalar(select(func.count()).select_from(Episode).join(Run, Run.id == Episode.run_id).where(
            *mine, Run.status.in_(ACTIVE_RUN), Run.clock.in_(clocks), Episode.status == EpisodeStatus.queued)) or 0
        names = [] if runs else s.scalars(select(Run.model_name).distinct().where(
            Run.status.in_(ACTIVE_RUN), *([] if admin else [Run.team == team]))).all()
    other_clocks = sorted({clock for status, clock, _ in runs if status in ACTIVE_RUN and clock not in clocks})
    if queued:
        reason = WorkReason.queued
        hint = f"{_plural(queued, 'episode')} queued in {_plural(matching, 'run')} for model '{model}'"
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
        hint = f"no run for model '{model}' {scope}; create one with: mpe run create --model {model} ..."
        close = _close_names(model, names)
        if close:
            hint += f" (runs exist for {', '.join(repr(n) for n in close)}: a different model name)"
    return Status(matching_runs=matching, queued_episodes=queued, reason=reason.value, hint=hint)


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
