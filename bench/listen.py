#!/usr/bin/env python
"""Live listening benchmark: does watching an episode change its pacing?

One process, one event loop, nothing mocked: the real server (BackgroundServer), a realtime
episode of the built-in demo suite served by the ``echo`` reference bridge over loopback
WebSockets, and listeners on ``/v1/episodes/{id}/listen``: ``--listeners`` that read
everything and ``--stalled`` that complete the handshake and never read (their server-side
send buffer narrowed to 8 KiB, as on a slow network path, so their backlog reaches the
server's bounded queue within seconds).

For each configuration (no listeners, then the given mix) it prints the send-time error of
every room frame against its deadline (``sent_us - seq * 80 ms`` from the frame log:
p50/p99/max), the assistant frames that arrived late, what the listeners received and
what was dropped for the stalled ones.

Usage::

    python bench/listen.py                          # 0 listeners vs 4 + 2 stalled, one 73 s episode each
    python bench/listen.py --listeners 16 --stalled 4 --episodes 3 --db postgres
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import sqlalchemy as sa
import websockets
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clients.sdk import BridgeClient, BridgeOptions  # noqa: E402
from model_bridges import create_bridge  # noqa: E402
from server.app import BackgroundServer  # noqa: E402
from server.auth import create_token  # noqa: E402
from server.benchmarks.mpe.demo_suite import build_demo_suite  # noqa: E402
from server.core.status import RunStatus  # noqa: E402
from server.db import Attempt, Database, Episode, FrameRow  # noqa: E402
from server.engine.leasing import create_run  # noqa: E402
from server.engine.progress import run_progress  # noqa: E402
from server.settings import Settings  # noqa: E402


@contextlib.contextmanager
def database(kind: str, work: Path, pg_url: str):
    if kind == "sqlite":
        yield f"sqlite:///{work / 'bench.db'}"
        return
    schema = "bench_" + uuid.uuid4().hex[:10]
    eng = sa.create_engine(pg_url)
    with eng.begin() as c:
        c.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{pg_url}{'&' if '?' in pg_url else '?'}options=-csearch_path%3D{schema}"
    finally:
        with eng.begin() as c:
            c.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        eng.dispose()


async def reader(url: str, counts: dict) -> None:
    async with websockets.connect(url, max_size=1 << 20) as ws:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for msg in ws:
                counts["frames" if isinstance(msg, bytes) else "json"] += 1


def stalled(port: int, path: str, server: BackgroundServer) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    me = sock.getsockname()
    for proto in list(server.server.server_state.connections):
        tr = getattr(proto, "transport", None)
        if tr is not None and tr.get_extra_info("peername") == me:
            tr.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    return sock


async def one_episode(settings: Settings, db: Database, suite: Path, n_listen: int, n_stalled: int) -> dict:
    token = create_token(db, "bench")
    run = create_run(db, team="bench", model="echo", suite_path=str(suite), clock="realtime", limit=1,
                     conditions=["explicit"])
    with db.session() as s:
        ep_id = s.scalars(select(Episode).where(Episode.run_id == run)).one().id
    async with BackgroundServer(settings) as server:
        path = f"/v1/episodes/{ep_id}/listen?token={token}"
        counts = [{"frames": 0, "json": 0} for _ in range(n_listen)]
        readers = [asyncio.create_task(reader(f"ws://127.0.0.1:{server.port}{path}", c)) for c in counts]
        socks = [await asyncio.to_thread(stalled, server.port, path, server) for _ in range(n_stalled)]
        dropped: dict[int, int] = {}
        client = BridgeClient(create_bridge("echo"), BridgeOptions(server=server.url, token=token))
        task = asyncio.create_task(client.run())
        hub = server.app.state.mpe.live
        while (await asyncio.to_thread(run_progress, db, run)).status != RunStatus.finished:
            ch = hub.get(ep_id)
            for lst in list(ch.listeners) if ch else ():
                dropped[id(lst)] = max(dropped.get(id(lst), 0), lst.dropped)
            if task.done():
                task.result()
            await asyncio.sleep(0.05)
        client.stop()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.wait_for(asyncio.gather(*readers, return_exceptions=True), 30)
        for s in socks:
            s.close()
    with db.session() as s:
        att = s.get(Attempt, s.get(Episode, ep_id).completed_attempt_id)
        sent = [(r.seq, r.sent_us) for r in s.scalars(select(FrameRow).where(
            FrameRow.attempt_id == att.id, FrameRow.direction == "room"))]
    return {"errors_ms": [(us - seq * 80_000) / 1000 for seq, us in sent], "frames": att.n_frames,
            "late_assistant": att.stats.get("server", {}).get("late_frames"),
            "received": [c["frames"] for c in counts], "dropped": sorted(dropped.values(), reverse=True)[:n_stalled]}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listeners", type=int, default=4)
    ap.add_argument("--stalled", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=1, help="episodes per configuration")
    ap.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--pg-url", default=os.environ.get("MPE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--cache-dir", type=Path, default=Path(".mpe"), help="where the demo suite's TTS clips are cached")
    args = ap.parse_args()
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}, db {args.db}")
    suite = await asyncio.to_thread(build_demo_suite, args.cache_dir)
    rows = []
    for n_listen, n_stalled in ((0, 0), (args.listeners, args.stalled)):
        errors, extra = [], []
        for _ in range(args.episodes):
            with tempfile.TemporaryDirectory() as tmp, database(args.db, Path(tmp), args.pg_url) as url:
                settings = Settings(data_dir=Path(tmp), DATABASE_URL=url, poll_s=0.05)
                db = await asyncio.to_thread(Database, settings.db_url)
                t0 = time.monotonic()
                r = await one_episode(settings, db, suite, n_listen, n_stalled)
                db.dispose()
                errors += r["errors_ms"]
                extra.append(r | {"wall_s": time.monotonic() - t0})
        e = np.asarray(errors)
        rows.append((n_listen, n_stalled, len(e), statistics.median(e), np.percentile(e, 99), e.max(), extra))
    print(f"{'listeners':>9} {'stalled':>7} {'frames':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}  "
          f"late asst  received by each listener / dropped for each stalled one")
    for n_l, n_s, n, p50, p99, mx, extra in rows:
        recv = "; ".join(f"{x['received']} / {x['dropped']}" for x in extra)
        late = ",".join(str(x["late_assistant"]) for x in extra)
        print(f"{n_l:>9} {n_s:>7} {n:>7} {p50:>7.2f} {p99:>7.2f} {mx:>7.2f}  {late:>9}  {recv}")


if __name__ == "__main__":
    asyncio.run(main())
