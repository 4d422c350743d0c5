"""Read access to scoring results for other parts of the server (REST API, reports, audit).

Metrics come as JSON-able dicts, entries as their benchmark's :class:`ScoreEntry` model
(parsed by :func:`server.scoring.store.parse_entry`); ``None`` when nothing has been scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic

from sqlalchemy import select

from server.core.benchmark import Benchmark
from server.db import Database, EpisodeScoreRow, ScoringRow
from server.engine.registry import get_benchmark
from server.scoring.store import EntryT, ScoringStatus, parse_entry


@dataclass(frozen=True)
class ScoredEntry(Generic[EntryT]):
    """An episode's entry and the scoring it belongs to."""

    scoring_id: str
    entry: EntryT


def _scoring_info(row: ScoringRow) -> dict[str, Any]:
    return {"scoring_id": row.id, "run_id": row.run_id, "status": row.status, "n_episodes": row.n_episodes,
            "config": row.config, "created_at": row.created_at.isoformat() if row.created_at else None,
            "finished_at": row.finished_at.isoformat() if row.finished_at else None}


def benchmark_of(row: ScoringRow) -> Benchmark:
    """The benchmark a scoring scored: its configuration names it, except the default's
    (:func:`server.scoring.runner.scoring_config` keeps older scorings' hashes)."""
    return get_benchmark(row.config.get("benchmark"))


def latest_scoring(db: Database, run_id: str) -> ScoringRow | None:
    """The most recently finished complete scoring of a run."""
    with db.session() as s:
        return s.scalar(select(ScoringRow).where(ScoringRow.run_id == run_id,
                                                 ScoringRow.status == ScoringStatus.complete)
                        .order_by(ScoringRow.finished_at.desc(), ScoringRow.created_at.desc()).limit(1))


def get_scoring(db: Database, scoring_id: str) -> ScoringRow | None:
    with db.session() as s:
        return s.get(ScoringRow, scoring_id)


def load_run_metrics(db: Database, run_id: str) -> dict[str, Any] | None:
    """The latest complete scoring of ``run_id``: ``{"scoring": {...}, "metrics": ..., "analyses": ...}``
    where ``metrics[model][condition][quantity] = {"num", "den", "value"}``; None if never scored."""
    row = latest_scoring(db, run_id)
    if row is None:
        return None
    assert row.results is not None  # a complete scoring has published its results
    return {"scoring": _scoring_info(row), "metrics": row.results["metrics"], "analyses": row.results["analyses"]}


def load_episode_scores(db: Database, episode_id: str,
                        model: type[EntryT]) -> ScoredEntry[EntryT] | None:
    """The episode's entry (windows, transcripts, verdicts) from the latest complete scoring
    that holds it (else from any scoring in progress); None if not scored."""
    with db.session() as s:
        row = s.execute(
            select(EpisodeScoreRow.data, EpisodeScoreRow.scoring_id)
            .join(ScoringRow, ScoringRow.id == EpisodeScoreRow.scoring_id)
            .where(EpisodeScoreRow.episode_id == episode_id)
            .order_by((ScoringRow.status == ScoringStatus.complete).desc(), EpisodeScoreRow.created_at.desc(),
                      EpisodeScoreRow.id.desc())
            .limit(1)).first()
    if row is None:
        return None
    return ScoredEntry(row.scoring_id, parse_entry(model, row.data, row.scoring_id, episode_id))
