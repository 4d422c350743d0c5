"""A bridge written the way an outsider writes one: from docs/protocol.md alone, with the
`websockets` library, `json` and `struct` — no import of this project in the bridge's code.

It connects with a valid token for a model that has no run and is told so by ``status``
(§4.5) instead of waiting in silence; it is told when runs for its model exist only for
another clock and when every run has ended ("no more work"); it gets an episode as soon as a
run for its clock is created. Another team's run of the same model name is neither served
nor mentioned. Declaring ``accepts_context`` in ``hello``, it takes assistant-context frames
(kind 3, §5.1), each right before the room frame of its seq; without it, it is never given an
episode that has them and is told why it waits. The harness around it (server, tokens, runs,
the test benchmark with context frames) uses the project.
"""

from __future__ import annotations

import asyncio
import json
import struct

import websockets

# --- the outsider's bridge: wire protocol v1 from docs/protocol.md, nothing else ---------------

HEADER = struct.Struct("<BBHI")  # §5: version u8, kind u8, flags u16, seq u32, little-endian
VERSION, KIND_ROOM, KIND_ASSISTANT, KIND_CONTEXT, FLAG_SILENT = 1, 1, 2, 3, 0x0001
STEP_TIMEOUT_S = 10.0


class OutsiderBridge:
    """A silent lockstep model that keeps every server text message it receives, and the kind and
    seq of every binary frame (with ``accepts_context``: also the context audio it was given)."""

    def __init__(self, url: str, token: str, model: str, accepts_context: bool = False):
        self.url, self.token, self.model, self.accepts_context = url, token, model, accepts_context
        self.ws = None
        self.seen: list[dict] = []
        self.frames: list[tuple[int, int]] = []  # (kind, seq) of the binary frames of the last episode
        self.context: dict[int, bytes] = {}  # seq -> context samples (s16le; zeros for SILENT)

    async def connect(self) -> dict:
        self.ws = await websockets.connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"},
                                           max_size=2**20)
        hello = {"type": "hello", "protocol": 1, "model": {"name": self.model}, "sample_rate": 24000,
                 "clocks": ["lockstep"]}
        if self.accepts_context:  # §4.1: only a bridge that takes kind-3 frames says so
            hello["accepts_context"] = True
        await self.ws.send(json.dumps(hello))
        return await self._text()

    async def _text(self) -> dict:
        raw = await asyncio.wait_for(self.ws.recv(), STEP_TIMEOUT_S)
        assert isinstance(raw, str), "a room frame outside an episode"
        msg = json.loads(raw)
        self.seen.append(msg)
        return msg

    async def next_status(self) -> dict:
        """The next ``status`` message (the server sends one after welcome and on every change)."""
        while True:
            msg = await self._text()
            if msg["type"] == "status":
                return msg
            assert msg["type"] != "error", msg

    async def serve_episode(self) -> dict:
        """Wait for ``episode.start`` and answer every room frame with silence until ``episode.end``;
        a context frame (§5.1) is kept as the model's own output for its seq (this model: silence anyway)."""
        while (start := await self._text())["type"] != "episode.start":
            assert start["type"] == "status", start
        frame_bytes = 2 * start["frame_samples"]
        self.frames, self.context = [], {}
        while True:
            raw = await asyncio.wait_for(self.ws.recv(), STEP_TIMEOUT_S)
            if isinstance(raw, bytes):
                version, kind, flags, seq = HEADER.unpack_from(raw)
                self.frames.append((kind, seq))
                if kind == KIND_CONTEXT and self.accepts_context:
                    self.context[seq] = bytes(frame_bytes) if flags & FLAG_SILENT else raw[HEADER.size:]
                    continue
                assert (version, kind) == (VERSION, KIND_ROOM)
                await self.ws.send(HEADER.pack(VERSION, KIND_ASSISTANT, FLAG_SILENT, seq))
                continue
            msg = json.loads(raw)
            self.seen.append(msg)
            if msg["type"] == "episode.end":
                return msg
            assert msg["type"] not in ("error", "episode.start"), msg

    async def close(self) -> None:
        await self.ws.close()


# --- the harness ----------------------------------------------------------------------------

STATUS_FIELDS = {"type", "matching_runs", "queued_episodes", "reason", "hint"}


def _run(db, suite, **kw) -> str:
    from server.engine.leasing import create_run

    return create_run(db, **({"suite_path": str(suite), "clock": "lockstep", "limit": 1,
                              "conditions": ["explicit"]} | kw))


async def test_outsider_bridge_is_told_why_it_waits_then_served(settings, db, mini_suite):
    from sqlalchemy import select

    from server.app import BackgroundServer
    from server.auth import create_token
    from server.db import Episode, Run
    from server.engine.leasing import cancel_run

    token = create_token(db, "outsiders")
    rivals = _run(db, mini_suite, team="rivals", model="outsider-7b")  # same model name, another team
    _run(db, mini_suite, team="outsiders", model="outsider-7b-v2")  # a similar name in its own team
    async with BackgroundServer(settings) as srv:
        bridge = OutsiderBridge(srv.url + "/v1/bridge", token, "outsider-7b")
        welcome = await bridge.connect()
        assert welcome["type"] == "welcome"

        st = await bridge.next_status()  # right after welcome: why nothing comes
        assert set(st) == STATUS_FIELDS
        assert (st["matching_runs"], st["queued_episodes"], st["reason"]) == (0, 0, "no_run")
        assert "'outsider-7b'" in st["hint"] and "'outsiders'" in st["hint"]
        assert "'outsider-7b-v2'" in st["hint"]  # the near miss of its own team is named
        assert "rivals" not in json.dumps(bridge.seen)  # another team's run is never revealed

        realtime = _run(db, mini_suite, team="outsiders", model="outsider-7b", clock="realtime")
        st = await bridge.next_status()  # the change is reported while the bridge idles
        assert (st["matching_runs"], st["queued_episodes"], st["reason"]) == (0, 0, "other_clocks")
        assert "realtime" in st["hint"] and "lockstep" in st["hint"]

        cancel_run(db, realtime)
        st = await bridge.next_status()
        assert st["reason"] == "ended" and "no more work" in st["hint"] and "1 cancelled" in st["hint"]

        lockstep = _run(db, mini_suite, team="outsiders", model="outsider-7b")
        end = await bridge.serve_episode()  # a run for its clock: the episode comes at once
        assert end["reason"] == "completed"
        st = await bridge.next_status()  # its run has ended: told once, no silent wait
        assert (st["matching_runs"], st["queued_episodes"], st["reason"]) == (0, 0, "ended")
        assert "no more work" in st["hint"] and "1 finished" in st["hint"]
        await bridge.close()
    with db.session() as s:
        assert s.get(Run, lockstep).status == "finished"
        assert s.scalars(select(Episode.status).where(Episode.run_id == rivals)).all() == ["queued"]


async def test_status_counts_queued_work_and_admin_sees_every_team(settings, db, mini_suite):
    from server.app import BackgroundServer
    from server.auth import create_token

    _run(db, mini_suite, team="rivals", model="shared-name", clock="realtime")
    admin = create_token(db, "ops", admin=True)
    plain = create_token(db, "ops")
    async with BackgroundServer(settings) as srv:
        url = srv.url + "/v1/bridge"
        seen_by_admin = OutsiderBridge(url, admin, "shared-name")
        await seen_by_admin.connect()
        st = await seen_by_admin.next_status()
        assert st["reason"] == "other_clocks" and "in any team" in st["hint"]
        await seen_by_admin.close()

        ops = OutsiderBridge(url, plain, "shared-name")
        await ops.connect()
        st = await ops.next_status()
        assert st["reason"] == "no_run" and "'ops'" in st["hint"] and "rivals" not in st["hint"]
        await ops.close()

        _run(db, mini_suite, team="ops", model="shared-name", conditions=["explicit", "implicit"])
        counted = OutsiderBridge(url, plain, "shared-name")
        await counted.connect()
        st = await counted.next_status()  # sent before the first episode starts
        assert (st["matching_runs"], st["queued_episodes"], st["reason"]) == (1, 2, "queued")
        assert (await counted.serve_episode())["reason"] == "completed"
        await counted.close()


async def test_outsider_bridge_takes_context_frames_only_when_it_says_so(settings, db, mini_suite, tmp_path,
                                                                       monkeypatch):
    """§5.1 from the outside: without ``accepts_context`` the bridge is not given the episode with context frames
    and its ``status`` says why; with it, every slot below ``context_frames`` brings one kind-3 frame right
    before the room frame of the same seq, and later slots none."""
    from server.app import BackgroundServer
    from server.auth import create_token
    from tests.support.context import FRAME, context_suite, expected_tracks, register

    register(monkeypatch)
    suite = context_suite(mini_suite, tmp_path / "ctx")
    token = create_token(db, "outsiders")
    _run(db, suite, team="outsiders", model="outsider-tf", conditions=["implicit"])
    async with BackgroundServer(settings) as srv:
        url = srv.url + "/v1/bridge"
        plain = OutsiderBridge(url, token, "outsider-tf")
        await plain.connect()
        st = await plain.next_status()
        assert (st["matching_runs"], st["queued_episodes"], st["reason"]) == (1, 1, "needs_context")  # §4.5
        assert '"accepts_context": true' in st["hint"] and "implicit" in st["hint"]

        forced = OutsiderBridge(url, token, "outsider-tf", accepts_context=True)
        await forced.connect()
        end = await forced.serve_episode()
        assert end["reason"] == "completed"
        start = next(m for m in forced.seen if m["type"] == "episode.start")
        n = start["context_frames"]
        rooms = [seq for kind, seq in forced.frames if kind == KIND_ROOM]
        assert n > 0 and rooms == list(range(len(rooms))) and len(rooms) > n
        assert forced.frames == [f for seq in rooms for f in ([(KIND_CONTEXT, seq)] if seq < n else []) +
                                 [(KIND_ROOM, seq)]]
        await forced.close()
        await plain.close()
        assert not any(m["type"] == "episode.start" for m in plain.seen)
    # what it took as its own output is the suite's ground-truth audio, sample for sample
    from sqlalchemy import select

    from server.db import Episode
    from server.engine.clips import episode_audio, load_suite

    with db.session() as s:
        ep = s.scalars(select(Episode)).one()
    loaded = load_suite(suite)
    _, ctx, n_ctx = expected_tracks(episode_audio(loaded, loaded.benchmark.snapshot(ep.scenario, ep.id))[0],
                                    history=True)
    assert n_ctx == n and b"".join(forced.context[i] for i in range(n)) == ctx.astype("<i2").tobytes()
    assert len(ctx) == n * FRAME


async def test_outsider_bridge_runs_an_mtr_gt_episode(settings, db, say, tmp_path):
    """The raw bridge, from docs/protocol.md alone, serves MTR-DuplexBench ``gt`` episodes: round 1
    has no history; round 2 starts with round 1's ground truth as context frames, each before its
    room frame, and the episode completes."""
    from sqlalchemy import update

    from server.app import BackgroundServer
    from server.auth import create_token
    from server.db import Episode
    from tests.support.mtr import build_mtr_suite

    suite = build_mtr_suite(tmp_path / "mtr", say)
    token = create_token(db, "outsiders")
    run = _run(db, suite, team="outsiders", model="outsider-mtr", conditions=["gt"])
    with db.session() as s:  # leased in the dialogue's order (a run's lease order is otherwise a secret shuffle)
        s.execute(update(Episode).where(Episode.run_id == run).values(lease_rank=Episode.ordinal))
    async with BackgroundServer(settings) as srv:
        bridge = OutsiderBridge(srv.url + "/v1/bridge", token, "outsider-mtr", accepts_context=True)
        await bridge.connect()
        starts = []
        for _ in range(2):  # rounds 1 and 2 of the dialogue, in the run's order
            end = await bridge.serve_episode()
            assert end["reason"] == "completed"
            starts.append([m for m in bridge.seen if m["type"] == "episode.start"][-1])
        await bridge.close()
    assert "context_frames" not in starts[0]  # round 1: nothing before it
    n = starts[1]["context_frames"]
    rooms = [seq for kind, seq in bridge.frames if kind == KIND_ROOM]
    assert n > 0 and len(rooms) > n
    assert bridge.frames == [f for seq in rooms for f in ([(KIND_CONTEXT, seq)] if seq < n else []) + [(KIND_ROOM, seq)]]
    assert any(any(b) for b in bridge.context.values())  # the ground-truth reply was in it
