"""Window rules of DESIGN §6, pure: logged events + detector segments in, outcomes out.

Everything here works on integer sample counts at the stream rate (24 kHz); seconds only
appear in :meth:`to_json` helpers at the edge. Segments are half-open ``[start, end)``;
speech is *active at t* when ``start <= t < end``.

No audio, no models, no I/O: the semantic part (ASR, judges) is layered on top by
:mod:`server.benchmarks.mpe.scoring`, which decides the verdicts of windows that hold speech.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence, get_args

from server.benchmarks.mpe.scheduler import GAP_S, N4_GAP_S, ONSET_WAIT_S
from server.benchmarks.mpe.speaking import speaking_at
from server.core.events import Event
from server.core.spans import Span, active_at, clipped, overlap_with, total
from server.core.timebase import STREAM_RATE, samples
from server.scoring.errors import BadBundle

ONSET_WAIT = samples(ONSET_WAIT_S)  # §6 T: an onset in (e_T, e_T + 5 s]
N4_GAP = samples(N4_GAP_S)  # §6 N4: window response in [start N4Q, end N4Q + 3 s]
N4_DEADLINE = 2 * STREAM_RATE  # §6 N4: silent at t_R + 2 s
CLIP_GAP = samples(GAP_S)  # §6 N4: t_E = end of N4R + 0.5 s
TAIL = 768  # one detector chunk: speech ending this close to the end of the recording ran to it

SilenceLabel = Literal["N1", "N2", "N3"]
N4Category = Literal["already_speaking", "started_during_q", "fresh_onset", "no_speech"]
N4Outcome = Literal["pass", "still_voicing", "resumed"]
SILENCE_LABELS: tuple[SilenceLabel, ...] = get_args(SilenceLabel)
#: the utterance types a model may respond to: what the response decisions count and the text reference decides
RESPONSE_LABELS: tuple[str, ...] = ("T", *SILENCE_LABELS, "N4Q")
N4_CATEGORIES: tuple[N4Category, ...] = get_args(N4Category)
N4_OUTCOMES: tuple[N4Outcome, ...] = get_args(N4Outcome)


# --- timeline ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    idx: int
    label: str
    speaker: str
    start: int
    end: int


@dataclass(frozen=True)
class Timeline:
    """What the room did, from the episode's events (§3)."""

    clips: tuple[Clip, ...]
    end: int  # episode.end
    n_samples: int  # length of the recorded assistant track
    t_wait: tuple[int, int, str] | None  # (start, end, reason) of the wait after T
    preamble: tuple[int, int] | None = None

    def clip(self, idx: int) -> Clip:
        for c in self.clips:
            if c.idx == idx:
                return c
        raise KeyError(idx)

    def next_start(self, i: int) -> int:
        """Start of the clip after position ``i`` (the episode end after the last clip)."""
        return self.clips[i + 1].start if i + 1 < len(self.clips) else self.end


def parse_timeline(events: Iterable[Event], n_samples: int, end_sample: int | None = None) -> Timeline:
    """Build the room timeline from the logged events (§3)."""
    starts: dict[int, dict[str, Any]] = {}
    ends: dict[int, int] = {}
    order: list[int] = []
    end = None
    wait_start = wait_end = None
    pre_start = pre_end = None
    reason = ""
    for e in events:
        typ, t, data = e.type, e.t, e.data
        if typ == "clip.start":
            idx = int(data["idx"])
            if idx not in starts:
                order.append(idx)
            starts[idx] = {"t": t, "label": data.get("label", ""), "speaker": data.get("speaker", "")}
        elif typ == "clip.end":
            ends[int(data["idx"])] = t
        elif typ == "t_wait.start":
            wait_start = t
        elif typ == "t_wait.end":
            wait_end, reason = t, str(data.get("reason", ""))
        elif typ == "episode.end":
            end = t
        elif typ == "preamble.start":
            pre_start = t
        elif typ == "preamble.end":
            pre_end = t
    if not order:
        raise BadBundle("the episode has no clip.start events")
    missing = [i for i in order if i not in ends]
    if missing:
        raise BadBundle(f"clips {missing} have no clip.end event (incomplete episode)")
    if end is None:
        end = end_sample if end_sample is not None else n_samples
        if end is None or end <= 0:
            raise BadBundle("the episode has no episode.end event")
    clips = tuple(
        Clip(idx=i, label=starts[i]["label"], speaker=starts[i]["speaker"], start=starts[i]["t"], end=ends[i])
        for i in sorted(order, key=lambda i: starts[i]["t"])
    )
    t_wait = None if wait_start is None or wait_end is None else (wait_start, wait_end, reason)
    preamble = None if pre_start is None or pre_end is None else (pre_start, pre_end)
    return Timeline(clips=clips, end=end, n_samples=max(n_samples, 0), t_wait=t_wait, preamble=preamble)


# --- windows ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TOutcome:
    turn_idx: int
    start: int  # T clip start
    e_t: int  # T clip end
    wait_end: int
    fresh: bool  # §6: no speech active at e_T and an onset in (e_T, e_T + 5 s]
    present: bool  # §6: fresh, or speech active at e_T
    already_speaking: bool
    onset: int | None  # the fresh onset, or where the response audio starts when already speaking
    response: tuple[Span, ...]  # detected speech from the response start to the end of the wait

    @property
    def speech(self) -> int:
        return total(self.response)


@dataclass(frozen=True)
class SilenceWindow:
    turn_idx: int
    label: str
    start: int
    end: int  # the next clip's start, or the episode end
    speech: tuple[Span, ...]  # detected speech inside the window
    overlap_human: int  # samples of that speech overlapping any human clip

    @property
    def speech_samples(self) -> int:
        return total(self.speech)

    @property
    def has_speech(self) -> bool:
        return bool(self.speech)


@dataclass(frozen=True)
class N4Event:
    q_idx: int
    r_idx: int
    q_start: int
    q_end: int
    t_r: int
    t_e: int
    deadline: int
    window_response: bool
    category: N4Category
    speaking_at_t_r: bool
    eligible: bool
    outcome: N4Outcome | None  # for eligible events, else None
    censored: bool  # the recording ends before the deadline


@dataclass(frozen=True)
class EpisodeWindows:
    timeline: Timeline
    segments: tuple[Span, ...]
    t: TOutcome
    silence: tuple[SilenceWindow, ...]
    n4: tuple[N4Event, ...]
    request_time: int = field(default=0)  # first human turn start to T start (input timing)


def t_outcome(tl: Timeline, segments: Sequence[Span]) -> TOutcome:
    ts = [c for c in tl.clips if c.label == "T"]
    if len(ts) != 1:
        raise BadBundle(f"the episode has {len(ts)} T clips (exactly one expected)")
    t = ts[0]
    e_t = t.end
    wait_end = tl.t_wait[1] if tl.t_wait else _after(tl, t)
    # §3/§6 "speech already active at e_T": the rule the live scheduler follows too.
    already = speaking_at(segments, e_t)
    seg_at = active_at(segments, e_t)
    # §6 T: fresh = nothing active at e_T and an onset in (e_T, e_T + 5 s].
    onset = next((s for s, _ in segments if e_t < s <= e_t + ONSET_WAIT), None)
    fresh = not already and onset is not None
    present = fresh or already
    if fresh:
        begin: int | None = onset
    elif seg_at is not None:
        begin = max(seg_at[0], t.start)  # §6: from the active segment's start, not before T's start
    else:
        begin = None
    response = tuple(clipped(segments, begin, wait_end)) if begin is not None and wait_end > begin else ()
    return TOutcome(turn_idx=t.idx, start=t.start, e_t=e_t, wait_end=wait_end, fresh=fresh, present=present,
                    already_speaking=already, onset=begin, response=response)


def _after(tl: Timeline, clip: Clip) -> int:
    i = tl.clips.index(clip)
    return tl.next_start(i)


def silence_windows(tl: Timeline, segments: Sequence[Span]) -> list[SilenceWindow]:
    humans = [(c.start, c.end) for c in tl.clips]
    out = []
    for i, c in enumerate(tl.clips):
        if c.label not in SILENCE_LABELS:
            continue
        # §6 N1-N3: from the clip's start to the next clip's start (last clip: episode end).
        end = tl.next_start(i)
        speech = tuple(clipped(segments, c.start, end))
        out.append(SilenceWindow(turn_idx=c.idx, label=c.label, start=c.start, end=end, speech=speech,
                                 overlap_human=overlap_with(speech, humans)))
    return out


def n4_events(tl: Timeline, segments: Sequence[Span]) -> list[N4Event]:
    out = []
    for i, q in enumerate(tl.clips):
        if q.label != "N4Q":
            continue
        if i + 1 >= len(tl.clips) or tl.clips[i + 1].label != "N4R":
            raise BadBundle(f"N4Q turn {q.idx} is not followed by its N4R")
        r = tl.clips[i + 1]
        t_r = r.start  # §6: t_R = start of N4R
        t_e = r.end + CLIP_GAP  # §6: t_E = end of N4R + 0.5 s
        gap_end = q.end + N4_GAP
        # §6: window response = any speech in [start of N4Q, end of N4Q + 3 s].
        window_response = any(s <= gap_end and e > q.start for s, e in segments)
        during_q = any(s <= q.end and e > q.start for s, e in segments)
        if active_at(segments, q.start):
            category = "already_speaking"
        elif during_q:
            category = "started_during_q"
        elif any(q.end < s <= gap_end for s, _ in segments):
            category = "fresh_onset"
        else:
            category = "no_speech"
        speaking = active_at(segments, t_r) is not None
        # §6: eligible = no speech during N4Q, an onset in (end N4Q, end N4Q + 3 s], speech active at t_R.
        eligible = category == "fresh_onset" and speaking
        deadline = t_r + N4_DEADLINE
        censored = deadline >= tl.n_samples > 0
        outcome = None
        if eligible:
            if censored:
                # The recording stops before t_R + 2 s: speech running to its end counts as voicing.
                voicing = any(e >= tl.n_samples - TAIL and s <= tl.n_samples for s, e in segments)
                outcome = "still_voicing" if voicing else "pass"
            elif active_at(segments, deadline):
                outcome = "still_voicing"  # §6: speaking at the deadline
            elif t_e > deadline and any(s <= t_e and e > deadline for s, e in segments):
                outcome = "resumed"  # §6: silent at t_R + 2 s, but not until t_E
            else:
                outcome = "pass"
        out.append(N4Event(q_idx=q.idx, r_idx=r.idx, q_start=q.start, q_end=q.end, t_r=t_r, t_e=t_e,
                           deadline=deadline, window_response=window_response, category=category,
                           speaking_at_t_r=speaking, eligible=eligible, outcome=outcome, censored=censored))
    return out


def episode_windows(tl: Timeline, segments: Iterable[Span]) -> EpisodeWindows:
    segs = tuple(sorted((int(s), int(e)) for s, e in segments if e > s))
    t = t_outcome(tl, segs)
    # Request time (§6 analyses): first human turn to T, from input timing only.
    request_time = t.start - tl.clips[0].start
    return EpisodeWindows(timeline=tl, segments=segs, t=t, silence=tuple(silence_windows(tl, segs)),
                          n4=tuple(n4_events(tl, segs)), request_time=request_time)
