"""``mpe serve --workers N``: N server processes on one port (DESIGN §10, scale-out on one host).

The supervisor (this module, in the ``mpe serve`` process) brings the database to head once, then
starts N worker processes. Each worker opens its own listening socket on the same host and port
with ``SO_REUSEPORT``, so the kernel spreads new connections over the workers, and serves the whole
application (bridge sockets, listen sockets, REST API, pages) under a server id of its own,
``<base>-w<i>``, which its leases and attempts carry. Nothing is shared between the workers but
the database: leasing (``SELECT … FOR UPDATE SKIP LOCKED``) lets them share runs, and a listen
socket that lands on one worker follows an episode another worker runs by tailing the database
(server/api/listen.py).

The supervisor forwards SIGTERM and SIGINT to the workers as SIGTERM (a graceful stop; a second
signal kills them), and starts a worker that died again, after a backoff that doubles while it
keeps dying soon after starting (:class:`RestartBackoff`). The attempts a dead worker was running
are lost to it only: their leases expire and other bridges retry them (§10).

Only PostgreSQL: SQLite lets one process write at a time, so a second process would only queue on
its write lock (docs/api.md "Several server processes").
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from clients.errors import MPEError
from server.engine.limits import worker_rates
from server.settings import Settings, default_server_id

log = logging.getLogger("mpe.workers")
STARTED_LOG = re.compile(r"worker (\d+) started \(pid (\d+), server id (\S+)\)")  # the line _start logs
STOP_GRACE_S = 30.0  # a worker still running this long after SIGTERM is killed
START_TIMEOUT_S = 120.0  # the first start of every worker must be serving by then


class WorkersUnsupported(MPEError):
    """More than one server process was asked for where that cannot work."""

    code = "bad_request"


def check_workers(settings: Settings, workers: int) -> None:
    """Refuse a number of workers the database cannot serve (SQLite: one; see the module)."""
    if workers < 1:
        raise WorkersUnsupported("--workers must be at least 1")
    if workers > 1 and not sys.platform.startswith("linux"):
        raise WorkersUnsupported(f"--workers {workers} needs Linux, whose SO_REUSEPORT spreads connections over "
                                 "the processes sharing a port; run one server process per port elsewhere")
    if workers > 1 and not settings.db_url.startswith("postgresql"):
        raise WorkersUnsupported(
            f"--workers {workers} needs PostgreSQL (DATABASE_URL=postgresql+psycopg://…): SQLite lets one "
            "process write at a time, so more server processes would only wait on each other's writes; "
            "run one worker on SQLite (docs/api.md \"Several server processes\")")


def worker_server_id(base: str, index: int) -> str:
    """The server id of worker ``index`` (1-based): the base id with ``-w<index>``."""
    return f"{base}-w{index}"


@dataclass
class RestartBackoff:
    """When to start a dead worker again: after ``min_s``, doubling up to ``max_s`` each time it
    dies within ``stable_s`` of starting; a worker that ran ``stable_s`` or longer starts again
    after ``min_s``. Pure: the caller gives the uptime."""

    min_s: float = 0.5
    max_s: float = 30.0
    stable_s: float = 30.0
    _next_s: float = field(default=0.0, init=False)

    def delay(self, uptime_s: float) -> float:
        """The wait before the restart of a worker that died after ``uptime_s`` seconds."""
        if uptime_s >= self.stable_s or self._next_s == 0.0:
            self._next_s = self.min_s
        d, self._next_s = self._next_s, min(self._next_s * 2, self.max_s)
        return d


def _family(host: str) -> socket.AddressFamily:
    return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]


def _reuseport_socket(host: str, port: int, *, reuseaddr: bool = True) -> socket.socket:
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    if reuseaddr:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket that holds ``host:port`` for the workers (bound, never listening, so the kernel gives
    it no connections); port 0 picks a free port. Refused when anything else holds the port, also
    another group of ``SO_REUSEPORT`` sockets (another ``mpe serve --workers``)."""
    if port:
        probe = socket.socket(_family(host), socket.SOCK_STREAM)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))  # without SO_REUSEPORT: fails when any socket holds the port
        except OSError as exc:
            raise WorkersUnsupported(f"cannot bind {host}:{port}: {exc.strerror}") from None
        finally:
            probe.close()
    # Without SO_REUSEADDR: two sockets that both set it may share a port while neither listens, so
    # another supervisor's probe would not see this one.
    return _reuseport_socket(host, port, reuseaddr=False)


def _worker_main(settings: Settings, index: int, host: str, port: int, ready: Connection) -> None:
    """One worker process: the application on its own ``SO_REUSEPORT`` socket (spawned, so it shares
    nothing with the supervisor but its arguments)."""
    import asyncio

    import uvicorn

    from server.app import create_app, uvicorn_config

    logging.basicConfig(level=logging.WARNING, format=f"%(levelname)s [w{index}] %(name)s: %(message)s")
    logging.getLogger("mpe").setLevel(logging.INFO)
    sock = _reuseport_socket(host, port)
    sock.listen(2048)
    server = uvicorn.Server(uvicorn_config(create_app(settings, migrate=False), host, port,
                                           settings.http_idle_timeout_s, log_level="info"))

    parent = os.getppid()

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            ready.send(True)
        while not task.done():  # a supervisor that died (SIGKILL) leaves no worker behind on its port
            if os.getppid() != parent:
                log.warning("the supervisor is gone; stopping")
                server.should_exit = True
            await asyncio.wait({task}, timeout=1.0)
        await task

    asyncio.run(serve())


@dataclass
class _Worker:
    index: int
    server_id: str
    proc: BaseProcess | None = None
    ready: Connection | None = None
    started_at: float = 0.0
    serving: bool = False
    restart_at: float | None = None
    backoff: RestartBackoff = field(default_factory=RestartBackoff)


class Supervisor:
    """Starts, watches, restarts and stops the workers of one ``mpe serve --workers N``."""

    def __init__(self, settings: Settings, workers: int, host: str, port: int):
        check_workers(settings, workers)
        self.settings, self.host, self.port = settings, host, port
        base = settings.server_id or default_server_id()
        self.workers = [_Worker(i, worker_server_id(base, i)) for i in range(1, workers + 1)]
        self.ctx = multiprocessing.get_context("spawn")
        self.signals = 0

    def _start(self, w: _Worker) -> None:
        parent, child = self.ctx.Pipe(duplex=False)
        settings = self.settings.model_copy(update={"server_id": w.server_id,  # and its share of the rates
                                                    **worker_rates(self.settings, len(self.workers))})
        w.proc = self.ctx.Process(target=_worker_main, name=f"mpe-worker-{w.index}",
                                  args=(settings, w.index, self.host, self.port, child), daemon=False)
        w.proc.start()
        child.close()
        w.ready, w.started_at, w.serving, w.restart_at = parent, time.monotonic(), False, None
        log.info("worker %d started (pid %d, server id %s)", w.index, w.proc.pid, w.server_id)

    def _on_signal(self, signum, _frame) -> None:
        """The first SIGTERM/SIGINT ends the watch (the workers then get SIGTERM); a second kills them."""
        self.signals += 1
        if self.signals > 1:
            for w in self.workers:
                if w.proc is not None and w.proc.is_alive():
                    w.proc.kill()

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT; the exit status (1 when a worker never started)."""
        from server.db import upgrade

        upgrade(self.settings.db_url)  # once, before any worker: the workers do not migrate
        reservation = reserve_port(self.host, self.port)
        self.port = reservation.getsockname()[1]
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for w in self.workers:
                self._start(w)
            return self._watch()
        finally:
            self._stop()
            for s, h in old.items():
                signal.signal(s, h)
            reservation.close()

    def _watch(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        announced = False
        while not self.signals:
            running = [w for w in self.workers if w.proc is not None]
            handles = [w.proc.sentinel for w in running] + [w.ready for w in running if not w.serving]
            wait(handles, timeout=0.2)
            t = time.monotonic()
            for w in running:
                if not w.serving and w.ready.poll():
                    try:
                        w.serving = bool(w.ready.recv())
                    except EOFError:
                        pass
                if w.proc.is_alive():
                    continue
                code = w.proc.exitcode
                how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
                if not announced:  # the first start failed: a setting or the database, not bad luck
                    log.error("worker %d (pid %d) %s before serving; stopping", w.index, w.proc.pid, how)
                    return 1
                w.restart_at = t + w.backoff.delay(t - w.started_at)
                log.warning("worker %d (pid %d) %s; starting it again in %.1f s", w.index, w.proc.pid, how,
                            w.restart_at - t)
                w.ready.close()
                w.proc, w.ready = None, None
            for w in self.workers:
                if w.proc is None and w.restart_at is not None and t >= w.restart_at and not self.signals:
                    self._start(w)
            if not announced:
                if all(w.serving for w in self.workers):
                    announced = True
                    log.info("serving on %s:%d with %d workers", self.host, self.port, len(self.workers))
                elif t > deadline:
                    log.error("the workers did not start within %.0f s; stopping", START_TIMEOUT_S)
                    return 1
        return 0

    def _stop(self) -> None:
        live = [w.proc for w in self.workers if w.proc is not None and w.proc.is_alive()]
        for p in live:
            p.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for p in live:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                log.warning("worker pid %d did not stop within %.0f s; killing it", p.pid, STOP_GRACE_S)
                p.kill()
                p.join()


def serve_workers(settings: Settings, workers: int, host: str, port: int) -> int:
    """``mpe serve --workers N`` (N > 1): supervise N workers on ``host:port``; the exit status."""
    return Supervisor(settings, workers, host, port).run()
