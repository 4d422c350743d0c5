"""A text reference's episode as a scoring entry: the :class:`EpisodeScore` every Duplex-MPE run
has, its verdicts filled from the decisions, so that the six quantities, the statistics and the
reports are exactly those of the speech models (no metric is computed twice).

What each decision becomes (an unparseable one counts as failing, as a reply without a verdict
does in §6):

* **T**: response present (and fresh: nothing was speaking, the decision comes right after the
  request) when RESPOND; its answer carries the grading call's verdict where ``mpe reference``
  graded it (:mod:`.grading`; an unparseable grade is incorrect), else it is judged by the
  scoring's own judge, as a transcript would be (an empty answer is incorrect). SILENT: no
  response. Unparseable: no response.
* **N1-N3**: the window passes on SILENT; RESPOND (``responded``) and unparseable fail.
* **N4Q**: window response on RESPOND (a ``fresh_onset`` after the question); never eligible for
  the yield, which needs speech still running at t_R: a text decision has no duration.

There is no audio: the timeline lays the clips out from the manifest's durations with the
scheduler's gaps (0.5 s after a clip, 3 s after N4Q), so the request time (first turn to T, input
timing only) is the one the speech runs of the same voiced suite have (a text-only suite has no
durations: every clip then lasts 0 s).
"""

from __future__ import annotations

from server.benchmarks.mpe.entry import EpisodeScore, N4Score, SilenceScore, TimelineInfo, TScore
from server.benchmarks.mpe.judging import PASSING, Judge
from server.benchmarks.mpe.rules import CLIP_GAP, N4_DEADLINE, N4_GAP, RESPONSE_LABELS, SILENCE_LABELS
from server.benchmarks.mpe.scoring import BundleTurn, MPEEpisodeView, answer_input, episode_fields
from server.benchmarks.mpe.textref.prompt import TextDecision, TextReference
from server.core.spans import sec
from server.core.timebase import STREAM_RATE
from server.scoring.errors import BadBundle
from server.scoring.loading import LoadedEpisode
from server.scoring.store import Cache

RESPOND = "RESPOND"


def _layout(turns: list[BundleTurn]) -> tuple[list[tuple[int, str, str, int, int]], int]:
    """(idx, label, speaker, start, end) of every clip as the scheduler would place it without a
    model, and the end of the episode."""
    clips, t = [], 0
    for turn in turns:
        n = round((turn.duration_s or 0.0) * STREAM_RATE)
        clips.append((turn.idx, turn.label, turn.speaker, t, t + n))
        t += n + (N4_GAP if turn.label == "N4Q" else CLIP_GAP)
    return clips, t


def text_entry(ep: LoadedEpisode, ref: TextReference, judge: Judge, cache: Cache) -> EpisodeScore:
    """The entry of an episode decided by a text reference (module docstring)."""
    doc = ep.view(MPEEpisodeView)
    turns = sorted(doc.turns, key=lambda t: t.idx)
    decided: dict[int, TextDecision] = {d.turn_idx: d for d in ref.decisions}
    missing = [t.idx for t in turns if t.label in RESPONSE_LABELS and t.idx not in decided]
    if missing:
        raise BadBundle(f"episode {doc.episode_id}: no text reference decision for turns {missing}")
    ts = [t for t in turns if t.label == "T"]
    if len(ts) != 1:
        raise BadBundle(f"episode {doc.episode_id} has {len(ts)} T turns (exactly one expected)")
    clips, end = _layout(turns)
    pos = {c[0]: i for i, c in enumerate(clips)}

    def span(idx: int) -> tuple[int, int]:
        return clips[pos[idx]][3], clips[pos[idx]][4]

    def next_start(idx: int) -> int:
        i = pos[idx] + 1
        return clips[i][3] if i < len(clips) else end

    # T: presence is the decision; the answer is judged like a transcript (§6: empty = incorrect).
    t_turn = ts[0]
    t_idx = t_turn.idx
    d = decided[t_idx]
    present = d.decision == RESPOND
    verdict = verdict_id = correct = None
    if not present:
        reason = "no_response" if d.decision is not None else "unparseable"
    elif not (d.answer or "").strip():
        reason, correct = "empty_transcript", False
    elif d.grade is not None:  # graded by the reference's grading call (an unparseable grade fails, §6)
        verdict_id, verdict = d.grade.verdict_id, d.grade.label
        reason, correct = "judged" if verdict else "unparseable", verdict == PASSING["answer"]
    else:
        verdict_id, v = cache.judge(judge, "answer", answer_input(doc, t_turn.text, d.answer))
        verdict, reason = v.label, "judged" if v.label else "unparseable"
        correct = v.label == PASSING["answer"]
    e_t = span(t_idx)[1]
    t_score = TScore(turn_idx=t_idx, addressee=t_turn.addressee, fresh=present, present=present,
                     already_speaking=False, onset_s=sec(e_t) if present else None, e_t_s=sec(e_t),
                     wait_end_s=sec(e_t), response_speech_ms=0, fragments=[],
                     transcript=d.answer if present else None, transcript_id=None, correct=correct,
                     verdict=verdict, verdict_id=verdict_id, reason=reason)

    # N1-N3: SILENT passes; RESPOND and an unparseable decision fail.
    windows = []
    for turn in turns:
        if turn.label not in SILENCE_LABELS:
            continue
        idx = turn.idx
        d = decided[idx]
        windows.append(SilenceScore(
            turn_idx=idx, addressee=turn.addressee, label=turn.label, start_s=sec(span(idx)[0]),
            end_s=sec(next_start(idx)), speech_ms=0, overlap_human_ms=0, fragments=[],
            passed=d.decision == "SILENT", transcript=d.answer if d.decision == RESPOND else None,
            transcript_id=None, verdict=None, verdict_id=None,
            reason={RESPOND: "responded", "SILENT": "no_speech", None: "unparseable"}[d.decision],
            utterance_type=turn.utterance_type))

    # N4Q: window response on RESPOND; a decision has no duration, so no event is eligible for the yield.
    n4 = []
    for q, r in zip(turns, turns[1:]):
        if q.label != "N4Q":
            continue
        if r.label != "N4R":
            raise BadBundle(f"N4Q turn {q.idx} is not followed by its N4R")
        responded = decided[q.idx].decision == RESPOND
        t_r, r_end = span(r.idx)
        n4.append(N4Score(q_idx=q.idx, r_idx=r.idx, addressee=q.addressee,
                          window_response=responded, category="fresh_onset" if responded else "no_speech",
                          eligible=False, outcome=None, speaking_at_t_R=False, t_R_s=sec(t_r),
                          deadline_s=sec(t_r + N4_DEADLINE), t_E_s=sec(r_end + CLIP_GAP), censored=False))

    return EpisodeScore(
        **episode_fields(doc, ep.source),
        semantic=True,  # the answers are text: judged whatever the ASR
        request_time_s=sec(span(t_idx)[0] - clips[0][3]),
        duration_s=sec(end),
        speech_ms=0,
        t=t_score,
        silence_windows=windows,
        n4=n4,
        timeline=TimelineInfo(end=end, n_samples=end, clips=clips, speech=[], t_wait=None, preamble=None,
                              detector="none", segments="none"),
        text_reference=ref.info,
    )
