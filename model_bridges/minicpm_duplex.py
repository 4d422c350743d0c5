"""``minicpm-o``: the duplex interface of MiniCPM-o 4.5, run in this process through transformers.

MiniCPM-o decides once per chunk (1 s by default), not once per 80 ms frame. The bridge therefore
buffers the room stream: room frames are resampled to 16 kHz (soxr, streaming, causal) and cut
into chunks of exactly ``chunk_ms``; each full chunk goes to ``streaming_prefill`` and then
``streaming_generate``, whose speech (24 kHz) goes into the playout buffer
(:class:`model_bridges.playout.PlayoutBuffer`) and plays from the slot of the room frame that
completed the chunk on, one 80 ms frame per slot, as a loudspeaker would play it. So an answer starts at least one chunk after the
room speech it answers (the chunk must be complete), plus the model's compute time in realtime:
about 1 s of latency that is the model's design, not the bridge's. A turn's last partial frame
is played padded when the model says ``end_of_turn``.

The model's code comes with the checkpoint (``trust_remote_code``). The calls and their order are
those of OpenBMB's own code; references are to ``OpenBMB/MiniCPM-o`` at 3ec4cb0e (README.md) and
to ``OpenBMB/minicpm-o-4_5-pytorch-simple-demo`` at c7e16605 (the demo; ``MiniCPMO45/`` holds the
model code the checkpoint ships):

- load: ``AutoModel.from_pretrained(…, trust_remote_code=True)``, ``init_tts()``, ``as_duplex()``
  (README.md:1550-1567);
- per episode, the fresh state: ``prepare(prefix_system_prompt, suffix_system_prompt, ref_audio,
  prompt_wav_path)`` (MiniCPMO45/modeling_minicpmo.py:2561-2567). The system turn is framed as the
  demo frames it: prefix ``<|im_start|>system\n{text}\n<|audio_start|>``, the reference voice
  (16 kHz) as audio embeddings, suffix ``<|audio_end|><|im_end|>`` (demo core/processors/unified.py:
  879-882, modeling_minicpmo_unified.py:657-662), with the demo's default text ``Streaming Omni
  Conversation.`` (core/processors/unified.py:879-880) unless ``instructions`` is given;
- the **TTS prompt**: ``prompt_wav_path`` is the same reference WAV (core/processors/unified.py:894,
  README.md:1612). ``prepare`` initialises the token-to-wave cache only when it is given
  (modeling_minicpmo.py:2579-2581) and without that cache ``_generate_waveform_from_tokens`` returns
  ``None`` (modeling_minicpmo.py:3416-3418): the model would never make a sound. The reference WAV
  is ``ref_audio=WAV``, by default ``assets/HT_ref_audio.wav`` in the checkpoint directory (the
  file OpenBMB's README reads, README.md:1600; the demo's configured default,
  ``assets/ref_audio/ref_minicpm_signature.wav`` of the demo repository, config.py:65, is used
  when the checkpoint has that one instead). No reference voice is an error at start, not a
  silent run;
- per chunk: ``streaming_prefill(audio_waveform=…)``, ``streaming_generate(prompt_wav_path=…)``
  (README.md:1628-1639), then ``finalize_unit()`` where the model code has it: the unified model
  defers the unit's terminator to it and its next ``streaming_prefill`` raises until it is called
  (modeling_minicpmo_unified.py:4574-4579, 4970, 5263); the checkpoint's ``MiniCPMODuplex``
  finalises inside ``streaming_generate`` and has no such call.

**Ground-truth history** (``accepts_context``, docs/protocol.md §5.1-5.2). The model's own past
output enters its context as the text tokens it generated, never as audio; the speech is
synthesised from those tokens. So the history's assistant turns go in as tokens, through the
model's own unit loop:

- *Where a unit's tokens come from.* ``streaming_generate`` is the only place they are produced
  (modeling_minicpmo.py:3014-3270): from the ``pending_logits`` of ``streaming_prefill`` it asks
  ``self.decoder.decode(logits=…, mode=…)`` for each token (3087-3098), replaces ``<|listen|>`` by
  ``<|tts_bos|>`` while the turn has not ended (3100-3102), appends it to ``total_ids`` (3104),
  stops at a chunk terminator (``<|listen|>``, ``<|chunk_eos|>``, ``<|chunk_tts_eos|>``: 3109-3112,
  ids from 2415-2426), else feeds it, counts it in ``res_ids`` unless it is ``<|speak|>``
  (3113-3123), marks the turn ended on ``<|turn_eos|>`` (3129-3132) and keeps tokens after the
  first (``j != 0``) as the unit's text (3134-3136); at ``j = max_new_speak_tokens_per_chunk − 1``
  it forces ``<|chunk_eos|>`` (3078-3083); then it feeds ``</unit>`` (3139-3141) and calls
  ``decoder.register_unit_end`` and the sliding window (3149-3160). ``StreamDecoder.decode``
  (utils.py:2087-2200) returns a one-element id tensor; it returns ``<|chunk_eos|>`` without any
  record (2132-2136) and every other token it records in ``generated_tokens`` (the repetition
  penalty's window, 2143-2158) or, for ids in ``special_token_ids`` (none for the duplex,
  modeling_minicpmo.py:2432-2434, utils.py:1179), in ``generated_special_tokens`` (2195-2198).
- *Teacher forcing replaces only the sampling step.* For a history unit the bridge sets, for that
  one ``streaming_generate`` call, an instance-level ``decode`` on the duplex's ``decoder`` that
  returns the script's next id as such a tensor with the same bookkeeping, so the penalty window
  holds the ground-truth words as if the model had said them, and ``generate_audio`` false, so no
  speech is synthesised (modeling_minicpmo.py:3183-3197; the server plays the context audio, and
  the bridge answers history slots with silence). Both are restored afterwards; everything else —
  feeding, ``total_ids``/``res_ids``, ``current_turn_ended``, ``</unit>``, ``register_unit_end``,
  the sliding window, ``finalize_unit`` where the model code defers it — is the model's own loop.
  After the call the unit's ids in ``total_ids`` must be the script, else the attempt ends with
  ``model_error`` (e.g. a model that forces listening on its first calls, ``force_listen_count``,
  3066-3068). Upstream forces
  tokens into the stream itself: the unified model's ``force_listen_override`` feeds
  ``<|turn_eos|>`` and then listens, giving the sequence ``… <|turn_eos|> <|listen|> </unit>``
  (modeling_minicpmo_unified.py:4998-5008, 5038-5039).
- *The unit grammar scripted* (:func:`unit_scripts`): a unit where the ground-truth assistant is
  silent and its turn has ended: ``<|listen|>``; a unit inside its turn: ``<|speak|>``, that unit's
  words, ``<|chunk_eos|>``; the unit in which the turn ends: ``<|speak|>``, its words,
  ``<|turn_eos|>``, ``<|listen|>`` (legal: the turn has ended when ``<|listen|>`` comes, 3101). A
  unit takes at most ``max_new_speak_tokens_per_chunk − 1`` decoded ids (the last index is the
  forced ``<|chunk_eos|>``), and in the unified model (the one with ``finalize_unit``) a unit's
  text is under 28 characters: a word that would make the unit's text, decoded without special
  tokens, 28 characters or longer is refused and ``<|chunk_eos|>`` forced
  (modeling_minicpmo_unified.py:5079-5093). Words that do not fit are carried to the next unit; a
  single token whose own text reaches the limit could never go in and is dropped.
- *Words per unit is our rule; upstream leaves it to the model.* A turn's text tokens (the
  tokenizer's ``encode(…, add_special_tokens=False)``, as ``prepare`` encodes text,
  modeling_minicpmo.py:2583-2586) are spread over the units its played audio spans in proportion
  to time: token *k* of *n* belongs to the unit holding the instant ``start + (end − start)·k/n``
  (the turn's slots, ``context_turns``; a reply cut by a barge-in: its ``spoken_text()``), and the
  turn ends in the unit its audio ends in. The words heard in a unit's second go in with that unit,
  after its room audio; in free running a unit's words play in the next second, so the history
  places them one unit later than the model would have said them, and no word enters the context
  before the user audio that precedes it in the room. The history units are those whose second
  lies wholly within the context frames; a turn still open in the last of them ends there, and
  words that do not fit are dropped (``forced_dropped`` in the stats).
- *Not forced:* the user turns. The history's room audio goes through ``streaming_prefill`` in the
  same chunks as live. Free running resumes with the first unit that is not wholly history.

Context frames without words (``context_turns``) end the attempt with ``model_error``.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import ceil, floor
from typing import Any

import numpy as np

from clients.codec import FRAME_MS
from clients.errors import ModelError, ModelMissingPackage, ModelMissingWeights
from clients.messages import ContextTurn
from clients.pcm import float_to_pcm16
from model_bridges import register
from model_bridges.inprocess import (
    FRAME_S,
    InProcessBridge,
    bad_checkpoint,
    model_errors,
    resolve_checkpoint,
    torch_dtype,
)
from model_bridges.playout import PlayoutBuffer, Rechunker, opt_int

IN_RATE = 16_000
# the system turn as OpenBMB's demo frames it (core/processors/unified.py:879-882)
SYSTEM_PREFIX, SYSTEM_SUFFIX = "<|im_start|>system\n{text}\n<|audio_start|>", "<|audio_end|><|im_end|>"
DEFAULT_SYSTEM_TEXT = "Streaming Omni Conversation."
# reference voices a checkpoint directory may hold, in order (README.md:1600; demo config.py:65)
DEFAULT_REF_AUDIO = ("assets/HT_ref_audio.wav", "assets/ref_audio/ref_minicpm_signature.wav")
# the unified model refuses a word that makes its unit's text this long (modeling_minicpmo_unified.py:5079-5093)
UNIFIED_UNIT_CHARS = 28


@dataclass(frozen=True)
class UnitTokens:
    """The ids of the unit grammar's tokens (``MiniCPMODuplex.__init__``, modeling_minicpmo.py:2415-2422)."""

    speak: int
    listen: int
    chunk_eos: int
    turn_eos: int


@dataclass(frozen=True)
class SpokenTurn:
    """A ground-truth assistant turn: the slots its played audio spans and its text tokens."""

    start_seq: int
    end_seq: int
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class ForcedHistory:
    """What each history unit's ``streaming_generate`` decodes, unit by unit; ``dropped``: text
    tokens that did not fit before the history's last unit."""

    scripts: tuple[tuple[int, ...], ...]
    dropped: int


def unit_scripts(turns: Sequence[SpokenTurn], n_units: int, unit_frames: Fraction, cap: int,
                 ids: UnitTokens, fits: Callable[[Sequence[int]], bool] | None = None) -> ForcedHistory:
    """The decoded ids of history units ``0 … n_units−1`` (unit *u* spans slots ``[u·unit_frames,
    (u+1)·unit_frames)``), for the assistant ``turns`` in time order; ``cap`` is the loop's
    ``max_new_speak_tokens_per_chunk``, so a unit decodes at most ``cap − 1`` ids. The rule (module
    docstring): token *k* of a turn's *n* is due in the unit holding ``start + (end − start)·k/n``;
    a unit in a turn takes the tokens due by then (``<|speak|>`` … ``<|chunk_eos|>``), the unit its
    audio ends in closes it (``<|speak|>`` … ``<|turn_eos|> <|listen|>``), tokens that do not fit
    go into the next unit, any other unit listens. ``fits``: whether a unit's text tokens are within
    the model's limit on a unit's text (checked word by word, as the model does: a unit takes the words
    before the first that does not fit); a token that does not fit alone is dropped. The last unit
    closes an open turn; what does not fit there is dropped, as are later turns."""
    going_on, closing = cap - 3, cap - 4  # text tokens that fit beside the unit's other ids
    if closing < 1:
        raise ValueError(f"max_new_speak_tokens_per_chunk={cap}: a unit that closes a turn needs at least 5")
    last = n_units - 1

    def fitting(words: tuple[int, ...]) -> int:
        """How many of ``words`` one unit's text takes."""
        n = len(words) if fits is None else 0
        while n < len(words) and fits(words[:n + 1]):
            n += 1
        return n

    def unit_of(slot: Fraction) -> int:
        return min(last, floor(slot / unit_frames))

    plans = []  # (tokens, the unit each is due in, the unit the turn ends in)
    for t in turns:
        n = len(t.tokens)
        if not n:
            continue
        span = t.end_seq - t.start_seq
        due = [unit_of(t.start_seq + Fraction(span * k, n)) for k in range(n)]
        plans.append((t.tokens, due, max(due[-1], min(last, ceil(Fraction(t.end_seq) / unit_frames) - 1))))
    scripts: list[tuple[int, ...]] = []
    ti = k = dropped = 0
    for u in range(n_units):
        if ti == len(plans) or (k == 0 and plans[ti][1][0] > u):
            scripts.append((ids.listen,))
            continue
        tokens, due, end = plans[ti]
        ready = k + sum(1 for d in due[k:] if d <= u)
        rest = tokens[k:]
        if u >= end and ((len(rest) <= closing and fitting(rest) == len(rest)) or u == last):
            said = rest[:fitting(rest[:closing])]
            dropped += len(rest) - len(said)
            scripts.append((ids.speak, *said, ids.turn_eos, ids.listen))
            ti, k = ti + 1, 0
        else:
            due_now = tokens[k:min(ready, k + going_on)]
            said = due_now[:fitting(due_now)]
            scripts.append((ids.speak, *said, ids.chunk_eos))
            k += len(said)
            if due_now and not said:  # its first token alone is over the limit: it can never go in
                dropped, k = dropped + 1, k + 1
    dropped += sum(len(p[0]) for p in plans[ti:]) - (k if ti < len(plans) else 0)
    return ForcedHistory(tuple(scripts), dropped)


@register("minicpm-o")
class MiniCPMODuplex(InProcessBridge):
    """Options: ``checkpoint`` (directory or hub id, e.g. ``openbmb/MiniCPM-o-4_5`` in the local hub
    cache), ``device``, ``dtype``, ``seed``, ``chunk_ms`` (default 1000), ``ref_audio`` (the reference
    voice and TTS prompt, a WAV; default ``assets/HT_ref_audio.wav`` in the checkpoint),
    ``instructions`` / ``instructions_file`` (the text of the system turn instead of the demo's),
    ``model_name`` (default ``minicpm-o``), ``warmup_frames``, ``allow_download``."""

    name = "minicpm-o"
    family = "minicpm-o"
    takes_text_prompt = True
    accepts_context = True

    def __init__(self, checkpoint: str = "", **options: Any):
        super().__init__(checkpoint, **options)
        self.chunk_ms = opt_int(self.options, "chunk_ms", 1000)
        self.ref_audio_path = self.options.pop("ref_audio", None)
        self.start()

    def load_model(self, directory):
        """The model object with its duplex interface (the checkpoint's own code)."""
        try:
            from transformers import AutoModel
        except ImportError:
            raise ModelMissingPackage("minicpm-o needs transformers: pip install 'duplex-mpe[minicpm]'") from None
        try:
            model = AutoModel.from_pretrained(str(directory), trust_remote_code=True,
                                              torch_dtype=torch_dtype(self.dtype_name), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise bad_checkpoint(f"minicpm-o: loading {directory}", exc) from None
        model = model.to(self.device).eval()
        model.init_tts()
        return model

    def load(self) -> None:
        directory = resolve_checkpoint(self.checkpoint, self.allow_download)
        self.model = self.load_model(directory)
        self.duplex = self.model.as_duplex()
        self.tts_prompt = self.reference_voice(directory)
        import soundfile as sf
        import soxr

        x, rate = sf.read(self.tts_prompt, dtype="float32", always_2d=True)
        self.ref_audio = soxr.resample(x[:, 0], rate, IN_RATE).astype(np.float32)
        self.chunk_samples = IN_RATE * self.chunk_ms // 1000

    def reference_voice(self, directory) -> str:
        """The reference WAV: the ``ref_audio`` option, else the first of DEFAULT_REF_AUDIO in the checkpoint."""
        from pathlib import Path

        if self.ref_audio_path:
            path = Path(self.ref_audio_path).expanduser()
            if not path.is_file():
                raise ModelMissingWeights(f"minicpm-o: ref_audio={self.ref_audio_path!r} is not a file")
            return str(path)
        for name in DEFAULT_REF_AUDIO:
            if (Path(directory) / name).is_file():
                return str(Path(directory) / name)
        raise ModelMissingWeights(f"minicpm-o: no reference voice: give ref_audio=WAV or put {DEFAULT_REF_AUDIO[0]} "
                                  f"in {directory} (without a TTS prompt the model makes no sound)")

    def describe(self) -> dict[str, Any]:
        return {"chunk_ms": self.chunk_ms, "input_rate": IN_RATE, "tts_prompt": self.tts_prompt,
                "system_text": self.text_prompt or DEFAULT_SYSTEM_TEXT}

    def fresh_state(self) -> None:
        self.duplex.prepare(prefix_system_prompt=SYSTEM_PREFIX.format(text=self.text_prompt or DEFAULT_SYSTEM_TEXT),
                            suffix_system_prompt=SYSTEM_SUFFIX, ref_audio=self.ref_audio,
                            prompt_wav_path=self.tts_prompt)
        self.rechunk = Rechunker(self.chunk_samples, self.sample_rate, IN_RATE)
        self._slot = 0
        self.playout = PlayoutBuffer(self.frame_samples, self.sample_rate, clock=lambda: self._slot * FRAME_S)
        self.turn, self.chunks, self.speaking = 0, 0, False
        self.history = ForcedHistory((), 0)
        self.forced = {"units": 0, "tokens": 0}

    def reset(self, episode) -> None:
        super().reset(episode)
        if self.context_frames:
            turns = list(self.assistant_turns().values())
            with model_errors(f"{self.family}: history"):
                self.history = self.plan_history(turns)

    def plan_history(self, turns: list[ContextTurn]) -> ForcedHistory:
        """The history units' scripts for this episode's ground-truth assistant turns."""
        d = self.duplex
        ids = UnitTokens(speak=d.speak_token_id, listen=d.listen_token_id, chunk_eos=d.chunk_eos_token_id,
                         turn_eos=d.turn_eos_token_id)
        # the bridge calls streaming_generate with the loop's own default cap (modeling_minicpmo.py:3017)
        cap = inspect.signature(d.streaming_generate).parameters["max_new_speak_tokens_per_chunk"].default
        spoken = [SpokenTurn(t.start_seq, t.end_seq, tuple(d.tokenizer.encode(t.spoken_text(), add_special_tokens=False)))
                  for t in sorted(turns, key=lambda t: t.start_seq)]
        n_units = self.context_frames * FRAME_MS // self.chunk_ms  # units whose second is wholly history
        fits = None
        if hasattr(d, "finalize_unit"):  # the unified model and its limit on a unit's text (module docstring)
            def fits(words: Sequence[int]) -> bool:
                return len(d.tokenizer.decode(list(words), skip_special_tokens=True)) < UNIFIED_UNIT_CHARS
        return unit_scripts(spoken, n_units, Fraction(self.chunk_ms, FRAME_MS), cap, ids, fits)

    def force_unit(self, unit: int, script: tuple[int, ...]) -> None:
        """One ``streaming_generate`` whose sampling step returns ``script`` (module docstring)."""
        import torch

        duplex, decoder = self.duplex, self.duplex.decoder
        pending = deque(script)

        def scripted(logits, **_):
            if not pending:
                raise ModelError(f"minicpm-o: history unit {unit} asked for more than its script {list(script)}")
            tid = pending.popleft()
            if tid != decoder.chunk_eos_id:  # StreamDecoder.decode's record (utils.py:2132-2136, 2195-2198)
                kept = decoder.generated_special_tokens if tid in decoder.special_token_ids else decoder.generated_tokens
                kept.append(tid)
            return torch.tensor([tid], dtype=torch.long, device=logits.device)

        before, own = len(duplex.total_ids), vars(decoder).get("decode")
        audio = duplex.generate_audio
        decoder.decode, duplex.generate_audio = scripted, False
        try:
            duplex.streaming_generate(prompt_wav_path=self.tts_prompt)
        finally:
            duplex.generate_audio = audio
            if own is None:
                del decoder.decode
            else:
                decoder.decode = own
        taken = list(duplex.total_ids[before:before + len(script)])
        if taken != list(script):
            raise ModelError(f"minicpm-o: history unit {unit} took {taken}, not its script {list(script)}")
        self.forced["units"] += 1
        self.forced["tokens"] += sum(1 for t in script[1:] if t not in (duplex.chunk_eos_token_id,
                                                                         duplex.turn_eos_token_id,
                                                                         duplex.listen_token_id))

    def compute(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self._slot = seq
        for chunk in self.rechunk.push(room):
            unit = self.chunks
            self.chunks += 1
            self.duplex.streaming_prefill(audio_waveform=chunk)
            if unit < len(self.history.scripts):
                self.force_unit(unit, self.history.scripts[unit])
                if getattr(self.duplex, "needs_finalize", False):
                    self.duplex.finalize_unit()
                continue
            result = self.duplex.streaming_generate(prompt_wav_path=self.tts_prompt)
            if getattr(self.duplex, "needs_finalize", False):
                self.duplex.finalize_unit()
            item = f"turn{self.turn}"
            if result.get("text"):
                self.emit_text(seq, str(result["text"]))
            wave = result.get("audio_waveform")
            listening = result.get("is_listen", True)
            if not listening and wave is not None and len(wave):
                self.playout.push(float_to_pcm16(np.asarray(wave, dtype=np.float32).reshape(-1)), item)
                self.speaking = True
            # a turn ends with end_of_turn, or with a unit that decodes <|turn_eos|> <|listen|>: upstream
            # returns that one as listening, without end_of_turn (modeling_minicpmo.py:3163-3178)
            if result.get("end_of_turn") or (listening and self.speaking):
                self.playout.end_item(item)
                self.turn += 1
                self.speaking = False
        return self.playout.pull()

    def model_stats(self) -> dict[str, Any]:
        out = super().model_stats()
        if hasattr(self, "playout"):
            out |= {"chunks": self.chunks, "playout": self.playout.stats(), "forced_units": self.forced["units"],
                    "forced_tokens": self.forced["tokens"], "forced_dropped": self.history.dropped}
        return out
