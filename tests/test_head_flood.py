"""Request heads that never end: capped in size (431 at once), cheap for the server, and a realtime
episode running meanwhile is either on time or marked late (docs/protocol.md §8, "Connections")."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from sqlalchemy import select

from clients.sdk import Bridge, BridgeClient, BridgeOptions
from server.db import Attempt, Episode, FrameRow
from server.engine.leasing import create_run
from server.engine.protocols import MAX_HEAD_BYTES
from server.engine.session import ROOM_LATE_PERIODS, RoomPacing
from tests.support.world import world_on

FLOOD_BYTES = 24 * 1024 * 1024  # what each flood connection sends at most (the cap is far below)
CHUNK = 16 * 1024


class Listening(Bridge):
    """A realtime bridge that answers silence and says when its episode has begun."""

    name = "rt"
    clocks = ("realtime",)
    blocking = False

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()

    def reset(self, episode) -> None:
        self.started.set()

    def step(self, seq, room):
        return None


def flood(port: int) -> tuple[int, bytes]:
    """One connection sends a request head that never ends, until the server closes it or
    FLOOD_BYTES are out; returns the bytes sent and what the server answered."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(30)
    sent = 0
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Flood: ")
        piece = b"a" * CHUNK
        while sent < FLOOD_BYTES:
            sock.sendall(piece)
            sent += CHUNK
    except OSError:
        pass
    answer = b""
    try:
        while chunk := sock.recv(4096):
            answer += chunk
    except OSError:
        pass
    sock.close()
    return sent, answer


def test_room_pacing_marks_a_frame_sent_a_period_late():
    p = RoomPacing(0.08)
    p.sent(1.0, 1.0)
    p.sent(1.08, 1.1)  # 20 ms behind: within the bound
    assert not p.late and p.to_json() == {"room_late": False, "room_late_frames": 0, "max_room_lateness_ms": 20.0}
    p.sent(1.16, 1.16 + ROOM_LATE_PERIODS * 0.08)
    p.sent(1.24, 1.5)
    assert p.late and p.late_frames == 2 and p.to_json()["max_room_lateness_ms"] == 260.0


async def test_endless_request_heads_cost_little_and_never_leave_an_episode_silently_late(tmp_path, mini_suite):
    async with world_on("sqlite", tmp_path, mini_suite) as w:
        run = create_run(w.db, team="alpha", model="rt", suite_path=str(w.suite), clock="realtime", limit=1,
                         conditions=["explicit"])
        bridge = Listening()
        client = BridgeClient(bridge, BridgeOptions(server=w.server.url, token=w.tokens["alpha"], reconnect=False,
                                                    max_episodes=1))
        task = asyncio.create_task(client.run())
        assert await asyncio.to_thread(bridge.started.wait, 60)
        # the server runs on this thread's loop: its CPU time during the flood is this thread's
        cpu0 = time.thread_time()
        floods = await asyncio.gather(*(asyncio.to_thread(flood, w.server.port) for _ in range(2)))
        cpu = time.thread_time() - cpu0
        for sent, answer in floods:
            assert sent < FLOOD_BYTES, "the server read an endless head to the end"
            assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
            assert sent <= MAX_HEAD_BYTES + 4 * 1024 * 1024  # closed soon after the cap (what the kernel buffers aside)
        assert cpu / len(floods) < 0.3, f"{cpu:.2f} s of the server's CPU for {len(floods)} flood connections"
        await asyncio.wait_for(task, 120)
        assert client.episodes_done == 1
        with w.db.session() as s:
            ep = s.scalars(select(Episode).where(Episode.run_id == run)).one()
            att = s.get(Attempt, ep.completed_attempt_id)
            sent_us = [(r.seq, r.sent_us) for r in s.scalars(select(FrameRow).where(
                FrameRow.attempt_id == att.id, FrameRow.direction == "room"))]
        worst = max(us - seq * 80_000 for seq, us in sent_us)
        server = att.stats["server"]
        # on time, or marked late: never stored as clean when a room frame went out a period late
        bound = ROOM_LATE_PERIODS * 80_000
        if worst > bound:
            assert server["room_late"] and server["room_late_frames"] >= 1, (worst, server)
        elif worst < bound - 1:  # (the frame log rounds to µs)
            assert not server["room_late"], (worst, server)
        assert server["max_room_lateness_ms"] >= round(worst / 1000, 1) - 0.1
