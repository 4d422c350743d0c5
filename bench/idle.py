#!/usr/bin/env python
"""Idle bridges benchmark: what do N connected, idle bridges cost the server?

Real processes, nothing mocked: a server (``mpe serve``) on PostgreSQL, N bridges on one token in a
second process (the SDK's ``BridgeClient``, for a model no run asks for, so they stay idle), and
this process asking ``GET /v1/me`` ten times a second. For each configuration it prints the server
process's CPU (% of one core, over the measuring window) and the ``/v1/me`` latency p50/p95, with
ratios against the baseline measured in the same run:

* ``baseline``: the server of this tree, no bridges;
* ``legacy``: the server of ``--legacy-rev`` (default ``main``; ``git archive`` into a temporary
  directory), N bridges: each idle bridge polls leasing every ``poll_s`` (0.5 s);
* ``signal``: the server of this tree, N bridges: idle bridges wait on the work signal.

Usage::

    python bench/idle.py --pg-url postgresql+psycopg://postgres@127.0.0.1:5432/test
    python bench/idle.py --pg-url ... --bridges 150 --seconds 20 --legacy-rev 9b89f82
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from listen import database  # noqa: E402 (bench/listen.py: a schema of its own in the PostgreSQL)

MODEL = "bench-idle"  # no run asks for it: the bridges stay idle


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def legacy_tree(rev: str, into: Path) -> Path:
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def start_server(src: Path, url: str, data: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": url, "MPE_DATA_DIR": str(data), "PYTHONPATH": str(src),
           "MPE_MAX_BRIDGES_PER_TEAM": "0", "MPE_CONNECT_BURST": "10000", "MPE_REST_BURST": "10000",
           "MPE_REST_RATE_PER_S": "10000"}
    log = open(data.parent / f"{data.name}.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", "from server.cli import main; main()", "serve", "--port",
                             str(port)], cwd=src, env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        if proc.poll() is not None:
            log.close()
            raise SystemExit(f"the server of {src} did not start:\n{Path(log.name).read_text()[-3000:]}")
        time.sleep(0.2)
    raise SystemExit("the server did not answer /healthz")


def connected(url: str) -> int:
    from server.db import BridgeRow

    eng = sa.create_engine(url)
    try:
        with eng.connect() as c:
            return c.execute(sa.select(sa.func.count()).select_from(BridgeRow).where(
                BridgeRow.model_name == MODEL, BridgeRow.disconnected_at.is_(None))).scalar_one()
    finally:
        eng.dispose()


def measure(server: subprocess.Popen, port: int, token: str, seconds: float) -> tuple[float, list[float]]:
    """The server's CPU (% of one core) and /v1/me latencies (ms) over ``seconds``."""
    proc = psutil.Process(server.pid)
    lat: list[float] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                      timeout=10) as client:
        client.get("/v1/me").raise_for_status()
        proc.cpu_percent(None)
        t_end = time.monotonic() + seconds
        nxt = time.monotonic()
        while time.monotonic() < t_end:
            t0 = time.perf_counter()
            client.get("/v1/me").raise_for_status()
            lat.append((time.perf_counter() - t0) * 1000)
            nxt += 0.1
            time.sleep(max(0.0, nxt - time.monotonic()))
        cpu = proc.cpu_percent(None)
    return cpu, lat


def run_config(name: str, src: Path, pg_url: str, work: Path, bridges: int, seconds: float) -> dict:
    with database("postgres", work, pg_url) as url:  # each its own schema: the trees' migrations may differ
        made = subprocess.run([sys.executable, "-c", TOKEN, url], cwd=src, env={**os.environ, "PYTHONPATH": str(src)},
                                check=True, capture_output=True, text=True)
        return _run(name, src, url, work, made.stdout.strip(), bridges, seconds)


TOKEN = ("import sys; from server.auth import create_token; from server.db import Database; "
         "print(create_token(Database(sys.argv[1]), 'bench', label='idle bridges'))")


def _run(name: str, src: Path, url: str, work: Path, token: str, bridges: int, seconds: float) -> dict:
    port = free_port()
    server = start_server(src, url, work / name, port)
    child = None
    try:
        if bridges:
            child = subprocess.Popen([sys.executable, __file__, "--child", f"ws://127.0.0.1:{port}", token,
                                      str(bridges)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while connected(url) < bridges:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise SystemExit(f"{name}: only {connected(url)} of {bridges} bridges connected")
                time.sleep(0.5)
            time.sleep(3)  # settle
        load = os.getloadavg()[0]
        cpu, lat = measure(server, port, token, seconds)
    finally:
        if child is not None:
            child.terminate()
            child.wait(30)
        server.terminate()
        server.wait(30)
    q = statistics.quantiles(lat, n=100)
    return {"name": name, "bridges": bridges, "cpu": cpu, "p50": statistics.median(lat), "p95": q[94],
            "n": len(lat), "load": load}


async def child(server: str, token: str, n: int) -> None:
    """N idle bridges on one token, until terminated."""

    from clients.sdk import BridgeClient, BridgeOptions
    from model_bridges import create_bridge

    def idle():
        bridge = create_bridge("silent")
        bridge.name = MODEL
        return bridge

    clients = [BridgeClient(idle(), BridgeOptions(server=server, token=token, backoff_min_s=0.2)) for _ in range(n)]
    await asyncio.gather(*(c.run() for c in clients))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pg-url", default=os.environ.get("MPE_TEST_PG_URL"), help="PostgreSQL (a schema is made)")
    ap.add_argument("--bridges", type=int, default=150)
    ap.add_argument("--seconds", type=float, default=20.0, help="measuring window per configuration")
    ap.add_argument("--legacy-rev", default="main", help="the revision whose server polls (git archive)")
    ap.add_argument("--child", nargs=3, metavar=("SERVER", "TOKEN", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        server, token, n = args.child
        asyncio.run(child(server, token, int(n)))
        return
    if not args.pg_url:
        raise SystemExit("give --pg-url (or MPE_TEST_PG_URL)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        legacy = legacy_tree(args.legacy_rev, work / "legacy")
        rows = [run_config("baseline", ROOT, args.pg_url, work, 0, args.seconds),
                run_config("legacy", legacy, args.pg_url, work, args.bridges, args.seconds),
                run_config("signal", ROOT, args.pg_url, work, args.bridges, args.seconds)]
    base = rows[0]
    print(f"{os.cpu_count()} CPUs; {args.bridges} idle bridges on one token; {args.seconds:.0f} s per configuration; "
          f"legacy = {args.legacy_rev}")
    print(f"{'config':<10}{'bridges':>8}{'CPU %':>8}{'x base':>8}{'p50 ms':>9}{'x base':>8}{'p95 ms':>9}"
          f"{'x base':>8}{'load1':>7}")
    for r in rows:
        print(f"{r['name']:<10}{r['bridges']:>8}{r['cpu']:>8.1f}{r['cpu'] / max(base['cpu'], 0.1):>8.1f}"
              f"{r['p50']:>9.1f}{r['p50'] / base['p50']:>8.2f}{r['p95']:>9.1f}{r['p95'] / base['p95']:>8.2f}"
              f"{r['load']:>7.2f}")


if __name__ == "__main__":
    main()
