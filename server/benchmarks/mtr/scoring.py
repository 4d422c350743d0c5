"""Scoring one MTR episode: the §12.4 rules over its speech segments (no transcripts needed)."""

from __future__ import annotations

from server.benchmarks.mtr.entry import MTREpisodeScore, RoundScore
from server.benchmarks.mtr.rules import judge_rounds, live_rounds
from server.core.detector import detect_segments
from server.core.spans import sec
from server.scoring.loading import LoadedEpisode


def score_episode(ep: LoadedEpisode) -> MTREpisodeScore:
    doc = ep.doc
    segments = ep.segments if ep.segments is not None else [(g.start, g.end) for g in detect_segments(ep.assistant)]
    rounds = live_rounds(ep.events)
    results = judge_rounds(rounds, segments)
    dialogue = doc.get("dialogue") or {}
    model = doc.get("model") or {}
    return MTREpisodeScore(
        episode_id=str(doc["episode_id"]), attempt_id=doc.get("attempt_id"), run_id=doc.get("run_id"),
        scenario_id=str(doc.get("scenario_id", "")), condition=str(doc.get("condition", "")),
        model=str(model.get("name", "") if isinstance(model, dict) else model), source=ep.source,
        dialogue_id=str(dialogue.get("dialogue_id", doc.get("pair_id", ""))), set=str(dialogue.get("set", "")),
        mode=doc.get("condition"), live_round=doc.get("round"), duration_s=sec(len(ep.assistant)) or 0.0,
        speech=[(int(s), int(e)) for s, e in segments], room=[x for r in rounds for x in r.spans()],
        segments=ep.segments_source,
        rounds=[RoundScore.of(r) for r in results])
