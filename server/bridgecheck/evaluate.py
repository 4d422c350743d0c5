"""The bridge check's judgement, pure: the recorded attempts of the check runs in, a pass/fail
report with concrete advice per line out.

What is judged, per clock the bridge announced (DESIGN §4, docs/protocol.md §5-§7):

- ``episodes``: every check episode completed; the codes of failed attempts, with advice;
- ``frames``: frame size and format (``bad_frame``, ``message_too_big``, ``unsupported_version``);
- ``seq``: assistant seqs in order (``bad_seq``; lockstep: one answer per room frame);
- ``timing``: lockstep turnaround per frame (``timeout``); realtime lateness ``slot - seq`` and
  slots left silent, from the frame log;
- ``speech``: whether the output is detected as speech at all (§5: the detector counts speech
  only, a tone is not speech);
- ``reaction``: the onset after the request ends, from the window rule of §6 T;
- ``reset``: fresh state per episode: a later episode must not open with speech (before
  anything was asked) when the bridge's first episode did not;
- ``barge_in``: stopping when talked over: where the bridge is speaking when a person starts a
  turn after the request (N4Q, N4R), its speech must stop within ``STOP_WITHIN`` (1.0 s) of that
  turn's start: the interruption rule of MTR-DuplexBench as this project scores it
  (server/benchmarks/mtr/rules.py; /work/shared/notes/mtr-duplexbench.md: the model must be
  silent during the interruption);
- ``rate``: audio at the announced rate: the apparent vocal-tract length of the bridge's voiced
  speech (:mod:`.vocaltract`) must be one a human can have. A bridge that announces 16 kHz and
  sends 24 kHz audio is played 1.5 times slow, its formants scaled by 2/3 and its tract 1.5 times
  too long: it fails above ``TRACT_FAIL_CM``; the reverse (24 kHz announced, 16 kHz sent) makes the
  tract 2/3 as long: a warning below ``TRACT_WARN_CM`` (a child's voice is that short too).

Nothing here reads a clock, a socket or the database (:mod:`.runs` loads the attempts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clients.checkreport import BridgeOut, CheckLine, CheckReport, RunState, Verdict
from clients.codec import FRAME_MS, FRAME_SAMPLES, STREAM_RATE, frame_samples
from clients.messages import CLOCKS
from server.benchmarks.mpe.rules import ONSET_WAIT, TAIL, parse_timeline, t_outcome
from server.benchmarks.mtr.rules import STOP_WITHIN
from server.bridgecheck.vocaltract import TractFrames, estimate
from server.core.events import Event
from server.core.spans import Span, active_at
from server.core.status import ACTIVE_RUN, FAILED_ATTEMPT, AttemptStatus, RunStatus
from server.scoring.errors import BadBundle

FRAME = FRAME_SAMPLES
FRAME_US = FRAME_MS * 1000

# Realtime (§4: placed at the arrival slot): answering takes time and lateness is expected;
# falling behind (answers ever later, slots left silent) is not. Limits on (95th percentile of
# the answer time in frames, largest lateness in slots, share of slots without a frame):
REALTIME_WARN = (1, 3, 0.01)  # beyond 80 ms, 3 slots (240 ms) or 1% of slots: warn
REALTIME_FAIL = (3, 12, 0.05)  # beyond 240 ms, 12 slots (~1 s) or 5% of slots: fail

FRAME_CODES = ("bad_frame", "message_too_big", "unsupported_version")

# The rate line's bounds, from Lammert & Narayanan 2015 (PLoS ONE 10(7): e0132193, "On Short-Time
# Estimation of Vocal Tract Length from Formant Frequencies"): the adult tracts their estimation was
# evaluated on span 14-19 cm (simulated; 14.5-18.0 cm measured by rtMRI in five speakers), and
# estimating the length from formants on human speech erred by 1.277 cm RMS. A failure needs the
# apparent length two errors beyond the longest adult tract; a warning, one error below the shortest.
ADULT_TRACT_CM = (14.0, 19.0)
TRACT_RMSE_CM = 1.277
TRACT_FAIL_CM = ADULT_TRACT_CM[1] + 2 * TRACT_RMSE_CM  # 21.55 cm
TRACT_WARN_CM = ADULT_TRACT_CM[0] - TRACT_RMSE_CM  # 12.72 cm
#: voiced speech needed to judge the rate (frames where F1..F4 were tracked): a median over fewer
#: frames rests on a handful of syllables
MIN_VOICED_S = 1.0


#: what to do about each error code an attempt can end with (server/engine/session.py,
#: clients/errors.py, server/engine/bridge_ws.py); a code not listed is the bridge's own
ADVICE: dict[str, str] = {
    "bad_frame": "Send exactly one frame per binary message: the 8-byte header (version 1, kind 2, flags 0, "
                 "seq) and then frame_samples int16 little-endian samples (1920 at 24 kHz, 1280 at 16 kHz: "
                 "take episode.start.frame_samples), or the header alone with flags = 1 (SILENT) for silence. "
                 "The rate you send must be the one announced in hello.sample_rate (docs/protocol.md §5, §6).",
    "message_too_big": "A binary message may hold one frame only (8 + 2*frame_samples bytes): do not batch "
                       "frames or send a longer buffer; split your model's audio into 80 ms frames.",
    "unsupported_version": "Byte 0 of every binary frame is the protocol version, 1 (docs/protocol.md §5).",
    "bad_seq": "Answer room frame n with assistant frame seq n. Lockstep: exactly one answer per room frame, "
               "in order, no gaps or repeats. Realtime: seq strictly increasing, never 25 or more frames ahead "
               "of the room frames received, and no more than 2 s of audio queued ahead of real time "
               "(docs/protocol.md §7).",
    "timeout": "In lockstep the server waits for the answer to every room frame, SILENT ones included, and "
               "gives up after 30 s without a message. Answer each frame as it arrives (None or zeros for "
               "silence); never wait for more input before answering, and run a slow model step in a "
               "worker thread so the socket keeps being served.",
    "disconnected": "The bridge closed the connection during an episode without sending an error: look at the "
                    "bridge's log (an exception in reset or step?). With the SDK, step() must return "
                    "int16[frame_samples] or None; raise an MPEError to report a failure with its own code.",
    "internal": "The server failed during the attempt (its fault, not the bridge's): the attempt's message "
                "names the exception and the server's log has its traceback. The episode is tried again (up to "
                "the run's max_attempts); report it if it repeats.",
    "unexpected_message": "Send audio only between episode.start and episode.end, and hello only once "
                          "(docs/protocol.md §3).",
    "bad_json": "Text messages must be JSON objects (docs/protocol.md §4).",
    "bad_message": "A text message did not match its schema: check the field names and types of "
                   "text {seq, text}, stats {data} and error {code, message} (docs/protocol.md §4).",
    "unknown_type": "Bridges may send only the text message types hello, text, stats and error.",
    "lease_expired": "The attempt stalled past its lease (the bridge or the server stopped making progress) "
                     "and was given up; check that the bridge keeps answering and does not block the socket.",
    "aborted": "The attempt was stopped by the server (the check was cancelled or the server shut down).",
    "bridge_error": "The bridge's own code raised an exception in reset(), step() or force() (the message names "
                    "its type and text; the bridge's log has the file and line). The SDK fails that attempt and "
                    "goes on with the next episode; fix the exception in the bridge.",
}
OWN_CODE_ADVICE = ("Your bridge sent this error itself (an error message with its own code): see its message, "
                   "and the log of the bridge or of the model's endpoint behind it.")


# --- inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoomFrame:
    """A room frame of the frame log: its seq and when it was sent (µs after the episode's t0)."""

    seq: int
    sent_us: int | None


@dataclass(frozen=True)
class AnswerFrame:
    """An assistant frame of the frame log: its seq, the timeline slot it was placed at, when it
    arrived (µs after t0) and whether it was all zeros."""

    seq: int
    slot: int
    arrived_us: int | None
    silent: bool


@dataclass(frozen=True)
class RecordedAttempt:
    """One attempt of a check episode as recorded (§8), in the order the attempts started."""

    clock: str
    episode: int  # the episode's ordinal in its run
    status: AttemptStatus
    error_code: str | None
    error_message: str | None
    bridge_id: str
    bridge_rate: int
    room: tuple[RoomFrame, ...]
    answers: tuple[AnswerFrame, ...]
    segments: tuple[Span, ...]  # the live detector's speech segments (completed attempts only)
    events: tuple[Event, ...]
    end_sample: int | None
    tract: TractFrames | None = None  # the bridge's voiced speech tracked (completed attempts, once the check ended)

    @property
    def n_samples(self) -> int:
        """Length of the recorded assistant track (one frame per room frame)."""
        return len(self.room) * FRAME


@dataclass(frozen=True)
class CheckRun:
    """One run of the check (one per clock)."""

    clock: str
    run_id: str
    status: RunStatus
    episodes: int


@dataclass(frozen=True)
class BridgeSeen:
    """A bridge of the check's model: one that served a check attempt, or one connected now."""

    bridge_id: str
    model_revision: str
    sample_rate: int
    clocks: tuple[str, ...]
    connected: bool
    check: bool = True  # it announced hello.check: only such a bridge is given the check's episodes


# --- the report -------------------------------------------------------------------------------


# --- judgement --------------------------------------------------------------------------------


def _s(samples: int) -> str:
    return f"{samples / STREAM_RATE:.2f} s"


def _ms(us: float) -> str:
    return f"{us / 1000:.0f} ms"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _advice(code: str) -> str:
    return ADVICE.get(code, OWN_CODE_ADVICE)


def _first_error(attempts: Sequence[RecordedAttempt], codes: Sequence[str]) -> RecordedAttempt | None:
    return next((a for a in attempts if a.error_code in codes), None)


def _error_text(a: RecordedAttempt) -> str:
    return f"{a.error_code}: {a.error_message}" if a.error_message else str(a.error_code)


def _episodes_line(clock: str, run: CheckRun, ended: Sequence[RecordedAttempt], bridges_seen: bool) -> CheckLine:
    completed = {a.episode for a in ended if a.status == AttemptStatus.completed}
    failed = [a for a in ended if a.status != AttemptStatus.completed]
    if not ended:
        if run.status in ACTIVE_RUN:
            return CheckLine(check="episodes", clock=clock, verdict=Verdict.skipped, detail="not run yet")
        detail = f"no episode ran (the run is {run.status})"
        if not bridges_seen:
            return CheckLine(check="episodes", clock=clock, verdict=Verdict.skipped, detail=detail)
        return CheckLine(check="episodes", clock=clock, verdict=Verdict.failed, detail=detail,
                         advice="A bridge in check mode connected but took no episode of this clock before the "
                                "check gave up: it was busy with the check's other clock, or stopped serving "
                                "(look at its log).")
    detail = f"{len(completed)} of {run.episodes} completed"
    if not failed:
        verdict = Verdict.passed if len(completed) == run.episodes else Verdict.skipped
        return CheckLine(check="episodes", clock=clock, verdict=verdict, detail=detail)
    codes = list(dict.fromkeys(a.error_code or "unknown" for a in failed))
    first = {c: next(a for a in failed if (a.error_code or "unknown") == c) for c in codes}
    counts = {c: sum((a.error_code or "unknown") == c for a in failed) for c in codes}
    detail += "; attempts that ended early: " + "; ".join(
        _error_text(first[c]) + (f" (x{counts[c]})" if counts[c] > 1 else "") for c in codes)
    # an unstarted attempt (the bridge left before answering, e.g. it was restarted) is not the
    # model's failure (server.core.status), but worth a look
    verdict = Verdict.failed if any(a.status in FAILED_ATTEMPT for a in failed) else Verdict.warn
    return CheckLine(check="episodes", clock=clock, verdict=verdict, detail=detail,
                     advice=" ".join(f"[{c}] {_advice(c)}" for c in codes))


def _frames_line(clock: str, ended: Sequence[RecordedAttempt], done: Sequence[RecordedAttempt]) -> CheckLine:
    bad = _first_error(ended, FRAME_CODES)
    if bad is not None:
        return CheckLine(check="frames", clock=clock, verdict=Verdict.failed, detail=_error_text(bad),
                         advice=_advice(bad.error_code or ""))
    if not done:
        return CheckLine(check="frames", clock=clock, verdict=Verdict.skipped, detail="no episode completed")
    rates = sorted({a.bridge_rate for a in done})
    n = sum(len(a.answers) for a in done)
    sizes = ", ".join(f"{frame_samples(r)} samples at {r} Hz" for r in rates)
    return CheckLine(check="frames", clock=clock, verdict=Verdict.passed, detail=f"{n} frames, each {sizes}")


def _seq_problem(a: RecordedAttempt) -> str | None:
    seqs = [f.seq for f in a.answers]
    if any(b <= x for x, b in zip(seqs, seqs[1:])):
        return "assistant seqs do not increase"
    if a.clock == "lockstep" and seqs != [f.seq for f in a.room]:
        return f"{len(seqs)} answers to {len(a.room)} room frames"
    return None


def _seq_line(clock: str, ended: Sequence[RecordedAttempt], done: Sequence[RecordedAttempt]) -> CheckLine:
    bad = _first_error(ended, ("bad_seq",))
    if bad is not None:
        return CheckLine(check="seq", clock=clock, verdict=Verdict.failed, detail=_error_text(bad),
                         advice=_advice("bad_seq"))
    if not done:
        return CheckLine(check="seq", clock=clock, verdict=Verdict.skipped, detail="no episode completed")
    problem = next((p for p in map(_seq_problem, done) if p), None)
    if problem:
        return CheckLine(check="seq", clock=clock, verdict=Verdict.failed, detail=problem, advice=_advice("bad_seq"))
    answered = sum(len(a.answers) for a in done)
    rooms = sum(len(a.room) for a in done)
    detail = ("every room frame answered once, with its own seq, in order" if clock == "lockstep"
              else f"{answered} answers to {rooms} room frames, seq increasing")
    return CheckLine(check="seq", clock=clock, verdict=Verdict.passed, detail=detail)


def _turnaround_us(a: RecordedAttempt) -> list[int]:
    """Per answered frame: its arrival minus the send time of the room frame with the same seq."""
    sent = {f.seq: f.sent_us for f in a.room}
    return [f.arrived_us - sent[f.seq] for f in a.answers
            if f.arrived_us is not None and sent.get(f.seq) is not None]


def _timing_line(clock: str, ended: Sequence[RecordedAttempt], done: Sequence[RecordedAttempt]) -> CheckLine:
    bad = _first_error(ended, ("timeout",))
    if bad is not None:
        return CheckLine(check="timing", clock=clock, verdict=Verdict.failed, detail=_error_text(bad),
                         advice=_advice("timeout"))
    turn = [t for a in done for t in _turnaround_us(a)]
    if not turn:
        return CheckLine(check="timing", clock=clock, verdict=Verdict.skipped, detail="no episode completed")
    p50, p95, worst = np.percentile(turn, 50), np.percentile(turn, 95), max(turn)
    answer_time = f"answer after {_ms(p50)} (median), {_ms(p95)} (95th percentile), {_ms(worst)} (max)"
    if clock == "lockstep":
        if p95 > FRAME_US:
            return CheckLine(check="timing", clock=clock, verdict=Verdict.warn, detail=answer_time,
                             advice="Slower than real time (80 ms per frame): lockstep waits for you, but in "
                                    "realtime runs the answers would arrive late and slots would stay silent. "
                                    "Serve realtime only if the model keeps up.")
        return CheckLine(check="timing", clock=clock, verdict=Verdict.passed, detail=answer_time)
    # §4 realtime: lateness = slot - seq (it persists after a stall: frames are never dropped);
    # slots where nothing was placed were recorded as silence.
    worst_late = max((f.slot - f.seq for a in done for f in a.answers), default=0)
    slots = sum(len(a.room) for a in done)
    missing = slots - sum(len(a.answers) for a in done)
    share = missing / slots if slots else 0.0
    detail = (f"{answer_time}; lateness at most {worst_late} slots ({worst_late * FRAME_MS} ms); "
              f"{missing} of {slots} slots without a frame")
    measured = (p95 / FRAME_US, worst_late, share)
    if any(x > limit for x, limit in zip(measured, REALTIME_FAIL)):
        verdict = Verdict.failed
    elif any(x > limit for x, limit in zip(measured, REALTIME_WARN)):
        verdict = Verdict.warn
    else:
        return CheckLine(check="timing", clock=clock, verdict=Verdict.passed, detail=detail)
    return CheckLine(check="timing", clock=clock, verdict=verdict, detail=detail,
                     advice="The bridge does not keep up with real time: every room frame must be answered within "
                            "80 ms, or its answers arrive later and later and slots stay silent. Never block the "
                            "receive loop (run the model in a worker thread, or as an AsyncBridge whose step "
                            "returns at once) and send each frame as soon as it is ready. Occasional lateness "
                            "also comes from a loaded machine (of the bridge or of the server).")


def _speech_line(clock: str, done: Sequence[RecordedAttempt]) -> CheckLine:
    if not done:
        return CheckLine(check="speech", clock=clock, verdict=Verdict.skipped, detail="no episode completed")
    audible = sum(not f.silent for a in done for f in a.answers)
    speech = sum(e - s for a in done for s, e in a.segments)
    if speech:
        return CheckLine(check="speech", clock=clock, verdict=Verdict.passed,
                         detail=f"{_s(speech)} of speech in {_plural(len(done), 'episode')}")
    if not audible:
        return CheckLine(check="speech", clock=clock, verdict=Verdict.failed,
                         detail="only silence: every assistant frame was SILENT or zeros",
                         advice="The check asks the bridge something and expects a spoken answer. Return the "
                                "model's audio from step() (int16[frame_samples]); None or zeros are silence.")
    return CheckLine(check="speech", clock=clock, verdict=Verdict.failed,
                     detail=f"{_plural(audible, 'frame')} of sound, none detected as speech",
                     advice="The server's detector (Silero VAD, DESIGN §5) counts speech only: a tone, a beep or "
                            "noise is never a response. Send the model's speech; check that samples are int16 "
                            "little-endian (not float32, not big-endian), at the rate announced in hello, "
                            "and not too quiet.")


def _reaction_line(clock: str, done: Sequence[RecordedAttempt]) -> CheckLine:
    fresh: list[int] = []
    already = none = 0
    for a in done:
        try:
            t = t_outcome(parse_timeline(a.events, a.n_samples, a.end_sample), a.segments)
        except BadBundle:
            continue
        if t.fresh and t.onset is not None:
            fresh.append(t.onset - t.e_t)  # §6 T: a fresh onset in (e_T, e_T + 5 s]
        elif t.already_speaking:
            already += 1
        else:
            none += 1
    n = len(fresh) + already + none
    if not n:
        return CheckLine(check="reaction", clock=clock, verdict=Verdict.skipped, detail="no episode completed")
    parts = []
    if fresh:
        parts.append(f"speech onset {_s(int(np.median(fresh)))} after the request ended (median of "
                     f"{len(fresh)}; max {_s(max(fresh))})")
    if already:
        parts.append(f"already speaking when the request ended in {_plural(already, 'episode')}")
    if none:
        parts.append(f"no speech within {_s(ONSET_WAIT)} of the request's end in {_plural(none, 'episode')}")
    detail = "; ".join(parts)
    if len(fresh) == n:
        return CheckLine(check="reaction", clock=clock, verdict=Verdict.passed, detail=detail)
    # no response at all fails; speech running through the end of the request cannot be timed
    advice = ("After a request the benchmark waits 5 s for the model's speech to begin (DESIGN §3) and counts "
              "a response only when it starts after the request ended. Answer when the room goes quiet after "
              "a question, stop talking while people speak, and make sure the answer is speech "
              "(see the speech line).")
    return CheckLine(check="reaction", clock=clock, verdict=Verdict.failed if none == n else Verdict.warn,
                     detail=detail, advice=advice)


def _barge_in(a: RecordedAttempt) -> tuple[str, int] | None:
    """The first person's turn after the request that starts while the bridge speaks: (its label,
    samples from its start to the end of the bridge's speech), or None when the bridge was silent
    at every such start."""
    try:
        tl = parse_timeline(a.events, a.n_samples, a.end_sample)
    except BadBundle:
        return None
    t_end = next((c.end for c in tl.clips if c.label == "T"), None)
    if t_end is None:
        return None
    for clip in tl.clips:
        if clip.start >= t_end and (seg := active_at(a.segments, clip.start)) is not None:
            return clip.label, seg[1] - clip.start
    return None


def _barge_in_line(clock: str, done: Sequence[RecordedAttempt]) -> CheckLine:
    talked_over = [(a, hit) for a in done if (hit := _barge_in(a)) is not None]
    if not done:
        return CheckLine(check="barge_in", clock=clock, verdict=Verdict.skipped, detail="no episode completed")
    if not talked_over:
        return CheckLine(check="barge_in", clock=clock, verdict=Verdict.skipped,
                         detail="the bridge was silent whenever a person started talking after the request: "
                                "nothing to judge")
    late = [(a, label, stop) for a, (label, stop) in talked_over if stop > STOP_WITHIN]
    shown = "; ".join(f"episode {a.episode + 1}: {label} started while it spoke, its speech ran on {_s(stop)}"
                      for a, (label, stop) in talked_over)
    if not late:
        return CheckLine(check="barge_in", clock=clock, verdict=Verdict.passed, detail=shown)
    return CheckLine(check="barge_in", clock=clock, verdict=Verdict.failed,
                     detail=f"{shown} (limit {_s(STOP_WITHIN)})",
                     advice=f"When someone starts talking over the bridge, its speech must stop within "
                            f"{_s(STOP_WITHIN)} (the interruption rule of MTR-DuplexBench): watch the room "
                            "frames while speaking and drop the rest of the queued answer when speech begins.")


RATE_ADVICE_SLOW = (
    "The bridge's speech plays slower and lower than it was made: it sends audio at a higher rate than the "
    "one it announces (e.g. 24 kHz audio with hello.sample_rate = 16000). Announce the rate your model "
    "produces in hello.sample_rate, or resample its audio to the announced rate before sending "
    "(docs/protocol.md §6).")
RATE_ADVICE_FAST = (
    "The bridge's speech sounds like a child's: if the voice is an adult's, it plays faster and higher than "
    "it was made: the bridge sends audio at a lower rate than the one it announces (e.g. 16 kHz audio with "
    "hello.sample_rate = 24000). Announce the rate your model produces in hello.sample_rate, or resample "
    "its audio to the announced rate before sending (docs/protocol.md §6).")


def _rate_line(clock: str, done: Sequence[RecordedAttempt]) -> CheckLine:
    tracked = [a.tract for a in done if a.tract is not None]
    found = estimate(tracked)
    rates = "/".join(f"{r // 1000} kHz" if r % 1000 == 0 else f"{r} Hz" for r in sorted({a.bridge_rate for a in done}))
    if found is None or found.seconds < MIN_VOICED_S:
        voiced = found.seconds if found else 0.0
        return CheckLine(check="rate", clock=clock, verdict=Verdict.skipped,
                         detail=f"{voiced:.2f} s of voiced speech with its formants tracked; at least "
                                f"{MIN_VOICED_S:.2f} s is needed to judge the rate")
    detail = (f"apparent vocal-tract length {found.length_cm:.1f} cm over {found.seconds:.2f} s of voiced "
              f"speech (formant ceiling {found.ceiling_hz:.0f} Hz), sent as {rates}; adult tracts are "
              f"{ADULT_TRACT_CM[0]:.0f}-{ADULT_TRACT_CM[1]:.0f} cm")
    if found.length_cm > TRACT_FAIL_CM:
        return CheckLine(check="rate", clock=clock, verdict=Verdict.failed,
                         detail=f"{detail}: above {TRACT_FAIL_CM:.1f} cm, longer than any adult's by more than twice "
                                f"the estimation error", advice=RATE_ADVICE_SLOW)
    if found.length_cm < TRACT_WARN_CM:
        return CheckLine(check="rate", clock=clock, verdict=Verdict.warn,
                         detail=f"{detail}: below {TRACT_WARN_CM:.1f} cm", advice=RATE_ADVICE_FAST)
    return CheckLine(check="rate", clock=clock, verdict=Verdict.passed, detail=detail)


def _opening_speech(a: RecordedAttempt) -> Span | None:
    """The first speech before the preamble ended (nothing has been asked yet), if any."""
    try:
        tl = parse_timeline(a.events, a.n_samples, a.end_sample)
    except BadBundle:
        return None
    end = tl.preamble[1] if tl.preamble else (tl.clips[0].start if tl.clips else 0)
    return next(((s, e) for s, e in sorted(a.segments) if s < end), None)


def _ends_speaking(a: RecordedAttempt) -> bool:
    return any(e >= a.n_samples - TAIL for _, e in a.segments)


def _reset_lines(done_in_order: Sequence[RecordedAttempt]) -> dict[str, CheckLine]:
    """Fresh state per episode, judged from what can be heard: each bridge's later episodes must
    not open with speech (during the preamble, before anything was asked) unless its first one did."""
    results: dict[str, list[tuple[Verdict, str]]] = {}
    by_bridge: dict[str, list[RecordedAttempt]] = {}
    for a in done_in_order:
        by_bridge.setdefault(a.bridge_id, []).append(a)
    for attempts in by_bridge.values():
        first_opening = _opening_speech(attempts[0])
        for prev, a in zip(attempts, attempts[1:]):
            opening = _opening_speech(a)
            prev_speaking = _ends_speaking(prev)
            where = f"{a.clock} episode {a.episode + 1}"
            after = (f" right after the previous episode ({prev.clock} episode {prev.episode + 1}) ended "
                     "mid-speech" if prev_speaking else "")
            if opening is None:
                note = " (the previous one ended mid-speech)" if prev_speaking else ""
                results.setdefault(a.clock, []).append((Verdict.passed, f"{where} opened silent{note}"))
            elif first_opening is not None:
                results.setdefault(a.clock, []).append(
                    (Verdict.warn, f"{where} opens with speech, like the bridge's first episode: "
                                   "reset cannot be judged from the audio"))
            else:
                results.setdefault(a.clock, []).append(
                    (Verdict.failed, f"{where} speaks at {_s(opening[0])}-{_s(opening[1])}, before anything was "
                                     f"asked{after}; the bridge's first episode did not"))
    lines = {}
    for clock, found in results.items():
        verdict = next((v for v in (Verdict.failed, Verdict.warn) if any(x == v for x, _ in found)), Verdict.passed)
        shown = [d for v, d in found if v == verdict] if verdict != Verdict.passed else [d for _, d in found]
        advice = ""
        if verdict == Verdict.failed:
            advice = ("On episode.start, return to a fresh model state: drop queued or buffered audio, the model's "
                      "conversation context and any counters (SDK: reset()). Audio left over from the previous "
                      "episode plays into the next one.")
        lines[clock] = CheckLine(check="reset", clock=clock, verdict=verdict, detail="; ".join(shown), advice=advice)
    return lines


CHECK_MODE_ADVICE = ("A check's episodes go only to a bridge that announces \"check\": true in hello (the "
                     "client install's `duplex-mpe-client check`, or BridgeOptions(check=True)); a bridge "
                     "without it serves real runs only. Start the bridge in check mode.")


def _bridge_line(model: str, bridges: Sequence[BridgeSeen]) -> CheckLine:
    if bridges and not any(b.check for b in bridges):
        names = ", ".join(b.bridge_id for b in bridges)
        return CheckLine(check="bridge", verdict=Verdict.failed,
                         detail=f"bridges of model '{model}' connected ({names}) but none in check mode",
                         advice=CHECK_MODE_ADVICE)
    if not bridges:
        return CheckLine(check="bridge", verdict=Verdict.failed,
                         detail=f"no bridge announcing model '{model}' connected",
                         advice=f"Start your bridge against this server with hello.model.name = '{model}' and a "
                                "token of the team that created the check (the SDK adds /v1/bridge to the server "
                                "URL). It must announce at least one of the checked clocks in hello.clocks.")
    detail = "; ".join(f"{b.bridge_id}: {b.sample_rate} Hz, clocks {', '.join(b.clocks)}"
                       + (f", revision '{b.model_revision}'" if b.model_revision else "") for b in bridges)
    return CheckLine(check="bridge", verdict=Verdict.passed, detail=detail)


def check_done(runs: Sequence[CheckRun]) -> bool:
    """Every run of the check has ended."""
    return all(r.status not in ACTIVE_RUN for r in runs)


def evaluate(model: str, runs: Sequence[CheckRun], attempts: Sequence[RecordedAttempt],
             bridges: Sequence[BridgeSeen]) -> CheckReport:
    """The check's report from its runs, their attempts (in the order they started) and the bridges
    seen. Until every run has ended (:func:`check_done`) it holds the bridge line only: the other
    lines read the attempts' whole recordings, once, at the end."""
    checking = [b for b in bridges if b.check]
    announced = {c for b in checking for c in b.clocks}
    states = [RunState(clock=r.clock, run_id=r.run_id, status=r.status, episodes=r.episodes,
                       announced=(r.clock in announced) if checking else None) for r in runs]
    ended = [a for a in attempts if a.status != AttemptStatus.running]
    done = [a for a in ended if a.status == AttemptStatus.completed]
    reset = _reset_lines(done)
    lines = [_bridge_line(model, bridges)]
    done_check = check_done(runs)
    for run, state in sorted(zip(runs, states), key=lambda x: CLOCKS.index(x[0].clock)):
        clock = run.clock
        if not done_check:
            break
        if state.announced is False:
            lines.append(CheckLine(check="episodes", clock=clock, verdict=Verdict.skipped,
                                   detail=f"not checked: the bridge announces only {', '.join(sorted(announced))}",
                                   advice=f"To serve {clock} runs, list it in hello.clocks."))
            continue
        mine = [a for a in ended if a.clock == clock]
        mine_done = [a for a in done if a.clock == clock]
        lines += [_episodes_line(clock, run, mine, bool(checking)), _frames_line(clock, mine, mine_done),
                  _seq_line(clock, mine, mine_done), _timing_line(clock, mine, mine_done),
                  _speech_line(clock, mine_done), _reaction_line(clock, mine_done),
                  reset.get(clock) or CheckLine(check="reset", clock=clock, verdict=Verdict.skipped,
                                                detail="needs two completed episodes on one bridge"),
                  _barge_in_line(clock, mine_done), _rate_line(clock, mine_done)]
    return CheckReport(model=model, runs=states,
                       bridges=[BridgeOut(bridge_id=b.bridge_id, model_revision=b.model_revision,
                                          sample_rate=b.sample_rate, clocks=list(b.clocks), connected=b.connected,
                                          check=b.check)
                                for b in bridges],
                       attempts=len(ended), running=len(attempts) - len(ended),
                       done=done_check, lines=lines)
