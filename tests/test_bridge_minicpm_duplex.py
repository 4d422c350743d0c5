"""The in-process ``minicpm-o`` bridge against a test double of MiniCPM-o 4.5's duplex interface.

The double has the exact call signatures of the real API (``init_tts()``, ``as_duplex()``,
``prepare(prefix_system_prompt, suffix_system_prompt, ref_audio, prompt_wav_path)``,
``streaming_prefill(audio_waveform)``, ``streaming_generate(prompt_wav_path, max_new_speak_tokens_per_chunk,
…)`` → ``{is_listen, text, audio_waveform, end_of_turn}``, ``finalize_unit()``), the state the bridge
reads and sets (``tokenizer``, ``decoder``, ``total_ids``, ``generate_audio``, the unit grammar's token
ids), the upstream preconditions the bridge depends on, and a scripted behaviour; it is not the
model. The preconditions, from OpenBMB's ``minicpm-o-4_5-pytorch-simple-demo`` at c7e16605
(``MiniCPMO45/``):

- no waveform without a TTS prompt: ``MiniCPMODuplex.prepare`` initialises the token-to-wave cache
  only when ``prompt_wav_path`` is given (modeling_minicpmo.py:2579-2581), and
  ``_generate_waveform_from_tokens`` returns ``None`` while it is not (modeling_minicpmo.py:3416-3418);
- a unit must be finalised: the unified model's ``streaming_prefill`` raises while the previous
  ``streaming_generate`` has not been followed by ``finalize_unit()``
  (modeling_minicpmo_unified.py:4574-4579, ``needs_finalize`` at 4949-4952);
- a unit's tokens come from one loop (modeling_minicpmo.py:3078-3141, the terminator and ``</unit>``
  deferred to ``finalize_unit`` as modeling_minicpmo_unified.py:5027-5075, 5263-5296 do): each id
  from ``decoder.decode``, ``<|listen|>`` turned into ``<|tts_bos|>`` while the turn has not ended, fed
  unless it is a terminator; the double checks every unit against the grammar the bridge relies on;
- a unit's text stays under 28 characters: the unified model refuses a word that would make the
  unit's text (decoded without special tokens) that long and forces ``<|chunk_eos|>``
  (modeling_minicpmo_unified.py:5079-5093).

Untested here: ``MiniCPMODuplex.load_model`` (the checkpoint's remote code through
``AutoModel.from_pretrained(..., trust_remote_code=True)``), which needs the real weights on a GPU
host (docs/bridges.md)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import soundfile as sf

torch = pytest.importorskip("torch")

from clients.errors import MPEError  # noqa: E402
from clients.messages import ContextTurn, EpisodeStart  # noqa: E402
from model_bridges.minicpm_duplex import MiniCPMODuplex, SpokenTurn, UnitTokens, unit_scripts  # noqa: E402
from server.engine.leasing import create_run  # noqa: E402
from tests.support.world import serve_run  # noqa: E402

# OpenBMB's framing of the system turn (core/processors/unified.py:879-882 of the demo, c7e16605)
SYSTEM_OPEN, SYSTEM_CLOSE, SUFFIX = "<|im_start|>system\n", "\n<|audio_start|>", "<|audio_end|><|im_end|>"
DEFAULT_SYSTEM = "Streaming Omni Conversation."

FRAME = 1920
SPEECH_S = 1.5
# the token ids of MiniCPMO45/added_tokens.json (lines 18-99)
UNIT, UNIT_END, TTS_BOS, LISTEN, SPEAK = 151683, 151684, 151703, 151705, 151706
TURN_EOS, CHUNK_EOS, CHUNK_TTS_EOS = 151717, 151718, 151721
AUDIO = -1  # what the double's decoder records for a row of audio embeddings
SPECIAL = {"<unit>": UNIT, "</unit>": UNIT_END, "<|tts_bos|>": TTS_BOS, "<|listen|>": LISTEN, "<|speak|>": SPEAK,
           "<|turn_eos|>": TURN_EOS, "<|chunk_eos|>": CHUNK_EOS, "<|chunk_tts_eos|>": CHUNK_TTS_EOS}
ANSWER = "yes it is".split()  # the double's own words, one unit's worth


class TokenizerDouble:
    """A word tokenizer: every word (split on spaces, punctuation kept) one id from 1000 on."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def encode(self, text, add_special_tokens=True):
        assert add_special_tokens is False  # text goes in as prepare encodes it (modeling_minicpmo.py:2585)
        return [self.vocab.setdefault(w, 1000 + len(self.vocab)) for w in text.split()]

    def decode(self, ids, skip_special_tokens=False):
        words = {v: k for k, v in self.vocab.items()}
        return " ".join(words[i] for i in ids if i in words)

    def convert_tokens_to_ids(self, name):
        return SPECIAL[name]


class DecoderDouble:
    """``StreamDecoder``'s surface (utils.py:1168-2200): it records what is fed (token ids; AUDIO per
    row of audio embeddings) and samples with the duplex's scripted policy."""

    def __init__(self, sample):
        self.sample = sample
        self.chunk_eos_id = CHUNK_EOS  # utils.py:1174
        self.special_token_ids: list[int] = []  # MiniCPMODuplex passes none (modeling_minicpmo.py:2432-2434)
        self.reset()

    def reset(self):  # utils.py:1273-1277
        self.fed: list[int] = []
        self.generated_tokens: list[int] = []
        self.generated_special_tokens: list[int] = []
        self.units: list[dict] = []
        self._unit_open = False

    def embed_token(self, tid):  # utils.py:2041-2044: an int or a one-element id tensor
        tid = tid if isinstance(tid, int) else int(tid.item())
        return torch.full((1, 4), float(tid))

    def feed(self, embeds, return_logits=False):  # utils.py:2060-2085
        assert embeds.dim() == 2
        self.fed += [int(v) if v >= 0 else AUDIO for v in embeds[:, 0].tolist()]
        if return_logits:
            return torch.zeros(1, 8), torch.zeros(1, 1, 4)  # [1, vocab], hidden [1, 1, H]

    def decode(self, logits, mode="sampling", temperature=0.7, top_k=20, top_p=0.8, listen_top_k=None,
               listen_prob_scale=1.0, text_repetition_penalty=1.05, text_repetition_window_size=512):
        assert logits.shape[0] == 1
        tid = self.sample()
        if tid != self.chunk_eos_id:  # chunk_eos returns before any record (utils.py:2132-2136)
            kept = self.generated_special_tokens if tid in self.special_token_ids else self.generated_tokens
            kept.append(tid)  # utils.py:2195-2198
        return torch.tensor([tid], dtype=torch.long, device=logits.device)

    def register_unit_start(self):  # utils.py:1319
        self._unit_open = True

    def register_unit_end(self, input_type, generated_tokens=None, is_listen=False, generated_text=None):
        assert self._unit_open, "register_unit_end without register_unit_start (utils.py:1341-1343)"
        self.units.append({"type": input_type, "tokens": list(generated_tokens or []), "is_listen": is_listen,
                           "text": generated_text or ""})
        self._unit_open = False


def is_word(tid: int) -> bool:
    return 1000 <= tid < UNIT  # the double's word ids, below the special tokens


def check_unit(ids: list[int]) -> None:
    """The unit grammar the bridge's history relies on: ``<|listen|>``; ``<|speak|>`` words
    ``<|chunk_eos|>``; ``<|speak|>`` words ``<|turn_eos|>`` then ``<|listen|>`` or ``<|chunk_eos|>``."""
    assert TTS_BOS not in ids, f"listen before the turn ended became <|tts_bos|> (modeling_minicpmo.py:3101): {ids}"
    if ids == [LISTEN]:
        return
    words = [i for i in ids[1:] if is_word(i)]
    tail = ids[1 + len(words):]
    assert ids[0] == SPEAK and ids[1:1 + len(words)] == words, ids
    assert tail in ([CHUNK_EOS], [TURN_EOS, LISTEN], [TURN_EOS, CHUNK_EOS]), ids


class DuplexDouble:
    """Listens until a chunk is loud while its turn has ended, then answers with SPEECH_S of a tone
    over the next units (its words ANSWER in each), ending with ``<|turn_eos|> <|chunk_eos|>``."""

    def __init__(self):
        self.calls: list[str] = []
        self._pending_finalize = False
        self.tokenizer = TokenizerDouble()
        self.decoder = DecoderDouble(self._sample)
        self.generate_audio, self.ls_mode, self.force_listen_count = True, "explicit", 0  # modeling_minicpmo.py:2306-2392
        # modeling_minicpmo.py:2415-2426
        self.listen_token_id, self.speak_token_id, self.tts_bos_token_id = LISTEN, SPEAK, TTS_BOS
        self.chunk_eos_token_id, self.turn_eos_token_id = CHUNK_EOS, TURN_EOS
        self.chunk_terminator_token_ids = [LISTEN, CHUNK_EOS, CHUNK_TTS_EOS]
        self.answer = [self.tokenizer.vocab.setdefault(w, 1000 + len(self.tokenizer.vocab)) for w in ANSWER]
        self.ran_units = 0  # units whose ids came from the double's own sampler
        self.turn_end = (TURN_EOS, CHUNK_EOS)  # how its answers end; (TURN_EOS, LISTEN) is legal too

    @property
    def needs_finalize(self) -> bool:  # modeling_minicpmo_unified.py:4949-4952
        return self._pending_finalize

    def prepare(self, prefix_system_prompt=None, suffix_system_prompt=None, ref_audio=None, prompt_wav_path=None):
        self.calls.append(f"prepare:{prefix_system_prompt}")
        self.suffix, self.ref_audio = suffix_system_prompt, ref_audio
        # _reset_streaming_state and decoder.reset (modeling_minicpmo.py:2528-2575)
        self.current_turn_ended, self.total_ids, self.res_ids = True, [], []
        self.decoder.reset()
        self._streaming_generate_count = 0
        # the token-to-wave cache exists only with a TTS prompt (modeling_minicpmo.py:2579-2581)
        self.token2wav_initialized = bool(prompt_wav_path) and self.generate_audio
        self.left, self.chunk, self._pending_finalize, self.pending_logits = 0, None, False, None
        self.ran_units = 0

    def streaming_prefill(self, audio_waveform=None, frame_list=None, text_list=None, max_slice_nums=1,
                          batch_vision_feed=False):
        if self._pending_finalize:  # modeling_minicpmo_unified.py:4574-4579
            raise RuntimeError("streaming_prefill called before finalize_unit()!")
        assert audio_waveform.dtype == np.float32 and audio_waveform.ndim == 1
        self.chunk = audio_waveform
        self.calls.append(f"prefill:{len(audio_waveform)}")
        self.decoder.register_unit_start()  # modeling_minicpmo.py:2721-2722
        self.decoder.feed(self.decoder.embed_token(UNIT))  # 2727
        # one row per 100 ms of audio, fed with the logits kept for generate (2960)
        self.pending_logits, _ = self.decoder.feed(torch.full((len(audio_waveform) // 1600, 4), -1.0), return_logits=True)
        self._plan: list[int] | None = None

    def _sample(self) -> int:
        """The double's policy, decided at a unit's first decode."""
        if self._plan is None:
            loud = float(np.abs(self.chunk).max()) > 0.05
            if self.left <= 0 and loud and self.current_turn_ended:
                self.left = int(SPEECH_S * 24000)
            if self.left <= 0:
                self._plan = [LISTEN]
            else:
                self.unit_samples = min(self.left, 24000)
                self.left -= self.unit_samples
                end = list(self.turn_end) if self.left == 0 else [CHUNK_EOS]
                self._plan = [SPEAK, *self.answer, *end]
            self.ran_units += 1
        return self._plan.pop(0)

    def streaming_generate(self, prompt_wav_path=None, max_new_speak_tokens_per_chunk=20, decode_mode="sampling",
                           temperature=0.7, top_k=20, top_p=0.8, listen_prob_scale=1.0, listen_top_k=None,
                           text_repetition_penalty=1.05, text_repetition_window_size=512):
        assert self.pending_logits is not None  # set by streaming_prefill (modeling_minicpmo.py:3046-3064)
        logits, self.pending_logits = self.pending_logits, None
        force_listen = self._streaming_generate_count < self.force_listen_count  # 3066-3068
        self._streaming_generate_count += 1
        start, ids_in_unit, is_listen, end_of_turn, terminator = len(self.total_ids), [], False, False, None
        for j in range(max_new_speak_tokens_per_chunk):  # 3078-3136
            if j == max_new_speak_tokens_per_chunk - 1 and self.ls_mode == "explicit":
                terminator = CHUNK_EOS
                self.total_ids.append(CHUNK_EOS)
                break
            if force_listen:
                last_id = torch.tensor([LISTEN])
            else:
                last_id = self.decoder.decode(logits=logits, mode=decode_mode, temperature=temperature, top_k=top_k,
                                              top_p=top_p, listen_top_k=listen_top_k,
                                              listen_prob_scale=listen_prob_scale,
                                              text_repetition_penalty=text_repetition_penalty,
                                              text_repetition_window_size=text_repetition_window_size)
                assert last_id.shape == (1,) and last_id.dtype == torch.long
                if last_id.item() == LISTEN and not self.current_turn_ended:  # 3101-3102
                    last_id = torch.tensor([TTS_BOS])
            self.total_ids.append(last_id.item())
            is_listen = last_id.item() == LISTEN
            if last_id.item() in self.chunk_terminator_token_ids:
                terminator = last_id.item()
                break
            self.current_turn_ended = False
            if j != 0 and len(self.tokenizer.decode(ids_in_unit + [last_id.item()], skip_special_tokens=True)) >= 28:
                self.total_ids[-1] = terminator = CHUNK_EOS  # the word refused (modeling_minicpmo_unified.py:5079-5093)
                break
            if last_id.item() != SPEAK:
                self.res_ids.append(last_id.item())
            logits, hidden = self.decoder.feed(self.decoder.embed_token(last_id.item()), return_logits=True)
            assert hidden.dim() == 3 and hidden.shape[:2] == (1, 1)  # 3125-3127
            end_of_turn = last_id.item() == TURN_EOS
            if end_of_turn:
                self.current_turn_ended = True
            if j != 0:
                ids_in_unit.append(last_id.item())
        check_unit(self.total_ids[start:])
        self._finalize = (terminator, ids_in_unit, is_listen)  # modeling_minicpmo_unified.py:5144-5152
        self._pending_finalize = True
        if is_listen:
            return {"is_listen": True, "text": "", "audio_waveform": None, "end_of_turn": False}
        text = self.tokenizer.decode(ids_in_unit, skip_special_tokens=True)
        if not self.generate_audio:  # modeling_minicpmo.py:3183-3197: no TTS at all
            return {"is_listen": False, "text": text, "audio_waveform": None, "end_of_turn": end_of_turn}
        t = np.arange(self.unit_samples) / 24000
        wave = (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
        # _generate_waveform_from_tokens: None while the cache is not initialised (modeling_minicpmo.py:3416-3418)
        return {"is_listen": False, "text": text, "audio_waveform": wave if self.token2wav_initialized else None,
                "end_of_turn": end_of_turn}

    def finalize_unit(self):  # modeling_minicpmo_unified.py:5263-5296: terminator and </unit>, then the unit's end
        terminator, ids_in_unit, is_listen = self._finalize
        if terminator is not None and self.ls_mode == "explicit":
            self.decoder.feed(self.decoder.embed_token(terminator))
        self.decoder.feed(self.decoder.embed_token(UNIT_END))
        self.total_ids.append(UNIT_END)
        self.decoder.register_unit_end("audio", ids_in_unit, is_listen, self.tokenizer.decode(ids_in_unit))
        self._pending_finalize = False


class ModelDouble:
    def init_tts(self):
        pass

    def as_duplex(self):
        return DuplexDouble()


class OnDouble(MiniCPMODuplex):
    def load_model(self, directory):
        return ModelDouble()


def run(bridge, room):
    bridge.reset(EpisodeStart(episode_id="e", clock="lockstep", sample_rate=24000, frame_samples=FRAME))
    out = [bridge.step(s, room[s * FRAME:(s + 1) * FRAME]) for s in range(len(room) // FRAME)]
    return np.concatenate([np.zeros(FRAME, np.int16) if o is None else o for o in out])


def write_ref(directory):
    """A reference voice where OpenBMB's README reads it: ``assets/HT_ref_audio.wav`` (README.md:1600)."""
    (directory / "assets").mkdir(exist_ok=True)
    path = directory / "assets" / "HT_ref_audio.wav"
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * np.arange(24000) / 24000)).astype(np.float32), 24000)
    return path


@pytest.fixture
def bridge(tmp_path):
    write_ref(tmp_path)
    return OnDouble(checkpoint=str(tmp_path), warmup_frames="2")


def test_chunks_of_one_second_and_playout_from_the_completing_slot(bridge):
    room = np.zeros(75 * FRAME, np.int16)  # 6 s
    room[int(2.2 * 24000):int(2.6 * 24000)] = 12000  # loud in the third chunk (2 s … 3 s)
    out = run(bridge, room)
    assert len(out) == len(room)
    d = bridge.duplex
    assert [c for c in d.calls if c.startswith("prefill")] == ["prefill:16000"] * 5  # 5 full chunks of 6 s
    # the third chunk completes with room frame 37 (2.96 … 3.04 s); its answer plays from that frame's
    # slot on, SPEECH_S long, then the turn ends
    loud = np.flatnonzero(np.abs(out.reshape(-1, FRAME)).max(axis=1) > 1000)
    assert loud[0] == 37 and len(loud) == int(np.ceil(SPEECH_S / 0.08))  # all of it, the last frame padded
    # the first second of speech ends mid-frame: that half frame waits for the next chunk (one underrun)
    assert loud[-1] - loud[0] + 1 == len(loud) + 1 and bridge.playout.stats()["underruns"] == 1


def test_a_turn_closed_by_a_listening_unit_plays_to_its_end(bridge):
    """A unit that decodes ``<|turn_eos|> <|listen|>`` comes back as listening, without end_of_turn and
    without audio (modeling_minicpmo.py:3163-3178): the turn's last partial frame still plays, padded,
    and the next answer is a turn of its own."""
    bridge.duplex.turn_end = (TURN_EOS, LISTEN)
    room = np.zeros(75 * FRAME, np.int16)
    room[int(2.2 * 24000):int(2.6 * 24000)] = 12000
    out = run(bridge, room)
    loud = np.flatnonzero(np.abs(out.reshape(-1, FRAME)).max(axis=1) > 1000)
    # only the first second has audio (the closing unit listens): 12.5 frames, the half one padded
    assert loud[0] == 37 and len(loud) == 13 and bridge.turn == 1


def test_fresh_state_and_text_prompt_only_as_an_option(bridge, tmp_path):
    room = np.zeros(40 * FRAME, np.int16)
    room[FRAME * 5:FRAME * 8] = 12000
    first = run(bridge, room)
    assert run(bridge, room).tobytes() == first.tobytes()
    default = f"{SYSTEM_OPEN}{DEFAULT_SYSTEM}{SYSTEM_CLOSE}"
    assert bridge.duplex.calls.count(f"prepare:{default}") == 3  # warm-up, then one per episode
    records = [m["data"]["instructions"] for m in bridge._outbox if "instructions" in m.get("data", {})]
    assert records and all(r["source"] == "none" for r in records)
    prompted = OnDouble(checkpoint=str(tmp_path), warmup_frames="0", instructions="You are Aria.")
    run(prompted, room)
    aria = f"{SYSTEM_OPEN}You are Aria.{SYSTEM_CLOSE}"
    assert prompted.duplex.calls.count(f"prepare:{aria}") == 2 and f"prepare:{default}" not in prompted.duplex.calls
    rec = [m["data"]["instructions"] for m in prompted._outbox if "instructions" in m.get("data", {})][-1]
    assert rec["source"] == "option" and rec["text"] == "You are Aria."


def test_speaks_with_the_tts_prompt_and_the_system_turn_framed_as_openbmb_does(bridge):
    """Without ``prompt_wav_path`` the real model returns no waveform and without ``finalize_unit``
    the next prefill raises: the double does both, so a bridge that skips either fails here."""
    room = np.zeros(40 * FRAME, np.int16)
    room[FRAME * 5:FRAME * 8] = 12000
    out = run(bridge, room)
    assert np.abs(out).max() > 1000  # the model's speech reached the room
    d = bridge.duplex
    assert d.suffix == SUFFIX and d.ref_audio is not None and d.ref_audio.dtype == np.float32
    assert bridge.model_stats()["tts_prompt"].endswith("HT_ref_audio.wav")


def test_no_reference_voice_is_a_clear_error(tmp_path):
    from clients.errors import ModelMissingWeights

    with pytest.raises(ModelMissingWeights, match="HT_ref_audio.wav"):
        OnDouble(checkpoint=str(tmp_path), warmup_frames="0")


# ground-truth history ---------------------------------------------------------------------------

IDS = UnitTokens(speak=1, listen=2, chunk_eos=3, turn_eos=4)
SECOND = Fraction(25, 2)  # a 1 s unit in 80 ms slots


def test_unit_scripts_spread_a_turn_over_its_seconds_in_proportion_to_time():
    """Six tokens over slots 25-50 (2.0-4.0 s): token k at slot 25 + 25k/6, so three in the third
    second and three in the fourth, where the audio ends and the turn closes; the others listen."""
    plan = unit_scripts([SpokenTurn(25, 50, (10, 11, 12, 13, 14, 15))], 5, SECOND, 20, IDS)
    assert plan.scripts == ((2,), (2,), (1, 10, 11, 12, 3), (1, 13, 14, 15, 4, 2), (2,)) and plan.dropped == 0


def test_unit_scripts_carry_what_does_not_fit_and_drop_only_at_the_last_unit():
    turn = SpokenTurn(25, 50, (10, 11, 12, 13, 14, 15))
    # cap 6: a unit decodes 5 ids, so 3 words go on, 2 close a turn
    carried = unit_scripts([turn], 5, SECOND, 6, IDS)
    assert carried.scripts == ((2,), (2,), (1, 10, 11, 12, 3), (1, 13, 14, 15, 3), (1, 4, 2)) and carried.dropped == 0
    cut = unit_scripts([turn], 4, SECOND, 6, IDS)  # the history ends with the turn's last second
    assert cut.scripts[-1] == (1, 13, 14, 4, 2) and cut.dropped == 1
    assert unit_scripts([turn], 0, SECOND, 20, IDS).dropped == 6  # no whole second of history
    with pytest.raises(ValueError, match="at least 5"):
        unit_scripts([turn], 5, SECOND, 4, IDS)


def test_unit_scripts_start_a_turn_after_the_unit_that_closed_the_one_before():
    """A turn that closes with <|listen|> ends its unit: the next turn's words, due in the same
    second, go into the next one."""
    a, b = SpokenTurn(0, 12, (10, 11)), SpokenTurn(12, 25, (20, 21))
    plan = unit_scripts([a, b], 3, SECOND, 20, IDS)
    assert plan.scripts == ((1, 10, 11, 4, 2), (1, 20, 21, 4, 2), (2,))
    gap = unit_scripts([SpokenTurn(0, 50, (10, 11))], 4, SECOND, 20, IDS)  # a turn with a silent second in it
    assert gap.scripts == ((1, 10, 3), (1, 3), (1, 11, 3), (1, 4, 2))


def test_unit_scripts_keep_each_units_text_within_the_models_limit():
    """``fits`` (here: two words of text at most) is checked word by word, as the unified model checks
    its 28 characters: the words after the first that does not fit go into the next unit; at the
    last unit they are dropped; a token that does not fit alone is dropped where it comes."""
    turn = SpokenTurn(25, 50, (10, 11, 12, 13, 14, 15))
    two = unit_scripts([turn], 5, SECOND, 20, IDS, fits=lambda words: len(words) <= 2)
    assert two.scripts == ((2,), (2,), (1, 10, 11, 3), (1, 12, 13, 3), (1, 14, 15, 4, 2)) and two.dropped == 0
    cut = unit_scripts([turn], 4, SECOND, 20, IDS, fits=lambda words: len(words) <= 2)
    assert cut.scripts[-1] == (1, 12, 13, 4, 2) and cut.dropped == 2
    long = unit_scripts([SpokenTurn(0, 12, (10, 99, 11))], 3, SECOND, 20, IDS, fits=lambda words: 99 not in words)
    assert long.scripts == ((1, 10, 3), (1, 3), (1, 11, 4, 2)) and long.dropped == 1


GT_REPLY = "Sure , two plus two makes four ."


def history_episode(n_ctx: int, turns: list[ContextTurn]) -> EpisodeStart:
    return EpisodeStart(episode_id="gt", clock="lockstep", sample_rate=24000, frame_samples=FRAME,
                        context_frames=n_ctx, context_turns=turns)


def units_fed(fed: list[int]) -> list[list[int]]:
    """The fed stream cut into units: each unit's ids after its audio, up to ``</unit>``."""
    out: list[list[int]] = []
    for i in fed:
        if i == UNIT:
            out.append([])
        elif out and i != AUDIO and i != UNIT_END:
            out[-1].append(i)
    return out


def gt_room() -> np.ndarray:
    room = np.zeros(100 * FRAME, np.int16)  # 8 s
    room[int(0.5 * 24000):int(1.5 * 24000)] = 12000  # the history's question
    room[int(4.3 * 24000):int(4.8 * 24000)] = 12000  # the live one
    return room


def test_ground_truth_reply_goes_through_the_models_own_unit_loop(bridge):
    """4 s of history: the question's audio through streaming_prefill as live; the reply (slots
    25-45) as the model's own tokens in units 2 and 3, framed by the unit grammar; no audio and no
    text from the bridge in the history; then the model samples again and answers the live question."""
    bridge.reset(history_episode(50, [ContextTurn(role="user", text="What is two plus two ?", start_seq=6, end_seq=19),
                                      ContextTurn(role="assistant", text=GT_REPLY, start_seq=25, end_seq=45)]))
    room = gt_room()
    out = [bridge.step(s, room[s * FRAME:(s + 1) * FRAME]) for s in range(len(room) // FRAME)]
    d = bridge.duplex
    w = d.tokenizer.encode(GT_REPLY, add_special_tokens=False)
    # 7 tokens at slots 25 + 20k/7: k = 0…4 in the third second (slots 25 to 37.5), 5 and 6 in the fourth
    assert units_fed(d.decoder.fed)[:4] == [[LISTEN], [LISTEN], [SPEAK, *w[:5], CHUNK_EOS],
                                            [SPEAK, *w[5:], TURN_EOS, LISTEN]]
    assert d.decoder.units[3]["tokens"] == [*w[5:], TURN_EOS] and d.decoder.units[3]["is_listen"]
    # the repetition window holds the words as if the model had said them (utils.py:2195-2198)
    assert d.decoder.generated_tokens[:len(w) + 6] == [LISTEN, LISTEN, SPEAK, *w[:5], SPEAK, *w[5:], TURN_EOS, LISTEN]
    assert d.generate_audio is True and "decode" not in vars(d.decoder)  # both restored
    stats = bridge.model_stats()
    assert (stats["forced_units"], stats["forced_tokens"], stats["forced_dropped"]) == (4, len(w), 0)
    assert all(o is None for o in out[:50])
    # free running from unit 4: the double's own sampler, and its answer to the live question
    assert d.ran_units == bridge.chunks - 4 and units_fed(d.decoder.fed)[4][0] == SPEAK
    loud = [s for s, o in enumerate(out) if o is not None and np.abs(o).max() > 1000]
    assert loud and loud[0] >= 62  # the unit of 4-5 s completes at slot 62
    assert [m["text"] for m in bridge._outbox if m["type"] == "text"] == ["yes it is"] * 2


def test_a_dense_reply_is_spread_so_that_no_unit_is_over_the_models_28_characters(bridge):
    """A reply of 56 characters in one second (slots 25-37): the unified model would refuse the words
    past its 28 characters in that unit (the double does, as upstream), so the history carries them
    into the next seconds, every unit taking its script, every word in order, none dropped."""
    reply = "Absolutely , extraordinary achievements deserve proper recognition ."
    bridge.reset(history_episode(75, [ContextTurn(role="assistant", text=reply, start_seq=25, end_seq=37)]))
    room = np.zeros(90 * FRAME, np.int16)
    for s in range(90):
        bridge.step(s, room[s * FRAME:(s + 1) * FRAME])
    d = bridge.duplex
    forced = units_fed(d.decoder.fed)[:6]  # 6 s of history
    words = [i for ids in forced for i in ids if is_word(i)]
    assert words == d.tokenizer.encode(reply, add_special_tokens=False) and bridge.history.dropped == 0
    assert [len(d.tokenizer.decode(ids)) < 28 for ids in forced] == [True] * 6
    speaking = [ids for ids in forced if ids[0] == SPEAK]
    assert len(speaking) >= 3 and speaking[-1][-2:] == [TURN_EOS, LISTEN]


def test_a_script_the_model_would_not_take_ends_the_attempt(bridge):
    """The bridge checks that each history unit took its script: a model that listens on its first
    calls (``force_listen_count``, modeling_minicpmo.py:3066-3068) or a script that listens before
    its turn ended (``<|listen|>`` becomes ``<|tts_bos|>``, 3101-3102) is an error, not a history
    other than the given one."""
    turns = [ContextTurn(role="assistant", text=GT_REPLY, start_seq=25, end_seq=45)]
    bridge.reset(history_episode(50, turns))
    bridge.duplex.force_listen_count = 3
    room = gt_room()
    with pytest.raises(MPEError, match="history unit 2 took \\[151705"):
        for s in range(50):
            bridge.step(s, room[s * FRAME:(s + 1) * FRAME])
    bridge.duplex.force_listen_count = 0
    bridge.reset(history_episode(50, turns))
    bridge.history = type(bridge.history)(((SPEAK, 1000, CHUNK_EOS), (LISTEN,)), 0)
    with pytest.raises(MPEError, match="history unit 1 asked for more"):
        for s in range(50):
            bridge.step(s, room[s * FRAME:(s + 1) * FRAME])
    assert bridge.duplex.total_ids[-1] == TTS_BOS  # the listen the model turned into <|tts_bos|>
    with pytest.raises(MPEError, match="without their words"):
        bridge.reset(history_episode(50, []))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the bridge is the subject: one database
async def test_mtr_gt_history_through_the_server(settings, db, mtr_mini, tmp_path, monkeypatch):
    """``--history gt`` on the ``mtr-mini`` suite: the gt episodes are given to this bridge; every
    ground-truth reply's words reach the model's fed token stream in order, in the unit grammar,
    and after the history the model samples again and speaks."""
    write_ref(tmp_path)
    bridge = OnDouble(checkpoint=str(tmp_path), warmup_frames="0", model_name="minicpm-o-double")
    run_id = create_run(db, team="local", model="minicpm-o-double", suite_path=mtr_mini, clock="lockstep",
                        limit=1, conditions=["gt"])
    seen: list[dict] = []
    reset, end, step = bridge.reset, bridge.end_episode, bridge.step

    def tracking_reset(episode):
        seen.append({"replies": [t.spoken_text() for t in episode.context_turns if t.role == "assistant"],
                     "n_ctx": episode.context_frames, "loud_live": 0})
        reset(episode)

    def tracking_step(seq, room):
        out = step(seq, room)
        if seq >= seen[-1]["n_ctx"] and out is not None and np.abs(out).max() > 1000:
            seen[-1]["loud_live"] += 1
        return out

    def tracking_end(e):
        d = bridge.duplex
        seen[-1] |= {"units": units_fed(d.decoder.fed), "scripts": bridge.history.scripts,
                     "dropped": bridge.history.dropped, "sampled": d.ran_units, "chunks": bridge.chunks}
        end(e)

    monkeypatch.setattr(bridge, "reset", tracking_reset)
    monkeypatch.setattr(bridge, "step", tracking_step)
    monkeypatch.setattr(bridge, "end_episode", tracking_end)
    p = await serve_run(settings, db, bridge, run_id, timeout=900)
    monkeypatch.undo()
    assert p.completed == p.total >= 2 and p.failed_attempts == 0
    encode = bridge.duplex.tokenizer.encode
    with_history = [e for e in seen if e["replies"]]
    assert with_history
    for e in with_history:
        n = len(e["scripts"])
        assert n == e["n_ctx"] * 80 // 1000 and e["dropped"] == 0
        forced = e["units"][:n]
        assert forced == [list(s) for s in e["scripts"]]  # each history unit fed exactly its script
        for ids in forced:
            check_unit(ids)
        words = [i for ids in forced for i in ids if is_word(i)]
        assert words == [i for r in e["replies"] for i in encode(r, add_special_tokens=False)]  # in order
        assert sum(ids[-2:] == [TURN_EOS, LISTEN] for ids in forced) == len(e["replies"])
        assert e["sampled"] == e["chunks"] - n  # free running after the history
    assert any(e["loud_live"] for e in with_history)  # and the model speaks again


def test_the_gpu_check_forces_the_models_own_words(bridge):
    """bench/gpu_smoke.py's context episode gives this bridge the words of the model's own first
    reply (its ``text`` messages) with the context audio, so the forced path runs (not ``model_error``)."""
    from bench.gpu_smoke import probe_episode, smoke

    request, barge = (np.full(int(0.6 * 24000), 12000, np.int16) for _ in range(2))
    lines: list[str] = []
    report = smoke(bridge, probe_episode(request, barge), say=lines.append)
    assert report.context is not None and any(line.startswith("context:") for line in lines)
    assert bridge.model_stats()["forced_units"] >= 1 and bridge.model_stats()["forced_tokens"] >= len(ANSWER)
    words = [i for ids in units_fed(bridge.duplex.decoder.fed)[:bridge.model_stats()["forced_units"]] for i in ids
             if is_word(i)]
    assert words[:len(ANSWER)] == bridge.duplex.answer  # the model's own first words, given back as its own
