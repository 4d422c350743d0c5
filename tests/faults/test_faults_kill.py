"""The server killed (SIGKILL) at random moments of a run and started again, several times
(docs/guarantees.md "Faults"). Seeded, bounded: the kill moments are drawn from a fixed seed, so a
failure names the moments that caused it. Invariants: every episode completes exactly once; an
episode completed before a kill is byte-identical afterwards; no attempt is left running; every
attempt lost to a kill is abandoned with ``lease_expired``."""

from __future__ import annotations

import asyncio
import os
import random
import signal

import pytest
from sqlalchemy import select

from clients.sdk import BridgeClient, BridgeOptions
from server.auth import create_token
from server.core.status import AttemptStatus
from server.db import Attempt, Episode
from server.engine.leasing import create_run
from server.engine.progress import run_progress
from tests.support.faults import completed
from tests.support.servers import check_attempt_recording, free_port, start_server
from tests.support.world import Slow, wait_run

KILLS = 3
SEED = 20261201


@pytest.mark.parametrize("seed", [SEED])
async def test_server_killed_at_random_moments_loses_nothing(db, settings, mini_suite, seed):
    rng = random.Random(seed)
    moments = [rng.uniform(0.3, 2.0) for _ in range(KILLS)]  # seconds after each (re)start
    tok = create_token(db, "local")
    # a kill costs the attempt it meets: with more attempts than kills, every episode can complete
    run = create_run(db, team="local", model="slow", suite_path=str(mini_suite), clock="lockstep",
                     max_attempts=KILLS + 1)
    port = free_port()
    proc = start_server(settings, port)
    client = BridgeClient(Slow(0.003), BridgeOptions(server=f"ws://127.0.0.1:{port}", token=tok, backoff_min_s=0.1,
                                                backoff_max_s=0.3))
    task = asyncio.create_task(client.run())
    seen: dict[str, str] = {}
    try:
        for after in moments:
            await asyncio.sleep(after)
            if not (await asyncio.to_thread(run_progress, db, run)).active:
                break
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            now = await asyncio.to_thread(completed, db)
            assert {k: now[k] for k in seen} == seen, f"a completed episode changed (kill moments {moments})"
            seen = now
            proc = start_server(settings, port)
        p = await wait_run(db, run, [task], timeout=120)
    finally:
        client.stop()
        await asyncio.gather(task, return_exceptions=True)
        proc.terminate()
        proc.wait()
    assert p.completed == p.total == 4 and p.failed == 0, moments
    final = await asyncio.to_thread(completed, db)
    assert {k: final[k] for k in seen} == seen, moments
    with db.session() as s:
        atts = s.scalars(select(Attempt)).all()
        assert not [a for a in atts if a.status == AttemptStatus.running], moments
        for ep in s.scalars(select(Episode)):
            assert [a.status for a in atts if a.episode_id == ep.id].count(AttemptStatus.completed) == 1, moments
        lost = [a for a in atts if a.status != AttemptStatus.completed]
        assert lost, f"no kill met a running attempt (kill moments {moments}): nothing was tested"
        assert all(a.status == AttemptStatus.abandoned and a.error_code == "lease_expired" for a in lost), \
            [(a.status, a.error_code) for a in lost]
    for ep_id in final:
        with db.session() as s:
            att_id = s.get(Episode, ep_id).completed_attempt_id
        check_attempt_recording(db, att_id)
