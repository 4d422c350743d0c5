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
from typing import Literal

from pydantic import Field

from server.benchmarks.mpe.entry import EpisodeScore
from server.benchmarks.mpe.rules import EpisodeWindows, N4Outcome, episode_windows, parse_timeline
from server.core.benchmark import Outcome
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
