"""The server in tests: ``mpe serve`` as a process of its own on a free port (:func:`start_server`),
bridges served until a run ends against an in-process server (:func:`serve`), and the check that an
attempt's recording is whole and replays as it ran (:func:`check_attempt_recording`)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

from sqlalchemy import func, select

from clients.sdk import BridgeClient, BridgeOptions
from server.core.detector import detect_segments
from server.core.timebase import Segment
from server.db import Attempt, EventRow, FrameRow, SegmentRow
from server.engine.bundles import load_track
from tests.support.world import FRAME, wait_run


async def serve(db, server, bridges, run_id, timeout=120, *, also=()):
    """Run bridges (bridge, token) until the run (and the runs in ``also``) finish; the
    progress of ``run_id``."""
    clients = [BridgeClient(b, BridgeOptions(server=server.url, token=tok, backoff_min_s=0.05)) for b, tok in bridges]
    tasks = [asyncio.create_task(c.run()) for c in clients]
    try:
        for other in also:
            await wait_run(db, other, tasks, timeout)
        return await wait_run(db, run_id, tasks, timeout)
    finally:
        for c in clients:
            c.stop()
        await asyncio.gather(*tasks, return_exceptions=True)


def check_attempt_recording(db, attempt_id):
    """Both tracks complete and equal length; frame log complete; replay = live segments."""
    with db.session() as s:
        att = s.get(Attempt, attempt_id)
        n_room = s.scalar(select(func.count()).select_from(FrameRow).where(
            FrameRow.attempt_id == attempt_id, FrameRow.direction == "room"))
        live = [Segment(g.start, g.end) for g in s.scalars(
            select(SegmentRow).where(SegmentRow.attempt_id == attempt_id).order_by(SegmentRow.start))]
        types = [e.type for e in s.scalars(select(EventRow).where(EventRow.attempt_id == attempt_id).order_by(EventRow.id))]
    room, assistant = load_track(db, attempt_id, "room"), load_track(db, attempt_id, "assistant")
    assert att.status == "completed"
    assert n_room == att.n_frames
    assert len(room) == len(assistant) == att.n_frames * FRAME
    assert att.end_sample <= len(room) < att.end_sample + FRAME
    assert types[0] == "preamble.start" and types[-1] == "episode.end"
    assert detect_segments(assistant) == live  # §5: replay gives exactly what the live run saw
    return room, assistant, live


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(settings, port, *args: str, stderr=subprocess.PIPE, env: dict[str, str] | None = None
                  ) -> subprocess.Popen:
    """``mpe serve`` (with ``args``, e.g. ``--workers 2``; ``env``: more of its settings) in a process
    of its own, once it accepts."""
    env = dict(os.environ, DATABASE_URL=settings.db_url, MPE_DATA_DIR=str(settings.data_dir), MPE_LEASE_S="2",
               MPE_POLL_S="0.05", MPE_FLUSH_S="0.2", **(env or {}))
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--port", str(port), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=stderr)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else proc.returncode
            time.sleep(0.1)
    raise AssertionError("server did not start")
