"""Scoring one MTR episode by one rule set: ``project`` (the §12.4 rules over its speech segments,
no transcripts needed) or ``published`` (the published scripts' rules over the Whisper words of
the whole model track, :mod:`.published`); and the rounds with a task judged on their dimension
(§12.5, :mod:`.dimensions`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from server.benchmarks.mpe.judging import Judge
from server.benchmarks.mtr import published
from server.benchmarks.mtr.dimensions import DimensionScorer
from server.benchmarks.mtr.entry import RULE_SETS, MTREpisodeScore, RoundScore, RuleSet
from server.benchmarks.mtr.judges import make_dimension_judge
from server.benchmarks.mtr.rules import LiveRound, RoundResult, judge_rounds, live_rounds
from server.benchmarks.mtr.suite import Dialogue
from server.core.benchmark import EpisodeView
from server.core.detector import detect_segments
from server.core.spans import sec
from server.scoring.asr import ASRBackend
from server.scoring.errors import BackendUnavailable, BadBundle
from server.scoring.loading import LoadedEpisode
from server.scoring.store import Cache


class RecordingInfo(BaseModel):
    """What an episode replayed from a recording made elsewhere says of it (``mtr/imported.py``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    moved: list[str] = Field(default_factory=list, description="the parts the file has elsewhere than the "
                                                                "live scheduler places them")
    count_moved: bool = False


class MTREpisodeView(EpisodeView):
    """What MTR scores an episode from: the shared fields, its part of the scenario snapshot (the
    dialogue and the live round, §12.2), and the recording it was replayed from, if any."""

    round: int | None = None
    dialogue: Dialogue | None = None
    recording: RecordingInfo | None = None


def moved_rounds(doc: MTREpisodeView) -> dict[int, str]:
    """The live round of a replayed recording (``mpe score DIR --suite``) whose barge-in, background
    voice or backchannels the file has elsewhere than the live scheduler places them, with the
    reason: left out of the feature scores unless the import counts them (``--count-moved``)."""
    rec = doc.recording
    if rec is None or not rec.moved or rec.count_moved or doc.round is None:
        return {}
    return {doc.round: f"moved in the recording: {', '.join(rec.moved)} (not where the live scheduler "
                       "places it after the model's onset)"}


def published_rounds(rounds: list[LiveRound], dialogue: Dialogue | None, track, asr: ASRBackend,
                     cache: Cache) -> list[RoundResult]:
    """The live rounds by the published rules: the whole model track transcribed with word timestamps."""
    if dialogue is None:
        raise BadBundle("the published rules need the dialogue (its ground-truth reply lengths); the episode has none")
    if not asr.enabled or not getattr(asr, "words", False):
        raise BackendUnavailable(f"--rules published decides on word timestamps: the {asr.name} ASR gives none "
                                 "(use --asr faster-whisper)")
    _, segments = cache.transcribe_words(asr, track)
    rate = published.frequency(segments)
    specs = {r.round: r for r in dialogue.rounds}
    out = []
    for r in rounds:
        spec = specs[r.round]
        w = published.windows(r, spec.assistant.duration_s,
                              spec.barge_in.response.duration_s if spec.barge_in else None)
        out.append(published.judge_round(r, w, segments, rate))
    return out


def score_episode(ep: LoadedEpisode, asr: ASRBackend, judge: Judge, cache: Cache,
                  rules: RuleSet = RULE_SETS[0]) -> MTREpisodeScore:
    if rules not in RULE_SETS:
        raise BackendUnavailable(f"unknown rule set {rules!r}; choose one of: {', '.join(RULE_SETS)}")
    doc = ep.view(MTREpisodeView)
    segments = ep.segments if ep.segments is not None else [(g.start, g.end) for g in detect_segments(ep.assistant)]
    rounds = live_rounds(ep.events)
    dialogue = doc.dialogue
    if rules == "published":
        results = published_rounds(rounds, dialogue, ep.assistant, asr, cache)
    else:
        results = judge_rounds(rounds, segments)
    dims = {}
    if dialogue is not None and any(r.task for r in dialogue.rounds):
        scorer = DimensionScorer(ep.assistant, segments, asr, judge, make_dimension_judge(judge), cache)
        dims = scorer.score_rounds(dialogue, doc.condition, rounds)
    excluded = moved_rounds(doc)
    return MTREpisodeScore(
        episode_id=doc.episode_id, attempt_id=doc.attempt_id, run_id=doc.run_id, scenario_id=doc.scenario_id,
        condition=doc.condition, model=doc.model.name, source=ep.source,
        dialogue_id=doc.pair_id if dialogue is None else dialogue.dialogue_id, set="" if dialogue is None else dialogue.set,
        mode=doc.condition or None, live_round=doc.round, duration_s=sec(len(ep.assistant)) or 0.0,
        speech=[(int(s), int(e)) for s, e in segments], room=[x for r in rounds for x in r.spans()],
        segments=ep.segments_source, rules=rules,
        rounds=[RoundScore.of(r, dims.get(r.round), excluded.get(r.round)) for r in results])
