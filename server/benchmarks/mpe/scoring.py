"""Scoring one Duplex-MPE episode: apply the window rules to its speech segments, transcribe
and judge what needs it, and build its entry (:class:`server.benchmarks.mpe.entry.EpisodeScore`,
§6, §7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from server.benchmarks.mpe.entry import EpisodeScore, N4Score, SilenceScore, TimelineInfo, TScore
from server.benchmarks.mpe.judging import PASSING, AnswerInput, HumanTurn, Judge, SilenceInput
from server.benchmarks.mpe.rules import EpisodeWindows, episode_windows, parse_timeline
from server.core.benchmark import EpisodeView
from server.core.detector import DETECTOR_VERSION, detect_segments
from server.core.spans import Span, ms, sec, total
from server.scoring.asr import ASRBackend, join_fragments, pad_fragments
from server.scoring.loading import LoadedEpisode
from server.scoring.store import Cache

CONTEXT_TURNS = 3  # §6: up to three human turns ending at the current one


# --- the episode document -----------------------------------------------------------------------


class BundleTurn(BaseModel):
    """A turn of the script as an episode document carries it (§2's turn; a recording made elsewhere
    may leave out what scoring does not need)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    idx: int
    label: str = ""
    speaker: str = ""
    text: str = ""
    addressee: str | None = None  # §2: optional in the manifest
    utterance_type: str | None = None  # optional in the manifest (the paper's Table 19)
    duration_s: float | None = None


class MPEEpisodeView(EpisodeView):
    """What Duplex-MPE scores an episode from (§7): the shared fields, and its part of the scenario
    snapshot: the turns, the gold answer and its keys."""

    gold_answer: str | None = None
    answer_keys: list[list[str]] | None = None
    turns: list[BundleTurn] = Field(default_factory=list)


# --- scoring -----------------------------------------------------------------------------------


def _context(turns: list[BundleTurn], idx: int) -> list[HumanTurn]:
    pos = next((i for i, t in enumerate(turns) if t.idx == idx), None)
    if pos is None:
        return []
    return [HumanTurn(speaker=t.speaker, text=t.text) for t in turns[max(0, pos - CONTEXT_TURNS + 1): pos + 1]]


def episode_fields(doc: MPEEpisodeView, source: str) -> dict[str, Any]:
    """The fields of an entry that come from its episode document (§7) alone."""
    return dict(episode_id=doc.episode_id, attempt_id=doc.attempt_id, run_id=doc.run_id,
                scenario_id=doc.scenario_id, pair_id=doc.pair_id, condition=doc.condition, model=doc.model.name,
                model_revision=doc.model.revision, clock=doc.clock, source=source, gold_answer=doc.gold_answer)


def answer_input(doc: MPEEpisodeView, question: str, transcript: str) -> AnswerInput:
    """What the answer judge is given for T (§6): the request, the gold answer and its keys, the reply."""
    return AnswerInput(question=question, gold_answer=doc.gold_answer or "", answer_keys=doc.answer_keys,
                       transcript=transcript)


def _spans(spans: Sequence[Span]) -> list[Span]:
    return [(int(s), int(e)) for s, e in spans]


@dataclass(frozen=True)
class _Judgement:
    """How the speech of one T response or N1-N3 window was decided."""

    reason: str
    transcript: str | None = None
    transcript_id: int | None = None
    verdict: str | None = None
    verdict_id: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class _Scorer:
    """The backends one episode's speech is transcribed and judged with."""

    track: np.ndarray
    segments: Sequence[Span]  # every detected speech segment of the track
    asr: ASRBackend
    judge: Judge
    cache: Cache

    def decide(self, task: str, speech: Sequence[Span], inputs: Callable[[str], BaseModel]) -> _Judgement:
        """§6: speech fails without ASR; else the judge decides on the transcript of the joined
        fragments, each padded with the track around it (an empty transcript fails), or on
        duration alone where the judge was asked to (``--judge rule:fast``)."""
        if not self.asr.enabled:
            return _Judgement("no_asr")
        early = self.judge.decide_on_duration(task, ms(total(speech)))
        if early is not None:
            return _Judgement("duration", verdict=early.label, note=early.raw)
        clip = join_fragments(self.track, pad_fragments(speech, self.segments, len(self.track)))
        tid, text = self.cache.transcribe(self.asr, clip)
        if not text.strip():
            return _Judgement("empty_transcript", text, tid)
        vid, v = self.cache.judge(self.judge, task, inputs(text))
        return _Judgement("judged" if v.label else "unparseable", text, tid, v.label, vid)


def score_episode(ep: LoadedEpisode, asr: ASRBackend, judge: Judge, cache: Cache) -> EpisodeScore:
    doc = ep.view(MPEEpisodeView)
    track = ep.assistant
    tl = parse_timeline(ep.events, len(track), doc.end_sample)
    # §5: the live segments when the same detector made them, else a replay (identical).
    segments = ep.segments if ep.segments is not None else [(g.start, g.end) for g in detect_segments(track)]
    w: EpisodeWindows = episode_windows(tl, segments)
    turns = doc.turns
    texts = {t.idx: t.text for t in turns}
    addressees = {t.idx: t.addressee for t in turns}
    kinds = {t.idx: t.utterance_type for t in turns}
    scorer = _Scorer(track, w.segments, asr, judge, cache)

    # T (§6): response presence, then the answer's correctness on its transcript.
    t = w.t
    if t.present:
        jt = scorer.decide("answer", t.response, lambda text: answer_input(doc, texts.get(t.turn_idx, ""), text))
        correct = None if jt.reason == "no_asr" else jt.verdict == PASSING["answer"]  # §6: empty = incorrect
    else:
        jt, correct = _Judgement("no_response"), None
    t_score = TScore(
        turn_idx=t.turn_idx, addressee=addressees.get(t.turn_idx), fresh=t.fresh, present=t.present,
        already_speaking=t.already_speaking,
        onset_s=sec(t.onset), e_t_s=sec(t.e_t), wait_end_s=sec(t.wait_end), response_speech_ms=ms(t.speech),
        fragments=_spans(t.response), transcript=jt.transcript, transcript_id=jt.transcript_id, correct=correct,
        verdict=jt.verdict, verdict_id=jt.verdict_id, reason=jt.reason, verdict_note=jt.note)

    # N1-N3 (§6): pass without speech; otherwise the judged transcript decides.
    windows = []
    for sw in w.silence:
        if sw.has_speech:
            jw = scorer.decide("silence", sw.speech, lambda text, sw=sw: SilenceInput(
                transcript=text, context=_context(turns, sw.turn_idx), speech_ms=ms(sw.speech_samples),
                overlap_ms=ms(sw.overlap_human)))
        else:
            jw = _Judgement("no_speech")
        windows.append(SilenceScore(
            turn_idx=sw.turn_idx, addressee=addressees.get(sw.turn_idx), label=sw.label, start_s=sec(sw.start),
            end_s=sec(sw.end),
            speech_ms=ms(sw.speech_samples), overlap_human_ms=ms(sw.overlap_human), fragments=_spans(sw.speech),
            passed=not sw.has_speech or jw.verdict == PASSING["silence"], transcript=jw.transcript,
            transcript_id=jw.transcript_id, verdict=jw.verdict, verdict_id=jw.verdict_id, reason=jw.reason,
            verdict_note=jw.note, utterance_type=kinds.get(sw.turn_idx)))

    n4 = [N4Score(q_idx=e.q_idx, r_idx=e.r_idx, addressee=addressees.get(e.q_idx), window_response=e.window_response,
                  category=e.category,
                  eligible=e.eligible, outcome=e.outcome, speaking_at_t_R=e.speaking_at_t_r, t_R_s=sec(e.t_r),
                  deadline_s=sec(e.deadline), t_E_s=sec(e.t_e), censored=e.censored)
          for e in w.n4]

    return EpisodeScore(
        **episode_fields(doc, ep.source),
        semantic=asr.enabled,
        request_time_s=sec(w.request_time),
        duration_s=sec(len(track)),
        speech_ms=ms(total(w.segments)),
        t=t_score,
        silence_windows=windows,
        n4=n4,
        timeline=TimelineInfo(
            end=tl.end, n_samples=tl.n_samples,
            clips=[(c.idx, c.label, c.speaker, c.start, c.end) for c in tl.clips],
            speech=_spans(w.segments), t_wait=tl.t_wait, preamble=tl.preamble,
            detector="segments.json" if ep.segments_source == "segments.json" else DETECTOR_VERSION,
            segments=ep.segments_source),
        text_reference=None,
    )
