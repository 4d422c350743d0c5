"""Scoring entries of a run's episodes for the episode list and its ``outcome`` filter."""

from __future__ import annotations

from server.core.benchmark import Benchmark, ScoreEntry
from server.db import Database
from server.scoring.results import latest_scoring, load_episode_scores
from server.scoring.store import load_entries

PER_EPISODE_MAX = 100  # episodes looked up one by one when the run's scoring lacks them


def run_episode_scores(db: Database, bench: Benchmark, run_id: str, episode_ids: list[str]) -> dict[str, ScoreEntry]:
    """Entries of many episodes: those of the run's latest complete scoring in one query, then
    one by one (from any scoring) for the few it lacks. Nothing before the run is scored."""
    row = latest_scoring(db, run_id)
    if row is None:
        return {}
    wanted = set(episode_ids)
    out = {e.episode_id: e for e in load_entries(db, row.id, bench.entry_model, wanted)}
    for i in [i for i in episode_ids if i not in out][:PER_EPISODE_MAX]:
        found = load_episode_scores(db, i, bench.entry_model)
        if found is not None:
            out[i] = found.entry
    return out
