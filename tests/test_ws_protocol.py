"""The server's WebSocket protocol (server.engine.protocols): reading pauses once READ_HIGH_WATER
messages wait for the app, so a client cannot make the server buffer without bound, and every
message still reaches the app, in order, once it reads."""

from __future__ import annotations

import asyncio

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect

from server.app import uvicorn_config
from server.engine.protocols import READ_HIGH_WATER

MESSAGE = 64 * 1024
SENT_AT_MOST = 2000  # what the client tries to send: 125 MiB, far beyond the sockets' buffers


@pytest.mark.timeout(120)
def test_reading_pauses_past_the_mark_and_nothing_is_lost():
    reading = asyncio.Event()
    received: list[int] = []
    queued_at_most: list[int] = []

    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        await reading.wait()  # the app does not read until the test says so
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            received.append(int.from_bytes(msg["bytes"][:4], "big"))
            if len(received) == len(sent):
                await ws.send_text("all")

    app = Starlette(routes=[WebSocketRoute("/ws", endpoint)])
    sent: list[int] = []

    async def main() -> None:
        server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", 0, 5.0))
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            async with connect(f"ws://127.0.0.1:{port}/ws", max_size=1 << 20, write_limit=MESSAGE) as ws:
                for k in range(SENT_AT_MOST):
                    try:
                        await asyncio.wait_for(ws.send(k.to_bytes(4, "big") + bytes(MESSAGE - 4)), 1.0)
                    except TimeoutError:  # the server stopped reading: its buffers and ours are full
                        sent.append(k)  # (written to the socket's buffer all the same: it still arrives)
                        break
                    sent.append(k)
                protocols = [c for c in server.server_state.connections if hasattr(c, "queue")]
                queued_at_most.append(max(p.queue.qsize() for p in protocols))
                reading.set()
                for k in range(len(sent), len(sent) + 10):  # and it reads again once the app reads
                    await asyncio.wait_for(ws.send(k.to_bytes(4, "big") + bytes(MESSAGE - 4)), 5.0)
                    sent.append(k)
                assert await asyncio.wait_for(ws.recv(), 10.0) == "all"
        finally:
            server.should_exit = True
            await task

    asyncio.run(main())
    assert len(sent) < SENT_AT_MOST // 2  # the server paused reading (kernel buffers took the rest)
    assert queued_at_most[0] <= READ_HIGH_WATER  # what waits for the app in the server is bounded
    assert received == sent  # every message, in order
