"""What of an episode's script a caller may see: the one rule (docs/api.md "What a team sees").

The *script* of an episode is what a model must not know while it plays: turn labels, texts,
addressees, the gold answer and answer keys, the rest of the scenario snapshot, and the
scheduler's events and state that follow from them. A team reads it only once its run has
ended (finished, failed or cancelled), and never, without an admin token, on a suite marked
held out (``"held_out": true`` in its ``suite.json``): there a team sees outcomes only.
Admin tokens see everything. Until then a team sees what its model heard and did: the audio,
the detector's view of its speech, its text, and the events its benchmark lists in
``Benchmark.public_events``. Every route, socket, export and page that shows an episode goes
through :func:`script_visible`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.auth import Principal
from server.core.benchmark import Benchmark
from server.core.status import ACTIVE_RUN, RunStatus
from server.db import Run
from server.db import Suite as SuiteRow

PublicEvents = Mapping[str, frozenset[str]]  # event type -> the data fields that may be shown
WITHHELD = "withheld"  # the scheduler state a listener is told while the script is withheld

# The parts of an episode document (server.engine.export.episode_document; the REST API calls its
# live_segments "segments") that are not script.
_DOCUMENT_KEYS = frozenset({
    "bundle_version", "episode_id", "attempt_id", "attempt", "status", "run_id", "team", "benchmark",
    "scenario_id", "pair_id", "condition", "model", "clock", "suite", "settings", "end_sample", "live_segments",
    "segments", "stats",
})


def held_out(suite_meta: Mapping[str, Any] | None) -> bool:
    """Whether a suite (its stored ``suite.json``) is held out: its script is for admins only."""
    return (suite_meta or {}).get("held_out") is True


def script_visible(p: Principal, run_status: RunStatus, suite_meta: Mapping[str, Any] | None) -> bool:
    """The rule: admins always; a team once its run has ended, unless the suite is held out."""
    return p.admin or (run_status not in ACTIVE_RUN and not held_out(suite_meta))


def suite_script_visible(s: Session, p: Principal, row: SuiteRow) -> bool:
    """Whether the caller may read a suite's per-scenario script: not while the caller's team has a
    run of it that has not ended (nor ever, for a team, on a held-out suite)."""
    if p.admin:
        return True
    if held_out(row.meta):
        return False
    active = s.scalar(select(Run.id).where(Run.suite_id == row.id, Run.team == p.team,
                                           Run.status.in_(ACTIVE_RUN)).limit(1))
    return active is None


def public_event(public: PublicEvents, type_: str, data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The part of one event a team may see while the script is withheld (``public``: the
    benchmark's :attr:`~Benchmark.public_events`); None when none of it is public."""
    fields = public.get(type_)
    if fields is None:
        return None
    return {k: v for k, v in data.items() if k in fields}


def public_events(bench: Benchmark, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored events (``{"t", "type", "data", ...}``) with the script taken out."""
    out = []
    for e in events:
        data = public_event(bench.public_events, e["type"], e.get("data") or {})
        if data is not None:
            out.append({**e, "data": data})
    return out


def public_document(bench: Benchmark, doc: dict[str, Any]) -> dict[str, Any]:
    """An episode document without its script: no turns, answers or scenario fields, only the
    public events and the stats that are not script; ``script`` says it was withheld."""
    out = {k: v for k, v in doc.items() if k in _DOCUMENT_KEYS}
    out.update(turns=[], events=public_events(bench, doc.get("events", [])), script=WITHHELD)
    if isinstance(out.get("stats"), dict):
        out["stats"] = {k: v for k, v in out["stats"].items() if k not in bench.script_stats}
    return out


def public_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """A listener's scheduler ``status`` message with the scheduler's state withheld."""
    return {k: status[k] for k in ("type", "t", "t_s") if k in status} | {"state": WITHHELD}
