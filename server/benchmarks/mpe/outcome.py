"""Episode outcomes for the pages, the ``outcome`` filter and the demo table.

Both kinds come from the one set of window rules (:mod:`server.benchmarks.mpe.rules`):

* **live**: the windows of the logged events over the live detector segments, durations
  only (speech in an N1-N3 window is ``speech_in_silence``: no semantic exemption);
* **score**: the latest scoring's entry for the episode (its verdicts decide correctness and
  intrusions; its windows were computed by the same rules).

So an episode whose model is already speaking through N4Q is ``not_eligible`` for the N4 yield
on the pages exactly as in scoring (§6).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from server.benchmarks.mpe.entry import EpisodeScore, N4Score, SilenceScore, TScore
from server.benchmarks.mpe.rules import (
    N4_DEADLINE,
    N4_GAP,
    SILENCE_LABELS,
    EpisodeWindows,
    N4Outcome,
    episode_windows,
    parse_timeline,
)
from server.core.benchmark import OpenSpan, Outcome, Timeline, Verdict, Window
from server.core.events import Event
from server.scoring.errors import BadBundle

Span = tuple[int, int]
TState = Literal["fresh", "already_speaking", "none"]
N4Result = Literal[N4Outcome, "not_eligible"]

# Failure types, in the order pages list them.
FAILURES = ("no_response", "incorrect", "intrusion", "speech_in_silence", "n4_still_voicing", "n4_resumed")


class MPEOutcome(Outcome):
    t: TState | None = Field(description="fresh | already_speaking | none (no response)")
    correct: bool | None
    silence: tuple[int, int] = Field(description="[clean N1-N3 windows, all N1-N3 windows]")
    n4: list[N4Result]


def t_state(fresh: bool, present: bool) -> TState:
    if not present:
        return "none"
    return "fresh" if fresh else "already_speaking"


def n4_result(eligible: bool, outcome: N4Outcome | None) -> N4Result:
    """§6 N4: only eligible events have a yield outcome."""
    return outcome if eligible and outcome is not None else "not_eligible"


def _outcome(source: Literal["live", "score"], t: TState, correct: bool | None, clean: int, windows: int,
             n4: list[N4Result], silence_failure: str) -> MPEOutcome:
    failures: list[str] = []
    if t == "none":
        failures.append("no_response")
    elif correct is False:
        failures.append("incorrect")
    if clean < windows:
        failures.append(silence_failure)
    failures += [f"n4_{o}" for o in dict.fromkeys(n4) if o in ("still_voicing", "resumed")]
    return MPEOutcome(source=source, t=t, correct=correct, silence=(clean, windows), n4=n4, failures=failures,
                      ok=not failures)


def outcome_of_windows(w: EpisodeWindows) -> MPEOutcome:
    """The live (duration-only) outcome of an episode's windows."""
    clean = sum(not sw.has_speech for sw in w.silence)
    return _outcome("live", t_state(w.t.fresh, w.t.present), None, clean, len(w.silence),
                    [n4_result(e.eligible, e.outcome) for e in w.n4], "speech_in_silence")


def live_outcome(events: Sequence[Event], segments: Sequence[Span], n_samples: int) -> MPEOutcome | None:
    """Outcome of a completed attempt from its events and live segments (None: not a whole episode)."""
    try:
        tl = parse_timeline(events, n_samples)
        return outcome_of_windows(episode_windows(tl, segments))
    except (BadBundle, KeyError, ValueError):
        return None


def scored_outcome(entry: EpisodeScore) -> MPEOutcome:
    """Outcome from one episode's scoring entry (:func:`server.benchmarks.mpe.scoring.score_episode`)."""
    t = entry.t
    windows = entry.silence_windows
    clean = sum(w.passed for w in windows)
    return _outcome("score", t_state(t.fresh, t.present), t.correct if t.present else None, clean,
                    len(windows), [n4_result(e.eligible, e.outcome) for e in entry.n4], "intrusion")


# --- the pages' timeline: the §6 windows of a finished or growing episode, with verdicts -----


@dataclass
class _Clip:
    idx: int
    label: str
    start: int
    end: int | None = None


@dataclass
class _Wait:
    start: int
    end: int | None = None
    reason: str | None = None
    onset: int | None = None


def silence_verdict(sc: SilenceScore | None, speech: bool) -> Verdict:
    """An N1-N3 window: the scoring's verdict, else whether the live detector heard speech in it."""
    if sc is not None:
        why = sc.verdict if sc.verdict is not None else (sc.reason if sc.reason != "judged" else None)
        text = why.lower().replace("_", " ") if why else "pass" if sc.passed else "fail"
        return Verdict(state="pass" if sc.passed else "fail", text=text, scored=True)
    if speech:
        return Verdict(state="speech", text="speech (not scored)", scored=False)
    return Verdict(state="quiet", text="silent", scored=False)


def n4_verdict(sc: N4Score | None) -> Verdict:
    """An N4 window: the scoring's yield outcome (only eligible events have one)."""
    if sc is None:
        return Verdict(state="none", text="", scored=False)
    result = n4_result(sc.eligible, sc.outcome)
    text = result.replace("_", " ")
    state = "pass" if result == "pass" else "fail" if result in ("still_voicing", "resumed") else "none"
    return Verdict(state=state, text=text, scored=True)


def t_verdict(t: TScore | None, w: _Wait) -> Verdict:
    """The wait after T: the scoring's verdict, else how the wait went by the live events."""
    if t is not None:
        if not t.present:
            return Verdict(state="fail", text="no response", scored=True)
        how = "fresh onset" if t.fresh else "already speaking"
        judged = " · correct" if t.correct is True else " · incorrect" if t.correct is False else ""
        return Verdict(state="fail" if t.correct is False else "pass", text=how + judged, scored=True)
    if not w.reason:
        return Verdict(state="none", text="answering…" if w.onset is not None else "waiting…", scored=False)
    if w.reason == "no_response":
        return Verdict(state="fail", text="no response", scored=False)
    return Verdict(state="quiet", text=f"{'answered' if w.onset is not None else 'already speaking'}, "
                                       f"ended by {w.reason}", scored=False)


def timeline(events: Sequence[Event], segments: Sequence[OpenSpan], head: int, end: int | None,
             entry: EpisodeScore | None) -> Timeline:
    """The §6 windows as far as the events go (:mod:`~server.benchmarks.mpe.rules`' bounds):
    each N1-N3 window from its clip's start to the next clip's start (the episode's end after the
    last clip), each N4 window over [start of N4Q, end of N4Q + 3 s] with its deadline t_R + 2 s,
    and the wait after T; an open one runs to ``head``."""
    clips: list[_Clip] = []
    waits: list[_Wait] = []
    for e in events:
        if e.type == "clip.start" and "idx" in e.data:
            clips.append(_Clip(idx=int(e.data["idx"]), label=str(e.data.get("label", "")), start=e.t))
        elif e.type == "clip.end" and "idx" in e.data:
            c = next((c for c in clips if c.idx == e.data["idx"] and c.end is None), None)
            if c is not None:
                c.end = e.t
        elif e.type == "t_wait.start":
            waits.append(_Wait(start=e.t))
        elif e.type == "t_wait.onset" and waits and "at" in e.data:
            waits[-1].onset = int(e.data["at"])
        elif e.type == "t_wait.end" and waits:
            waits[-1].end, waits[-1].reason = e.t, str(e.data.get("reason", ""))
    silence = {w.turn_idx: w for w in entry.silence_windows} if entry is not None else {}
    n4 = {w.q_idx: w for w in entry.n4} if entry is not None else {}
    out: list[Window] = []
    for i, c in enumerate(clips):
        after = clips[i + 1].start if i + 1 < len(clips) else end
        if c.label in SILENCE_LABELS:
            w_end = after if after is not None else head
            speech = any(s < w_end and (e if e is not None else head) > c.start for s, e in segments)
            out.append(Window(kind="silence", label=c.label, idx=c.idx, start=c.start, end=w_end, open=after is None,
                              verdict=silence_verdict(silence.get(c.idx), speech)))
        elif c.label == "N4Q":
            q_end = c.end if c.end is not None else head
            r = clips[i + 1] if i + 1 < len(clips) else None
            out.append(Window(kind="n4", label="N4", idx=c.idx, start=c.start, end=q_end + N4_GAP,
                              open=c.end is None, deadline=None if r is None else r.start + N4_DEADLINE,
                              deadline_label="t_R + 2 s", verdict=n4_verdict(n4.get(c.idx))))
    for w in waits:
        t_idx = next((c.idx for c in reversed(clips) if c.label == "T" and c.start <= w.start), None)
        out.append(Window(kind="t", label="T wait", idx=t_idx, start=w.start, end=w.end if w.end is not None else head,
                          open=w.end is None, verdict=t_verdict(entry.t if entry is not None else None, w)))
    return Timeline(head=head, windows=out)
