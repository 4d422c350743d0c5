"""``freeze-omni``: Freeze-Omni (VITA-MLLM) run in this process with the repository's own modules.

Freeze-Omni ships its inference code as a repository: ``code=DIR`` is a clone of VITA-MLLM/Freeze-Omni
(``models/pipeline.py``: ``inferencePipeline``; ``models/decoder/llm2tts.py``: ``llm2TTS``;
``web/vad.py``: ``VAD``). Its demo server (``bin/server.py``) runs listening and speaking in two
threads; this bridge runs the same steps in the same order, serialised into the room's frames:

- **Listening, per 160 ms chunk.** The room is resampled to 16 kHz (soxr, streaming, causal) and cut
  into chunks of ``VAD.get_chunk_size()`` samples (2560: 16 fbank frames of 10 ms). ``VAD.predict``
  (Silero VAD plus 80-bin fbank features with 3 frames of overlap) gives ``sl`` at a speech start
  (with the features of the 6 chunks before it), ``cl`` while in a dialogue, ``el`` at 2 s of
  silence. On ``sl`` the LLM state is a copy of the latest one (the system role, or the last reply's),
  the 6 earlier chunks are prefilled (the first as ``sl``) and the current one as ``cl``; each further
  ``cl`` chunk goes through ``speech_dialogue`` while the **state classifier** says ``cl``. It says
  ``ss`` (the user is done and the model should answer) or ``el`` (not for the model: no answer).
- **Speaking.** On ``ss`` the current reply (if any) is interrupted — its unplayed audio is dropped
  from the playout buffer, as the demo drops its queue — and a new reply starts: ``speech_dialogue``
  with stat ``ss`` then ``cs`` gives one text token and hidden state per call until ``<|im_end|>``;
  the text is cut into segments at punctuation (after at least 4 tokens; commas too for the first
  segment or after 20 tokens), each segment goes through ``post_process`` and ``llm2TTS.run`` with
  the checkpoint's ``server.json`` decoder settings (the first segment with the first-pack ones and
  its leading samples below 0.03 cut), and its 24 kHz pieces go into the playout buffer.
- **Pacing.** The demo's speaking thread runs as fast as the GPU goes, beside the listening
  thread (bin/server.py). In **realtime** the reply's timing is the model's own: after a frame's
  listening, reply steps (LLM tokens or TTS pieces) run until the frame's 80 ms of wall time since
  the frame arrived are spent (at least one step per frame), so a reply whose steps are slower
  than its audio shows as underruns in the playout stats, as it would in the demo. In
  **lockstep** wall time is not the model's time, so the rule is fixed and stated: exactly
  ``llm_steps_per_frame`` reply steps per room frame (default 4: 50 steps a second). The rule is
  this bridge's, not the authors'; lockstep timings of Freeze-Omni depend on it and are reported
  with it (``llm_steps_per_frame`` and ``reply_steps`` in the stats).

Latency by design: an answer cannot start before the classifier's ``ss``, which comes on a chunk
after the question's end (160 ms chunks), plus the first segment's tokens and TTS. The model code
places everything on ``cuda`` and computes in bfloat16 autocast (float32 where bf16 is missing):
``device`` must be a CUDA device (``cuda:N`` selects it) and ``dtype`` bfloat16.
The duty is the spoken preamble only; ``instructions=`` becomes the system role (``prompt_text``
in the demo, web/parms.py:54-55), recorded in the stats; without it the role is the authors' demo
default (web/parms.py:44-48 at 3e17af43, ``DEMO_ROLE``, its whitespace included: the demo's
string literal continues its lines with a backslash), prefilled with ``stat='pre'``
(models/pipeline.py:54-62) and copied for every episode (web/parms.py:57-61).

**VAD version.** The authors pin ``silero-vad==5.1.2`` (requirements.txt:6); this project's
environment has silero-vad 6.2.3, whose ``load_silero_vad()`` loads other weights (the
``VADIterator`` rule is the same in both). ``web/vad.py`` runs it with threshold 0.8 (end below
0.65) and 2 s of minimum silence (web/vad.py:33-42), and its ``sl``/``el`` decide when the model
listens and when a dialogue ends. Measured on this project's synthetic MTR and Duplex-MPE rooms
(``bench/freeze_omni_vad.py``; figures in docs/bridges.md): 78-97 % of the two versions' starts and
ends fall in the same 160 ms chunk and nearly all the rest one chunk apart, and 5.1.2 alone ends the
dialogue in 3 of 15 mid-turn pauses that 6.2.3 listens through. ``vad=PATH`` (a
``silero_vad.jit`` or a directory holding one, e.g. silero-vad 5.1.2's package) loads those weights
into the authors' ``VAD`` in place of the installed package's; the ``[freeze-omni]`` extra pins
5.1.2 for a bridge host in a venv of its own. The stats record which weights ran (``vad``).

**Ground-truth history** (``accepts_context``, docs/protocol.md §5.1-5.2). The model's own past
output enters its LLM state as text tokens, never as audio: on ``ss`` ``recognize`` feeds the chat
template's suffix (the assistant turn's opening, models/audioLLM.py:289-294), and each ``cs`` step
feeds the token sampled one step before (``input_ids = last_id``, models/audioLLM.py:303-308;
``past_tokens`` grows by it, models/pipeline.py:80-84) until ``<|im_end|>`` is sampled, which is
not fed (the next user turn's prefix starts with it, models/audioLLM.py:281-285). So a history
turn is taken as the model's own in the same way, through ``speech_dialogue`` only:

- *Teacher-forced:* each ground-truth assistant turn's words (``context_turns``, role
  ``assistant``; a reply cut by a barge-in: :meth:`~clients.messages.ContextTurn.spoken_text`).
  In the slot its audio starts, the state of the user turn being listened to gets stat ``ss``
  (the suffix), then the turn's tokens (the LLM's tokenizer, as ``synthesize`` encodes text) go
  in one ``cs`` step each, every step's sampled token replaced by the ground truth's next one;
  after the last the state is left as upstream leaves it when ``<|im_end|>`` is sampled (stat
  ``sl``, the next speech start copies it). No audio is made for it: the context audio is the
  assistant track of those slots (the server records it), and the context frames themselves are
  not fed to the model, which never hears its own voice in the demo either.
- *Not forced:* the user turns. The history's room audio goes through the normal listening path
  (VAD, the 6-chunk prefill, the state classifier on every chunk), so the user's words enter the
  LLM as speech features exactly as live. In the history the classifier's verdicts do not act
  (``history_verdicts`` counts them): an ``ss`` or ``el`` there is taken as ``cl``, so the user's
  turn is listened to whole, and a speech start while a user turn is open (a pause in it)
  continues that turn's state; the ground-truth reply ends the turn. A ground-truth turn with no
  speech start before it follows the last state (``forced_unheard``). Replies start again from
  the first live slot.

A turn is forced within the slot it starts in (one LLM step per token), so in realtime that
slot's answer is late by the turn's compute (a history slot, whose answer the server ignores).
Context frames without words (``context_turns``) end the attempt with ``model_error``. The MTR
paper gives the history as ground-truth assistant audio and publishes no Freeze-Omni inference
code, so this text route is the bridge's own (docs/bridges.md).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from clients.errors import ModelBadCheckpoint
from clients.pcm import float_to_pcm16
from model_bridges import register
from model_bridges.inprocess import FRAME_S, InProcessBridge, import_model_code, need_file, resolve_checkpoint
from model_bridges.playout import BridgeConfigError, PlayoutBuffer, Rechunker, opt_float, opt_int

IN_RATE, OUT_RATE = 16_000, 24_000
TTS_DIM = 896  # the decoder's input rows: the authors reshape the LLM's embeddings and hidden states to it
REPO = "https://github.com/VITA-MLLM/Freeze-Omni"
# bin/inference.py's decoder settings, used where the checkpoint has no server.json
DECODER_DEFAULTS = {"decoder_first_chunk_size": 40, "decoder_chunk_size": 40, "decoder_chunk_overlap_size": 10,
                    "decoder_top_k": 2, "decoder_penalty_window_size": -1, "decoder_penalty": 1.1,
                    "decoder_N": 2401, "decoder_seg_threshold_first_pack": 0.01, "decoder_seg_threshold": 0.01}
FIRST_PACK_FLOOR = 0.03  # the first segment starts at its first sample above this (bin/server.py)
SENTENCE_SUFFIXES = ("。", "：", "？", "！", ".", "?", "!", "\n")
CLAUSE_SUFFIXES = (",", "，", ":") + SENTENCE_SUFFIXES
HISTORY_CHUNKS = 6  # chunks before a speech start that are prefilled with it
# the authors' demo role (web/parms.py:44-48): one string literal continued with backslashes, so the
# next line's indentation (77 spaces) is part of it
_INDENT = " " * 77
DEMO_ROLE = _INDENT.join(("You are a helpful voice assistant.", "Your answer should be coherent, natural, simple, "
                          "complete.", "Your name is Xiao Yun.", "Your inventor is Tencent."))


def vad_weights_file(path: str) -> Path:
    """The ``silero_vad.jit`` that ``vad=PATH`` names: the file itself, or one in the directory, its
    ``data/`` or its ``silero_vad/data/`` (an unpacked silero-vad package or wheel)."""
    p = Path(path).expanduser()
    for candidate in (p, p / "silero_vad.jit", p / "data" / "silero_vad.jit", p / "silero_vad" / "data" / "silero_vad.jit"):
        if candidate.is_file():
            return candidate
    raise BridgeConfigError(f"freeze-omni: vad={path} is not a silero_vad.jit nor a directory holding one "
                            "(data/ or silero_vad/data/)")


def load_vad_jit(path: Path):
    """The TorchScript VAD model as silero-vad's ``init_jit_model`` loads it (CPU, eval mode; the same
    in 5.1.2 and 6.2.3, silero_vad/utils_vad.py)."""
    import torch

    model = torch.jit.load(str(path), map_location=torch.device("cpu"))
    model.eval()
    return model


def use_vad_weights(vad, model) -> None:
    """Put ``model`` into the authors' ``VAD``: it keeps the model as ``vad_model`` and drives it through
    ``vad_iterator`` (web/vad.py:33-42), whose threshold and silence settings stay as they are."""
    vad.vad_model = model
    vad.vad_iterator.model = model
    vad.vad_iterator.reset_states()


def installed_vad() -> str:
    """Which VAD weights ``load_silero_vad()`` gives: the installed silero-vad package's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"silero-vad {version('silero-vad')} (installed)"
    except PackageNotFoundError:
        return "silero-vad (version unknown)"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@register("freeze-omni")
class FreezeOmni(InProcessBridge):
    """Options: ``checkpoint`` (Freeze-Omni's ``checkpoints`` directory or hub id, e.g.
    ``VITA-MLLM/Freeze-Omni``: ``audiollm/``, ``decoder/``, ``codec/``, ``server.json``), ``llm``
    (Qwen2-7B-Instruct: a directory or hub id), ``code`` (a clone of VITA-MLLM/Freeze-Omni),
    ``top_k``/``top_p``/``temperature`` (default 20/0.8/0.8, the authors' demo script),
    ``llm_steps_per_frame`` (default 4), ``max_reply_tokens`` (default 500, as the demo),
    ``instructions``/``instructions_file`` (the system role), ``vad`` (a ``silero_vad.jit`` or a
    directory holding one: the VAD weights, default the installed silero-vad's), and the common ones."""

    name = "freeze-omni"
    family = "freeze-omni"
    takes_text_prompt = True
    accepts_context = True

    def __init__(self, checkpoint: str = "", **options: Any):
        super().__init__(checkpoint, **options)
        o = self.options
        self.llm_id = str(o.pop("llm", "") or "")
        self.code_dir = str(o.pop("code", "") or "")
        self.sampling = {"top_k": opt_int(o, "top_k", 20), "top_p": opt_float(o, "top_p", 0.8),
                         "temperature": opt_float(o, "temperature", 0.8)}
        self.steps_per_frame = opt_int(o, "llm_steps_per_frame", 4)
        self.max_reply_tokens = opt_int(o, "max_reply_tokens", 500)
        vad = str(o.pop("vad", "") or "")
        self.vad_file = vad_weights_file(vad) if vad else None
        if not self.llm_id:
            raise BridgeConfigError("freeze-omni: give llm=DIR (Qwen2-7B-Instruct, a directory or hub id)")
        if self.steps_per_frame < 1:
            raise BridgeConfigError("freeze-omni: llm_steps_per_frame is at least 1")
        self.start()

    # loading ------------------------------------------------------------------------------

    def load_parts(self, directory: Path, llm_dir: Path):
        """The repository's pipeline (encoder, adapter, LLM, state classifier), speech decoder and VAD."""
        if not self.device.startswith("cuda") or self.dtype_name != "bfloat16":
            raise BridgeConfigError("freeze-omni: its code runs on cuda in bfloat16 autocast only "
                                    "(--device cuda, --dtype bfloat16)")
        import torch

        if ":" in self.device:
            torch.cuda.set_device(self.device)
        pipeline = import_model_code(self.code_dir, "models.pipeline", "freeze-omni", REPO)
        llm2tts = import_model_code(self.code_dir, "models.decoder.llm2tts", "freeze-omni", REPO)
        vad = import_model_code(self.code_dir, "web.vad", "freeze-omni", REPO)
        args = SimpleNamespace(model_path=str(directory), llm_path=str(llm_dir), **self.sampling)
        try:
            return pipeline.inferencePipeline(args), llm2tts.llm2TTS(str(directory)), vad.VAD()
        except (KeyError, ValueError) as exc:
            raise ModelBadCheckpoint(f"freeze-omni: the checkpoint does not fit ({type(exc).__name__}: "
                                     f"{str(exc)[:300]})") from None

    def load(self) -> None:
        import torch

        self.torch = torch
        directory = resolve_checkpoint(self.checkpoint, self.allow_download)
        if not (directory / "audiollm").is_dir() and (directory / "checkpoints" / "audiollm").is_dir():
            directory = directory / "checkpoints"  # the hub repository holds the model_path as checkpoints/
        for name, what in (("audiollm/final.pt", "the speech encoder and adapter"),
                           ("audiollm/train.yaml", "the model config"), ("audiollm/global_cmvn", "the CMVN"),
                           ("decoder/final.pt", "the speech decoder"), ("decoder/model.json", "its config"),
                           ("codec/final.pt", "the codec"), ("codec/model.json", "its config")):
            need_file(directory, name, what)
        llm_dir = resolve_checkpoint(self.llm_id, self.allow_download)
        need_file(llm_dir, "config.json", "the LLM config")
        self.decoder_cfg = dict(DECODER_DEFAULTS)
        server_json = directory / "server.json"
        if server_json.is_file():
            try:
                self.decoder_cfg |= json.loads(server_json.read_text("utf-8"))
            except ValueError as exc:
                raise ModelBadCheckpoint(f"freeze-omni: server.json is not valid JSON ({exc})") from None
        self.pipeline, self.tts, self.vad = self.load_parts(directory, llm_dir)
        self.vad_source = installed_vad()
        if self.vad_file is not None:
            use_vad_weights(self.vad, load_vad_jit(self.vad_file))
            self.vad_source = f"{self.vad_file} (sha256 {file_sha256(self.vad_file)[:12]})"
        self.chunk_samples = int(self.vad.get_chunk_size())
        # the system role is prefilled once; every episode starts from a copy of it (the demo's reset)
        self.system_role = self.pipeline.speech_dialogue(None, stat="pre", role=self.text_prompt or DEMO_ROLE)

    def describe(self) -> dict[str, Any]:
        return {"chunk_ms": 1000 * self.chunk_samples // IN_RATE, "input_rate": IN_RATE, "output_rate": OUT_RATE,
                "sampling": self.sampling, "llm_steps_per_frame": self.steps_per_frame,
                "system_role": "option" if self.text_prompt else "demo", "vad": self.vad_source}

    # per episode ----------------------------------------------------------------------------

    def fresh_state(self) -> None:
        self.clock = getattr(self, "clock", "lockstep")  # warm-up runs before any episode
        self.vad.reset_vad()
        self.latest = copy.deepcopy(self.system_role)  # the demo's generate_outputs
        self.listening: dict | None = None
        self.reply = None
        self.reply_no = 0
        self.rechunk = Rechunker(self.chunk_samples, self.sample_rate, IN_RATE)
        self._slot = 0
        self.playout = PlayoutBuffer(self.frame_samples, self.sample_rate, clock=lambda: self._slot * FRAME_S)
        self.counts = {"chunks": 0, "speech_starts": 0, "vad_ends": 0, "answers": 0, "dismissed": 0,
                       "interrupted": 0, "tokens": 0, "segments": 0, "reply_steps": 0, "forced_turns": 0,
                       "forced_tokens": 0, "forced_unheard": 0,
                       "history_verdicts": 0}
        self.forcing: dict = {}  # slot -> the ground-truth assistant turn that starts in it (gt history)

    def compute(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self._slot = seq
        deadline = self.now() + FRAME_S
        with self.torch.no_grad():
            turn = self.forcing.get(seq)
            if turn is not None:
                self.force_turn(turn.spoken_text())
            for chunk in self.rechunk.push(room):
                self.listen(chunk)
            steps = 0
            while self.reply is not None:
                if self.clock == "lockstep" and steps >= self.steps_per_frame:
                    break
                if self.clock == "realtime" and steps and self.now() >= deadline:
                    break
                if next(self.reply, StopIteration) is StopIteration:
                    self.reply = None
                    break
                steps += 1
            self.counts["reply_steps"] += steps
        return self.playout.pull()

    def now(self) -> float:
        """Wall time in seconds (realtime pacing; a test replaces it)."""
        return time.perf_counter()

    def reset(self, episode) -> None:
        self.clock = episode.clock
        super().reset(episode)
        self.forcing = self.assistant_turns()

    def in_history(self) -> bool:
        """The slot being stepped is one of the episode's ground-truth history (context) slots."""
        return self._slot < self.context_frames

    # ground-truth history (see the module docstring) ------------------------------------------

    def force_turn(self, text: str) -> None:
        """Take ``text`` into the LLM state as the model's own reply to the turn listened to."""
        torch, dialogue = self.torch, self.pipeline.speech_dialogue
        if self.listening is not None:
            out = self.listening
        else:  # no speech start before it: the turn follows the last state
            self.counts["forced_unheard"] += 1
            out = copy.deepcopy(self.latest)
            out.update(adapter_cache=None, encoder_cache=None, pe_index=0, last_id=None)
            out.pop("text", None)
            out.pop("hidden_state", None)
        self.vad.in_dialog = False  # as on ss: the next speech start is a new user turn
        self.listening = None
        out = dialogue(None, **(out | {"stat": "ss"}))  # the assistant turn's opening (chat suffix)
        tokens = list(self.pipeline.model.tokenizer.encode(text))
        for i, token in enumerate(tokens):
            # the step's sample is replaced by the ground truth's token, which the next step feeds
            past = list(out.get("past_tokens") or [])
            if out["stat"] == "cs":
                past[-1] = token
            else:
                past.append(token)
            fed = {k: v for k, v in out.items() if k not in ("text", "hidden_state")}
            fed.update(stat="cs", last_id=torch.tensor([[token]], device=self.token_device(out)), past_tokens=past)
            out = dialogue(None, **fed)
        out = {k: v for k, v in out.items() if k not in ("text", "hidden_state")}
        out.update(stat="sl", last_id=None)  # as after <|im_end|> was sampled (not fed)
        self.latest = out
        self.counts["forced_turns"] += 1
        self.counts["forced_tokens"] += len(tokens)

    def token_device(self, out: dict):
        """Where the sampled token ids live (the model's device)."""
        last = out.get("last_id")
        return last.device if last is not None else self.device

    # listening (bin/server.py send_pcm and llm_prefill) ------------------------------------------

    def listen(self, chunk: np.ndarray) -> None:
        self.counts["chunks"] += 1
        res = self.vad.predict(chunk.astype(np.float32))
        status = res.get("status")
        if status == "sl" and self.in_history() and self.listening is not None:
            self.counts["speech_starts"] += 1  # gt history: the same user turn goes on (a pause in it)
            for feature in [*res["feature_last_chunk"], res["feature"]]:
                self.prefill("cl", feature)
        elif status == "sl":
            self.counts["speech_starts"] += 1
            out = copy.deepcopy(self.latest)
            out.update(adapter_cache=None, encoder_cache=None, pe_index=0, stat="sl", last_id=None)
            out.pop("text", None)
            out.pop("hidden_state", None)
            self.listening = out
            for i, feature in enumerate(res["feature_last_chunk"]):
                self.prefill("sl" if i == 0 else "cl", feature, first=True)
            self.prefill("cl", res["feature"])
        elif status in ("cl", "el") and self.listening is not None:
            self.prefill(status, res["feature"])

    def prefill(self, status: str, feature, first: bool = False) -> None:
        torch, dialogue = self.torch, self.pipeline.speech_dialogue
        out = self.listening
        if status == "sl":
            out = dialogue(torch.as_tensor(np.asarray(feature, dtype=np.float32)), **out)
        elif status == "el":
            self.vad.in_dialog = False
            self.counts["vad_ends"] += 1
        else:
            if out["stat"] == "cl":
                out = dialogue(torch.as_tensor(np.asarray(feature, dtype=np.float32)), **out)
            if first:
                out["stat"] = "cl"
            if out["stat"] in ("ss", "el") and self.in_history():
                # gt history: the classifier's verdict does not act; the user's turn is listened to
                # whole and the ground-truth reply answers it (force_turn)
                self.counts["history_verdicts"] += 1
                out["stat"] = "cl"
            if out["stat"] == "el":
                self.vad.in_dialog = False
                self.counts["dismissed"] += 1
            elif out["stat"] == "ss":
                self.vad.in_dialog = False
                self.interrupt()
                self.counts["answers"] += 1
                self.reply = self.speak(out)
        self.listening = out

    def interrupt(self) -> None:
        """A new answer starts: the running reply stops and what it left unplayed is dropped."""
        active = self.reply is not None
        if active:
            self.reply.close()
            self.reply = None
        if self.playout.flush() or active:
            self.counts["interrupted"] += 1

    # speaking (bin/server.py generate and decoder) ------------------------------------------------

    def speak(self, out: dict):
        """A reply, one model call per ``next``: the LLM's tokens and the decoder's pieces."""
        dialogue = self.pipeline.speech_dialogue
        item = f"reply{self.reply_no}"
        self.reply_no += 1
        out = dialogue(None, **out)
        self.latest = out
        hidden, text, last, pieces = [], "", "", 0
        if out["stat"] == "cs":
            hidden.append(out["hidden_state"])
            self.counts["tokens"] += 1
        yield
        while out["stat"] == "cs" and len(out["past_tokens"]) <= self.max_reply_tokens:
            out = {k: v for k, v in out.items() if k not in ("text", "hidden_state")}
            out = dialogue(None, **out)
            self.latest = out
            if out["stat"] != "cs":
                break
            self.counts["tokens"] += 1
            hidden.append(out["hidden_state"])
            new = out["text"][len(last):]
            if "\ufffd" in new:  # an incomplete UTF-8 sequence: wait for the next token
                yield
                continue
            text += new
            suffixes = CLAUSE_SUFFIXES if pieces == 0 or len(hidden) >= 20 else SENTENCE_SUFFIXES
            if new.endswith(suffixes) and len(hidden) >= 4 and not (new.endswith(".") and last[-1:].isdigit()):
                pieces = yield from self.synthesize(hidden, text, pieces, item)
                hidden, text = [], ""
            last = out["text"]
            yield
        if hidden:
            yield from self.synthesize(hidden, text, pieces, item)
        self.playout.end_item(item)

    def synthesize(self, hidden: list, text: str, pieces: int, item: str):
        torch, cfg, model = self.torch, self.decoder_cfg, self.pipeline.model
        states = torch.cat(hidden).squeeze(1)
        text = self.pipeline.post_process(text)
        self.emit_text(self._slot, text)
        self.counts["segments"] += 1
        ids = torch.tensor(model.tokenizer.encode(text)).to(states.device)
        embeddings = model.llm_decoder.model.embed_tokens(ids)
        first = pieces == 0
        chunk = cfg["decoder_first_chunk_size"] if first else cfg["decoder_chunk_size"]
        threshold = cfg["decoder_seg_threshold_first_pack"] if first else cfg["decoder_seg_threshold"]
        for piece in self.tts.run(embeddings.reshape(-1, TTS_DIM).unsqueeze(0), cfg["decoder_top_k"],
                                  states.reshape(-1, TTS_DIM).unsqueeze(0), chunk, cfg["decoder_chunk_overlap_size"],
                                  cfg["decoder_penalty_window_size"], cfg["decoder_penalty"], cfg["decoder_N"],
                                  threshold):
            wave = piece.squeeze().float().cpu().numpy().reshape(-1)
            if pieces == 0:
                loud = np.flatnonzero(np.abs(wave) > FIRST_PACK_FLOOR)
                wave = wave[loud[0]:] if len(loud) else wave
            pieces += 1
            self.playout.push(float_to_pcm16(wave), item)
            yield
        return pieces

    def model_stats(self) -> dict[str, Any]:
        out = super().model_stats()
        if hasattr(self, "counts"):
            out |= {"steps": dict(self.counts), "playout": self.playout.stats()}
        return out
