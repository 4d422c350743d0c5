"""What of an episode's script a caller may see: the one rule (docs/api.md "What a team sees").

The *script* of an episode is what a model must not know while it plays: turn labels, texts,
addressees, the gold answer and answer keys, the rest of the scenario snapshot, and the
scheduler's events and state that follow from them. A team reads it only once no run of its
team on the same suite content (by content hash) is queued or running any more, and never, without an admin token, on a suite marked
held out (``"held_out": true`` in its ``suite.json``): there a team sees outcomes only.
Admin tokens see everything. Until then a team sees what its model heard and did: the audio,
the detector's view of its speech, its text, and the events its benchmark lists in
``Benchmark.public_events``. Every route, socket, export and page that shows an episode goes
through :func:`disclosure`, which also withholds which scenario an episode plays (so
that the episode ids a bridge is given cannot be joined to scenario ids) while the team has a
run of that suite's content that has not ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.auth import Principal
from server.core.benchmark import Benchmark
from server.core.status import ACTIVE_RUN
from server.db import Run
from server.db import Suite as SuiteRow

PublicEvents = Mapping[str, frozenset[str]]  # event type -> the data fields that may be shown
WITHHELD = "withheld"  # the scheduler state a listener is told while the script is withheld

# Which scenario an episode plays: withheld with the pairing (Disclosure.pairing).
PAIRING_KEYS = frozenset({"scenario_id", "pair_id", "ordinal"})
# The parts of an episode document (server.engine.bundles.episode_document; the REST API calls its
# live_segments "segments") that are not script.
_DOCUMENT_KEYS = frozenset({
    "bundle_version", "episode_id", "attempt_id", "attempt", "status", "run_id", "team", "benchmark",
    "scenario_id", "pair_id", "condition", "model", "clock", "suite", "settings", "end_sample", "live_segments",
    "segments", "stats",
})


def held_out(suite_meta: Mapping[str, Any] | None) -> bool:
    """Whether a suite (its stored ``suite.json``) is held out: its script is for admins only."""
    return (suite_meta or {}).get("held_out") is True


@dataclass(frozen=True)
class Disclosure:
    """What a caller may see of a suite's episodes right now (:func:`disclosure`).

    ``script``: the per-scenario script (labels, texts, gold answers, answer keys, the snapshot,
    the scheduler's events). ``pairing``: which scenario an episode plays (its ``scenario_id``,
    ``pair_id`` and ``ordinal``), i.e. whether the episode ids a bridge is given at
    ``episode.start`` can be joined to the suite's scenario ids."""

    script: bool
    pairing: bool


def in_play(s: Session, team: str, content_hash: str) -> bool:
    """Whether ``team`` has a run that has not ended (queued or running) of a suite with this
    content (by content hash, whichever suite row it was registered under)."""
    found = s.scalar(select(Run.id).join(SuiteRow, SuiteRow.id == Run.suite_id)
                     .where(Run.team == team, SuiteRow.content_hash == content_hash, Run.status.in_(ACTIVE_RUN))
                     .limit(1))
    return found is not None


def disclosure(s: Session, p: Principal, row: SuiteRow) -> Disclosure:
    """The rule, for every route that shows a suite's scripts, gold answers, labels or which
    scenario an episode plays: admins see everything. A team token sees none of it while any
    run of its team on the same suite content has not ended (so no run, a cancelled throwaway
    one included, shows a script another run is playing, and no episode id is paired with its
    scenario), and never the script of a held-out suite."""
    if p.admin:
        return Disclosure(script=True, pairing=True)
    playing = in_play(s, p.team, row.content_hash)
    return Disclosure(script=not playing and not held_out(row.meta), pairing=not playing)


def run_disclosure(s: Session, p: Principal, run: Run) -> Disclosure:
    """:func:`disclosure` for the episodes of ``run`` (its suite row)."""
    return disclosure(s, p, s.get(SuiteRow, run.suite_id))


def suite_script_visible(s: Session, p: Principal, row: SuiteRow) -> bool:
    """Whether the caller may read a suite's per-scenario script (:func:`disclosure`)."""
    return disclosure(s, p, row).script


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


def public_document(bench: Benchmark, doc: dict[str, Any], pairing: bool = True) -> dict[str, Any]:
    """An episode document without its script: no turns, answers or scenario fields, only the
    public events and the stats that are not script; ``script`` says it was withheld. Without
    ``pairing`` it does not say which scenario the episode plays either (:data:`PAIRING_KEYS`)."""
    keys = _DOCUMENT_KEYS if pairing else _DOCUMENT_KEYS - PAIRING_KEYS
    out = {k: v for k, v in doc.items() if k in keys}
    out.update(turns=[], events=public_events(bench, doc.get("events", [])), script=WITHHELD)
    if isinstance(out.get("stats"), dict):
        out["stats"] = {k: v for k, v in out["stats"].items() if k not in bench.script_stats}
    return out


def public_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """A listener's scheduler ``status`` message with the scheduler's state withheld."""
    return {k: status[k] for k in ("type", "t", "t_s") if k in status} | {"state": WITHHELD}
