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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

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
from server.benchmarks.mpe.scheduler import N4_GAP_S
from server.benchmarks.mpe.suite import Scenario, Turn
from server.core.benchmark import (
    Block,
    Cell,
    Column,
    Label,
    Note,
    OpenSpan,
    Outcome,
    ScriptRow,
    Timeline,
    Verdict,
    Window,
)
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


#: how the T request went, in words (the pages' outcome cells and T window verdicts)
T_WORDS: Mapping[TState, str] = {"fresh": "fresh onset", "already_speaking": "already speaking", "none": "no response"}


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


def _judged(correct: bool | None) -> str:
    return " · correct" if correct is True else " · incorrect" if correct is False else ""


def t_verdict(t: TScore | None, w: _Wait) -> Verdict:
    """The wait after T: the scoring's verdict, else how the wait went by the live events."""
    if t is not None:
        if not t.present:
            return Verdict(state="fail", text=T_WORDS["none"], scored=True)
        return Verdict(state="fail" if t.correct is False else "pass",
                       text=T_WORDS[t_state(t.fresh, t.present)] + _judged(t.correct), scored=True)
    if not w.reason:
        return Verdict(state="none", text="answering…" if w.onset is not None else "waiting…", scored=False)
    if w.reason == "no_response":
        return Verdict(state="fail", text=T_WORDS["none"], scored=False)
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


# --- shown: what the pages draw of Duplex-MPE's labels, outcomes, clips and script ------------

LABELS = (Label(key="T", title="request to Aria", legend="T request to Aria"),
          Label(key="N1", title="Aria mentioned", legend="N1 mentioned"),
          Label(key="N2", title="someone else addressed", legend="N2 other addressee"),
          Label(key="N3", title="nobody addressed", legend="N3 nobody"),
          Label(key="N4Q", title="question to Aria", legend="N4Q question"),
          Label(key="N4R", title="human resolves it", legend="N4R resolution"))
LABEL_TITLES = {lb.key: lb.title for lb in LABELS}
FAILURE_TITLES = {"no_response": "no response", "incorrect": "incorrect answer", "intrusion": "intrusion",
                  "speech_in_silence": "speech in a silence window", "n4_still_voicing": "N4: still voicing",
                  "n4_resumed": "N4: resumed"}
OUTCOME_COLUMNS = (Column(key="t", title="T response"), Column(key="silence", title="Silence windows"),
                   Column(key="n4", title="N4"))
SCRIPT_COLUMNS = (Column(key="speaker", title="Speaker"), Column(key="label", title="Label"),
                  Column(key="text", title="Text"))


def outcome_cells(o: MPEOutcome) -> list[Cell]:
    """The run page's T response, silence windows (clean/all) and N4 results of an outcome."""
    clean, windows = o.silence
    return [Cell(text=(T_WORDS[o.t] if o.t is not None else "–") + _judged(o.correct), bad=o.t == "none"),
            Cell(text=f"{clean}/{windows}", bad=clean < windows),
            Cell(text=", ".join(x.replace("_", " ") for x in o.n4) if o.n4 else "–")]


def metric_notes(analyses: Mapping[str, Any], model: str) -> list[str]:
    """The paired explicit-vs-implicit comparison of response presence (stats.paired_addressing)."""
    pa = (analyses.get("paired_addressing") or {}).get(model)
    if not pa or not pa.get("n_pairs"):
        return []
    diff = pa["diff_pp"]
    return [f"Explicit vs implicit response presence over {pa['n_pairs']} pairs: "
            f"{pa['explicit_rate'] * 100:.1f}% vs {pa['implicit_rate'] * 100:.1f}% "
            f"({'+' if diff >= 0 else ''}{_num(diff)} pp, exact McNemar p = {_num(pa['p_mcnemar'])})"]


def _num(x: float) -> str:
    """A number as plainly as it was computed (1.0 -> 1, 0.25 -> 0.25)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _turns(scenario: Scenario | None) -> dict[int, Turn]:
    return {t.idx: t for t in scenario.turns} if scenario is not None else {}


def status_text(status: Mapping[str, Any], scenario: Scenario | None) -> str:
    """The scheduler's status (:meth:`Scheduler.status`) in words."""
    state = status.get("state")
    if state == "preamble":
        return "Playing the duty preamble"
    if state == "playing":
        turn = _turns(scenario).get(int(status["idx"]))
        who = f"{turn.speaker}, " if turn is not None else ""
        return f"Playing turn {status['idx'] + 1}: {who}{status['label']} ({LABEL_TITLES.get(status['label'], '')})"
    if state == "gap":
        return "Pause between turns"
    if state == "n4_gap":
        return f"N4: {N4_GAP_S:g} s pause before the resolution, {status['remaining_s']:.1f} s left"
    if state == "t_wait_onset":
        return f"Waiting for Aria's onset, {status['remaining_s']:.1f} s left"
    if state == "t_wait_silence":
        return (f"Aria is answering: confirmed silence {status['silence_s']:.1f} / {status['need_s']:g} s "
                f"(cap in {round(status['cap_left_s'])} s)")
    if state == "ended":
        return "Episode ended"
    return str(state)


def room_blocks(events: Sequence[Event], scenario: Scenario | None) -> list[Block]:
    """The duty preamble and each turn's clip, coloured by its label (with its speaker and words
    where the script is shown)."""
    turns = _turns(scenario)
    out: list[Block] = []
    for e in events:
        if e.type == "preamble.start":
            out.append(Block(key="preamble", idx=None, kind="pre", who="preamble", title="Duty preamble",
                             aria="Duty preamble at {t}", start=e.t, end=None))
        elif e.type == "clip.start" and "idx" in e.data:
            idx = int(e.data["idx"])
            turn = turns.get(idx)
            label = e.data.get("label", turn.label if turn is not None else None)
            speaker = e.data.get("speaker", turn.speaker if turn is not None else None)
            text = turn.text if turn is not None else ""
            if label is None:  # the script is withheld: only where a clip played
                out.append(Block(key=f"clip-{idx}", idx=idx, kind="", who=f"turn {idx + 1}", title=f"turn {idx + 1}",
                                 aria=f"{{t}}: turn {idx + 1}", start=e.t, end=None))
                continue
            out.append(Block(key=f"clip-{idx}", idx=idx, kind=str(label), who=f"{speaker} · {label}", text=text,
                             title=f"{speaker} · {label} ({LABEL_TITLES.get(str(label), '')}): {text}",
                             aria=f"{{t}}: speaker {speaker}, {label}, {text}", start=e.t, end=None))
        elif e.type in ("preamble.end", "clip.end"):
            key = "preamble" if e.type == "preamble.end" else f"clip-{e.data.get('idx')}"
            for i, b in enumerate(out):
                if b.key == key and b.end is None:
                    out[i] = b.model_copy(update={"end": e.t})
    return out


def script_rows(scenario: Scenario, events: Sequence[Event], timeline: Timeline) -> list[ScriptRow]:
    """Every turn of the script: when its clip began, its speaker, label and words, and its window's verdict."""
    starts: dict[int, int] = {}
    playing: set[int] = set()
    for e in events:
        if e.type == "clip.start" and "idx" in e.data:
            starts.setdefault(int(e.data["idx"]), e.t)
            playing.add(int(e.data["idx"]))
        elif e.type == "clip.end" and "idx" in e.data:
            playing.discard(int(e.data["idx"]))
    rows = []
    for idx, t in _turns(scenario).items():
        w = next((w for w in timeline.windows if w.idx == idx), None)
        rows.append(ScriptRow(key=f"turn-{idx}", start=starts.get(idx), now=idx in playing, verdict=w.verdict if w else None,
                              cells=[Cell(text=t.speaker), Cell(text=t.label, chip=t.label, title=LABEL_TITLES.get(t.label)),
                                     Cell(text=t.text)]))
    return rows


def script_notes(entry: EpisodeScore | None) -> list[Note]:
    """Aria's transcribed answer to T, once scored (with a transcript)."""
    if entry is None or entry.t.transcript is None:
        return []
    return [Note(title="Aria's answer", text=entry.t.transcript)]


def script_facts(scenario: Scenario) -> list[Note]:
    """The gold answer to T."""
    return [Note(title="Gold answer", text=scenario.gold_answer or "–")]
