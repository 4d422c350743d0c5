"""Shared parts of in-process bridges: a model that runs inside the bridge process.

In-process bridges (``moshi``, ``minicpm-o``, ``voila``, ``freeze-omni``) load a checkpoint with
the model's own Python code and step it once per room frame (a frame-synchronous
:class:`clients.sdk.Bridge`, both clocks). What they share lives here:

:func:`resolve_checkpoint`
    A local directory, or a hub id looked up in the local hub cache only. Nothing is ever
    downloaded unless the bridge is started with ``allow_download=1``, and never while the hub's
    offline mode (``HF_HUB_OFFLINE=1``) is set: a benchmark must not fetch weights silently.
    Files that are absent raise :class:`~clients.errors.ModelMissingWeights`.

:class:`FrameTimer` (pure)
    Per-frame compute time in integer microseconds; ``summary()`` gives frames, p50/p99/max in
    milliseconds and the real-time factor (compute time over audio time; below 1 keeps up).

:func:`model_errors`
    A context manager that turns what model code raises into the stable codes of
    :class:`~clients.errors.ModelError` (out of memory, missing package, any other fault).

:class:`InProcessBridge`
    Options common to every in-process bridge (``checkpoint``, ``device``, ``dtype``, ``seed``,
    ``threads``, ``warmup_frames``, ``model_name``, ``allow_download``; unknown options are an
    error), warm-up before the first episode, a fresh model state per episode with its cost
    measured, the text-prompt record (§4: none unless given as an explicit option, and reported),
    and ``stats``: ``model`` (load, warm-up and reset milliseconds, per-frame compute p50/p99, the
    real-time factor) every ``stats_every`` frames. Subclasses implement ``load``, ``fresh_state``
    and ``compute``.
"""

from __future__ import annotations

import logging
import os
import re
import time
from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clients.codec import FRAME_MS
from clients.errors import (
    ModelBadCheckpoint,
    ModelError,
    ModelMissingPackage,
    ModelMissingWeights,
    ModelOutOfMemory,
    MPEError,
)
from clients.messages import ContextTurn, EpisodeEnd, EpisodeStart
from clients.sdk import Bridge
from model_bridges.playout import (
    BridgeConfigError,
    instructions_option,
    opt_bool,
    opt_int,
    text_prompt_record,
)

log = logging.getLogger("mpe.bridges")

FRAME_S = FRAME_MS / 1000  # one wire frame (DESIGN §4)
SENTENCE_END = re.compile(r"[.!?]\s*$")  # where a model's text pieces are sent as one `text` message


def hub_offline() -> bool:
    """The hub's offline mode as huggingface_hub reads it (``HF_HUB_OFFLINE``)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_checkpoint(checkpoint: str, allow_download: bool = False, revision: str | None = None) -> Path:
    """The local directory of ``checkpoint`` (a directory, or a hub id ``owner/name`` in the local cache)."""
    if not checkpoint:
        raise BridgeConfigError("give checkpoint=DIR (a local checkpoint directory) or checkpoint=OWNER/NAME (hub id)")
    local = Path(checkpoint).expanduser()
    if local.is_dir():
        return local
    if local.exists() or checkpoint.startswith((".", "/", "~")) or checkpoint.count("/") != 1:
        raise ModelMissingWeights(f"checkpoint {checkpoint!r} is not a directory (nor a hub id OWNER/NAME)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelMissingPackage("a hub id needs huggingface_hub (pip install huggingface_hub)") from None
    download = allow_download and not hub_offline()
    try:
        return Path(snapshot_download(checkpoint, revision=revision, local_files_only=not download))
    except Exception as exc:  # LocalEntryNotFoundError, RepositoryNotFoundError, network errors
        how = ("the hub is in offline mode (HF_HUB_OFFLINE)" if allow_download and hub_offline()
               else "downloads are off (allow_download=1 allows one)" if not allow_download
               else f"the download failed ({type(exc).__name__})")
        raise ModelMissingWeights(f"checkpoint {checkpoint!r} is not in the local hub cache and {how}; "
                                  f"fetch it first: hf download {checkpoint}") from None


def need_file(directory: Path, name: str, what: str) -> Path:
    """``directory/name``, or :class:`ModelMissingWeights` naming it."""
    path = directory / name
    if not path.is_file():
        raise ModelMissingWeights(f"{what} {name!r} is missing from the checkpoint directory {directory}")
    return path


def import_model_code(code_dir: str, module: str, what: str, install: str):
    """``module`` from the model's own source tree (a clone of its repository at ``code_dir``, put
    first on ``sys.path``), or from the environment when ``code_dir`` is empty. Models that ship
    their inference code as a repository, not a package (Voila, Freeze-Omni), load this way."""
    import importlib
    import sys

    if code_dir:
        root = Path(code_dir).expanduser()
        if not root.is_dir():
            raise ModelMissingPackage(f"{what}: code={code_dir!r} is not a directory (a clone of {install})")
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ModelMissingPackage(f"{what}: cannot import {module} ({exc}); give code=DIR, a clone of {install} "
                                  "(docs/bridges.md)") from None


def is_oom(exc: BaseException) -> bool:
    """True for torch's out-of-memory errors (CUDA, MPS, host), by type or by message."""
    name = type(exc).__name__
    return name in ("OutOfMemoryError", "MemoryError") or "out of memory" in str(exc).lower()


@contextmanager
def model_errors(what: str) -> Iterator[None]:
    """Run model code; what it raises ends the attempt with a stable code."""
    try:
        yield
    except MPEError:
        raise
    except ImportError as exc:
        raise ModelMissingPackage(f"{what}: {exc}") from None
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        if is_oom(exc):
            raise ModelOutOfMemory(f"{what}: out of memory ({type(exc).__name__})") from None
        log.debug("%s failed", what, exc_info=True)
        raise ModelError(f"{what}: {type(exc).__name__}: {str(exc)[:300]}") from None


def bad_checkpoint(what: str, exc: BaseException) -> ModelBadCheckpoint:
    """A checkpoint whose files do not fit the model (shapes, keys, a broken file)."""
    return ModelBadCheckpoint(f"{what}: the checkpoint does not fit ({type(exc).__name__}: {str(exc)[:300]})")


@dataclass
class FrameTimer:
    """Per-frame compute times (integer microseconds) of one episode."""

    frame_s: float = FRAME_S
    us: list[int] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.us.append(int(round(seconds * 1e6)))

    def summary(self) -> dict[str, Any]:
        if not self.us:
            return {"frames": 0}
        a = np.asarray(self.us, dtype=np.int64)
        return {"frames": len(a), "compute_ms_p50": round(float(np.percentile(a, 50)) / 1000, 3),
                "compute_ms_p99": round(float(np.percentile(a, 99)) / 1000, 3),
                "compute_ms_max": round(int(a.max()) / 1000, 3),
                "rtf": round(float(a.sum()) / 1e6 / (len(a) * self.frame_s), 4)}


class InProcessBridge(Bridge):
    """A model stepped in this process, one room frame at a time (see the module docstring)."""

    blocking = True
    clocks = ("lockstep", "realtime")
    family = "model"
    takes_text_prompt = False  # True: the model can take a text system prompt (an explicit option)

    def __init__(self, checkpoint: str = "", device: str = "cpu", dtype: str = "", seed: str = "0",
                 model_name: str = "", **options: Any):
        super().__init__()
        self.options = options
        self.checkpoint = checkpoint
        self.device = device or "cpu"
        self.dtype_name = dtype or ("float32" if self.device == "cpu" else "bfloat16")
        if self.dtype_name not in ("float32", "bfloat16", "float16"):
            raise BridgeConfigError(f"dtype={self.dtype_name!r}: float32, bfloat16 or float16")
        try:
            self.seed = int(seed)
        except ValueError:
            raise BridgeConfigError(f"option seed={seed!r} is not an integer") from None
        self.allow_download = opt_bool(options, "allow_download", False)
        self.warmup_frames = opt_int(options, "warmup_frames", 4)
        self.stats_every = opt_int(options, "stats_every", 25)
        self.threads = opt_int(options, "threads", None)
        self.text_prompt = instructions_option(options) if self.takes_text_prompt else None
        if model_name:
            self.name = model_name
        self.timer = FrameTimer()
        self.figures: dict[str, Any] = {}
        self.context_frames = 0
        self.context_turns: list[ContextTurn] = []

    def check_options(self) -> None:
        """Call at the end of a subclass __init__: unknown options are an error, not ignored."""
        unknown = sorted(k for k in self.options if k not in ("data_dir", "suite"))
        if unknown:
            raise BridgeConfigError(f"{self.name}: unknown option(s) {', '.join(unknown)}")

    def start(self) -> None:
        """Load the checkpoint and warm the model up (call at the end of a subclass ``__init__``)."""
        self.check_options()
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
        t0 = time.perf_counter()
        with model_errors(f"{self.family}: loading"):
            self.load()
        t1 = time.perf_counter()
        with model_errors(f"{self.family}: warm-up"):
            self.fresh_state()
            for _ in range(max(self.warmup_frames or 0, 0)):
                self.compute(0, np.zeros(self.frame_samples, np.int16))
        self.figures.update(load_ms=round((t1 - t0) * 1000, 1), warmup_ms=round((time.perf_counter() - t1) * 1000, 1),
                            warmup_frames=self.warmup_frames)

    # to implement ------------------------------------------------------------------------

    @abstractmethod
    def load(self) -> None:
        """Read the checkpoint (``self.checkpoint``) onto ``self.device``."""

    @abstractmethod
    def fresh_state(self) -> None:
        """Return the model to the state it has before any input (no trace of an earlier episode)."""

    @abstractmethod
    def compute(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        """One room frame (int16) in, this slot's model audio (int16 frame) or None out."""

    def describe(self) -> dict[str, Any]:
        """What the stats say about the loaded model (checkpoint, sizes)."""
        return {}

    def assistant_turns(self) -> dict[int, ContextTurn]:
        """The ground-truth assistant turns of this episode's history by the slot they start in, for
        a model whose own past output is text (docs/protocol.md §5.2). An episode with context frames
        but without their words cannot be teacher-forced faithfully: an error, not a silent guess."""
        if self.context_frames and not any(t.role == "assistant" for t in self.context_turns):
            raise ModelError(f"{self.family}: this model takes its own past turns as text, and the episode's "
                             "context frames come without their words (episode.start.context_turns)")
        return {t.start_seq: t for t in self.context_turns if t.role == "assistant"}

    # Bridge --------------------------------------------------------------------------------

    def seed_everything(self) -> None:
        import torch

        torch.manual_seed(self.seed)

    def reset(self, episode: EpisodeStart) -> None:
        if episode.sample_rate != self.sample_rate:  # pragma: no cover - the server honours hello
            raise BridgeConfigError(f"{self.name} speaks {self.sample_rate} Hz only")
        t0 = time.perf_counter()
        with model_errors(f"{self.family}: reset"):
            self.seed_everything()
            self.fresh_state()
        self.figures["reset_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        self.timer = FrameTimer()
        self.context_frames = episode.context_frames or 0
        self.context_turns = list(episode.context_turns) if self.context_frames else []
        offered = bool(episode.instructions)
        prompt = self.text_prompt
        self.emit_stats(instructions=text_prompt_record(prompt, "option" if prompt else "none", offered))
        self.emit_stats(model=self.model_stats())

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        t0 = time.perf_counter()
        with model_errors(f"{self.family}: step {seq}"):
            out = self.compute(seq, room)
        self.timer.add(time.perf_counter() - t0)
        if self.stats_every and (seq + 1) % self.stats_every == 0:
            self.emit_stats(model=self.model_stats())
        if seq < self.context_frames:
            return None  # §5.1: the server records the context in these slots; answer with silence
        return out

    def model_stats(self) -> dict[str, Any]:
        return {"family": self.family, "checkpoint": str(self.checkpoint), "device": self.device,
                "dtype": self.dtype_name, "seed": self.seed, **self.describe(), **self.figures,
                **self.timer.summary()}

    def end_episode(self, end: EpisodeEnd) -> None:
        log.info("%s: episode %s, %s", self.name, end.episode_id, self.timer.summary())


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]

