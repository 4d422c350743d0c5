"""Read access to scoring results for other parts of the server (REST API, dashboard, reports).

All return values are JSON-able dicts; ``None`` when nothing has been scored.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from server.db import Database, EpisodeScoreRow, ScoringRow


def _scoring_info(row: ScoringRow) -> dict[str, Any]:
    return {"scoring_id": row.id, "run_id": row.run_id, "status": row.status, "n_episodes": row.n_episodes,
            "config": row.config, "created_at": row.created_at.isoformat() if row.created_at else None,
            "finished_at": row.finished_at.isoformat() if row.finished_at else None}


def latest_scoring(db: Database, run_id: str) -> ScoringRow | None:
    """The most recently finished complete scoring of a run."""
    with db.session() as s:
        return s.scalar(select(ScoringRow).where(ScoringRow.run_id == run_id, ScoringRow.status == "complete")
                        .order_by(ScoringRow.finished_at.desc(), ScoringRow.created_at.desc()).limit(1))


def get_scoring(db: Database, scoring_id: str) -> ScoringRow | None:
    with db.session() as s:
        return s.get(ScoringRow, scoring_id)


def load_run_metrics(db: Database, run_id: str) -> dict | None:
    """The latest complete scoring of ``run_id``: ``{"scoring": {...}, "metrics": ..., "analyses": ...}``
    where ``metrics[model][condition][quantity] = {"num", "den", "value"}``; None if never scored."""
    row = latest_scoring(db, run_id)
    if row is None or row.results is None:
        return None
    return {"scoring": _scoring_info(row), "metrics": row.results.get("metrics", {}),
            "analyses": row.results.get("analyses", {})}


def load_episode_scores(db: Database, episode_id: str) -> dict | None:
    """The episode's ``episodes[]`` entry (windows, transcripts, verdicts) from the latest
    complete scoring that holds it (else from any scoring in progress); None if not scored."""
    with db.session() as s:
        row = s.execute(
            select(EpisodeScoreRow.data, EpisodeScoreRow.scoring_id)
            .join(ScoringRow, ScoringRow.id == EpisodeScoreRow.scoring_id)
            .where(EpisodeScoreRow.episode_id == episode_id)
            .order_by((ScoringRow.status == "complete").desc(), EpisodeScoreRow.created_at.desc(),
                      EpisodeScoreRow.id.desc())
            .limit(1)).first()
    if row is None:
        return None
    return {**row.data, "scoring_id": row.scoring_id}


def load_scoring_entries(db: Database, scoring_id: str) -> list[dict[str, Any]]:
    with db.session() as s:
        rows = s.scalars(select(EpisodeScoreRow.data).where(EpisodeScoreRow.scoring_id == scoring_id)
                         .order_by(EpisodeScoreRow.id)).all()
    return list(rows)
