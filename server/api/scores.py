"""Verdicts and metrics from the scoring subsystem, when it is installed and has results.

Imported lazily: the API and pages work without scoring and show "not scored"; once
``server.scoring.results`` exists and a run is scored, its metrics and verdicts appear.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

from ..db import Database

log = logging.getLogger("mpe.api")
_MODULE = "server.scoring.results"
PER_EPISODE_MAX = 100  # episodes looked up one by one when the run's scoring lacks them


def _results() -> ModuleType | None:
    try:
        return importlib.import_module(_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name in ("server.scoring", _MODULE):
            return None
        log.exception("scoring results cannot be imported")
        return None
    except Exception:
        log.exception("scoring results cannot be imported")
        return None


def _call(name: str, db: Database, key: str) -> dict[str, Any] | None:
    mod = _results()
    fn = getattr(mod, name, None) if mod else None
    if fn is None:
        return None
    try:
        out = fn(db, key)
    except Exception as exc:  # not scored yet, or a scoring problem: the pages still work
        if getattr(exc, "code", None) != "not_scored":
            log.warning("%s(%s) failed: %s", name, key, exc)
        return None
    return out if isinstance(out, dict) else None


def run_metrics(db: Database, run_id: str) -> dict[str, Any] | None:
    return _call("load_run_metrics", db, run_id)


def episode_scores(db: Database, episode_id: str) -> dict[str, Any] | None:
    return _call("load_episode_scores", db, episode_id)


def run_episode_scores(db: Database, run_id: str, episode_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Scores of many episodes: the entries of the run's latest scoring in one query, then
    one by one for the few it lacks."""
    doc = run_metrics(db, run_id)
    if doc is None:
        return {}
    mod = _results()
    out: dict[str, dict[str, Any]] = {}
    sid = (doc.get("scoring") or {}).get("scoring_id")
    load_entries = getattr(mod, "load_scoring_entries", None)
    if sid and load_entries is not None:
        try:
            wanted = set(episode_ids)
            out = {e["episode_id"]: e for e in load_entries(db, sid) if e.get("episode_id") in wanted}
        except Exception as exc:
            log.warning("load_scoring_entries(%s) failed: %s", sid, exc)
    missing = [i for i in episode_ids if i not in out]
    for i in missing[:PER_EPISODE_MAX]:
        s = episode_scores(db, i)
        if s is not None:
            out[i] = s
    return out
