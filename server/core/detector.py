"""Speech detector for the assistant's output stream (§5).

One implementation serves the live scheduler (fed frame by frame) and offline scoring
(:func:`detect_segments` replays a recorded track through the very same class), so a
replay yields exactly the segments and events the scheduler saw.

Pipeline, all causal:

1. **Resampling.** Input is mono PCM at ``input_rate`` (24 kHz stream, or 16 kHz). At
   24 kHz it is resampled to 16 kHz with ``soxr.ResampleStream`` (float32, HQ). soxr's
   streaming resampler removes its own filter delay: output sample ``m`` is aligned with
   input time ``1.5 * m`` (an impulse at 24 kHz sample 3000 comes out at 16 kHz sample
   2000), so the time mapping below needs **no delay compensation (0 samples)**. The
   delay shows up only as latency: soxr holds back a few hundred samples until it has
   seen enough future input, so a chunk is processed a little after its audio arrived
   (with 80 ms frames, :attr:`SpeechDetector.known_until` trails the pushed audio by
   384-1536 stream samples, 16-64 ms, resampler hold-back plus the partial chunk).
   soxr's output does not depend on how the input is split into calls (verified
   bit-exact), so any push framing gives the same chunks.
2. **Chunking.** The 16 kHz signal is cut into 512-sample chunks (32 ms). Chunk ``i``
   covers stream samples ``[768*i, 768*(i+1))`` at 24 kHz, exactly. All times reported
   by this module are integer sample counts at the 24 kHz stream rate
   (:data:`server.core.timebase.STREAM_RATE`), also when the input is 16 kHz.
3. **Model.** Silero VAD, the ONNX weights shipped in the ``silero-vad`` wheel, run
   directly with onnxruntime (no torch). Each call gets ``[1, 64 + 512]`` float32: the
   last 64 samples of the previous chunk (the model's context) followed by the chunk,
   plus the recurrent state ``[2, 1, 128]``; it returns the speech probability and the
   next state. One InferenceSession per process, shared by all detectors (1 intra-op,
   1 inter-op thread); the per-stream state lives in the detector. The detector itself
   never calls the model: :meth:`SpeechDetector.push_calls` yields each call
   (:class:`ModelCall`) and takes its answer back, so a caller may run the calls of many
   streams as one batch (:func:`run_model_calls`: rows ``[B, 576]``, states
   ``[2, B, 128]``; each row's answer is the one it gets alone, bit for bit, which
   ``tests/test_detector.py`` checks); :meth:`SpeechDetector.push` runs them one by one.
   ``push_calls`` is :meth:`SpeechDetector.take` (resample and queue: how far the detector will
   have heard is known here) then :meth:`SpeechDetector.process_calls` (the model and the
   segmentation); between the two, :meth:`SpeechDetector.may_decide` says whether the queued
   chunks can report an event at all.
4. **Digital silence shortcut.** A chunk whose 16 kHz samples are all exactly zero gets
   probability 0.0 without a model call, and the model state and context are reset to
   zeros (a fresh model). This makes the silent frames that dominate an assistant track
   nearly free, and because live and replay run this same code they stay identical.
5. **Segmentation** (:class:`Segmenter`), hysteresis in the style of Silero's own
   timestamp logic, with ``neg_threshold = threshold - 0.15``:

   * a segment starts at the first chunk with ``p >= threshold`` (start = chunk start);
   * while a segment is open, every chunk with ``p >= neg_threshold`` extends its end to
     that chunk's end (this also resumes speech after a pause);
   * chunks with ``p < neg_threshold`` are pause; once ``merge_pause_ms`` (800 ms = 25
     chunks) have passed since the end of the last speech chunk, the segment is closed
     with end = end of its last speech chunk, so pauses shorter than 800 ms are merged;
   * a segment whose extent (end - start) stays below ``min_speech_ms`` (120 ms; in
     practice 4 chunks = 128 ms are needed) is dropped without any event;
   * **onset** is reported at the chunk where the extent first reaches ``min_speech_ms``:
     ``at`` = segment start (back-dated), ``seen_at`` = end of that chunk;
   * **offset** is reported when the pause is confirmed: ``at`` = segment end,
     ``seen_at`` = end of the chunk that confirmed it (so ``seen_at - at`` is exactly
     ``merge_pause_ms``). No offset is ever reported without its onset.

   ``seen_at`` is always the end of the chunk whose probability triggered the decision
   (= :attr:`SpeechDetector.known_until` at that moment), never the amount of input
   pushed, so events do not depend on the push framing either.

6. **End of track.** :meth:`SpeechDetector.finish` flushes the resampler, zero-pads the
   last partial chunk to 512 samples and runs it (its end is clamped to the end of the
   track), then closes an open segment that already had its onset: offset ``at`` = its
   last speech end, ``seen_at`` = end of track. A live scheduler that stops without
   calling ``finish`` simply leaves its last segment open; replaying the track reports it
   closed at the end.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np
import onnxruntime as ort
import soxr

from clients.codec import FRAME_SAMPLES
from clients.pcm import pcm16_to_float
from server.core.timebase import STREAM_RATE, Segment, SpeechEvent

__all__ = [
    "CHUNK_SAMPLES_16K",
    "CHUNK_STREAM_SAMPLES",
    "DETECTOR_VERSION",
    "DetectorConfig",
    "ModelCall",
    "ModelSteps",
    "Segmenter",
    "SpeechDetector",
    "detect_events",
    "detect_segments",
    "model_path",
    "run_model_calls",
    "run_steps",
    "speech_probabilities",
]

MODEL_RATE = 16_000
CHUNK_SAMPLES_16K = 512  # §5: Silero at 16 kHz on 512-sample chunks (32 ms)
CONTEXT_SAMPLES_16K = 64  # Silero prepends the previous chunk's last 64 samples
CHUNK_STREAM_SAMPLES = CHUNK_SAMPLES_16K * STREAM_RATE // MODEL_RATE  # 768 at 24 kHz
NEG_THRESHOLD_OFFSET = 0.15  # Silero: neg_threshold = threshold - 0.15
RESAMPLER_QUALITY = "HQ"

_SILERO_VERSION = importlib.metadata.version("silero-vad")
DETECTOR_VERSION = (
    f"silero-vad-{_SILERO_VERSION}-onnx/soxr-{soxr.__version__}-{RESAMPLER_QUALITY}"
    "/chunk512-ctx64-zeroskip/seg-v1"
)

_SR_INPUT = np.array(MODEL_RATE, dtype=np.int64)


@dataclass(frozen=True)
class DetectorConfig:
    """Detector parameters (§5). Durations in milliseconds, rates in Hz."""

    threshold: float = 0.5
    min_speech_ms: int = 120
    merge_pause_ms: int = 800
    input_rate: int = STREAM_RATE  # also 16000 (then no resampling)

    def __post_init__(self) -> None:
        if self.input_rate not in (STREAM_RATE, MODEL_RATE):
            raise ValueError(f"input_rate must be {STREAM_RATE} or {MODEL_RATE}")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        if self.min_speech_ms < 0 or self.merge_pause_ms < 0:
            raise ValueError("durations must be non-negative")

    @property
    def neg_threshold(self) -> float:
        return self.threshold - NEG_THRESHOLD_OFFSET

    @property
    def min_speech_samples(self) -> int:
        """min_speech_ms in stream samples (24 kHz)."""
        return self.min_speech_ms * STREAM_RATE // 1000

    @property
    def merge_pause_samples(self) -> int:
        """merge_pause_ms in stream samples (24 kHz)."""
        return self.merge_pause_ms * STREAM_RATE // 1000


# --------------------------------------------------------------------------- model


def model_path() -> Path:
    """The Silero VAD ONNX file shipped inside the ``silero-vad`` wheel.

    Located through the package's import spec without importing it:
    ``importlib.resources.files("silero_vad")`` would execute ``silero_vad/__init__``,
    which imports torch (and sets torch to one thread for the whole process).
    """
    spec = importlib.util.find_spec("silero_vad")  # top-level: finds, does not execute
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the silero-vad package is not installed")
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "silero_vad.onnx"
        if path.is_file():
            return path
    raise RuntimeError("silero_vad/data/silero_vad.onnx not found in the silero-vad package")


_session: ort.InferenceSession | None = None
_session_lock = threading.Lock()


def _get_session() -> ort.InferenceSession:
    """The process-wide Silero session, created on first use (thread-safe).

    ``InferenceSession.run`` may be called from several threads at once; every
    detector passes its own state in and out, so sharing the session is safe.
    """
    global _session
    session = _session
    if session is None:
        with _session_lock:
            session = _session
            if session is None:
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = 1
                opts.inter_op_num_threads = 1
                session = ort.InferenceSession(
                    str(model_path()), sess_options=opts, providers=["CPUExecutionProvider"]
                )
                names_in = [i.name for i in session.get_inputs()]
                names_out = [o.name for o in session.get_outputs()]
                if names_in != ["input", "state", "sr"] or names_out != ["output", "stateN"]:
                    raise RuntimeError(f"unexpected Silero model I/O: {names_in} -> {names_out}")
                _session = session
    return session


class ModelCall(NamedTuple):
    """One Silero call of one stream: its input row ``[1, 64 + 512]`` and state ``[2, 1, 128]``."""

    input: np.ndarray
    state: np.ndarray


ModelAnswer = tuple[float, np.ndarray]  # the speech probability and the next state [2, 1, 128]
R = TypeVar("R")
ModelSteps = Generator[ModelCall, ModelAnswer, R]  # yields its model calls, returns its result


def run_model_calls(calls: list[ModelCall]) -> list[ModelAnswer]:
    """Run the calls of any number of streams as one batch: one model call for all of them."""
    session = _get_session()
    if len(calls) == 1:
        out, state = session.run(None, {"input": calls[0].input, "state": calls[0].state, "sr": _SR_INPUT})
        return [(float(out[0, 0]), state)]
    out, state = session.run(None, {"input": np.concatenate([c.input for c in calls]),
                                    "state": np.concatenate([c.state for c in calls], axis=1), "sr": _SR_INPUT})
    return [(float(out[i, 0]), state[:, i : i + 1].copy()) for i in range(len(calls))]


def run_steps(steps: ModelSteps[R], run: Callable[[list[ModelCall]], list[ModelAnswer]] = run_model_calls) -> R:
    """Drive ``steps`` to its end, running each model call it yields alone, at once."""
    try:
        call = next(steps)
        while True:
            call = steps.send(run([call])[0])
    except StopIteration as stop:
        return stop.value


# ------------------------------------------------------------------- segmentation


class Segmenter:
    """The pure, causal segmentation state machine (§5), fed one probability per chunk.

    Times are stream samples (24 kHz). Sans-I/O: no model, no audio; used by
    :class:`SpeechDetector` and testable with literal probability sequences.
    """

    def __init__(self, config: DetectorConfig = DetectorConfig()) -> None:
        self._threshold = config.threshold
        self._neg_threshold = config.neg_threshold
        self._min_speech = config.min_speech_samples
        self._merge_pause = config.merge_pause_samples
        self.reset()

    def reset(self) -> None:
        self._start: int | None = None  # open segment's start, None when idle
        self._last_end = 0  # end of the open segment's last speech chunk
        self._onset_reported = False
        self.segments: list[Segment] = []
        self.events: list[SpeechEvent] = []

    @property
    def active(self) -> bool:
        """An onset was reported and its offset not yet."""
        return self._onset_reported

    @property
    def speech_end(self) -> int | None:
        """While :attr:`active`: the end of the open segment's last speech chunk (pauses not counted)."""
        return self._last_end if self._onset_reported else None

    def may_emit(self, start: int, end: int) -> bool:
        """May the chunks covering ``[start, end)`` report an event, whatever their probabilities?
        False only where no sequence of probabilities could: an onset needs a segment that reaches
        ``min_speech`` by ``end``, an offset a pause that reaches ``merge_pause`` by ``end``. Exact
        (True means some probabilities would), so a caller may act on False before the model has
        run (server.core.episode); tests/test_detector.py checks both ways."""
        if end <= start:
            return False
        if self._start is None:  # a segment opened at the span's first chunk
            return end - start >= self._min_speech
        if self._onset_reported:  # a pause from now on (speech only moves _last_end on)
            return end - self._last_end >= self._merge_pause
        # the open segment's onset; a segment opened after it closes starts later, so needs more
        return end - self._start >= self._min_speech

    def step(self, p: float, start: int, end: int) -> list[SpeechEvent]:
        """Consume the probability ``p`` of the chunk covering ``[start, end)``."""
        if self._start is None:
            if p < self._threshold:
                return []
            # Speech starts at the first chunk with p >= threshold.
            self._start, self._last_end, self._onset_reported = start, end, False
        elif p >= self._neg_threshold:
            # Hysteresis: inside a segment, p >= neg_threshold counts as speech.
            self._last_end = end
        elif end - self._last_end >= self._merge_pause:
            # §5: the pause reached merge_pause_ms -> the segment is over.
            return self._close(seen_at=end)
        else:
            return []  # a pause still shorter than merge_pause_ms: may be merged

        if not self._onset_reported and self._last_end - self._start >= self._min_speech:
            # §5: speech shorter than 120 ms is dropped, so onset waits for 120 ms of it.
            self._onset_reported = True
            return self._emit(SpeechEvent("onset", self._start, end))
        return []

    def close(self, seen_at: int) -> list[SpeechEvent]:
        """End of stream: close the open segment (if it had its onset)."""
        if self._start is None:
            return []
        return self._close(seen_at)

    def _close(self, seen_at: int) -> list[SpeechEvent]:
        assert self._start is not None
        start, end, reported = self._start, self._last_end, self._onset_reported
        self._start, self._onset_reported = None, False
        if not reported:  # never reached min_speech: dropped, no events
            return []
        self.segments.append(Segment(start, end))
        return self._emit(SpeechEvent("offset", end, seen_at))

    def _emit(self, event: SpeechEvent) -> list[SpeechEvent]:
        self.events.append(event)
        return [event]


# ------------------------------------------------------------------------ detector


class SpeechDetector:
    """Causal Silero-VAD speech detector over one stream; feed it with :meth:`push`."""

    def __init__(self, config: DetectorConfig = DetectorConfig()) -> None:
        self.config = config
        self._session = _get_session()
        self._segmenter = Segmenter(config)
        self._probabilities: list[float] | None = None  # set by speech_probabilities()
        self.reset()

    # -- state

    def reset(self) -> None:
        """Forget everything: fresh model state, empty timeline at stream time 0."""
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._input = np.zeros((1, CONTEXT_SAMPLES_16K + CHUNK_SAMPLES_16K), dtype=np.float32)
        self._resampler = (
            soxr.ResampleStream(
                self.config.input_rate, MODEL_RATE, 1, dtype="float32", quality=RESAMPLER_QUALITY
            )
            if self.config.input_rate != MODEL_RATE
            else None
        )
        self._pending = np.zeros(0, dtype=np.float32)  # 16 kHz samples not yet chunked
        self._chunks = 0  # chunks processed
        self._input_samples = 0  # input samples pushed, at input_rate
        self._finished = False
        self._known_until = 0
        self._segmenter.reset()
        if self._probabilities is not None:
            self._probabilities.clear()

    @property
    def known_until(self) -> int:
        """Stream samples (24 kHz) covered by processed chunks; end of track after finish()."""
        return self._known_until

    @property
    def active(self) -> bool:
        """An onset was reported and no offset yet."""
        return self._segmenter.active

    @property
    def speech_end(self) -> int | None:
        """While :attr:`active`: how far the open segment's speech reaches (its pauses not counted)."""
        return self._segmenter.speech_end

    @property
    def segments(self) -> list[Segment]:
        """Finalized segments so far (in order)."""
        return list(self._segmenter.segments)

    @property
    def events(self) -> list[SpeechEvent]:
        """All events so far, in order."""
        return list(self._segmenter.events)

    @property
    def finished(self) -> bool:
        return self._finished

    # -- input

    def push(self, pcm: np.ndarray) -> list[SpeechEvent]:
        """Feed mono PCM at ``input_rate`` (int16, or float32 in [-1, 1]); any length.

        Returns the events decided on the chunks that became complete.
        """
        return run_steps(self.push_calls(pcm))

    def push_calls(self, pcm: np.ndarray) -> ModelSteps[list[SpeechEvent]]:
        """:meth:`push` without calling the model: yields each :class:`ModelCall` and takes its
        answer back (the caller may batch them with other streams'), returns the events."""
        self.take(pcm)
        return (yield from self.process_calls())

    def take(self, pcm: np.ndarray) -> None:
        """The first half of :meth:`push_calls`: resample ``pcm`` and queue it, deciding nothing yet.
        :attr:`queued_until` and :meth:`may_decide` tell what processing it will do;
        :meth:`process_calls` processes it."""
        if self._finished:
            raise RuntimeError("push() after finish(); call reset() to start a new stream")
        x = self._to_float(pcm)
        self._input_samples += x.shape[0]
        if self._resampler is not None:
            x = self._resampler.resample_chunk(x)
        self._pending = np.concatenate((self._pending, x))  # a copy: the caller may reuse its array

    @property
    def queued_until(self) -> int:
        """What :attr:`known_until` will be once the whole chunks queued by :meth:`take` are processed
        (it depends on the amount of audio only, never on the model)."""
        return (self._chunks + self._pending.shape[0] // CHUNK_SAMPLES_16K) * CHUNK_STREAM_SAMPLES

    def may_decide(self) -> bool:
        """May processing the queued whole chunks report an event? False means it will not, whatever
        the model says of them (:meth:`Segmenter.may_emit`)."""
        return self._segmenter.may_emit(self._known_until, self.queued_until)

    def process_calls(self) -> ModelSteps[list[SpeechEvent]]:
        """The second half of :meth:`push_calls`: run the queued whole chunks, returns the events."""
        buf = self._pending
        events: list[SpeechEvent] = []
        n_full = buf.shape[0] // CHUNK_SAMPLES_16K
        for k in range(n_full):
            chunk = buf[k * CHUNK_SAMPLES_16K : (k + 1) * CHUNK_SAMPLES_16K]
            start = self._chunks * CHUNK_STREAM_SAMPLES
            events += yield from self._process(chunk, start, start + CHUNK_STREAM_SAMPLES)
        self._pending = self._pending[n_full * CHUNK_SAMPLES_16K :].copy()  # with what take() added meanwhile
        return events

    def finish(self) -> list[SpeechEvent]:
        """End of track: flush the resampler, run the zero-padded last partial chunk,
        close an open segment (offset ``seen_at`` = end of track). Idempotent."""
        return run_steps(self._finish_calls())

    def _finish_calls(self) -> ModelSteps[list[SpeechEvent]]:
        if self._finished:
            return []
        events: list[SpeechEvent] = []
        if self._resampler is not None:
            tail = self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
            self._pending = np.concatenate((self._pending, tail))
        events += yield from self.process_calls()  # what take() queued and the resampler held back
        track_end = self._input_samples * STREAM_RATE // self.config.input_rate
        if self._pending.shape[0]:
            chunk = np.zeros(CHUNK_SAMPLES_16K, dtype=np.float32)
            chunk[: self._pending.shape[0]] = self._pending
            self._pending = self._pending[:0]
            start = self._chunks * CHUNK_STREAM_SAMPLES
            end = max(start, min(start + CHUNK_STREAM_SAMPLES, track_end))
            events += yield from self._process(chunk, start, end)
        self._known_until = max(self._known_until, track_end)
        events += self._segmenter.close(seen_at=self._known_until)
        self._finished = True
        return events

    # -- internals

    @staticmethod
    def _to_float(pcm: np.ndarray) -> np.ndarray:
        x = np.asarray(pcm)
        if x.ndim == 2 and x.shape[1] == 1:
            x = x[:, 0]
        if x.ndim != 1:
            raise ValueError("expected mono PCM as a 1-D array")
        if x.dtype == np.int16:
            return pcm16_to_float(x)
        if x.dtype == np.float32:
            return np.ascontiguousarray(x)
        if x.dtype == np.float64:
            return x.astype(np.float32)
        raise TypeError(f"expected int16 or float32 PCM, got {x.dtype}")

    def _process(self, chunk: np.ndarray, start: int, end: int) -> ModelSteps[list[SpeechEvent]]:
        p = yield from self._probability(chunk)
        self._chunks += 1
        self._known_until = end
        if self._probabilities is not None:
            self._probabilities.append(p)
        return self._segmenter.step(p, start, end)

    def _probability(self, chunk: np.ndarray) -> ModelSteps[float]:
        inp = self._input
        if not chunk.any():
            # Digital silence shortcut: p = 0 without a model call, and the model
            # restarts from a fresh state and zero context.
            self._state.fill(0.0)
            inp.fill(0.0)
            return 0.0
        inp[0, CONTEXT_SAMPLES_16K:] = chunk
        p, self._state = yield ModelCall(inp.copy(), self._state)
        # Context for the next call: the last 64 samples of this chunk.
        inp[0, :CONTEXT_SAMPLES_16K] = chunk[-CONTEXT_SAMPLES_16K:]
        return p


# ---------------------------------------------------------------------- offline use


def detect_segments(
    track: np.ndarray,
    *,
    frame_samples: int = FRAME_SAMPLES,
    config: DetectorConfig = DetectorConfig(),
) -> list[Segment]:
    """Replay a whole recorded track in frames of ``frame_samples`` (the live framing),
    then ``finish()``; returns the segments, in stream samples (24 kHz)."""
    det = SpeechDetector(config)
    _replay(det, track, frame_samples)
    return det.segments


def detect_events(
    track: np.ndarray,
    *,
    frame_samples: int = FRAME_SAMPLES,
    config: DetectorConfig = DetectorConfig(),
) -> list[SpeechEvent]:
    """Like :func:`detect_segments`, but returns every event (onsets and offsets)."""
    det = SpeechDetector(config)
    _replay(det, track, frame_samples)
    return det.events


def speech_probabilities(
    track: np.ndarray, *, config: DetectorConfig = DetectorConfig()
) -> np.ndarray:
    """Per-chunk speech probabilities of a whole track as the detector sees them
    (float32, one per 32 ms chunk; chunk ``i`` covers stream samples
    ``[768*i, 768*(i+1))``; digital-silence chunks are 0.0). For debugging and tests."""
    det = SpeechDetector(config)
    det._probabilities = []
    _replay(det, track, frame_samples=0)
    return np.asarray(det._probabilities, dtype=np.float32)


def _replay(det: SpeechDetector, track: np.ndarray, frame_samples: int) -> None:
    if frame_samples <= 0:
        det.push(track)
    else:
        for i in range(0, len(track), frame_samples):
            det.push(track[i : i + frame_samples])
    det.finish()
