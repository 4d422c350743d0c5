"""``moshi``: Kyutai's Moshi (moshiko, moshika) run in this process with the ``moshi`` package.

One LM step per 80 ms frame, exactly as Moshi's own server runs it: Mimi encodes the room frame
(1920 samples at 24 kHz, streaming) to 8 codebooks, ``LMGen.step`` samples one text token and 8
audio codes of the model's own stream, Mimi decodes those back to 1920 samples. The first step
returns nothing (the acoustic codebooks lag the semantic one by one step), so the model's audio
in slot *n* is its frame *n* − 1: 80 ms of algorithmic latency, plus the compute time in realtime.

Checkpoint: a directory (or a hub id found in the local hub cache, see
:func:`model_bridges.inprocess.resolve_checkpoint`) laid out as Kyutai's repositories are: an
optional ``config.json`` in the ``moshi`` package's format (LM settings plus the file names
``moshi_name``, ``mimi_name``, ``tokenizer_name``, ``mimi_config_name``; without it, Moshi 7B's
settings and file names), the LM weights, the Mimi weights and the SentencePiece text tokenizer.
Checkpoints of other models that use the ``moshi`` package's streaming API (PersonaPlex) load the
same way when their directory has that layout; a ``model_type`` other than ``moshi`` (Hibiki, the
TTS, and FLM-Audio, whose LM is its own transformers class ``FLMAudioForCausalLM`` with
``model_type`` ``"FLMAudio"``: cofe-ai/flm-audio ``flmaudio/models/configuration_flmaudio.py:166``)
is refused as the wrong checkpoint; FLM-Audio runs through its server and ``moshi-ws``.

Teacher forcing (docs/protocol.md §5.1): a context frame is encoded by a second Mimi encoder with a
streaming state of its own (the model's own stream), and its 8 codes are forced in place of the
ones the depth transformer would sample: in step *n* the semantic code of frame *n* and the
acoustic codes of frame *n* − 1 (Moshi's delays), through ``LMGen.step(…,
depformer_replace_tokens=…)``; in the first live step after the context, the acoustic codes of
the last context frame are written over the sampled ones (``on_audio_hook``). The text token of
forced steps is sampled as usual: the ground truth has no aligned inner monologue. The decoder
decodes the forced codes too, so its state continues from the context audio.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from clients.errors import ModelBadCheckpoint, ModelMissingPackage
from clients.pcm import float_to_pcm16, pcm16_to_float
from model_bridges import register
from model_bridges.inprocess import (
    SENTENCE_END,
    InProcessBridge,
    bad_checkpoint,
    need_file,
    resolve_checkpoint,
    torch_dtype,
)
from model_bridges.playout import opt_bool, opt_float, opt_int

# the file names of Kyutai's legacy repositories (no config.json), as the moshi package has them
LEGACY_FILES = {"moshi_name": "model.safetensors", "mimi_name": "tokenizer-e351c8d8-checkpoint125.safetensors",
                "tokenizer_name": "tokenizer_spm_32k_3.model"}
TEXT_PADDING = (0, 3)  # text ids that are padding, never words (Moshi's end-of-padding and padding)


def read_checkpoint(directory: Path):
    """The ``moshi.models.loaders.CheckpointInfo`` of a local checkpoint directory."""
    from moshi.models import loaders

    cfg_path = directory / "config.json"
    raw: dict[str, Any] | None = None
    if cfg_path.is_file():
        try:
            raw = json.loads(cfg_path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelBadCheckpoint(f"moshi: {cfg_path.name} is not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ModelBadCheckpoint(f"moshi: {cfg_path.name} is not a JSON object")
    lm = dict(raw) if raw is not None else None
    names = {k: (lm.pop(k, v) if lm is not None else v) for k, v in LEGACY_FILES.items()}
    mimi_config_name = lm.pop("mimi_config_name", None) if lm else None
    model_type = lm.pop("model_type", "moshi") if lm else "moshi"
    gen = lm.pop("lm_gen_config", {}) if lm else {}
    lora_name = lm.pop("lora_name", None) if lm else None
    for key in ("tts_config", "stt_config", "model_id"):
        if lm and lm.pop(key, None) and key != "model_id":
            raise ModelBadCheckpoint(f"moshi: {cfg_path.name} has {key}: not a full-duplex Moshi checkpoint")
    if model_type == "FLMAudio":
        raise ModelBadCheckpoint(f"moshi: {cfg_path.name} is FLM-Audio's (FLMAudioForCausalLM, its own model class): "
                                 "run it with its server and the moshi-ws bridge")
    if model_type != "moshi":
        raise ModelBadCheckpoint(f"moshi: model_type {model_type!r} in {cfg_path.name} (a full-duplex checkpoint "
                                 "has model_type moshi)")
    mimi_config = None
    if mimi_config_name:
        try:
            mimi_config = json.loads(need_file(directory, mimi_config_name, "the Mimi config").read_text("utf-8"))
        except ValueError as exc:
            raise ModelBadCheckpoint(f"moshi: {mimi_config_name} is not valid JSON ({exc})") from None
    return loaders.CheckpointInfo(
        moshi_weights=need_file(directory, names["moshi_name"], "the LM weights"),
        mimi_weights=need_file(directory, names["mimi_name"], "the Mimi weights"),
        tokenizer=need_file(directory, names["tokenizer_name"], "the text tokenizer"),
        lm_config=lm, raw_config=raw, mimi_config=mimi_config, model_type=model_type,
        lora_weights=need_file(directory, lora_name, "the LoRA weights") if lora_name else None, lm_gen_config=gen)


@register("moshi")
class MoshiLM(InProcessBridge):
    """Options: ``checkpoint`` (directory or hub id), ``device`` (``cpu``, ``cuda``, ``cuda:1``),
    ``dtype`` of the LM (default bfloat16 on a GPU, float32 on the CPU; Mimi always float32),
    ``seed`` (per episode, default 0), ``temp``/``temp_text``/``top_k``/``top_k_text`` (default:
    the checkpoint's ``lm_gen_config``, else 0.8/0.7/250/25), ``threads`` (torch CPU threads),
    ``warmup_frames`` (default 4), ``compile`` (moshi's torch.compile kernels; default on a GPU only),
    ``model_name`` (the name announced, default ``moshi``),
    ``allow_download`` (default off), ``revision`` (of a hub id)."""

    name = "moshi"
    family = "moshi"
    accepts_context = True

    def __init__(self, checkpoint: str = "", **options: Any):
        super().__init__(checkpoint, **options)
        self.revision = str(self.options.pop("revision", "") or "")
        self.sampling = {k: opt_float(self.options, k, None) for k in ("temp", "temp_text")}
        self.sampling |= {k: opt_int(self.options, k, None) for k in ("top_k", "top_k_text")}
        # torch.compile of moshi's kernels: worth it on a GPU; on the CPU it costs seconds of warm-up
        self.compile = opt_bool(self.options, "compile", self.device != "cpu")
        self.start()

    def start(self) -> None:
        with self._compiled():
            super().start()

    def _compiled(self):
        """moshi's lazily compiled kernels on or off (``compile``)."""
        from contextlib import nullcontext

        try:
            from moshi.utils.compile import no_compile
        except ImportError:
            return nullcontext()  # reported by load()
        return nullcontext() if self.compile else no_compile()

    # loading ------------------------------------------------------------------------------

    def load(self) -> None:
        try:
            import moshi.models  # noqa: F401 (the package's own loaders, through CheckpointInfo)
            import sentencepiece
            import torch  # noqa: F401
        except ImportError as exc:
            raise ModelMissingPackage(f"moshi: {exc.name or exc} is not installed: pip install 'duplex-mpe[moshi]' "
                                      "(docs/bridges.md, moshi)") from None
        directory = resolve_checkpoint(self.checkpoint, self.allow_download, self.revision or None)
        info = read_checkpoint(directory)
        try:
            mimi = info.get_mimi(device=self.device)
            lm = info.get_moshi(device=self.device, dtype=torch_dtype(self.dtype_name))
            tokenizer = sentencepiece.SentencePieceProcessor(str(info.tokenizer))
        except (RuntimeError, KeyError, ValueError, OSError) as exc:
            if "out of memory" in str(exc).lower():
                raise
            raise bad_checkpoint(f"moshi: loading {directory.name}", exc) from None
        self.build(mimi, lm, tokenizer, info.lm_gen_config)
        self.loaded_from = str(directory)

    def build(self, mimi, lm, tokenizer, lm_gen_config: dict) -> None:
        """The streaming generator around a loaded Mimi, LM and text tokenizer (a checkpoint's, or
        random weights: bench/gpu_smoke.py ``--random-weights``)."""
        import torch
        from moshi.models import LMGen

        self.torch, self.mimi, self.lm, self.tokenizer = torch, mimi, lm, tokenizer
        self.dep_q = self.lm.dep_q
        if self.lm.num_codebooks - self.dep_q - 1 != self.dep_q:
            raise ModelBadCheckpoint(f"moshi: the LM has {self.dep_q} generated and "
                                     f"{self.lm.num_codebooks - self.dep_q - 1} input codebooks (a duplex Moshi "
                                     "has as many of each)")
        self.mimi.set_num_codebooks(self.dep_q)
        self.mimi_ctx = copy.deepcopy(self.mimi)  # the model's own stream, for teacher forcing
        gen = {"temp": 0.8, "temp_text": 0.7, "top_k": 250, "top_k_text": 25}
        gen |= {k: v for k, v in lm_gen_config.items() if k in gen}
        gen |= {k: v for k, v in self.sampling.items() if v is not None}
        self.gen_config = gen
        self.lm_gen = LMGen(self.lm, **gen, on_audio_hook=self._audio_hook)
        for module in (self.mimi, self.mimi_ctx, self.lm_gen):
            module.streaming_forever(1)
        self.params = {"lm": sum(p.numel() for p in self.lm.parameters()),
                       "mimi": sum(p.numel() for p in self.mimi.parameters())}

    def describe(self) -> dict[str, Any]:
        return {"parameters": self.params, "sampling": self.gen_config, "frame_rate_hz": 12.5,
                "algorithmic_delay_frames": 1}

    # per episode ----------------------------------------------------------------------------

    def fresh_state(self) -> None:
        for module in (self.mimi, self.mimi_ctx, self.lm_gen):
            module.reset_streaming()
        self._forced: dict[int, Any] = {}  # seq -> the context frame's codes [1, dep_q, 1]
        self._last_forced = None  # codes of the previous step's context frame
        self._overwrite = None  # acoustic codes the audio hook writes over the sampled ones
        self._text, self._text_frames = "", 0
        self.last_codes: np.ndarray | None = None

    def force(self, seq: int, pcm: np.ndarray) -> None:
        t0 = time.perf_counter()
        with self.torch.no_grad():
            x = self.torch.from_numpy(pcm16_to_float(pcm)).to(self.device)[None, None]
            self._forced[seq] = self.mimi_ctx.encode(x)
        self.figures["force_ms_last"] = round((time.perf_counter() - t0) * 1000, 3)

    def _audio_hook(self, tokens) -> None:
        """Called by LMGen with the codes it sampled ([B, dep_q]), before it stores them."""
        if self._overwrite is not None:
            tokens[:, 1:] = self._overwrite
            self._overwrite = None

    def compute(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        torch = self.torch
        with torch.no_grad(), self._compiled():
            x = torch.from_numpy(pcm16_to_float(room)).to(self.device)[None, None]
            codes = self.mimi.encode(x)
            forced = self._forced.pop(seq, None)
            replace = None
            if forced is not None:
                prev = forced if self._last_forced is None else self._last_forced
                replace = torch.cat([forced[:, :1], prev[:, 1:]], dim=1)
            elif self._last_forced is not None:  # the first live step: the last context frame's acoustics
                self._overwrite = self._last_forced[:, 1:, 0]
            self._last_forced = forced
            tok = self.lm_gen.step(codes, depformer_replace_tokens=replace)
            if tok is None:
                self.last_codes = None
                return None
            self.last_codes = tok[0, 1:1 + self.dep_q, 0].cpu().numpy()  # the audio codes decoded in this slot
            self._take_text(seq, int(tok[0, 0, 0]))
            pcm = self.mimi.decode(tok[:, 1:1 + self.dep_q])
        return float_to_pcm16(pcm[0, 0].float().cpu().numpy())

    def _take_text(self, seq: int, token: int) -> None:
        self._text_frames += 1
        if token not in TEXT_PADDING and token < self.tokenizer.get_piece_size():
            self._text += self.tokenizer.id_to_piece(token).replace("\u2581", " ")
        if self._text.strip() and (SENTENCE_END.search(self._text) or self._text_frames >= 25):
            self.emit_text(seq, self._text.strip())
            self._text, self._text_frames = "", 0
        elif not self._text.strip():
            self._text_frames = 0
