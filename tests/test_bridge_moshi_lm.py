"""The in-process ``moshi`` bridge with a real Mimi and a real Moshi LM of random weights and tiny
dimensions (tests/support/moshi.py), loaded by the bridge's own loading code from a checkpoint
directory: per-frame stepping, fresh state per episode, teacher forcing, the stable error codes,
and real episodes through the real server in lockstep (context frames included)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("moshi", reason="the [moshi] extra (make setup installs it)")

from clients.errors import MPEError  # noqa: E402
from clients.messages import EpisodeStart  # noqa: E402
from model_bridges import create_bridge  # noqa: E402
from server.engine.bundles import load_track  # noqa: E402
from server.engine.clips import episode_audio, load_suite  # noqa: E402
from server.engine.leasing import create_run  # noqa: E402
from tests.support.context import FRAME, context_suite, episode_of, expected_tracks, register  # noqa: E402
from tests.support.moshi import write_tiny_moshi  # noqa: E402
from tests.support.world import serve_run  # noqa: E402

NAME = "moshi-tiny"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_tiny_moshi(tmp_path_factory.mktemp("moshi") / "tiny")


@pytest.fixture(scope="module")
def moshi(checkpoint):
    return create_bridge("moshi", checkpoint=str(checkpoint), threads="1", warmup_frames="2", model_name=NAME)


def start(n_ctx: int = 0) -> EpisodeStart:
    return EpisodeStart(episode_id="e", clock="lockstep", sample_rate=24000, frame_samples=FRAME,
                        context_frames=n_ctx)


def play(bridge, room: np.ndarray, context: np.ndarray | None = None, episode: EpisodeStart | None = None):
    """Frames out (silence as zeros) and the audio codes decoded in each slot."""
    n_ctx = 0 if context is None else len(context) // FRAME
    bridge.reset(episode or start(n_ctx))
    out, codes = [], []
    for seq in range(len(room) // FRAME):
        if seq < n_ctx:
            bridge.force(seq, context[seq * FRAME:(seq + 1) * FRAME])
        pcm = bridge.step(seq, room[seq * FRAME:(seq + 1) * FRAME])
        assert pcm is None or (pcm.dtype == np.int16 and pcm.shape == (FRAME,))
        out.append(np.zeros(FRAME, np.int16) if pcm is None else pcm)
        codes.append(bridge.last_codes)
    return np.concatenate(out), codes


def voice(frames: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(frames * FRAME) / 24000
    return (6000 * np.sin(2 * np.pi * (180 + 40 * seed) * t) + rng.normal(0, 800, len(t))).astype(np.int16)


def test_fresh_state_per_episode_same_input_same_output(moshi):
    """One frame out per frame in, the first silent (Moshi's one-step delay); the same room gives the same
    output with the same seed whatever ran before; another room gives another output."""
    a, b = voice(12, 1), voice(12, 2)
    out_a, codes = play(moshi, a)
    assert codes[0] is None and not out_a[:FRAME].any()
    assert all(c is not None and c.shape == (8,) for c in codes[1:]) and out_a[FRAME:].any()
    out_b, _ = play(moshi, b)
    again, _ = play(moshi, a)
    assert np.array_equal(again, out_a)
    assert not np.array_equal(out_b, out_a)
    stats = [m["data"] for m in moshi._outbox if m["type"] == "stats" and "model" in m["data"]]
    moshi._outbox.clear()
    assert stats and stats[-1]["model"]["reset_ms"] >= 0 and stats[-1]["model"]["dtype"] == "float32"
    records = [m["data"]["instructions"] for m in moshi._outbox if m["type"] == "stats" and "instructions" in m["data"]]
    assert records == [] or all(r == {"source": "none", "offered": False} for r in records)


def test_forced_context_is_the_models_own_stream(moshi):
    """Context frames are encoded with Mimi and forced as the model's audio codes: each forced frame comes
    out of the LM as exactly its codes one step later (the last one through the first live step), the
    forced slots are answered with silence, and what follows differs from an episode without context."""
    import copy

    import torch

    n_ctx, n = 6, 12
    room, ctx = voice(n, 3), voice(n_ctx, 4)
    enc = copy.deepcopy(moshi.mimi_ctx)
    enc.reset_streaming()
    with torch.no_grad():
        want = [enc.encode(torch.from_numpy(ctx[i * FRAME:(i + 1) * FRAME].astype(np.float32) / 32768)[None, None])
                [0, :, 0].numpy() for i in range(n_ctx)]
    out, codes = play(moshi, room, ctx)
    for s in range(n_ctx):
        assert np.array_equal(codes[s + 1], want[s]), s
    assert not out[:n_ctx * FRAME].any()
    free, free_codes = play(moshi, room)
    assert not np.array_equal(out[n_ctx * FRAME:], free[n_ctx * FRAME:])
    assert not all(np.array_equal(free_codes[s + 1], want[s]) for s in range(n_ctx))


def test_errors_have_stable_codes(checkpoint, tmp_path, monkeypatch):
    def code(**options) -> str:
        with pytest.raises(MPEError) as info:
            create_bridge("moshi", threads="1", warmup_frames="0", **options)
        messages.append(str(info.value))
        return info.value.code

    messages: list[str] = []
    broken = tmp_path / "no-weights"
    shutil.copytree(checkpoint, broken)
    (broken / "model.safetensors").unlink()
    assert code(checkpoint=str(broken)) == "model_missing_weights"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))  # an empty hub cache: nothing is downloaded
    assert code(checkpoint="kyutai/moshiko-pytorch-bf16") == "model_missing_weights"
    assert "hf download kyutai/moshiko-pytorch-bf16" in messages[-1] and "allow_download=1" in messages[-1]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub's offline mode wins over allow_download
    assert code(checkpoint="kyutai/moshiko-pytorch-bf16", allow_download="1") == "model_missing_weights"
    assert "offline mode" in messages[-1]
    wrong = tmp_path / "wrong"
    shutil.copytree(checkpoint, wrong)
    cfg = json.loads((wrong / "config.json").read_text())
    (wrong / "config.json").write_text(json.dumps(cfg | {"dim": 48}))
    assert code(checkpoint=str(wrong)) == "model_bad_checkpoint"
    (wrong / "config.json").write_text(json.dumps(cfg | {"model_type": "hibiki"}))
    assert code(checkpoint=str(wrong)) == "model_bad_checkpoint"
    # FLM-Audio's config (cofe-ai/flm-audio configuration_flmaudio.py:166): its own model class, not moshi's
    (wrong / "config.json").write_text(json.dumps({"model_type": "FLMAudio", "architectures": ["FLMAudioForCausalLM"]}))
    assert code(checkpoint=str(wrong)) == "model_bad_checkpoint" and "moshi-ws" in messages[-1]
    assert code(checkpoint=str(checkpoint), temperature="2") == "bridge_config"


async def test_lockstep_episodes_through_the_server(settings, db, mini_suite, tmp_path, monkeypatch, moshi):
    """Two real episodes in lockstep (one with assistant-context frames) served by one bridge: every slot
    answered, the recorded live answers are exactly what a fresh bridge state gives for the recorded room
    (the second episode does not depend on the first), and the stats carry the compute figures."""
    register(monkeypatch)
    suite = context_suite(mini_suite, tmp_path / "ctx")
    run = create_run(db, team="local", model=NAME, suite_path=str(suite), clock="lockstep", limit=1,
                     conditions=["explicit", "implicit"])
    served: list[str] = []
    reset = moshi.reset

    def tracking_reset(episode):
        served.append(episode.episode_id)
        reset(episode)

    monkeypatch.setattr(moshi, "reset", tracking_reset)
    p = await serve_run(settings, db, moshi, run)
    monkeypatch.undo()
    assert p.completed == p.total == 2 and p.failed_attempts == 0
    loaded = load_suite(suite)
    attempts = {}
    for condition in ("explicit", "implicit"):
        ep, att, _ = episode_of(db, run, condition)
        clips, _ = episode_audio(loaded, loaded.benchmark.snapshot(ep.scenario, ep.id))
        room_expected, ctx, n_ctx = expected_tracks(clips, history=condition == "implicit")
        assert att.n_frames == len(room_expected) // FRAME  # one answer per room frame, none lost
        assert att.stats["model"]["family"] == "moshi" and att.stats["model"]["frames"] > 0
        assert att.stats["instructions"] == {"source": "none", "offered": False}
        attempts[att.id] = attempts[ep.id] = (att, ctx if n_ctx else None, n_ctx)
    second = served[-1]
    att, ctx, n_ctx = attempts[second]
    room, assistant = load_track(db, att.id, "room"), load_track(db, att.id, "assistant")
    replay, _ = play(moshi, room, ctx)
    cut = n_ctx * FRAME
    assert np.array_equal(assistant[cut:], replay[cut:len(assistant)]) and assistant[cut:].any()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # the bridge is the subject: one database (voila's twin runs on sqlite)
async def test_mtr_gt_history_through_the_server(settings, db, mtr_mini, monkeypatch, checkpoint):
    """``--history gt`` on an MTR suite served in process: each gt episode's context frames reach the LM as
    forced audio codes (``depformer_replace_tokens``), one step per context frame, none after."""
    bridge = create_bridge("moshi", checkpoint=str(checkpoint), threads="1", warmup_frames="0", model_name=NAME)
    run = create_run(db, team="local", model=NAME, suite_path=mtr_mini, clock="lockstep", limit=1, conditions=["gt"])
    seen: list[list[int]] = []  # per episode: [context frames announced, forced LM steps]
    reset, step = bridge.reset, bridge.lm_gen.step

    def tracking_reset(episode):
        seen.append([episode.context_frames, 0])
        reset(episode)

    def tracking_step(codes, depformer_replace_tokens=None):
        seen[-1][1] += depformer_replace_tokens is not None
        return step(codes, depformer_replace_tokens=depformer_replace_tokens)

    monkeypatch.setattr(bridge, "reset", tracking_reset)
    monkeypatch.setattr(bridge.lm_gen, "step", tracking_step)
    p = await serve_run(settings, db, bridge, run, timeout=900)
    monkeypatch.undo()
    assert p.completed == p.total >= 2 and p.failed_attempts == 0
    assert any(n for n, _ in seen) and all(forced == n for n, forced in seen)
