"""Helpers for the scoring tests: hand-built timelines, scheduler-simulated episodes, entries.

:func:`simulate` runs the real pure core (scheduler + causal detector, exactly as
``server.core.episode.EpisodeCore``, the loop the live session drives) over a pre-recorded assistant track, so the
events and the track are those a lockstep episode with that model output would record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from server.benchmarks.mpe.entry import EpisodeScore, N4Score, SilenceScore, TimelineInfo, TScore
from server.benchmarks.mpe.scheduler import EpisodePlan, Scheduler, TurnPlan
from server.core.detector import DETECTOR_VERSION
from server.core.episode import EpisodeCore
from server.core.schedule import PREAMBLE
from server.scoring.loading import LoadedEpisode

R = 24_000
FRAME = 1920


def sec(x: float) -> int:
    return round(x * R)


def events_for(clips: list[tuple[int, str, int, int]], *, end: int, t_wait: tuple[int, int, str] | None = None,
               preamble: tuple[int, int] | None = (0, R)) -> list[dict[str, Any]]:
    """Events of §3 for literal clip spans ``(idx, label, start, end)`` (samples)."""
    ev: list[dict[str, Any]] = []
    if preamble:
        ev += [{"t": preamble[0], "type": "preamble.start", "data": {}},
               {"t": preamble[1], "type": "preamble.end", "data": {}}]
    for idx, label, s, e in clips:
        d = {"idx": idx, "label": label, "speaker": "A"}
        ev.append({"t": s, "type": "clip.start", "data": d})
        ev.append({"t": e, "type": "clip.end", "data": d})
        if label == "T" and t_wait:
            ev.append({"t": t_wait[0], "type": "t_wait.start", "data": {"idx": idx, "already_speaking": False}})
            ev.append({"t": t_wait[1], "type": "t_wait.end", "data": {"reason": t_wait[2], "onset_at": None,
                                                                       "already_speaking": False}})
    ev.append({"t": end, "type": "episode.end", "data": {}})
    return sorted(ev, key=lambda e: e["t"])


def simulate(turns: list[tuple[str, str, float]], track: np.ndarray, *, preamble_s: float = 1.0,
             gold: str = "", answer_keys: list[list[str]] | None = None, model: str = "m", scenario_id: str = "s1",
             pair_id: str = "p1", condition: str = "explicit", episode_id: str = "e1") -> LoadedEpisode:
    """Run the scheduler over ``turns`` = [(label, text, seconds)] while the model "says" ``track``
    (absolute stream time); returns the episode as scoring would load it."""
    plan = EpisodePlan(preamble_samples=sec(preamble_s), turns=tuple(
        TurnPlan(idx=i, label=label, n_samples=sec(d), speaker="ABC"[i % 3]) for i, (label, _, d) in enumerate(turns)))
    clips = {PREAMBLE: np.zeros(plan.preamble_samples, np.int16), **{t.idx: np.zeros(t.n_samples, np.int16)
                                                                    for t in plan.turns}}
    core = EpisodeCore(Scheduler(plan, frame_samples=FRAME), clips)
    events = []
    seq = 0
    while (item := core.next_room()) is not None:
        events += [e.to_json() for e in item[2]]
        frame = np.zeros(FRAME, dtype=np.int16)
        part = track[seq * FRAME:(seq + 1) * FRAME]
        frame[:len(part)] = part
        core.feed_assistant(frame)
        seq += 1
    core.finish()
    sched = core.scheduler
    n = seq * FRAME
    rec = np.zeros(n, dtype=np.int16)
    rec[:min(n, len(track))] = track[:n]
    doc = {"episode_id": episode_id, "attempt_id": "a-" + episode_id, "run_id": None, "scenario_id": scenario_id,
           "pair_id": pair_id, "condition": condition, "model": {"name": model, "revision": ""}, "clock": "lockstep",
           "gold_answer": gold, "answer_keys": answer_keys, "end_sample": sched.end_sample, "events": events,
           "live_segments": [{"start": g.start, "end": g.end} for g in core.detector.segments],
           "stats": {"detector": DETECTOR_VERSION},
           "turns": [{"idx": i, "speaker": "ABC"[i % 3], "label": label, "text": text, "duration_s": d}
                     for i, (label, text, d) in enumerate(turns)]}
    return LoadedEpisode(doc=doc, assistant=rec, segments=None, source="test")


def event_t(doc: dict[str, Any], type_: str, idx: int | None = None) -> int:
    return next(e["t"] for e in doc["events"] if e["type"] == type_ and (idx is None or e["data"].get("idx") == idx))


def entry(model: str = "m", condition: str = "explicit", scenario: str = "s1", pair: str | None = None, *,
          fresh: bool = False, present: bool = False, correct: bool | None = None,
          windows: list[tuple[bool, int]] = (), n4: list[tuple[bool, str, bool, str | None]] = (),
          request_time_s: float = 10.0) -> EpisodeScore:
    """A synthetic scoring entry: windows = [(passed, speech_ms)],
    n4 = [(window_response, category, eligible, outcome)]; the rest is fixed filler."""
    present = present or fresh
    return EpisodeScore(
        episode_id=f"{model}-{scenario}-{condition}", attempt_id=None, run_id=None, scenario_id=scenario,
        pair_id=pair or scenario, condition=condition, model=model, model_revision="", clock="lockstep",
        source="test", semantic=correct is not None, request_time_s=request_time_s, duration_s=40.0, speech_ms=0,
        gold_answer=None,
        t=TScore(turn_idx=1, fresh=fresh, present=present, already_speaking=present and not fresh,
                 onset_s=None, e_t_s=12.0, wait_end_s=17.0, response_speech_ms=0, fragments=[], transcript=None,
                 transcript_id=None, correct=correct, verdict=None, verdict_id=None,
                 reason="no_response" if not present else "judged" if correct is not None else "no_asr"),
        silence_windows=[SilenceScore(turn_idx=i, label="N2", start_s=float(i), end_s=i + 1.0, speech_ms=ms,
                                      overlap_human_ms=0, fragments=[], passed=p, transcript=None,
                                      transcript_id=None, verdict=None, verdict_id=None,
                                      reason="no_speech" if not ms else "judged")
                         for i, (p, ms) in enumerate(windows)],
        n4=[N4Score(q_idx=10 + i, r_idx=11 + i, window_response=wr, category=cat, eligible=el, outcome=out,
                    speaking_at_t_R=el, t_R_s=20.0, deadline_s=22.0, t_E_s=23.0, censored=False)
            for i, (wr, cat, el, out) in enumerate(n4)],
        timeline=TimelineInfo(end=sec(40), n_samples=sec(40), clips=[], speech=[], t_wait=None, preamble=None,
                              detector=DETECTOR_VERSION, segments="replay"),
    )
