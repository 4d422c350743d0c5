"""The in-process ``freeze-omni`` bridge against test doubles of Freeze-Omni's modules with their exact
call signatures: ``VAD`` (``get_chunk_size()``, ``reset_vad()``, ``in_dialog``, ``predict(audio)`` →
``{status, feature_last_chunk, feature}``), ``inferencePipeline`` (``speech_dialogue(audio, role, stat,
past_key_values, last_id, past_tokens, adapter_cache, encoder_cache, pe_index)`` with the stats ``pre``,
``sl``, ``cl``, ``ss``, ``cs``, ``el``; ``post_process``; ``model.tokenizer``,
``model.llm_decoder.model.embed_tokens``) and ``llm2TTS.run(hidden, top_k, prefix, codec_chunk_size,
codec_padding_size, penalty_window_size, penalty, N, seg_threshold)``, with a scripted behaviour (they
are not the model). Untested here: ``FreezeOmni.load_parts`` past its device check (the repository's
``inferencePipeline(args)``, ``llm2TTS(model_path)`` and ``VAD()``), which need the real checkpoint and
a GPU."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

from clients.pcm import float_to_pcm16

torch = pytest.importorskip("torch")
pytest.importorskip("soxr")

from clients.errors import MPEError  # noqa: E402
from clients.messages import ContextTurn, EpisodeStart  # noqa: E402
from model_bridges.freeze_omni import DEMO_ROLE, FreezeOmni  # noqa: E402
from model_bridges.playout import BridgeConfigError  # noqa: E402
from server.engine.bundles import load_track  # noqa: E402
from server.engine.leasing import create_run  # noqa: E402
from tests.support.context import episode_of  # noqa: E402
from tests.support.silero import save_certain  # noqa: E402
from tests.support.world import serve_run  # noqa: E402

FRAME, CHUNK = 1920, 2560
WORDS = ["Yes", ",", "it", "is", "nine", ".", "That", "is", "all", "."]
LOUD, DISMISS = 0.01, 0.2  # chunk RMS: speech; a chunk this loud makes the classifier say "not for me"


class VADDouble:
    """Speech start on the first chunk above LOUD (with the 6 chunks before it), end after 12 quiet
    chunks in a dialogue; a chunk's "feature" is its RMS repeated, shaped like the real [1, 19, 80]."""

    def __init__(self):
        self.reset_vad()

    def get_chunk_size(self):
        return CHUNK

    def reset_vad(self):
        self.in_dialog, self.quiet = False, 0
        self.history = [np.zeros((1, 19, 80), np.float32)] * 10

    def predict(self, audio):
        assert audio.dtype == np.float32 and audio.shape == (CHUNK,)
        level = float(np.sqrt(np.mean(audio ** 2)))
        feature = np.full((1, 19, 80), level, np.float32)
        if self.in_dialog:
            self.quiet = self.quiet + 1 if level < LOUD else 0
            if self.quiet >= 12:
                self.quiet = 0
                return {"status": "el", "feature_last_chunk": None, "feature": feature.tolist()}
            return {"status": "cl", "feature_last_chunk": None, "feature": feature.tolist()}
        if level >= LOUD:
            self.in_dialog, self.quiet = True, 0
            return {"status": "sl", "feature_last_chunk": [h.tolist() for h in self.history[-6:]],
                    "feature": feature.tolist()}
        self.history = self.history[1:] + [feature]
        return {"status": None}


class TokenizerDouble:
    """Whole words and punctuation marks as tokens; an id is a place in a vocabulary that starts with
    WORDS (the reply the double samples) and grows with every new word encoded."""

    def __init__(self):
        self.vocab = list(WORDS)

    def encode(self, text):
        ids = []
        for w in re.findall(r"[\w']+|[^\w\s]", text):
            if w not in self.vocab:
                self.vocab.append(w)
            ids.append(self.vocab.index(w))
        return ids

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(self.vocab[int(i)] for i in ids)


class PipelineDouble:
    """The KV cache is a list mutated in place, like the real cache: ('role', text), ('a', level) per
    audio chunk, ('ss',) for the assistant turn's opening, ('t', id) per token fed. After two loud
    chunks, a quiet one ends the question: ``ss``, or ``el`` when a chunk was above DISMISS. As
    upstream (models/audioLLM.py:281-308 of VITA-MLLM/Freeze-Omni at 3e17af43): ``ss`` feeds the
    opening and samples a token; each ``cs`` step feeds ``last_id`` (the token sampled one step
    before, whatever the caller put there) and samples the next; a sampled <|im_end|> is not fed and
    gives stat ``sl``. The double samples WORDS[n] after n tokens of the turn, <|im_end|> after all."""

    def __init__(self):
        self.calls: list[tuple[str, list]] = []
        self.model = type("M", (), {})()
        self.model.tokenizer = TokenizerDouble()
        self.model.llm_decoder = type("D", (), {})()
        self.model.llm_decoder.model = torch.nn.Module()
        self.model.llm_decoder.model.embed_tokens = torch.nn.Embedding(4096, 896 * 4)

    def speech_dialogue(self, audio, role=None, stat="sl", past_key_values=None, last_id=None, past_tokens=None,
                        adapter_cache=None, encoder_cache=None, pe_index=0):
        self.calls.append((stat, copy.deepcopy(past_key_values)))
        out = {"past_key_values": past_key_values, "stat": stat, "last_id": last_id, "adapter_cache": adapter_cache,
               "encoder_cache": encoder_cache, "pe_index": pe_index}
        if stat == "pre":
            return out | {"past_key_values": [("role", role)], "stat": "sl"}
        assert past_key_values is not None, "must set system role first!!!"
        if stat in ("sl", "cl"):
            assert audio.shape == (1, 19, 80) and audio.dtype == torch.float32
            past_key_values.append(("a", round(float(audio.mean()), 4)))
            heard = []
            for e in reversed(past_key_values):
                if e[0] != "a":
                    break
                heard.append(e[1])
            loud = [x for x in heard if x >= LOUD]
            out["adapter_cache"], out["encoder_cache"], out["pe_index"] = "cnn", "enc", pe_index + 1
            out["stat"] = "cl"
            if len(loud) >= 2 and heard[0] < LOUD:
                out["stat"] = "el" if max(loud) >= DISMISS else "ss"
            return out
        if stat == "ss":
            past_key_values.append(("ss",))
        else:
            assert stat == "cs" and last_id is not None and last_id.shape == (1, 1), "cs feeds the last token"
            past_key_values.append(("t", int(last_id[0][0])))
        n = 0
        for e in reversed(past_key_values):
            if e[0] == "ss":
                break
            n += 1
        if n >= len(WORDS):
            return out | {"stat": "sl", "last_id": None}
        tokens = (past_tokens or []) + [n]
        return out | {"stat": "cs", "last_id": torch.tensor([[n]]), "past_tokens": tokens,
                      "text": self.model.tokenizer.decode(tokens), "hidden_state": torch.full((1, 1, 896), float(n))}

    def post_process(self, text):
        return text.replace(" ,", ",").replace(" .", ".").strip()


def piece(seconds, freq, lead=0.0):
    t = np.arange(int(seconds * 24000)) / 24000
    return torch.from_numpy(np.concatenate([np.zeros(int(lead * 24000)), 0.3 * np.sin(2 * np.pi * freq * t)])
                            .astype(np.float32))[None, None]


class TTSDouble:
    """Two pieces per segment: 50 ms of near-silence then a tone, and another tone."""

    def __init__(self):
        self.calls: list[dict] = []

    def run(self, hidden, top_k, prefix, codec_chunk_size=40, codec_padding_size=10, penalty_window_size=-1,
            penalty=1.1, N=2401, seg_threshold=0.01):
        assert hidden.shape[0] == 1 and hidden.shape[2] == 896 and prefix.shape[2] == 896
        self.calls.append({"chunk": codec_chunk_size, "threshold": seg_threshold, "rows": prefix.shape[1]})
        yield piece(0.25, 300, lead=0.05)
        yield piece(0.3, 450)


class OnDouble(FreezeOmni):
    def load_parts(self, directory, llm_dir):
        return PipelineDouble(), TTSDouble(), VADDouble()


def checkpoint_dirs(root):
    ckpt, llm = root / "checkpoints", root / "Qwen2-7B-Instruct"
    for name in ("audiollm/final.pt", "audiollm/train.yaml", "audiollm/global_cmvn", "decoder/final.pt",
                 "decoder/model.json", "codec/final.pt", "codec/model.json"):
        (ckpt / name).parent.mkdir(parents=True, exist_ok=True)
        (ckpt / name).write_bytes(b"")
    (ckpt / "server.json").write_text('{"decoder_first_chunk_size": 20, "decoder_seg_threshold_first_pack": 0.1}')
    llm.mkdir()
    (llm / "config.json").write_text("{}")
    return ckpt, llm


@pytest.fixture
def dirs(tmp_path):
    return checkpoint_dirs(tmp_path)


def make(dirs, **options):
    ckpt, llm = dirs
    return OnDouble(checkpoint=str(ckpt), llm=str(llm), warmup_frames="2", **options)


def tone(room, start_s, seconds, amp, freq=220):
    i = int(start_s * 24000)
    t = np.arange(int(seconds * 24000)) / 24000
    room[i:i + len(t)] = (amp * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def run(bridge, room, clock="lockstep"):
    bridge.reset(EpisodeStart(episode_id="e", clock=clock, sample_rate=24000, frame_samples=FRAME))
    out = [bridge.step(s, room[s * FRAME:(s + 1) * FRAME]) for s in range(len(room) // FRAME)]
    return np.concatenate([np.zeros(FRAME, np.int16) if o is None else o for o in out])


def expected_reply() -> np.ndarray:
    first = piece(0.25, 300, lead=0.05)[0, 0].numpy()
    first = first[np.flatnonzero(np.abs(first) > 0.03)[0]:]
    rest = [piece(0.3, 450), piece(0.25, 300, lead=0.05), piece(0.3, 450)]
    return float_to_pcm16(np.concatenate([first] + [p[0, 0].numpy() for p in rest]))


def test_a_question_is_answered_in_segments_played_whole(dirs):
    """Chunks of 160 ms reach the VAD; the speech start prefills the 6 chunks before it then the current
    one; the classifier's ``ss`` starts the reply; both segments are synthesised (the first with the
    first-pack settings of server.json, its leading quiet cut) and play gap-free, all of it, once."""
    bridge = make(dirs)
    room = np.zeros(75 * FRAME, np.int16)  # 6 s
    tone(room, 1.0, 0.6, 0.1)
    out = run(bridge, room)
    c = bridge.counts
    assert c["chunks"] == len(room) * 2 // 3 // CHUNK and c["speech_starts"] == 1 and c["answers"] == 1
    assert c["dismissed"] == 0 and c["segments"] == 2 and c["tokens"] == len(WORDS) and c["vad_ends"] == 0  # ss ends the dialogue
    stats = [call[0] for call in bridge.pipeline.calls]
    first_sl = stats.index("sl", 1)
    assert stats[first_sl:first_sl + 7] == ["sl"] + ["cl"] * 6  # 5 history chunks as cl, then the current one
    assert bridge.tts.calls[0]["chunk"] == 20 and bridge.tts.calls[0]["threshold"] == 0.1  # first pack
    assert bridge.tts.calls[1]["chunk"] == 40 and bridge.tts.calls[1]["threshold"] == 0.01
    want = expected_reply()
    start = int(np.flatnonzero(out)[0])
    assert start >= int(1.6 * 24000)  # never before the question has ended
    assert np.array_equal(out[start:start + len(want)], want) and not out[start + len(want):].any()
    assert [m["text"] for m in bridge._outbox if m["type"] == "text"] == ["Yes, it is nine.", "That is all."]


def test_not_for_the_model_no_answer_and_a_new_question_interrupts(dirs):
    bridge = make(dirs)
    room = np.zeros(60 * FRAME, np.int16)
    tone(room, 1.0, 0.6, 0.5)  # the classifier says el
    assert not run(bridge, room).any()
    assert bridge.counts["dismissed"] == 1 and bridge.counts["answers"] == 0
    room = np.zeros(75 * FRAME, np.int16)
    tone(room, 1.0, 0.6, 0.1)
    tone(room, 2.0, 0.4, 0.1, freq=330)  # a second question while the first answer plays
    out = run(bridge, room)
    assert bridge.counts["answers"] == 2 and bridge.counts["interrupted"] == 1
    # the second listening started from a copy of the state the first reply had reached
    sl = [cache for stat, cache in bridge.pipeline.calls if stat == "sl"]
    assert any(e[0] == "t" for e in sl[-1]) and sl[-1][0] == ("role", DEMO_ROLE)
    first_reply = expected_reply()
    start = int(np.flatnonzero(out)[0])
    assert bridge.playout.stats()["flushes"] == 1 and bridge.playout.stats()["dropped_ms"] > 0
    assert not np.array_equal(out[start:start + len(first_reply)], first_reply)  # cut short, then reply 2
    assert out[int(3.2 * 24000):].any()


def test_fresh_state_and_the_system_role_only_as_an_option(dirs):
    bridge = make(dirs)
    room = np.zeros(50 * FRAME, np.int16)
    tone(room, 1.0, 0.6, 0.1)
    first = run(bridge, room)
    assert np.array_equal(run(bridge, room), first) and first.any()
    calls = bridge.pipeline.calls
    assert [s for s, _ in calls].count("pre") == 1  # prefilled once at load; each episode copies it
    sl = [cache for stat, cache in calls if stat == "sl"]
    assert sl[-1] == [("role", DEMO_ROLE)]  # nothing of the episode before
    rec = [m["data"]["instructions"] for m in bridge._outbox if "instructions" in m.get("data", {})][-1]
    assert rec["source"] == "none"
    prompted = make(dirs, instructions="You are Aria.")
    assert prompted.pipeline.calls[0] == ("pre", None) and prompted.system_role["past_key_values"] == [
        ("role", "You are Aria.")]


def test_errors_have_stable_codes(dirs, tmp_path):
    ckpt, llm = dirs

    def code(cls=OnDouble, **options) -> str:
        with pytest.raises(MPEError) as info:
            cls(warmup_frames="0", **options)
        return info.value.code

    assert code(checkpoint=str(ckpt)) == "bridge_config"  # no llm
    assert code(checkpoint=str(ckpt), llm=str(tmp_path / "absent")) == "model_missing_weights"
    (ckpt / "decoder" / "final.pt").unlink()
    assert code(checkpoint=str(ckpt), llm=str(llm)) == "model_missing_weights"
    (ckpt / "decoder" / "final.pt").write_bytes(b"")
    (ckpt / "server.json").write_text("{")
    assert code(checkpoint=str(ckpt), llm=str(llm)) == "model_bad_checkpoint"
    (ckpt / "server.json").unlink()
    assert code(FreezeOmni, checkpoint=str(ckpt), llm=str(llm)) == "bridge_config"  # the CPU: cuda only
    assert code(checkpoint=str(ckpt), llm=str(llm), chunk_ms="200") == "bridge_config"
    repo_root = OnDouble(checkpoint=str(ckpt.parent), llm=str(llm), warmup_frames="0")  # holds checkpoints/
    assert repo_root.describe()["chunk_ms"] == 160


async def test_lockstep_episode_through_the_server(settings, db, mini_suite, tmp_path):
    """A real episode in lockstep: every room frame stepped once, every 160 ms chunk through the VAD, the
    answers' audio in the recorded assistant track, the stats stored."""
    bridge = OnDouble(checkpoint=str(checkpoint_dirs(tmp_path)[0]), llm=str(tmp_path / "Qwen2-7B-Instruct"),
                      warmup_frames="2", model_name="freeze-omni-double")
    run_id = create_run(db, team="local", model="freeze-omni-double", suite_path=str(mini_suite),
                        clock="lockstep", limit=1, conditions=["explicit"])
    p = await serve_run(settings, db, bridge, run_id)
    assert p.completed == p.total == 1 and p.failed_attempts == 0
    _, att, _ = episode_of(db, run_id, "explicit")
    assert bridge.timer.summary()["frames"] == att.n_frames
    assert bridge.counts["chunks"] == att.n_frames * FRAME * 2 // 3 // CHUNK
    assert bridge.counts["answers"] >= 1 and att.stats["model"]["family"] == "freeze-omni"
    assert load_track(db, att.id, "assistant").any()


def test_the_authors_demo_role_by_default(dirs):
    """Without instructions the system role is the authors' demo role (web/parms.py:44-48 of
    VITA-MLLM/Freeze-Omni at 3e17af43), not the checkpoint's chat-template role (role None)."""
    bridge = make(dirs)
    assert bridge.system_role["past_key_values"] == [("role", DEMO_ROLE)]
    assert DEMO_ROLE.startswith("You are a helpful voice assistant." + " " * 77 + "Your answer")
    assert DEMO_ROLE.endswith("Your inventor is Tencent.")


class SlowClock:
    """A wall clock that advances ``per_read`` seconds every time it is read."""

    def __init__(self, per_read: float):
        self.t, self.per_read = 0.0, per_read

    def __call__(self) -> float:
        self.t += self.per_read
        return self.t


def test_reply_pace_in_realtime_is_the_models_own_and_in_lockstep_a_stated_rule(dirs):
    room = np.zeros(50 * FRAME, np.int16)
    tone(room, 1.0, 0.6, 0.1)
    def first_sound(out):
        return int(np.flatnonzero(np.abs(out.reshape(-1, FRAME)).max(axis=1))[0])

    lock = make(dirs)
    out_lock = run(lock, room)
    steps_lock = lock.counts["reply_steps"]
    fast = make(dirs)
    fast.now = SlowClock(0.001)  # 1 ms a step: every step of the reply fits in the frame
    out_fast = run(fast, room, clock="realtime")
    slow = make(dirs)
    slow.now = SlowClock(0.1)  # slower than a frame: one step per frame
    out_slow = run(slow, room, clock="realtime")
    assert steps_lock > 4 and fast.counts["reply_steps"] == slow.counts["reply_steps"] == steps_lock
    # the reply's first sound: as soon as the model has it, later when its steps are slow
    assert first_sound(out_fast) <= first_sound(out_lock) < first_sound(out_slow)


def fed_turns(cache) -> list[list[int]]:
    """The assistant turns in a KV cache of the double: the token ids fed after each opening."""
    turns: list[list[int]] = []
    for e in cache:
        if e[0] == "ss":
            turns.append([])
        elif e[0] == "t":
            turns[-1].append(e[1])
    return turns


GT_REPLY = "Sure: two plus two makes four."


def history_episode(n_ctx: int, turns: list[ContextTurn]) -> EpisodeStart:
    return EpisodeStart(episode_id="gt", clock="lockstep", sample_rate=24000, frame_samples=FRAME,
                        context_frames=n_ctx, context_turns=turns)


def test_ground_truth_reply_enters_the_llm_history_as_its_own_tokens(dirs):
    """gt history: the user's turn is listened to through the VAD and prefill as live; the classifier's
    ``ss`` in the history starts no reply; in the slot the ground-truth reply starts, its words go in as
    the assistant turn (the opening, then one ``cs`` step per token with the ground truth's token in
    ``last_id``); the live question afterwards is heard on top of that history and answered."""
    bridge = make(dirs)
    room = np.zeros(125 * FRAME, np.int16)  # 10 s
    tone(room, 1.0, 0.6, 0.1)  # the history's question
    tone(room, 5.5, 0.6, 0.1, freq=330)  # the live question
    n_ctx = 50  # 4 s of history
    turns = [ContextTurn(role="user", text="What is two plus two?", start_seq=12, end_seq=20),
             ContextTurn(role="assistant", text=GT_REPLY, start_seq=28, end_seq=45)]
    bridge.reset(history_episode(n_ctx, turns))
    out = [bridge.step(s, room[s * FRAME:(s + 1) * FRAME]) for s in range(len(room) // FRAME)]
    c = bridge.counts
    gt_ids = bridge.pipeline.model.tokenizer.encode(GT_REPLY)
    assert c["forced_turns"] == 1 and c["forced_tokens"] == len(gt_ids) and c["forced_unheard"] == 0
    assert c["history_verdicts"] >= 1 and c["answers"] == 1  # the history's ss waited; the live one answered
    assert all(o is None for o in out[:n_ctx]) and any(o is not None and o.any() for o in out[n_ctx:])
    live_start = [cache for stat, cache in bridge.pipeline.calls if stat == "sl"][-1]
    assert live_start[0] == ("role", DEMO_ROLE)
    assert fed_turns(live_start) == [gt_ids]  # the ground truth is the model's own past turn
    heard = [e[1] for e in live_start[:live_start.index(("ss",))] if e[0] == "a"]
    assert sum(x >= LOUD for x in heard) >= 3  # the history's question went in as speech features
    final = bridge.latest["past_key_values"]
    assert fed_turns(final)[0] == gt_ids and len(fed_turns(final)) == 2  # then the live reply, generated
    assert [m["text"] for m in bridge._outbox if m["type"] == "text"] == ["Yes, it is nine.", "That is all."]


def test_a_reply_cut_by_a_barge_in_goes_in_as_its_played_words_and_no_words_is_an_error(dirs):
    bridge = make(dirs)
    room = np.zeros(50 * FRAME, np.int16)
    tone(room, 1.0, 0.6, 0.1)
    cut = ContextTurn(role="assistant", text="one two three four five six seven eight", start_seq=28, end_seq=34,
                      played=0.5)
    assert cut.spoken_text() == "one two three four"
    bridge.reset(history_episode(40, [cut]))
    for s in range(len(room) // FRAME):
        bridge.step(s, room[s * FRAME:(s + 1) * FRAME])
    assert fed_turns(bridge.latest["past_key_values"]) == [bridge.pipeline.model.tokenizer.encode("one two three four")]
    with pytest.raises(MPEError, match="without their words"):
        bridge.reset(history_episode(40, []))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the bridge is the subject: one database
async def test_mtr_gt_history_through_the_server(settings, db, mtr_mini, tmp_path, monkeypatch):
    """``--history gt`` on the ``mtr-mini`` suite: the gt episodes are given to this bridge, and every
    ground-truth reply of the history reaches the model's LLM history as its own tokens, in order."""
    bridge = OnDouble(checkpoint=str(checkpoint_dirs(tmp_path)[0]), llm=str(tmp_path / "Qwen2-7B-Instruct"),
                      warmup_frames="0", model_name="freeze-omni-double")
    run_id = create_run(db, team="local", model="freeze-omni-double", suite_path=mtr_mini, clock="lockstep",
                        limit=1, conditions=["gt"])
    seen: list[tuple[list[str], list[list[int]]]] = []  # per episode: the gt replies, the turns fed by the end
    reset, end = bridge.reset, bridge.end_episode

    def tracking_reset(episode):
        seen.append(([t.spoken_text() for t in episode.context_turns if t.role == "assistant"], []))
        reset(episode)

    def tracking_end(e):
        history = [cache for stat, cache in bridge.pipeline.calls if stat == "ss"]
        seen[-1] = (seen[-1][0], fed_turns(bridge.latest["past_key_values"]) if history else [])
        end(e)

    monkeypatch.setattr(bridge, "reset", tracking_reset)
    monkeypatch.setattr(bridge, "end_episode", tracking_end)
    p = await serve_run(settings, db, bridge, run_id, timeout=900)
    monkeypatch.undo()
    assert p.completed == p.total >= 2 and p.failed_attempts == 0
    assert any(replies for replies, _ in seen)
    encode = bridge.pipeline.model.tokenizer.encode
    for replies, fed in seen:
        assert [encode(r) for r in replies] == fed[:len(replies)]  # the history's turns, then any live ones


def test_the_gpu_check_forces_the_models_own_words(dirs):
    """bench/gpu_smoke.py's context episode gives a text-output model the words of its own first reply
    (its ``text`` messages) with the context audio, so the forced path runs (not ``model_error``)."""
    from bench.gpu_smoke import probe_episode, smoke

    request, barge = np.zeros(int(0.6 * 24000), np.int16), np.zeros(int(0.6 * 24000), np.int16)
    tone(request, 0.0, 0.6, 0.1)
    tone(barge, 0.0, 0.6, 0.1, freq=330)
    bridge = make(dirs)
    lines: list[str] = []
    report = smoke(bridge, probe_episode(request, barge), say=lines.append)
    assert report.context is not None and any(line.startswith("context:") for line in lines)
    assert bridge.counts["forced_turns"] == 1
    assert bridge.counts["forced_tokens"] == len(bridge.pipeline.model.tokenizer.encode("Yes, it is nine. That is all."))


class NeverSpeech:
    def __call__(self, x, sr):
        return torch.zeros(1, 1)

    def reset_states(self):
        pass


class VADDoubleWithWeights(VADDouble):
    """The double plus the two attributes of the authors' VAD that ``vad=`` replaces (web/vad.py:33-42)."""

    def __init__(self):
        super().__init__()
        from silero_vad.utils_vad import VADIterator

        self.vad_model = NeverSpeech()
        self.vad_iterator = VADIterator(self.vad_model, threshold=0.8, sampling_rate=16000,
                                        min_silence_duration_ms=2000, speech_pad_ms=30)


class OnDoubleWithWeights(OnDouble):
    def load_parts(self, directory, llm_dir):
        return PipelineDouble(), TTSDouble(), VADDoubleWithWeights()


def test_vad_option_puts_the_given_silero_weights_into_the_vad_and_records_them(dirs, tmp_path):
    """``vad=DIR`` (e.g. silero-vad 5.1.2's unpacked package) replaces the installed weights in the
    authors' VAD and its iterator; the stats name the file. Without it they name the installed package."""

    save_certain(tmp_path / "v5" / "data" / "silero_vad.jit")
    ckpt, llm = dirs
    bridge = OnDoubleWithWeights(checkpoint=str(ckpt), llm=str(llm), warmup_frames="2", vad=str(tmp_path / "v5"))
    assert bridge.vad.vad_iterator.model is bridge.vad.vad_model
    assert float(bridge.vad.vad_model(torch.zeros(512), 16000)) == 1.0
    assert bridge.describe()["vad"].startswith(str(tmp_path / "v5" / "data" / "silero_vad.jit") + " (sha256 ")
    assert re.fullmatch(r"silero-vad \S+ \(installed\)", make(dirs).describe()["vad"])
    with pytest.raises(BridgeConfigError, match="vad="):
        make(dirs, vad=str(tmp_path / "nothing"))
