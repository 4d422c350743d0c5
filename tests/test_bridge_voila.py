"""The in-process ``voila`` bridge: a real Encodec audio tokenizer (transformers ``EncodecModel`` at
Voila-Tokenizer's rate and bandwidth: 16 kHz, hop 640, 1.1 kbps, here 4 codebooks of 2048; random
weights, tiny dimensions) loaded by the bridge's loading code, and a **test double** of ``VoilaAutonomousModel`` and
its text tokenizer with the real call signatures (``forward(input_ids [1, n, 2·nq], attention_mask,
position_ids, past_key_values, ref_embs, ref_embs_mask, use_cache, return_dict)`` → ``logits``,
``last_hidden_state``, ``past_key_values``, ``voila_pred``; ``audio_transformer.inference(hidden,
temperature, top_k)`` → ``[1, 1, nq]``) and a scripted behaviour; it is not the model. Untested here:
``VoilaAutonomous.load_lm`` (``VoilaAutonomousModel.from_pretrained`` from the repository's
``model.py`` and ``AutoTokenizer.from_pretrained``), which needs the real checkpoint.

The speaker embedding goes through a double of the repository's ``spkr.py`` in a stand-in clone
(``SpeakerEmbedding(model_path, device)`` called with ``(wav, sr)``, wav channels × samples as
``torchaudio.load`` gives it: spkr.py:9-40 of maitrix-org/Voila at 6ba63bf6), with the default
reference voice where ``infer.py`` reads it (``examples/test1.mp3``, infer.py:155)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from clients.errors import MPEError  # noqa: E402
from clients.messages import EpisodeStart  # noqa: E402
from model_bridges.voila import VoilaAutonomous  # noqa: E402
from server.engine.bundles import load_track  # noqa: E402
from server.engine.leasing import create_run  # noqa: E402
from tests.support.context import episode_of  # noqa: E402
from tests.support.world import serve_run  # noqa: E402

FRAME = 1280  # 80 ms at 16 kHz
NQ, CARD = 4, 2048
SPECIALS = ["<pad>", "<unk>", "</s>", "<SYSTEM>", "</SYSTEM>", "<stream_chat>", "<chat_audio_output>",
            "<au_chat_ref_start>", "<au_chat_ref>", "<au_chat_ref_end>", "<|HUMAN|>", "<|VOILA|>", "<au_token>"]
WORDS = ["hello", ".", "You", "are", "Aria"]
SPEAK_AT, END_AT = 8, 20  # audio steps after which the double starts a turn, and ends it


class TokenizerDouble:
    """A Llama-style tokenizer's calls the bridge makes; specials, a few words, then <|0|> … <|8191|>."""

    def __init__(self, audio_tokens: bool = True):
        vocab = SPECIALS + WORDS + ([f"<|{i}|>" for i in range(NQ * CARD)] if audio_tokens else [])
        self.ids = {t: i for i, t in enumerate(vocab)}
        self.vocab = vocab
        self.unk_token_id, self.eos_token_id, self.pad_token_id = 1, 2, 0

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.ids.get(token, self.unk_token_id)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self.ids.get(t, 1) for t in re.findall(r"<[^>]+>|[^\s<.]+|\.", text)]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return " ".join(self.vocab[i] for i in ids if not (skip_special_tokens and self.vocab[i] in SPECIALS))


class LMDouble(torch.nn.Module):
    """Scripted: listens (``<au_token>``) for SPEAK_AT audio steps, then its head says speak and it
    writes "hello ." before the audio goes on; at END_AT it ends the turn with eos. Its audio codes are
    random (the global torch generator, which the bridge seeds) plus the newest user codes."""

    def __init__(self, tok: TokenizerDouble):
        super().__init__()
        self.config = SimpleNamespace(num_codebooks=NQ, codebook_size=CARD, max_position_embeddings=4096)
        self.tok, self.vocab = tok, len(tok.vocab)
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.audio_transformer = SimpleNamespace(inference=self.inference)
        self.calls: list[dict] = []

    def inference(self, inp, temperature=0, top_k=0):
        assert inp.shape[-1] == 8 and temperature == 0.8 and top_k == 50
        return (torch.randint(0, CARD, (1, 1, NQ)) + self._user % CARD) % CARD

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, ref_embs=None, ref_embs_mask=None, use_cache=None, return_dict=None, **_):
        assert input_ids.dtype == torch.long and input_ids.shape[0] == 1 and input_ids.shape[2] == 2 * NQ
        n, past = input_ids.shape[1], past_key_values.get_seq_length()
        assert attention_mask.shape == (1, past + n) and position_ids[0].tolist() == list(range(past, past + n))
        if past == 0:
            self.rows, self.queue, self.audio_rows = [], [], 0
        self.calls.append({"n": n, "ref": ref_embs is not None, "rows": input_ids[0].clone()})
        past_key_values.update(torch.zeros(1, 1, n, 1), torch.zeros(1, 1, n, 1), 0)
        last = input_ids[0, -1]
        self._user = last[:NQ]
        audio_min = self.tok.ids["<|0|>"]
        if n == 1 and int(last[0]) >= audio_min:
            self.audio_rows += 1
        head, token = 0, self.tok.ids["<au_token>"]
        if self.queue:
            token = self.queue.pop(0)
        elif self.audio_rows == SPEAK_AT and n == 1 and int(last[0]) >= audio_min:
            head, self.queue = 1, [self.tok.ids["hello"], self.tok.ids["."]]
        elif self.audio_rows == END_AT and n == 1 and int(last[0]) >= audio_min:
            token = self.tok.eos_token_id
        logits = torch.zeros(1, n, self.vocab)
        logits[0, -1, token] = 1e4
        pred = torch.zeros(1, n, 2)
        pred[0, -1, head] = 1.0
        return SimpleNamespace(logits=logits, last_hidden_state=torch.zeros(1, n, 8), past_key_values=past_key_values,
                               voila_pred=pred)


class OnDouble(VoilaAutonomous):
    audio_tokens = True

    def load_lm(self, directory):
        tok = TokenizerDouble(self.audio_tokens)
        return LMDouble(tok), tok


@pytest.fixture(scope="module")
def codec_dir(tmp_path_factory):
    from transformers import EncodecConfig, EncodecModel

    torch.manual_seed(0)
    cfg = EncodecConfig(sampling_rate=16000, upsampling_ratios=[8, 5, 4, 4], hidden_size=8, num_filters=4,
                        codebook_size=CARD, codebook_dim=8, target_bandwidths=[1.1], num_lstm_layers=1,
                        audio_channels=1, use_causal_conv=True)
    path = tmp_path_factory.mktemp("voila") / "tokenizer"
    codec = EncodecModel(cfg)
    with torch.no_grad():  # codebooks start as zeros: fill them with encoder outputs, so codes follow the input
        g = torch.Generator().manual_seed(1)
        x = torch.randn(16, 1, 640 * 128, generator=g) * torch.linspace(0.01, 0.5, 16)[:, None, None]
        vectors = codec.encoder(x).permute(0, 2, 1).reshape(-1, 8)
        for layer in codec.quantizer.layers:
            layer.codebook.embed.copy_(vectors[torch.randperm(len(vectors), generator=g)[:CARD]])
    codec.save_pretrained(path)
    return path


SPKR_DOUBLE = """
import numpy as np
import torch

CALLS = []


class SpeakerEmbedding:
    def __init__(self, model_path="pyannote/wespeaker-voxceleb-resnet34-LM", device="cuda"):
        self.model_path, self.device = model_path, device

    def __call__(self, wav, sr):
        wav = torch.tensor(wav)
        assert wav.ndim == 2 and wav.dtype == torch.float32
        CALLS.append((self.model_path, tuple(wav.shape), sr))
        return torch.linspace(-1, 1, 256) * float(wav.abs().mean())
"""


@pytest.fixture(scope="module")
def speaker(tmp_path_factory):
    """Options naming a stand-in clone (spkr.py and examples/test1.mp3) and a speaker model directory."""
    import soundfile as sf

    code = tmp_path_factory.mktemp("voila-code")
    (code / "spkr.py").write_text(SPKR_DOUBLE)
    (code / "examples").mkdir()
    sf.write(code / "examples" / "test1.mp3", (0.3 * np.sin(np.arange(16000) / 5)).astype(np.float32), 16000,
             format="MP3")
    model = tmp_path_factory.mktemp("wespeaker")
    (model / "pytorch_model.bin").write_bytes(b"")
    return {"code": str(code), "speaker_model": str(model)}


@pytest.fixture(scope="module")
def voila(codec_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("voila-lm")
    np.save(d / "ref.npy", np.linspace(-1, 1, 256, dtype=np.float32))
    return OnDouble(checkpoint=str(d), tokenizer=str(codec_dir), ref_emb=str(d / "ref.npy"), threads="1",
                    warmup_frames="2", model_name="voila-double")


def voice(frames: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(frames * FRAME) / 16000
    return (6000 * np.sin(2 * np.pi * (180 + 40 * seed) * t) + rng.normal(0, 800, len(t))).astype(np.int16)


def play(bridge, room):
    bridge.reset(EpisodeStart(episode_id="e", clock="lockstep", sample_rate=16000, frame_samples=FRAME))
    bridge.model.calls.clear()
    out = []
    for s in range(len(room) // FRAME):
        pcm = bridge.step(s, room[s * FRAME:(s + 1) * FRAME])
        assert pcm.dtype == np.int16 and pcm.shape == (FRAME,)
        out.append(pcm)
    return np.concatenate(out)


def audio_user_rows(calls, audio_min):
    """The user halves of the audio rows the LM was given, in order."""
    return [c["rows"][0, :NQ] for c in calls if c["n"] == 1 and int(c["rows"][0, 0]) >= audio_min]


def test_two_audio_steps_per_frame_markers_consume_no_audio(voila):
    """Per 80 ms frame exactly two audio steps (25 Hz codec); the turn's markers (<|VOILA|>, the text,
    eos) are extra steps written in both channels; the text is sent; the prompt goes first, with the
    speaker embedding only there."""
    n = 25
    out = play(voila, voice(n, 1))
    calls, counts = voila.model.calls, voila.counts
    assert counts["audio_steps"] == 2 * n and counts["marker_steps"] == 4 and counts["turns"] == 1
    assert counts["forced_audio_steps"] == 0
    assert calls[0]["n"] == len(voila.prompt_ids) and calls[0]["ref"] and not any(c["ref"] for c in calls[1:])
    assert len(calls) == 2 * n + 4  # one forward pass per step, each over the newest position only
    tok = voila.tokenizer
    markers = [c["rows"][0] for c in calls[1:] if int(c["rows"][0, 0]) < voila.audio_min]
    assert [int(m[0]) for m in markers] == [tok.ids["<|VOILA|>"], tok.ids["hello"], tok.ids["."], 2]
    assert all(bool((m == m[0]).all()) for m in markers)  # the same token in both channels
    texts = [m["text"] for m in voila._outbox if m["type"] == "text"]
    assert texts == ["hello ."]
    assert out.any()


def test_causal_user_codes_and_fresh_state(voila):
    """The user codes given to the LM up to a frame do not depend on later room audio; changing the room
    changes the codes from there on and the answer; the same room gives the same answer after a reset."""
    a = voice(20, 2)
    b = a.copy()
    b[12 * FRAME:] = voice(20, 3)[12 * FRAME:]
    out_a = play(voila, a)
    rows_a = audio_user_rows(voila.model.calls, voila.audio_min)
    out_b = play(voila, b)
    rows_b = audio_user_rows(voila.model.calls, voila.audio_min)
    # audio step k appends user codec frame k (room samples up to (k + 1) · 640)
    for k in range(2 * 12):
        assert torch.equal(rows_a[k], rows_b[k]), k
    assert not all(torch.equal(rows_a[k], rows_b[k]) for k in range(2 * 12, len(rows_a)))
    assert not np.array_equal(out_a, out_b) and np.array_equal(out_a[:12 * FRAME], out_b[:12 * FRAME])
    assert np.array_equal(play(voila, a), out_a)
    stats = [m["data"]["model"] for m in voila._outbox if m["type"] == "stats" and "model" in m["data"]]
    assert stats[-1]["frame_rate_hz"] == 25.0 and stats[-1]["reset_ms"] >= 0 and stats[-1]["codebooks"] == NQ


def test_text_prompt_only_as_a_recorded_option(codec_dir, tmp_path, speaker):
    plain = OnDouble(checkpoint=str(tmp_path), tokenizer=str(codec_dir), warmup_frames="0", **speaker)
    prompted = OnDouble(checkpoint=str(tmp_path), tokenizer=str(codec_dir), warmup_frames="0",
                        instructions="You are Aria", **speaker)
    tok = plain.tokenizer
    assert tok.decode(plain.prompt_ids) == ("<SYSTEM> <stream_chat> <chat_audio_output> <au_chat_ref_start> "
                                            "<au_chat_ref> <au_chat_ref_end> </SYSTEM> <|HUMAN|>")
    assert prompted.prompt_ids == plain.prompt_ids[:-2] + tok.encode("You are Aria") + plain.prompt_ids[-2:]
    for bridge, source in ((plain, "none"), (prompted, "option")):
        play(bridge, voice(2, 1))
        rec = [m["data"]["instructions"] for m in bridge._outbox if "instructions" in m.get("data", {})][-1]
        assert rec["source"] == source


def test_errors_have_stable_codes(codec_dir, tmp_path, monkeypatch, speaker):
    def code(cls=OnDouble, **options) -> str:
        with pytest.raises(MPEError) as info:
            cls(checkpoint=str(tmp_path), warmup_frames="0", **({"code": speaker["code"]} | options))
        return info.value.code

    assert code(tokenizer=str(tmp_path / "absent")) == "model_missing_weights"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    assert code() == "model_missing_weights"  # maitrix-org/Voila-Tokenizer is not in the (empty) cache
    assert code(VoilaAutonomous, tokenizer=str(codec_dir), code=str(tmp_path / "no-clone")) == "model_missing_package"

    class NoAudioTokens(OnDouble):
        audio_tokens = False

    assert code(NoAudioTokens, tokenizer=str(codec_dir), speaker_model=speaker["speaker_model"]) == \
        "model_bad_checkpoint"
    assert code(tokenizer=str(codec_dir), top_p="0.9") == "bridge_config"
    # no speaker model in the (empty) hub cache, no reference voice: missing weights, not a voiceless run
    assert code(tokenizer=str(codec_dir)) == "model_missing_weights"
    assert code(tokenizer=str(codec_dir), ref_audio=str(tmp_path / "absent.wav"),
                speaker_model=speaker["speaker_model"]) == "model_missing_weights"


async def test_lockstep_episode_through_the_server(settings, db, mini_suite, monkeypatch, voila):
    """A real episode in lockstep, the bridge at 16 kHz: every slot recorded, every room frame stepped once
    (two audio steps each), the scripted turn heard in the assistant track, the stats stored."""
    run = create_run(db, team="local", model="voila-double", suite_path=str(mini_suite), clock="lockstep",
                     limit=1, conditions=["explicit"])
    p = await serve_run(settings, db, voila, run)
    assert p.completed == p.total == 1 and p.failed_attempts == 0
    ep, att, _ = episode_of(db, run, "explicit")
    assert att.stats["model"]["family"] == "voila" and att.stats["model"]["frames"] > 0
    assert att.stats["instructions"] == {"source": "none", "offered": False}
    room, assistant = load_track(db, att.id, "room"), load_track(db, att.id, "assistant")
    assert att.n_frames == len(room) // 1920
    assert voila.timer.summary()["frames"] == att.n_frames  # every room frame reached the model, once
    assert voila.counts["audio_steps"] == 2 * att.n_frames and voila.counts["turns"] == 1
    assert assistant.any()


def test_bounded_marker_steps_and_a_full_context(codec_dir, tmp_path, speaker):
    """Past ``max_marker_steps`` markers in a row the next step is taken as audio (counted); a context past
    the LM's ``max_position_embeddings`` ends the step with ``model_error``, not with silence."""
    bridge = OnDouble(checkpoint=str(tmp_path), tokenizer=str(codec_dir), warmup_frames="0", max_marker_steps="1",
                      **speaker)
    play(bridge, voice(15, 1))
    # <|VOILA|> is one marker; the "hello" step that follows is taken as audio; ".", eos are markers again
    assert bridge.counts["forced_audio_steps"] == 1 and bridge.counts["marker_steps"] == 3
    assert bridge.counts["audio_steps"] == 30
    bridge.max_positions = len(bridge.prompt_ids) + 10  # as read from the LM's max_position_embeddings
    with pytest.raises(MPEError) as info:
        play(bridge, voice(15, 1))
    assert info.value.code == "model_error" and "context is full" in str(info.value)


def test_speaker_embedding_computed_as_upstream_by_default(codec_dir, tmp_path, speaker):
    """Without ``ref_emb`` the bridge computes the speaker embedding as infer.py:185-191 does (the
    repository's SpeakerEmbedding on the default reference voice) and the first forward pass carries it
    with mask [1]; a model without it would speak in no particular voice."""
    import sys

    bridge = OnDouble(checkpoint=str(tmp_path), tokenizer=str(codec_dir), warmup_frames="0", **speaker)
    calls = sys.modules["spkr"].CALLS
    assert calls and calls[-1][0].endswith("pytorch_model.bin") and calls[-1][1][0] == 1 and calls[-1][2] == 16000
    play(bridge, voice(3, 1))
    assert bridge.model.calls[0]["ref"] and bridge.ref_embs.shape == (1, 1, 256) and bridge.ref_embs.abs().sum() > 0
    assert bridge.model_stats()["speaker_embedding"] == "ref_audio:test1.mp3"


def play_with_context(bridge, room, context):
    n_ctx = len(context) // FRAME
    bridge.reset(EpisodeStart(episode_id="e", clock="lockstep", sample_rate=16000, frame_samples=FRAME,
                              context_frames=n_ctx))
    bridge.model.calls.clear()
    out = []
    for s in range(len(room) // FRAME):
        if s < n_ctx:
            bridge.force(s, context[s * FRAME:(s + 1) * FRAME])
        pcm = bridge.step(s, room[s * FRAME:(s + 1) * FRAME])
        out.append(np.zeros(FRAME, np.int16) if pcm is None else pcm)
    return np.concatenate(out)


def test_context_frames_enter_the_assistant_channel(voila):
    """Teacher forcing: each context frame is encoded (a window of its own) and its two codec frames are
    the assistant half of that frame's two audio steps, in place of the sampled ones; no marker steps
    are written over the ground truth; the live frames after it go on as before."""
    n_ctx, n = 6, 14
    context = voice(n_ctx, 4)
    out = play_with_context(voila, voice(n, 5), context)
    assert voila.counts["context_steps"] == 2 * n_ctx and voila.counts["audio_steps"] == 2 * (n - n_ctx)
    # the codes the tokenizer gives for the context, encoded causally with the same window
    window = np.zeros(voila.codec_context_ms * 16 // 640 * 640, np.float32)
    expected = []
    for s in range(n_ctx):
        x = np.concatenate([window, context[s * FRAME:(s + 1) * FRAME].astype(np.float32) / 32768])
        window = x[len(x) - len(window):]
        with torch.no_grad():
            codes = voila.codec.encode(torch.from_numpy(x)[None, None], bandwidth=1.1).audio_codes[0, 0][:, -2:]
        expected += [codes[:, k] + voila.offsets for k in range(2)]
    given = [c["rows"][0, NQ:] for c in voila.model.calls[1:1 + 2 * n_ctx]]  # each step's input: the last frame
    assert all(c["n"] == 1 for c in voila.model.calls[1:1 + 2 * n_ctx])  # audio steps only, no markers
    assert all(torch.equal(g, e) for g, e in zip(given, expected, strict=True))
    assert out[:n_ctx * FRAME].any() == 0 and out[n_ctx * FRAME:].any()  # silent slots while the context plays
    other = play_with_context(voila, voice(n, 5), voice(n_ctx, 6))
    assert not np.array_equal(other, out)  # the context is what the model heard itself say


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the bridge is the subject: one database (moshi's twin runs on postgres)
async def test_mtr_gt_history_through_the_server(settings, db, mtr_mini, monkeypatch, codec_dir, tmp_path,
                                                speaker):
    """``--history gt`` on an MTR suite: the gt episodes (round k live after rounds 1…k−1 of ground truth)
    are given to this bridge, and every context frame reaches the model as two forced assistant frames."""
    voila = OnDouble(checkpoint=str(tmp_path), tokenizer=str(codec_dir), threads="1", warmup_frames="0",
                     codec_context_ms="160", model_name="voila-double", **speaker)  # a short window: a fast test
    run = create_run(db, team="local", model="voila-double", suite_path=mtr_mini, clock="lockstep", limit=1,
                     conditions=["gt"])
    seen: list[tuple[int, int]] = []  # (context frames announced, context steps done) per episode
    reset, end = voila.reset, voila.end_episode

    def tracking_reset(episode):
        seen.append((episode.context_frames, 0))
        reset(episode)

    def tracking_end(e):
        seen[-1] = (seen[-1][0], voila.counts["context_steps"])
        end(e)

    monkeypatch.setattr(voila, "reset", tracking_reset)
    monkeypatch.setattr(voila, "end_episode", tracking_end)
    p = await serve_run(settings, db, voila, run, timeout=900)
    monkeypatch.undo()
    assert p.completed == p.total >= 2 and p.failed_attempts == 0
    assert any(n for n, _ in seen) and all(steps == 2 * n for n, steps in seen)


def test_codec_agreement_compares_the_codes_the_lm_was_given(voila):
    """``codec_agreement`` (printed by bench/gpu_smoke.py on a host with the real tokenizer) measures the
    bridge's own path: its windowed codes are those an episode gives the LM, compared with the encoding
    of the whole recording at once, as the authors' tokenize_func.py encodes it."""
    room = voice(20, 4)
    play(voila, room)
    given = torch.stack(audio_user_rows(voila.model.calls, voila.audio_min), dim=1) - voila.offsets[:, None]
    whole = voila.codec.encode(torch.from_numpy(room.astype(np.float32) / 32768)[None, None],
                               bandwidth=1.1).audio_codes[0, 0][:, :given.shape[1]]
    expected = [float((given[q] == whole[q]).float().mean()) for q in range(NQ)]
    share = voila.codec_agreement(room)
    assert len(share) == NQ and all(0 <= x <= 1 for x in share)
    # the LM has been given all but the last frame; a frame or so may differ with the thread's float order
    assert share == pytest.approx(expected, abs=2 / given.shape[1]) and min(expected) < 1
    with pytest.raises(Exception, match="whole frame"):
        voila.codec_agreement(room[:FRAME - 1])
