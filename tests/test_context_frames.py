"""Assistant-context frames (teacher forcing, docs/protocol.md §5.1) through the whole engine.

The pure core first (additive room mixing, context frames planned and forced on the assistant
track), then real servers, real WebSockets and SDK bridges on both databases, driven by the
``context-test`` plug-in of :mod:`tests.support.context`: a bridge that accepts context receives
every context frame bit-exactly right before the room frame of its seq (``force`` before
``step``), the recorded assistant track holds the context audio in those slots whatever the
bridge answered, and a bridge that does not accept context is never given such an episode and
is told why it waits.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from sqlalchemy import select

from clients.messages import EpisodeStart
from clients.sdk import Bridge, BridgeClient, BridgeOptions
from server.app import BackgroundServer
from server.auth import create_token
from server.core.detector import detect_segments
from server.core.episode import EpisodeCore
from server.core.schedule import FramePlan, Piece
from server.core.timebase import Segment
from server.db import Episode
from server.engine.bundles import load_track
from server.engine.clips import episode_audio, load_suite
from server.engine.leasing import create_run
from server.engine.matching import context_note
from tests.support.context import FRAME, HistoryScheduler, context_suite, episode_of, expected_tracks, register
from tests.support.world import until, wait_run

# --- the pure core -----------------------------------------------------------------------------


def test_core_mixes_additively_and_forces_the_context():
    """Overlapping room pieces add up with 16-bit clipping; the context of slot n is planned with room
    frame n and stands for the assistant in slot n, whatever the bridge sent."""
    rng = np.random.default_rng(5)
    clips = {k: rng.integers(-30000, 30000, n, dtype=np.int16) for k, n in
             {0: 9000, 1: 7000, 2: 5000, 3: 6000}.items()}
    core = EpisodeCore(HistoryScheduler({k: len(v) for k, v in clips.items()}, history=True), clips)
    room_expected, ctx_expected, n_ctx = expected_tracks(clips, history=True)
    assert core.context_frames == n_ctx > 0 and ctx_expected.any()
    room, fed = [], []
    bridge = np.full(FRAME, 77, np.int16)
    while (item := core.next_room()) is not None:
        assert (item.context is not None) == (item.seq < n_ctx)
        if item.context is not None:
            assert np.array_equal(item.context, ctx_expected[item.seq * FRAME:(item.seq + 1) * FRAME])
        room.append(item.pcm)
        fed.append(core.feed_assistant(bridge))
    room_track = np.concatenate(room)
    assert np.array_equal(room_track, room_expected[:len(room_track)])
    assert np.abs(room_track.astype(np.int32)).max() == 32768 or np.abs(room_track).max() == 32767  # clipped sums
    assert [f.forced for f in fed] == [i < n_ctx for i in range(len(fed))]
    assert np.array_equal(np.concatenate([f.pcm for f in fed[:n_ctx]]), ctx_expected)
    assert all(np.array_equal(f.pcm, bridge) for f in fed[n_ctx:])


class _Lies:
    """A scheduler that says it has no context frames but plans one."""

    context_frames = 0
    context_turns = ()
    end_sample = FRAME

    def next_frame(self):
        return FramePlan(0, (), (), context=(Piece(0, 0, 0, 10),))

    def observe(self, events, known_until):
        pass

    def status(self):
        return {}


def test_core_refuses_a_scheduler_that_breaks_the_context_contract():
    core = EpisodeCore(_Lies(), {0: np.ones(100, np.int16)})
    with pytest.raises(ValueError, match="context_frames"):
        core.next_room()


# --- end to end ----------------------------------------------------------------------------------


def noise(seq: int) -> np.ndarray:
    """A quiet, never-silent answer that tells the frames apart."""
    return np.random.default_rng(seq).integers(-200, 200, FRAME, dtype=np.int16) | 1


class Logged(Bridge):
    """Records every call (force and step with their seq and audio) and answers with :func:`noise`."""

    name = "forced-7b"
    blocking = False

    def __init__(self, accepts: bool, clocks=("lockstep", "realtime"), rate: int = 24_000):
        super().__init__()
        self.accepts_context, self.clocks, self.sample_rate = accepts, clocks, rate
        self.starts: list[EpisodeStart] = []
        self.calls: list[list[tuple[str, int, np.ndarray | None]]] = []

    def reset(self, episode: EpisodeStart) -> None:
        self.starts.append(episode)
        self.calls.append([])

    def force(self, seq: int, pcm: np.ndarray) -> None:
        self.calls[-1].append(("force", seq, pcm.copy()))

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self.calls[-1].append(("step", seq, None))
        return noise(seq)[: self.frame_samples]


def check_calls(calls, n_ctx: int, ctx: np.ndarray | None) -> None:
    """force(n) comes right before step(n) for n < n_ctx, never after; with ``ctx`` bit-exactly its audio."""
    steps = [seq for kind, seq, _ in calls if kind == "step"]
    assert steps == list(range(len(steps))) and len(steps) > n_ctx
    expected = [c for n in steps for c in ([("force", n), ("step", n)] if n < n_ctx else [("step", n)])]
    assert [(kind, seq) for kind, seq, _ in calls] == expected
    if ctx is not None:
        forced = np.concatenate([pcm for kind, _, pcm in calls if kind == "force"])
        assert np.array_equal(forced, ctx)


async def test_lockstep_context_frames_reach_only_bridges_that_accept_them(settings, db, mini_suite, tmp_path,
                                                                            monkeypatch):
    register(monkeypatch)
    suite = context_suite(mini_suite, tmp_path / "ctx")
    token = create_token(db, "local")
    run = create_run(db, team="local", model="forced-7b", suite_path=str(suite), clock="lockstep", limit=1,
                     conditions=["explicit", "implicit"])
    note = context_note(db, run)  # said when the run is created: nobody can take its implicit episode yet
    assert note and '"accepts_context": true in hello' in note and "condition implicit" in note
    assert "1 episode " in note and "'forced-7b'" in note
    loaded = load_suite(suite)
    async with BackgroundServer(settings) as server:
        plain = Logged(accepts=False)
        c_plain = BridgeClient(plain, BridgeOptions(server=server.url, token=token, backoff_min_s=0.05))
        t_plain = asyncio.create_task(c_plain.run())
        try:
            # it serves the explicit episode, then waits and is told that only context episodes are left
            await until(lambda: c_plain.episodes_done == 1 and c_plain.status is not None
                        and c_plain.status.reason == "needs_context", "the plain bridge's needs_context status", timeout=60)
            assert "accepts_context" in c_plain.status.hint and "implicit" in c_plain.status.hint
            assert c_plain.status.queued_episodes == 1 and "the 1 queued episode " in c_plain.status.hint
            ep, _, _ = episode_of(db, run, "implicit")
            assert ep.status == "queued" and ep.attempts == 0
            forced = Logged(accepts=True)
            c_forced = BridgeClient(forced, BridgeOptions(server=server.url, token=token, backoff_min_s=0.05))
            t_forced = asyncio.create_task(c_forced.run())
            try:
                p = await wait_run(db, run, [t_plain, t_forced], 120)
                assert context_note(db, run) is None  # a bridge that accepts context is connected
            finally:
                c_forced.stop()
                await asyncio.gather(t_forced, return_exceptions=True)
        finally:
            c_plain.stop()
            await asyncio.gather(t_plain, return_exceptions=True)
    assert p.completed == p.total == 2 and p.failed_attempts == 0
    assert [s.context_frames for s in plain.starts] == [0] and len(plain.calls) == 1
    check_calls(plain.calls[0], 0, None)

    ep, att, live = episode_of(db, run, "implicit")
    clips, _ = episode_audio(loaded, loaded.benchmark.snapshot(ep.scenario, ep.id))
    room_expected, ctx, n_ctx = expected_tracks(clips, history=True)
    assert len(forced.starts) == 1 and forced.starts[0].context_frames == n_ctx > 0
    check_calls(forced.calls[0], n_ctx, ctx)  # bit-exact, in order, each force right before its step
    room, assistant = load_track(db, att.id, "room"), load_track(db, att.id, "assistant")
    assert np.array_equal(room, room_expected[:len(room)])  # overlapping room clips add up
    cut = n_ctx * FRAME
    assert np.array_equal(assistant[:cut], ctx)  # the context is the assistant track, the answers are ignored
    assert np.array_equal(assistant[cut:], np.concatenate([noise(n) for n in range(n_ctx, att.n_frames)]))
    assert att.stats["server"]["context_frames"] == n_ctx
    assert att.stats["server"]["context_replies_nonsilent"] == n_ctx
    # the detector heard the context reply (turn 1), as a replay of the recorded track does
    assert detect_segments(assistant) == live
    reply = [Segment(a, b) for a, b in zip(np.flatnonzero(np.diff(np.r_[0, ctx != 0, 0]) == 1),
                                           np.flatnonzero(np.diff(np.r_[0, ctx != 0, 0]) == -1))]
    assert any(g.start < reply[-1].end and g.end > reply[0].start for g in live)

    ep, att, _ = episode_of(db, run, "explicit")
    assert "context_frames" not in att.stats["server"] and att.bridge_id is not None


async def test_realtime_16k_context_frames_before_their_room_frames(settings, db, mini_suite, tmp_path, monkeypatch):
    """Realtime at 16 kHz: the context is resampled like the room for the bridge, and recorded at 24 kHz as
    it is in the suite."""
    register(monkeypatch)
    suite = context_suite(mini_suite, tmp_path / "ctx")
    token = create_token(db, "local")
    run = create_run(db, team="local", model="forced-7b", suite_path=str(suite), clock="realtime", limit=1,
                     conditions=["implicit"])
    async with BackgroundServer(settings) as server:
        forced = Logged(accepts=True, clocks=("realtime",), rate=16_000)
        client = BridgeClient(forced, BridgeOptions(server=server.url, token=token, backoff_min_s=0.05))
        task = asyncio.create_task(client.run())
        try:
            p = await wait_run(db, run, [task], 120)
        finally:
            client.stop()
            await asyncio.gather(task, return_exceptions=True)
    assert p.completed == p.total == 1
    ep, att, live = episode_of(db, run, "implicit")
    loaded = load_suite(suite)
    clips, _ = episode_audio(loaded, loaded.benchmark.snapshot(ep.scenario, ep.id))
    _, ctx, n_ctx = expected_tracks(clips, history=True)
    assert forced.starts[0].context_frames == n_ctx and forced.starts[0].frame_samples == 1280
    check_calls(forced.calls[0], n_ctx, None)
    heard = np.concatenate([pcm for kind, _, pcm in forced.calls[0] if kind == "force"])
    assert len(heard) == n_ctx * 1280 and heard.any()
    assistant = load_track(db, att.id, "assistant")
    assert np.array_equal(assistant[: n_ctx * FRAME], ctx)
    assert att.stats["server"]["context_frames"] == n_ctx


# --- MTR-DuplexBench: gt episodes of the built-in suite ---------------------------------------------


class Quiet(Logged):
    """:class:`Logged`, silent in every slot."""

    name = "mtr-forced"

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        super().step(seq, room)
        return None


async def test_mtr_gt_history_arrives_as_context_before_the_live_round(settings, db, mtr_mini):
    """Every gt episode of one mtr-mini dialogue (round k live after rounds 1…k−1 of ground truth): the
    context frames all arrive before round k's first room frame, and the recorded assistant track holds each
    history reply exactly where the history places it."""
    from server.db import EventRow

    token = create_token(db, "local")
    run = create_run(db, team="local", model="mtr-forced", suite_path=mtr_mini, clock="lockstep", limit=1,
                     conditions=["gt"])
    async with BackgroundServer(settings) as server:
        forced = Quiet(accepts=True, clocks=("lockstep",))
        client = BridgeClient(forced, BridgeOptions(server=server.url, token=token, backoff_min_s=0.05))
        task = asyncio.create_task(client.run())
        try:
            p = await wait_run(db, run, [task], 300)
        finally:
            client.stop()
            await asyncio.gather(task, return_exceptions=True)
    assert p.completed == p.total == len(forced.starts) >= 2
    loaded = load_suite(mtr_mini)
    with db.session() as s:
        by_attempt = {e.completed_attempt_id: e for e in s.scalars(select(Episode).where(Episode.run_id == run))}
    eps = [by_attempt[start.episode_id] for start in forced.starts]  # in the order the bridge played them (a
    # bridge is given its attempt's id)
    rounds_seen = set()
    for ep, start, calls in zip(eps, forced.starts, forced.calls):
        with db.session() as s:
            events = [(e.t, e.type, e.data) for e in s.scalars(
                select(EventRow).where(EventRow.attempt_id == ep.completed_attempt_id).order_by(EventRow.id))]
        k = ep.scenario["round"]
        rounds_seen.add(k)
        n_ctx = start.context_frames
        first_live = min(t for t, type_, data in events if type_ == "user.start" and data["round"] == k)
        if k == 1:  # round 1 has no history: it runs as a free episode's first round
            assert n_ctx == 0 and not any(kind == "force" for kind, _, _ in calls)
            assert not any(type_.startswith(("history.", "context.")) for _, type_, _ in events)
            continue
        history_end = next(t for t, type_, _ in events if type_ == "history.end")
        assert n_ctx > 0 and history_end == n_ctx * FRAME <= first_live
        check_calls(calls, n_ctx, None)  # force(n) right before step(n), for every n < n_ctx
        assert max(seq for kind, seq, _ in calls if kind == "force") < first_live // FRAME
        forced_track = np.concatenate([pcm for kind, _, pcm in calls if kind == "force"])
        assistant = load_track(db, ep.completed_attempt_id, "assistant")
        assert np.array_equal(assistant[: n_ctx * FRAME], forced_track)  # what the bridge was forced with
        assert not assistant[n_ctx * FRAME:].any()  # the live part is the (silent) bridge's own
        clips, _ = episode_audio(loaded, loaded.benchmark.snapshot(ep.scenario, ep.id))
        spans = [(t, data) for t, type_, data in events if type_ == "context.start"]
        assert len(spans) >= k - 1  # one reply per history round at least
        for t, data in spans:
            end = next(e for e, type_, d in events if type_ == "context.end" and d == data)
            clip = clips[f"r{data['round']:02d}.{data['part']}"]
            assert np.array_equal(forced_track[t:end], clip[: end - t])  # the ground truth, sample for sample
    assert rounds_seen == set(range(1, len(eps) + 1))


# --- telling whoever creates the run -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_create_run_answer_notes_episodes_no_bridge_can_take(kind, tmp_path, mini_suite, monkeypatch):
    """The API's answer to creating a run names the hello field when no connected bridge of the model
    accepts the context frames some of its episodes need; a run without such episodes gets no note."""
    import httpx

    from tests.support.world import world_on

    register(monkeypatch)
    suite = context_suite(mini_suite, tmp_path / "ctx-suite")
    async with world_on(kind, tmp_path, suite) as w:
        async with httpx.AsyncClient(base_url=w.http, headers={"Authorization": f"Bearer {w.tokens['alpha']}"},
                                     timeout=30) as a:
            r = await a.post("/v1/runs", json={"model": "tf-model", "suite": suite.name, "limit": 1})
            assert r.status_code == 201, r.text
            notes = r.json()["notes"]
            assert len(notes) == 1 and '"accepts_context": true in hello' in notes[0] and "implicit" in notes[0]
            r = await a.post("/v1/runs", json={"model": "tf-model", "suite": suite.name, "conditions": ["explicit"]})
            assert r.status_code == 201 and r.json()["notes"] == []
            assert (await a.get(f"/v1/runs/{r.json()['id']}")).json()["notes"] == []


def test_mpe_run_create_notes_gt_runs_on_stderr(settings, mtr_mini):
    """``mpe run create`` prints the run id on stdout, and the note on stderr."""
    from tests.support.cli import mpe

    p = mpe(settings, "run", "create", "--model", "tf-model", "--suite", mtr_mini, "--conditions", "gt,free",
            "--limit", "1")
    assert len(p.stdout.strip()) >= 16 and "\n" not in p.stdout.strip()
    assert '"accepts_context": true in hello' in p.stderr and "condition gt" in p.stderr
    p = mpe(settings, "run", "create", "--model", "tf-model", "--suite", mtr_mini, "--conditions", "free",
            "--limit", "1")
    assert p.stderr == ""
