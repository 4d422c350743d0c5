"""Scoring one MTR episode: the §12.4 rules over its speech segments (no transcripts needed), and
the rounds with a task judged on their dimension (§12.5, :mod:`.dimensions`)."""

from __future__ import annotations

from server.benchmarks.mpe.judging import Judge
from server.benchmarks.mtr.dimensions import DimensionScorer
from server.benchmarks.mtr.entry import MTREpisodeScore, RoundScore
from server.benchmarks.mtr.judges import make_dimension_judge
from server.benchmarks.mtr.rules import judge_rounds, live_rounds
from server.benchmarks.mtr.suite import Dialogue
from server.core.detector import detect_segments
from server.core.spans import sec
from server.scoring.asr import ASRBackend
from server.scoring.loading import LoadedEpisode
from server.scoring.store import Cache


def moved_rounds(doc: dict) -> dict[int, str]:
    """The live round of a replayed recording (``mpe score DIR --suite``) whose barge-in, background
    voice or backchannels the file has elsewhere than the live scheduler places them, with the
    reason: left out of the feature scores unless the import counts them (``--count-moved``)."""
    rec = doc.get("recording") or {}
    moved = rec.get("moved") or []
    if not moved or rec.get("count_moved") or doc.get("round") is None:
        return {}
    return {int(doc["round"]): f"moved in the recording: {', '.join(moved)} (not where the live scheduler "
                                "places it after the model's onset)"}


def score_episode(ep: LoadedEpisode, asr: ASRBackend, judge: Judge, cache: Cache) -> MTREpisodeScore:
    doc = ep.doc
    segments = ep.segments if ep.segments is not None else [(g.start, g.end) for g in detect_segments(ep.assistant)]
    rounds = live_rounds(ep.events)
    results = judge_rounds(rounds, segments)
    dialogue = doc.get("dialogue") or {}
    dims = {}
    if any(r.get("task") for r in dialogue.get("rounds", [])):
        scorer = DimensionScorer(ep.assistant, segments, asr, judge, make_dimension_judge(judge), cache)
        dims = scorer.score_rounds(Dialogue.model_validate(dialogue), str(doc.get("condition")), rounds)
    excluded = moved_rounds(doc)
    model = doc.get("model") or {}
    return MTREpisodeScore(
        episode_id=str(doc["episode_id"]), attempt_id=doc.get("attempt_id"), run_id=doc.get("run_id"),
        scenario_id=str(doc.get("scenario_id", "")), condition=str(doc.get("condition", "")),
        model=str(model.get("name", "") if isinstance(model, dict) else model), source=ep.source,
        dialogue_id=str(dialogue.get("dialogue_id", doc.get("pair_id", ""))), set=str(dialogue.get("set", "")),
        mode=doc.get("condition"), live_round=doc.get("round"), duration_s=sec(len(ep.assistant)) or 0.0,
        speech=[(int(s), int(e)) for s, e in segments], room=[x for r in rounds for x in r.spans()],
        segments=ep.segments_source,
        rounds=[RoundScore.of(r, dims.get(r.round), excluded.get(r.round)) for r in results])
