"""``voila``: Voila-autonomous (maitrix-org), the full-duplex Voila checkpoint, run in this process.

Voila ships its inference code as a repository, not a package: ``code=DIR`` is a clone of
maitrix-org/Voila (its ``model.py`` defines ``VoilaAutonomousModel``). The authors' ``infer.py``
tokenises a whole recording first and then runs ``VoilaAutonomousModel.run_generate`` over it; this
bridge turns that loop into a per-step function, in the same order of operations:

- **Audio and frame rate.** Voila-Tokenizer is an Encodec model (transformers ``EncodecModel``) at
  16 kHz used at 1.1 kbps, **25 Hz** (hop 640 samples, 40 ms); the codebooks (``num_codebooks``,
  ``codebook_size``) come from the LM's config and must match what the tokenizer gives. The
  bridge speaks 16 kHz on the wire (1280-sample frames, the server resamples), so one room frame is
  exactly two codec frames, and one answer frame is two codec frames decoded.
- **Two channels.** Each LM position holds ``2 × num_codebooks`` ids: the user's codec frame, then
  the assistant's (both offset into the text vocabulary as ``<|n|>`` tokens); their embeddings are
  averaged. The prompt is ``<SYSTEM><stream_chat><chat_audio_output><au_chat_ref_start><au_chat_ref>
  <au_chat_ref_end></SYSTEM><|HUMAN|>`` in both channels; the speaker embedding (``ref_emb``, 256
  floats) is added at ``<au_chat_ref>`` on the first forward pass.
- **One step.** A forward pass over the newest position gives text logits, the 2-way head
  ``voila_pred`` and, through ``audio_transformer.inference``, one assistant codec frame. The text
  token is sampled (temperature 0.2, top-k 50); head = 1 while not speaking turns it into
  ``<|VOILA|>`` (the start of a turn), ``eos`` ends one. When the token is ``<au_token>`` the step is
  an **audio step**: the sampled codec frame is the assistant's next 40 ms and the next user codec
  frame is appended beside it. Any other token is a **marker step**: it is appended in both channels
  and consumes no user audio.
- **Causality.** The assistant's codec frame *k* is computed from user frames before *k*: it sees the
  room up to 40 ms earlier, plus the 40 ms needed to complete a codec frame; marker steps add compute,
  not audio time. The bridge encodes the room causally: each new 80 ms is encoded with the last
  ``codec_context_ms`` of room audio before it and only its own two frames are kept (the authors'
  script encodes the whole recording at once, so a non-causal codec would see the future there); the
  decoder decodes each pair of frames after ``codec_context_ms`` of the model's earlier frames.
  :meth:`VoilaAutonomous.codec_agreement` measures how far the two encodings agree (per codebook;
  ``bench/gpu_smoke.py`` prints it on a host with the real tokenizer).
- **Limits of the loop.** ``max_marker_steps`` (default 32) bounds the marker steps before one audio
  step: past it the step's sampled codec frame is taken as audio (counted as ``forced_audio_steps``);
  the authors' loop has no bound. The KV cache grows by 25 positions a second (plus markers); past the
  LM's ``max_position_embeddings`` the step is ``model_error`` (the authors' loop stops at
  ``max_new_tokens``).

**Speaker embedding.** Upstream always computes one for a task with audio output: ``infer.py``
(maitrix-org/Voila at 6ba63bf6, lines 185-191) loads ``--ref-audio`` (default
``examples/test1.mp3``, infer.py:155) and passes ``SpeakerEmbedding(device)(wav, sr)`` (spkr.py:9-40:
pyannote's ``wespeaker-voxceleb-resnet34-LM``, 16 kHz) as ``ref_embs`` with ``ref_embs_mask =
[1]``; the model adds it, through ``ref_emb_linear``, at the fifth prompt position
(model.py:705-712, ``<au_chat_ref>``). The bridge does the same at load, with the repository's own
``spkr`` module: ``ref_audio=FILE`` (default ``examples/test1.mp3`` of the code clone), the audio
read as ``torchaudio.load`` gives it (channels × samples, float32), the speaker model from the
local hub cache (``speaker_model``, default ``pyannote/wespeaker-voxceleb-resnet34-LM``, its
``pytorch_model.bin``). ``ref_emb=FILE.npy`` (256 floats) gives a precomputed one instead.

The duty comes as the spoken preamble only; ``instructions=`` (a text inserted before ``</SYSTEM>``,
as ``infer.py --instruction`` does) is an explicit option, recorded in the stats.
**Teacher forcing** (``accepts_context``, docs/protocol.md §5.1): the assistant channel is where
the model's own past output enters its input (each audio position holds the user's codec frame
and the assistant's, infer.py:92-99 with model.py:347-352, the two channels' embeddings averaged).
A context frame is encoded by the tokenizer with a window of its own (the model's own stream,
``codec_context_ms`` of earlier context audio, as the room is encoded), and its two codec frames
are written in place of the sampled assistant frames of that frame's two audio steps. Those steps
are audio steps whatever text token the model samples: the ground truth has no aligned markers
(turn starts, text), so none are written during the context (``context_steps`` in the stats). The
decoder decodes the forced frames too, so it continues from the context audio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from clients.errors import ModelBadCheckpoint, ModelError, ModelMissingPackage, ModelMissingWeights
from clients.pcm import float_to_pcm16, pcm16_to_float
from model_bridges import register
from model_bridges.inprocess import (
    SENTENCE_END,
    InProcessBridge,
    bad_checkpoint,
    import_model_code,
    need_file,
    resolve_checkpoint,
    torch_dtype,
)
from model_bridges.playout import BridgeConfigError, opt_float, opt_int

RATE = 16_000
BANDWIDTH_KBPS = 1.1  # Voila-Tokenizer's only bandwidth
REF_EMB_DIM = 256
AUDIO_TOKEN_FORMAT = "<|{}|>"
SYSTEM_PROMPT = ("<SYSTEM>", "<stream_chat><chat_audio_output><au_chat_ref_start><au_chat_ref><au_chat_ref_end>",
                 "</SYSTEM>")
HUMAN, ASSISTANT, AUDIO = "<|HUMAN|>", "<|VOILA|>", "<au_token>"
REPO = "https://github.com/maitrix-org/Voila"
DEFAULT_REF_AUDIO = "examples/test1.mp3"  # infer.py:155
SPEAKER_MODEL = "pyannote/wespeaker-voxceleb-resnet34-LM"  # spkr.py:10


@register("voila")
class VoilaAutonomous(InProcessBridge):
    """Options: ``checkpoint`` (directory or hub id, e.g. ``maitrix-org/Voila-autonomous-preview``),
    ``tokenizer`` (the audio tokenizer, default ``maitrix-org/Voila-Tokenizer``), ``code`` (a clone of
    maitrix-org/Voila; default: ``model`` importable as it is), ``ref_audio`` (the voice whose speaker
    embedding is computed, default the clone's ``examples/test1.mp3``), ``speaker_model`` (default
    ``pyannote/wespeaker-voxceleb-resnet34-LM``), ``ref_emb`` (a ``.npy`` of 256 floats instead), ``temperature``/``top_k`` (text, default 0.2/50),
    ``audio_temperature``/``audio_top_k`` (default 0.8/50), ``max_marker_steps`` (default 32),
    ``codec_context_ms`` (default 1000), ``instructions``/``instructions_file``, and the common ones."""

    name = "voila"
    family = "voila"
    sample_rate = RATE
    takes_text_prompt = True
    accepts_context = True

    def __init__(self, checkpoint: str = "", **options: Any):
        super().__init__(checkpoint, **options)
        o = self.options
        self.tokenizer_id = str(o.pop("tokenizer", "") or "maitrix-org/Voila-Tokenizer")
        self.code_dir = str(o.pop("code", "") or "")
        self.ref_emb_path = str(o.pop("ref_emb", "") or "")
        self.ref_audio_path = str(o.pop("ref_audio", "") or "")
        self.speaker_model_id = str(o.pop("speaker_model", "") or SPEAKER_MODEL)
        self.sampling = {"temperature": opt_float(o, "temperature", 0.2), "top_k": opt_int(o, "top_k", 50),
                         "audio_temperature": opt_float(o, "audio_temperature", 0.8),
                         "audio_top_k": opt_int(o, "audio_top_k", 50)}
        self.max_marker_steps = opt_int(o, "max_marker_steps", 32)
        self.codec_context_ms = opt_int(o, "codec_context_ms", 1000)
        if self.codec_context_ms < 0 or self.max_marker_steps < 0:
            raise BridgeConfigError("voila: codec_context_ms and max_marker_steps are >= 0")
        self.start()

    # loading ------------------------------------------------------------------------------

    def load_lm(self, directory: Path):
        """The LM (the repository's ``VoilaAutonomousModel``) and its text tokenizer."""
        voila = import_model_code(self.code_dir, "model", "voila", REPO)
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ModelMissingPackage("voila needs transformers: pip install 'duplex-mpe[voila]'") from None
        attn = "sdpa"
        if self.device.startswith("cuda"):
            try:
                import flash_attn  # noqa: F401

                attn = "flash_attention_2"  # as infer.py loads it
            except ImportError:
                pass
        try:
            model = voila.VoilaAutonomousModel.from_pretrained(
                str(directory), torch_dtype=torch_dtype(self.dtype_name), attn_implementation=attn, use_cache=True,
                local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise bad_checkpoint(f"voila: loading {directory}", exc) from None
        return model.to(self.device).eval(), tokenizer

    def load_codec(self, directory: Path):
        """Voila-Tokenizer: a transformers ``EncodecModel`` (float32)."""
        try:
            from transformers import EncodecModel
        except ImportError:
            raise ModelMissingPackage("voila needs transformers: pip install 'duplex-mpe[voila]'") from None
        if not (directory / "config.json").is_file():
            raise ModelMissingWeights(f"voila: the audio tokenizer {directory} has no config.json")
        try:
            codec = EncodecModel.from_pretrained(str(directory), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise bad_checkpoint(f"voila: loading the audio tokenizer {directory}", exc) from None
        return codec.to(self.device).eval()

    def load(self) -> None:
        import torch

        self.torch = torch
        directory = resolve_checkpoint(self.checkpoint, self.allow_download)
        codec_dir = resolve_checkpoint(self.tokenizer_id, self.allow_download)
        self.codec = self.load_codec(codec_dir)
        cfg = self.codec.config
        if cfg.sampling_rate != RATE:
            raise ModelBadCheckpoint(f"voila: the audio tokenizer runs at {cfg.sampling_rate} Hz, not {RATE}")
        self.hop = int(np.prod(cfg.upsampling_ratios))
        if self.frame_samples % self.hop:
            raise ModelBadCheckpoint(f"voila: codec hop {self.hop} does not divide a frame ({self.frame_samples})")
        self.per_frame = self.frame_samples // self.hop
        self.model, self.tokenizer = self.load_lm(directory)
        mc = self.model.config
        self.nq, self.card = int(mc.num_codebooks), int(mc.codebook_size)
        tok = self.tokenizer

        def token_id(text: str) -> int:
            i = tok.convert_tokens_to_ids(text)
            if not isinstance(i, int) or i == tok.unk_token_id:
                raise ModelBadCheckpoint(f"voila: the text tokenizer has no {text!r} (not a Voila checkpoint)")
            return i

        self.audio_min = token_id(AUDIO_TOKEN_FORMAT.format(0))
        self.audio_max = token_id(AUDIO_TOKEN_FORMAT.format(self.nq * self.card - 1))
        self.audio_id, self.assistant_id, human = token_id(AUDIO), token_id(ASSISTANT), token_id(HUMAN)
        self.eos_id = tok.eos_token_id
        head = tok.encode("".join(SYSTEM_PROMPT), add_special_tokens=False)
        extra = tok.encode(self.text_prompt, add_special_tokens=False) if self.text_prompt else []
        self.prompt_ids = head[:-1] + extra + head[-1:] + [human]
        self.offsets = torch.arange(self.nq, device=self.device) * self.card + self.audio_min
        emb = self.speaker_embedding()
        if emb.shape != (REF_EMB_DIM,):
            raise BridgeConfigError(f"voila: the speaker embedding holds {emb.size} values, not {REF_EMB_DIM}")
        self.ref_embs = torch.from_numpy(emb).to(self.device)[None, None]
        self.ref_mask = torch.ones(1, dtype=torch.long, device=self.device)
        self.max_positions = int(getattr(mc, "max_position_embeddings", 0) or 0)
        self.params = {"lm": sum(p.numel() for p in self.model.parameters()),
                       "codec": sum(p.numel() for p in self.codec.parameters())}

    def speaker_embedding(self) -> np.ndarray:
        """The 256 floats of ``ref_emb``, else computed as infer.py:186-190 computes them (module docstring)."""
        if self.ref_emb_path:
            self.speaker_source = f"ref_emb:{Path(self.ref_emb_path).name}"
            return np.load(self.ref_emb_path).astype(np.float32).reshape(-1)
        spkr = import_model_code(self.code_dir, "spkr", "voila", REPO)
        voice = Path(self.ref_audio_path).expanduser() if self.ref_audio_path else (
            Path(spkr.__file__).resolve().parent / DEFAULT_REF_AUDIO)
        if not voice.is_file():
            raise ModelMissingWeights(f"voila: the reference voice {voice} is missing (give ref_audio=FILE or "
                                      "ref_emb=FILE.npy)")
        speaker_dir = resolve_checkpoint(self.speaker_model_id, self.allow_download)
        weights = need_file(speaker_dir, "pytorch_model.bin", "the speaker model")
        import soundfile as sf

        try:
            wav, sr = sf.read(str(voice), dtype="float32", always_2d=True)
        except (RuntimeError, sf.LibsndfileError) as exc:
            raise BridgeConfigError(f"voila: cannot read the reference voice {voice} ({exc})") from None
        model = spkr.SpeakerEmbedding(model_path=str(weights), device=self.device)
        emb = model(wav.T.copy(), sr)  # channels × samples, as torchaudio.load gives it
        self.speaker_source = f"ref_audio:{voice.name}"
        return np.asarray(emb.detach().float().cpu() if hasattr(emb, "detach") else emb, np.float32).reshape(-1)

    def describe(self) -> dict[str, Any]:
        return {"parameters": self.params, "sampling": self.sampling, "frame_rate_hz": RATE / self.hop,
                "codebooks": self.nq, "codec_causal": bool(getattr(self.codec.config, "use_causal_conv", False)),
                "codec_context_ms": self.codec_context_ms, "speaker_embedding": self.speaker_source}

    # per episode ----------------------------------------------------------------------------

    def fresh_state(self) -> None:
        from transformers import DynamicCache

        torch = self.torch
        ids = torch.tensor(self.prompt_ids, dtype=torch.long, device=self.device)
        self.pending = ids[None, :, None].expand(1, len(self.prompt_ids), 2 * self.nq)  # both channels
        self.cache = DynamicCache()
        self.positions = 0
        self.speaking = False
        ctx = self.codec_context_ms * RATE // 1000 // self.hop * self.hop
        self.room_window = np.zeros(ctx, np.float32)
        self.own_window = np.zeros(ctx, np.float32)  # the model's own stream (context frames)
        self._forced: dict[int, Any] = {}  # seq -> the context frame's codes [nq, per_frame]
        self.own_codes = torch.zeros(self.nq, ctx // self.hop, dtype=torch.long, device=self.device)
        self.own_silent = ctx // self.hop  # leading frames of own_codes that are not the model's
        self.counts = {"audio_steps": 0, "marker_steps": 0, "turns": 0, "forced_audio_steps": 0, "context_steps": 0}
        self._text: list[int] = []

    def encode_room(self, room: np.ndarray):
        """This frame's user codec frames [nq, per_frame], encoded after the room audio before it."""
        x = np.concatenate([self.room_window, pcm16_to_float(room)])
        self.room_window = x[len(x) - len(self.room_window):] if len(self.room_window) else self.room_window
        return self.encode(x)

    def codec_agreement(self, pcm: np.ndarray) -> list[float]:
        """Per codebook, the share of codec frames on which this bridge's windowed encoding of ``pcm``
        (int16 at 16 kHz, whole frames; :meth:`encode_room` frame by frame from a fresh state) equals
        the authors' whole-recording encoding of it (tokenize_func.py:141,185 encode each recording at
        once). It measures what the windowing changes with the real tokenizer (bench/gpu_smoke.py
        prints it); the episode state is fresh before and after."""
        torch = self.torch
        n = len(pcm) // self.frame_samples
        if n == 0:
            raise BridgeConfigError("voila: codec_agreement needs at least one whole frame")
        pcm = pcm[:n * self.frame_samples]
        self.fresh_state()
        with torch.inference_mode():
            windowed = torch.cat([self.encode_room(f) for f in pcm.reshape(n, self.frame_samples)], dim=1)
            whole = self.codec.encode(torch.from_numpy(pcm16_to_float(pcm)).to(self.device)[None, None],
                                      bandwidth=BANDWIDTH_KBPS).audio_codes[0, 0][:, :windowed.shape[1]]
        self.fresh_state()
        return [float(x) for x in (windowed == whole).float().mean(dim=1).cpu()]

    def force(self, seq: int, pcm: np.ndarray) -> None:
        """A context frame (the model's own past output): its codec frames, encoded after the earlier ones."""
        x = np.concatenate([self.own_window, pcm16_to_float(pcm)])
        self.own_window = x[len(x) - len(self.own_window):] if len(self.own_window) else self.own_window
        with self.torch.inference_mode():
            self._forced[seq] = self.encode(x)

    def encode(self, x: np.ndarray):
        """The last ``per_frame`` codec frames [nq, per_frame] of ``x`` (float32 at 16 kHz)."""
        codes = self.codec.encode(self.torch.from_numpy(x).to(self.device)[None, None],
                                  bandwidth=BANDWIDTH_KBPS).audio_codes[0, 0]
        if codes.shape[0] != self.nq:
            raise ModelBadCheckpoint(f"voila: the audio tokenizer gives {codes.shape[0]} codebooks, the LM takes {self.nq}")
        return codes[:, -self.per_frame:]

    def decode_own(self, frames):
        """The model's newest codec frames [nq, per_frame] as PCM, decoded after its earlier ones."""
        torch = self.torch
        codes = torch.cat([self.own_codes, frames], dim=1)
        self.own_codes = codes[:, frames.shape[1]:]
        wave = self.codec.decode(codes[None, None], [None]).audio_values[0, 0]
        return wave[-frames.shape[1] * self.hop:].float().cpu().numpy()

    def sample_text(self, logits):
        torch = self.torch
        t, k = self.sampling["temperature"], self.sampling["top_k"]
        if t and t > 0:
            logits = logits / t
        if k and k > 0:
            kth = torch.topk(logits, min(k, logits.shape[-1]))[0][..., -1, None]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return int(torch.multinomial(torch.softmax(logits.float(), dim=-1), 1)[0, 0])

    def lm_step(self, user_row, force_audio: bool = False, forced=None):
        """One forward pass and what follows from it: the assistant's codec frame [nq] on an audio step,
        None on a marker step (``user_row``, the next user frame as ids [nq], is appended only on an audio
        step; ``force_audio`` takes the sampled frame as audio whatever the token; ``forced``, a context
        frame's codes [nq], is an audio step with those codes in place of the sampled ones)."""
        torch = self.torch
        n = self.pending.shape[1]
        if self.max_positions and self.positions + n > self.max_positions:
            raise ModelError(f"voila: the context is full ({self.max_positions} positions, "
                             f"{self.positions / (RATE / self.hop):.0f} s of steps)")
        first = self.positions == 0
        out = self.model(input_ids=self.pending,
                         attention_mask=torch.ones(1, self.positions + n, dtype=torch.long, device=self.device),
                         position_ids=torch.arange(self.positions, self.positions + n, device=self.device)[None],
                         past_key_values=self.cache, ref_embs=self.ref_embs if first else None,
                         ref_embs_mask=self.ref_mask if first else None, use_cache=True, return_dict=True)
        self.cache = out.past_key_values
        self.positions += n
        audio = self.model.audio_transformer.inference(out.last_hidden_state, temperature=self.sampling[
            "audio_temperature"], top_k=self.sampling["audio_top_k"])[0, -1]  # [nq], codes 0 … card-1
        if forced is not None:
            self.counts["context_steps"] += 1
            self.pending = torch.cat([user_row[None, None], (forced + self.offsets)[None, None]], dim=2)
            return forced
        token = self.sample_text(out.logits[:, -1, :])
        head = int(torch.argmax(out.voila_pred[0, -1]))
        if head == 1 and not self.speaking:
            token, self.speaking = self.assistant_id, True
            self.counts["turns"] += 1
        elif token == self.eos_id:
            self.speaking = False
        if token == self.audio_id or force_audio:
            self.counts["audio_steps"] += 1
            self.counts["forced_audio_steps"] += token != self.audio_id
            own = (audio + self.offsets)[None, None]
            self.pending = torch.cat([user_row[None, None], own], dim=2)
            return audio
        row = torch.full((1, 1, self.nq), token, dtype=torch.long, device=self.device)
        self.pending = torch.cat([row, row], dim=2)
        self.take_text(token)
        return None

    def take_text(self, token: int) -> None:
        self.counts["marker_steps"] += 1
        if token == self.eos_id or token == self.assistant_id or self.audio_min <= token <= self.audio_max:
            self.flush_text()
            return
        self._text.append(token)
        if SENTENCE_END.search(self.tokenizer.decode(self._text)):
            self.flush_text()

    def flush_text(self) -> None:
        text = self.tokenizer.decode(self._text, skip_special_tokens=True).strip() if self._text else ""
        self._text = []
        if text:
            self.emit_text(self._seq, text)

    def compute(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        torch = self.torch
        self._seq = seq
        with torch.inference_mode():
            user = self.encode_room(room) + self.offsets[:, None]  # [nq, per_frame] as LM ids
            forced = self._forced.pop(seq, None)
            own = []
            for k in range(self.per_frame):
                markers, audio = 0, None
                while audio is None:
                    audio = self.lm_step(user[:, k], force_audio=markers >= self.max_marker_steps,
                                         forced=None if forced is None else forced[:, k])
                    markers += 1
                own.append(audio)
            pcm = self.decode_own(torch.stack(own, dim=1))
        return float_to_pcm16(pcm)

    def model_stats(self) -> dict[str, Any]:
        out = super().model_stats()
        if hasattr(self, "counts"):
            out |= {"steps": dict(self.counts), "positions": self.positions}
        return out
