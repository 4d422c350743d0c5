"""End to end over real WebSockets: lockstep and realtime episodes, retries, restarts, export."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import signal
import time

import numpy as np
import pytest
import soundfile as sf
from sqlalchemy import func, select

from clients.messages import EpisodeStart
from clients.sdk import Bridge, BridgeClient, BridgeOptions
from server.app import BackgroundServer
from server.auth import create_token
from server.cli.bridges import create_bridge
from server.db import Attempt, AudioChunk, Episode, FrameRow
from server.engine.bundles import episode_document, export_run
from server.engine.leasing import create_run
from server.engine.progress import run_progress
from tests.support.servers import check_attempt_recording, free_port, serve, start_server
from tests.support.world import Slow, wait_run

FRAME = 1920


async def test_lockstep_silent_and_oracle(db, settings, mini_suite):
    tok = create_token(db, "local")
    adm = create_token(db, "local", admin=True)
    r_silent = create_run(db, team="local", model="silent", suite_path=str(mini_suite), clock="lockstep")
    r_oracle = create_run(db, team="local", model="oracle", suite_path=str(mini_suite), clock="lockstep")
    async with BackgroundServer(settings) as server:
        oracle = create_bridge("oracle", suite=str(mini_suite), data_dir=str(settings.data_dir))
        clients = [(create_bridge("silent"), tok), (oracle, adm)]
        p = await serve(db, server, clients, r_silent, also=[r_oracle])  # both bridges run until both runs end
        p2 = await wait_run(db, r_oracle)
    assert p.completed == p.total == 4 and p2.completed == 4
    with db.session() as s:
        eps = {(e.run_id, e.scenario_id, e.condition): e for e in s.scalars(select(Episode))}
    for (run, sid, cond), ep in eps.items():
        assert ep.attempts == 1
        room, assistant, live = check_attempt_recording(db, ep.completed_attempt_id)
        doc = episode_document(db, ep.id)
        ev = {e["type"]: e for e in doc["events"]}
        n_clips = len(ep.scenario["turns"])
        assert sum(e["type"] == "clip.start" for e in doc["events"]) == n_clips
        if run == r_silent:
            assert not assistant.any() and live == []
            assert ev["t_wait.end"]["data"]["reason"] == "no_response"
            # §3: no response -> next clip starts exactly 5 s after T ends
            t_idx = next(t["idx"] for t in ep.scenario["turns"] if t["label"] == "T")
            e_t = next(e["t"] for e in doc["events"] if e["type"] == "clip.end" and e["data"]["idx"] == t_idx)
            nxt = next(e["t"] for e in doc["events"] if e["type"] == "clip.start" and e["data"]["idx"] == t_idx + 1)
            assert nxt - e_t == 5 * 24000
        else:
            end = ev["t_wait.end"]["data"]
            assert end["reason"] == "silence" and end["onset_at"] is not None
            # the oracle answers T within half a second and is silent in every N1-N3 window
            starts = [e for e in doc["events"] if e["type"] == "clip.start"]
            for i, e in enumerate(starts):
                nxt = starts[i + 1]["t"] if i + 1 < len(starts) else ev["episode.end"]["t"]
                if e["data"]["label"] in ("N1", "N2", "N3"):
                    assert not any(g.start < nxt and g.end > e["t"] for g in live)
                if e["data"]["label"] == "N4R":  # §6 N4: speaking at t_R, silent at t_R + 2 s
                    t_r = e["t"]
                    assert any(g.start <= t_r < g.end for g in live)
                    assert not any(g.start <= t_r + 48000 < g.end for g in live)
            # the room track is the script: the preamble clip sits at stream time 0
            pre, _ = sf.read(mini_suite / "clips/preamble.wav", dtype="int16")
            assert np.array_equal(room[: len(pre)], pre)


class Flaky(Bridge):
    """Dies (drops the connection) after ``die_after`` frames of its first episode."""

    name = "flaky"
    blocking = False

    def __init__(self, die_after: int):
        super().__init__()
        self.die_after, self.frames, self.died = die_after, 0, False

    def reset(self, episode: EpisodeStart) -> None:
        self.frames = 0

    def step(self, seq, room):
        self.frames += 1
        if not self.died and self.frames > self.die_after:
            self.died = True
            raise ConnectionResetError("bridge crashed")
        return None


async def test_bridge_killed_mid_episode_is_retried(db, settings, mini_suite):
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="flaky", suite_path=str(mini_suite), clock="lockstep", limit=1,
                     conditions=["explicit"])
    async with BackgroundServer(settings) as server:
        flaky = Flaky(die_after=60)
        client = BridgeClient(flaky, BridgeOptions(server=server.url, token=tok, reconnect=False))
        with pytest.raises(ConnectionResetError):
            await client.run()
        for _ in range(100):  # the server notices the dropped connection and requeues at once
            p = await asyncio.to_thread(run_progress, db, run)
            if p.queued == 1:
                break
            await asyncio.sleep(0.02)
        assert p.status == "running" and p.queued == 1 and p.failed == 0
        p = await serve(db, server, [(Flaky(die_after=10**9), tok)], run)
    assert p.completed == 1 and p.failed_attempts == 1
    with db.session() as s:
        ep = s.scalars(select(Episode)).one()
        atts = s.scalars(select(Attempt).order_by(Attempt.number)).all()
        partial_chunks = s.scalar(select(func.count()).select_from(AudioChunk).where(AudioChunk.attempt_id == atts[0].id))
    assert ep.attempts == 2 and [a.status for a in atts] == ["failed", "completed"]
    assert atts[0].error_code == "disconnected"
    assert ep.completed_attempt_id == atts[1].id
    assert partial_chunks > 0  # the partial attempt is kept
    check_attempt_recording(db, atts[1].id)
    # export holds only completed attempts
    out = export_run(db, run, settings.data_dir / "export")
    assert len(out) == 1 and json.loads((out[0] / "episode.json").read_text())["attempt_id"] == atts[1].id


async def test_retries_exhausted_fail_the_episode_and_finish_the_run(db, settings, mini_suite):
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="flaky", suite_path=str(mini_suite), clock="lockstep", limit=1,
                     conditions=["explicit"], max_attempts=2)
    async with BackgroundServer(settings) as server:
        for _ in range(2):
            client = BridgeClient(Flaky(die_after=5), BridgeOptions(server=server.url, token=tok, reconnect=False))
            with pytest.raises(ConnectionResetError):
                await client.run()
    p = run_progress(db, run)
    assert p.status == "finished" and p.failed == 1 and p.completed == 0


async def test_realtime_episode(db, settings, mini_suite, speech_frames):
    """Realtime: frames on absolute deadlines; a late bridge's frames land at their arrival slot."""

    class LateTalker(Bridge):
        # Answers every room frame about 100 ms late (one stall at the start), speech from seq 100 on.
        name = "late"
        clocks = ("realtime",)

        def reset(self, episode):
            pass

        def step(self, seq, room):
            if seq == 0:
                time.sleep(0.1)
            if 100 <= seq < 100 + len(speech_frames) // FRAME:
                k = seq - 100
                return speech_frames[k * FRAME:(k + 1) * FRAME]
            return None

    tok = create_token(db, "local")
    run = create_run(db, team="local", model="late", suite_path=str(mini_suite), clock="realtime", limit=1,
                     conditions=["explicit"])
    async with BackgroundServer(settings) as server:
        t0 = time.monotonic()
        await serve(db, server, [(LateTalker(), tok)], run, timeout=90)
        wall = time.monotonic() - t0
    with db.session() as s:
        ep = s.scalars(select(Episode)).one()
        att = s.get(Attempt, ep.completed_attempt_id)
        rows = s.scalars(select(FrameRow).where(FrameRow.attempt_id == att.id).order_by(FrameRow.id)).all()
    room_rows = [r for r in rows if r.direction == "room"]
    asst = [r for r in rows if r.direction == "assistant"]
    stream_s = att.n_frames * 0.08
    assert wall >= stream_s  # paced in real time, not faster
    # room frames go out on their deadlines, never early (timing figures: bench/engine.py)
    errors = [r.sent_us - r.seq * 80_000 for r in room_rows]
    assert min(errors) >= 0 and len(room_rows) == att.n_frames
    # each assistant frame sits at its arrival slot, which is after its seq (100 ms late)
    for r in asst:
        assert r.slot == max(r.arrived_us // 80_000, r.slot)
        assert r.slot >= r.seq + 1
    assert att.stats["server"]["late_frames"] == len(asst)
    _, assistant, live = check_attempt_recording(db, att.id)
    # the speech sent as seq 100.. is on the timeline one or two slots later
    first = live[0].start
    assert 101 * FRAME <= first + 2400 and first <= 103 * FRAME + 4800
    # the bundle's frames.csv holds the frame log: one row per frame, seq and (late) slot as logged
    (bundle,) = export_run(db, run, settings.data_dir / "export")
    with open(bundle / "frames.csv", newline="") as f:
        logged = list(csv.DictReader(f))
    assert [(r["direction"], int(r["seq"]), int(r["slot"])) for r in logged] == [(r.direction, r.seq, r.slot) for r in rows]
    assert [r["seq"] for r in logged if r["direction"] == "room"] == [str(i) for i in range(att.n_frames)]
    assert [(r["sent_us"], r["arrived_us"]) for r in logged if r["direction"] == "assistant"] == \
        [("", str(r.arrived_us)) for r in asst]
    assert [r["silent"] for r in logged if r["direction"] == "assistant"] == ["1" if r.silent else "0" for r in asst]
    assert {r["silent"] for r in logged if r["direction"] == "assistant"} == {"0", "1"}  # speech and silence


async def test_16k_bridge_and_max_inflight(db, settings, mini_suite):
    class Echo16(Bridge):
        name = "echo16"
        sample_rate = 16000
        blocking = False
        seen = []

        def reset(self, episode):
            assert episode.sample_rate == 16000 and episode.frame_samples == 1280 and episode.max_inflight == 3
            assert episode.reference is None  # not an admin bridge

        def step(self, seq, room):
            assert room.shape == (1280,)
            self.seen.append(seq)
            return room

    tok = create_token(db, "local")
    run = create_run(db, team="local", model="echo16", suite_path=str(mini_suite), clock="lockstep", limit=1,
                     conditions=["explicit"], max_inflight=3)
    async with BackgroundServer(settings) as server:
        p = await serve(db, server, [(Echo16(), tok)], run)
    assert p.completed == 1, p
    with db.session() as s:
        ep = s.scalars(select(Episode)).one()
    room, assistant, _ = check_attempt_recording(db, ep.completed_attempt_id)
    # the echo comes back through 24k -> 16k -> 24k: correlated with the room, delayed by the
    # resamplers only (soxr HQ blocks: about 36 ms each way)
    lag = np.argmax([np.dot(room[24000:48000].astype(float), assistant[24000 + d:48000 + d].astype(float))
                     for d in range(0, 2400, 24)]) * 24
    assert 1200 < lag < 2100
    assert Echo16.seen == sorted(Echo16.seen)


async def test_team_isolation(db, settings, mini_suite):
    other = create_token(db, "other")
    run = create_run(db, team="local", model="silent", suite_path=str(mini_suite), clock="lockstep", limit=1,
                     conditions=["explicit"])
    async with BackgroundServer(settings) as server:
        client = BridgeClient(create_bridge("silent"), BridgeOptions(server=server.url, token=other))
        task = asyncio.create_task(client.run())
        await asyncio.sleep(1.0)
        assert run_progress(db, run).queued == 1  # another team's bridge never gets it
        client.stop()
        await task


async def test_server_killed_mid_run_resumes(db, settings, mini_suite):
    tok = create_token(db, "local")
    run = create_run(db, team="local", model="slow", suite_path=str(mini_suite), clock="lockstep")
    port = free_port()
    proc = start_server(settings, port)
    client = BridgeClient(Slow(), BridgeOptions(server=f"ws://127.0.0.1:{port}", token=tok, backoff_min_s=0.1,
                                                backoff_max_s=0.5))
    task = asyncio.create_task(client.run())
    try:
        while True:  # kill -9 once one episode is done and the next is running
            p = await asyncio.to_thread(run_progress, db, run)
            if p.completed >= 1 and p.running >= 1:
                break
            await asyncio.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with db.session() as s:
            done_before = {e.id: e.completed_attempt_id for e in s.scalars(select(Episode).where(Episode.status == "completed"))}
        proc = start_server(settings, port)
        p = await wait_run(db, run, [task], timeout=120)
    finally:
        client.stop()
        await asyncio.gather(task, return_exceptions=True)
        proc.terminate()
        proc.wait()
    assert p.status == "finished" and p.completed == 4 and p.failed == 0
    with db.session() as s:
        eps = s.scalars(select(Episode)).all()
        abandoned = s.scalars(select(Attempt).where(Attempt.status == "abandoned")).all()
    for e in eps:
        if e.id in done_before:
            assert e.completed_attempt_id == done_before[e.id]  # completed episodes untouched
        check_attempt_recording(db, e.completed_attempt_id)
    assert len(abandoned) == 1 and abandoned[0].error_code == "lease_expired"
