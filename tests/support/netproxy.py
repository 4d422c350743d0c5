"""A loopback TCP proxy that impairs a connection (for the fault tests): latency, jitter, bursts
(data held back, then delivered at once) and dropped connections. 127.0.0.1 only; seeded."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field


@dataclass
class Impairment:
    latency_s: float = 0.0  # one way, each direction
    jitter_s: float = 0.0  # uniform extra delay in [0, jitter_s]; order is kept
    burst_every_s: float = 0.0  # every so often, hold everything back for burst_s
    burst_s: float = 0.0
    drop_after_bytes: int | None = None  # abort the first connection once this much went upstream
    seed: int = 0


@dataclass
class Proxy:
    upstream_port: int
    imp: Impairment
    port: int = 0
    drops: int = 0
    connections: int = 0
    _server: asyncio.base_events.Server | None = None
    _tasks: set = field(default_factory=set)

    async def __aenter__(self) -> "Proxy":
        self.rng = random.Random(self.imp.seed)
        self.t0 = asyncio.get_running_loop().time()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _held_until(self, t: float) -> float:
        """Bursts: in the last burst_s of every burst_every_s, nothing moves."""
        every, hold = self.imp.burst_every_s, self.imp.burst_s
        if not every or not hold:
            return t
        phase = (t - self.t0) % every
        return t + (every - phase) if phase >= every - hold else t

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = self.connections == 1
        ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        drop = asyncio.Event()
        pumps = [asyncio.create_task(self._pump(cr, uw, drop, self.imp.drop_after_bytes if first else None)),
                 asyncio.create_task(self._pump(ur, cw, drop, None))]
        self._tasks.update(pumps)
        await asyncio.wait([*pumps, asyncio.create_task(drop.wait())], return_when=asyncio.FIRST_COMPLETED)
        for p in pumps:
            p.cancel()
        if drop.is_set():  # a dropped connection: both ends reset, nothing in flight delivered
            self.drops += 1
            for w in (cw, uw):
                w.transport.abort()
        else:
            for w in (cw, uw):
                w.close()
        self._tasks.difference_update(pumps)

    async def _pump(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, drop: asyncio.Event,
                    drop_after: int | None) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        last = 0.0

        async def deliver() -> None:
            while True:
                at, data = await queue.get()
                if data is None:
                    w.write_eof() if w.can_write_eof() else None
                    return
                await asyncio.sleep(max(0.0, at - loop.time()))
                w.write(data)
                await w.drain()

        sender = asyncio.create_task(deliver())
        sent = 0
        try:
            while True:
                data = await r.read(65536)
                if not data:
                    queue.put_nowait((0.0, None))
                    await sender
                    return
                sent += len(data)
                if drop_after is not None and sent >= drop_after:
                    drop.set()
                    return
                now = loop.time()
                at = self._held_until(now + self.imp.latency_s + self.rng.uniform(0, self.imp.jitter_s))
                last = max(last, at)  # never reordered
                queue.put_nowait((last, data))
        finally:
            sender.cancel()
