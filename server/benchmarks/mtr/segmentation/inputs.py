"""Reading a recording to segment: an episode bundle, a stereo file, or two mono files.

Channel convention: a **stereo** file holds the user on the **left** channel and the model on the
**right**, as MTR-DuplexBench publishes its recordings (notes §1: "left = user, right = model");
``swap`` reads it the other way. **Two mono files** are given user first, then model. An **episode
bundle** (DESIGN §7) has them as ``room.wav`` (the user's side: everything the model heard) and
``assistant.wav``; the model's segments come from the bundle as scoring takes them (a
``segments.json`` override, or the live detector's when its version matches), else from the
detector. Any file soundfile reads (WAV, FLAC, and MP3 with libsndfile 1.1 or newer), at any
sample rate, is resampled to the 24 kHz stream rate (soxr, HQ);
files of different lengths are padded with silence to the longer. Nothing is ever written next
to the input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from clients.pcm import float_to_pcm16, pcm16_to_float
from server.benchmarks.mtr.segmentation.schema import SegmentInput, Span, Utterance
from server.core.detector import detect_segments
from server.core.timebase import STREAM_RATE
from server.scoring.asr import ASRBackend, pad_fragments
from server.scoring.errors import BadBundle, BadRecording
from server.scoring.loading import is_bundle, load_bundle

CHANNEL_HINT = ("segmentation needs the user and the model on separate channels: give a stereo file "
                "(left = user, right = model; --swap for the other way), two mono files USER MODEL, "
                "or an episode bundle directory")


@dataclass(frozen=True)
class Recording:
    user: np.ndarray  # int16, 24 kHz
    model: np.ndarray  # int16, 24 kHz, as long as ``user``
    source: str
    model_segments: list[Span] | None = None  # known from a bundle; None: run the detector


def _read(path: Path) -> tuple[np.ndarray, int]:
    """(int16 samples, shape [n, channels]; sample rate)."""
    if not path.exists():
        raise BadRecording(f"{path}: no such file")
    if path.is_dir():
        raise BadRecording(f"{path}: a directory, but not an episode bundle (no episode.json)")
    if path.suffix.lower() == ".mp3" and "MP3" not in sf.available_formats():
        raise BadRecording(f"{path}: reading MP3 needs libsndfile 1.1 or newer (this one is "
                           f"{sf.__libsndfile_version__}); convert the file to WAV")
    try:
        pcm, rate = sf.read(str(path), dtype="int16", always_2d=True)
    except Exception as exc:  # soundfile raises its own error types
        raise BadRecording(f"{path}: cannot read as audio ({type(exc).__name__})") from None
    if pcm.shape[0] == 0:
        raise BadRecording(f"{path}: no samples")
    return pcm, rate


def to_stream_rate(pcm: np.ndarray, rate: int) -> np.ndarray:
    """Mono int16 at ``rate`` -> int16 at 24 kHz."""
    if rate == STREAM_RATE:
        return pcm.astype(np.int16, copy=False)
    return float_to_pcm16(soxr.resample(pcm16_to_float(pcm), rate, STREAM_RATE, quality="HQ"))


def _same_length(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = max(len(a), len(b))
    return np.pad(a, (0, n - len(a))), np.pad(b, (0, n - len(b)))


def _mono(path: Path) -> tuple[np.ndarray, int]:
    pcm, rate = _read(path)
    if pcm.shape[1] != 1:
        raise BadRecording(f"{path}: has {pcm.shape[1]} channels, expected a mono file ({CHANNEL_HINT})")
    return to_stream_rate(pcm[:, 0], rate), rate


def read_recording(paths: Sequence[Path], *, swap: bool = False) -> Recording:
    """The two channels of one recording (module docstring)."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1 and paths[0].is_dir() and is_bundle(paths[0]):
        if swap:
            raise BadRecording("--swap applies to audio files; a bundle's channels are known")
        ep = load_bundle(paths[0])
        room, rate = _mono(paths[0] / "room.wav")
        if rate != STREAM_RATE:
            raise BadBundle(f"{paths[0]}/room.wav: expected 24 kHz, got {rate} Hz")
        user, model = _same_length(room, ep.assistant)
        segs = None if ep.segments is None else [Span(start=s, end=e) for s, e in ep.segments]
        return Recording(user, model, ep.source, segs)
    if len(paths) == 1:
        pcm, rate = _read(paths[0])
        if pcm.shape[1] != 2:
            raise BadRecording(f"{paths[0]}: has {pcm.shape[1]} channel{'s' if pcm.shape[1] > 1 else ''}, "
                               f"expected stereo ({CHANNEL_HINT})")
        left, right = to_stream_rate(pcm[:, 0], rate), to_stream_rate(pcm[:, 1], rate)
        user, model = (right, left) if swap else (left, right)
        return Recording(user, model, str(paths[0].resolve()))
    if len(paths) == 2:
        (u, _), (m, _) = _mono(paths[0]), _mono(paths[1])
        if swap:
            u, m = m, u
        user, model = _same_length(u, m)
        return Recording(user, model, f"{paths[0].resolve()} + {paths[1].resolve()}")
    raise BadRecording(f"give one or two inputs, got {len(paths)} ({CHANNEL_HINT})")


def speech_spans(track: np.ndarray) -> list[Span]:
    """The speech detector's segments of a 24 kHz track (DESIGN §5), as spans."""
    return [Span(start=g.start, end=g.end) for g in detect_segments(track)]


def transcribe(track: np.ndarray, spans: Sequence[Span], channel: str, asr: ASRBackend) -> list[Utterance]:
    """ASR of every speech segment (with the scoring's padding of fragments); times: the segment's."""
    out = []
    pairs = [(s.start, s.end) for s in spans]
    for s in spans:
        (a, b), = pad_fragments([(s.start, s.end)], pairs, len(track)) or [(s.start, s.end)]
        text = asr.transcribe(track[a:b]).text.strip()
        if text:
            out.append(Utterance(channel=channel, start=s.start, end=s.end, text=text))
    return out


def recording_input(rec: Recording, *, asr: ASRBackend | None = None) -> SegmentInput:
    """The input of segmentation: the detector's segments of both channels, transcripts when ``asr``."""
    user = speech_spans(rec.user)
    model = rec.model_segments if rec.model_segments is not None else speech_spans(rec.model)
    utterances = []
    if asr is not None and asr.enabled:
        utterances = transcribe(rec.user, user, "user", asr) + transcribe(rec.model, model, "model", asr)
    return SegmentInput(n_samples=len(rec.user), user=user, model=model, utterances=utterances, source=rec.source)
