"""A bridge written the way an outsider writes one: from docs/protocol.md alone, with the
`websockets` library, `json` and `struct` — no import of this project in the bridge's code.

It connects with a valid token for a model that has no run and is told so by ``status``
(§4.5) instead of waiting in silence; it is told when runs for its model exist only for
another clock and when every run has ended ("no more work"); it gets an episode as soon as a
run for its clock is created. Another team's run of the same model name is neither served
nor mentioned. The harness around it (server, tokens, runs) uses the project.
"""

from __future__ import annotations

import asyncio
import json
import struct

import websockets

# --- the outsider's bridge: wire protocol v1 from docs/protocol.md, nothing else ---------------

HEADER = struct.Struct("<BBHI")  # §5: version u8, kind u8, flags u16, seq u32, little-endian
VERSION, KIND_ROOM, KIND_ASSISTANT, FLAG_SILENT = 1, 1, 2, 0x0001
STEP_TIMEOUT_S = 10.0


class OutsiderBridge:
    """A silent lockstep model that keeps every server text message it receives."""

    def __init__(self, url: str, token: str, model: str):
        self.url, self.token, self.model = url, token, model
        self.ws = None
        self.seen: list[dict] = []

    async def connect(self) -> dict:
        self.ws = await websockets.connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"},
                                           max_size=2**20)
        await self.ws.send(json.dumps({"type": "hello", "protocol": 1, "model": {"name": self.model},
                                       "sample_rate": 24000, "clocks": ["lockstep"]}))
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
        """Wait for ``episode.start`` and answer every room frame with silence until ``episode.end``."""
        while (msg := await self._text())["type"] != "episode.start":
            assert msg["type"] == "status", msg
        while True:
            raw = await asyncio.wait_for(self.ws.recv(), STEP_TIMEOUT_S)
            if isinstance(raw, bytes):
                version, kind, flags, seq = HEADER.unpack_from(raw)
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
