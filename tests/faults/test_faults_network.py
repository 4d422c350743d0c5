"""Network impairment between a bridge and the server (docs/guarantees.md "Faults"): a loopback
proxy (tests/support/netproxy.py) adds latency, jitter and bursts, and drops the first connection
mid-episode. In lockstep the recordings are those of an unimpaired run, sample for sample; the
dropped connection costs one attempt, which is retried on the next connection."""

from __future__ import annotations

import hashlib

from sqlalchemy import select

from server.core.status import AttemptStatus
from server.db import Attempt, Episode, EventRow, FrameRow
from server.engine.bundles import load_track
from server.engine.leasing import create_run
from tests.support.netproxy import Impairment, Proxy
from tests.support.world import Scripted, World, bridge, wait_run, world_on


def recordings(w: World, run_id: str) -> dict[str, tuple]:
    """Per scenario: what the completed attempt recorded, without the wall-clock times."""
    out = {}
    with w.db.session() as s:
        for ep in s.scalars(select(Episode).where(Episode.run_id == run_id)):
            att = ep.completed_attempt_id
            frames = s.execute(select(FrameRow.direction, FrameRow.seq, FrameRow.slot, FrameRow.silent)
                               .where(FrameRow.attempt_id == att).order_by(FrameRow.direction, FrameRow.seq)).all()
            events = s.execute(select(EventRow.t, EventRow.type, EventRow.data)
                               .where(EventRow.attempt_id == att).order_by(EventRow.id)).all()
            tracks = tuple(hashlib.sha256(load_track(w.db, att, t).tobytes()).hexdigest() for t in ("room", "assistant"))
            out[(ep.scenario_id, ep.condition)] = (tuple(map(tuple, frames)), tuple(map(repr, events)), tracks)
    return out


def attempts(w: World, run_id: str) -> list[tuple[AttemptStatus, str | None]]:
    with w.db.session() as s:
        return [(a.status, a.error_code) for a in s.scalars(
            select(Attempt).join(Episode, Episode.id == Attempt.episode_id).where(Episode.run_id == run_id)
            .order_by(Attempt.started_at))]


async def test_lockstep_through_an_impaired_network_records_the_same(tmp_path, mini_suite, speech_frames):
    async with world_on("sqlite", tmp_path, mini_suite) as w:
        plain = create_run(w.db, team="ops", model="scripted", suite_path=str(w.suite), clock="lockstep", limit=1)
        async with bridge(w, Scripted("scripted", speech_frames)) as task:
            await wait_run(w.db, plain, [task])

        impaired = create_run(w.db, team="ops", model="scripted", suite_path=str(w.suite), clock="lockstep", limit=1)
        imp = Impairment(latency_s=0.001, jitter_s=0.002, burst_every_s=0.5, burst_s=0.1,
                         drop_after_bytes=120_000, seed=7)
        async with Proxy(w.server.port, imp) as proxy:
            async with bridge(w, Scripted("scripted", speech_frames), server=f"ws://127.0.0.1:{proxy.port}") as task:
                p = await wait_run(w.db, impaired, [task])
        assert p.completed == 2 and proxy.drops == 1 and proxy.connections >= 2

        # the dropped connection failed one attempt (the bridge left mid-episode); its retry completed
        got = attempts(w, impaired)
        assert sum(st == AttemptStatus.failed for st, _ in got) == 1
        assert [code for st, code in got if st == AttemptStatus.failed] == ["disconnected"]
        assert sum(st == AttemptStatus.completed for st, _ in got) == 2
        a, b = recordings(w, plain), recordings(w, impaired)
        assert a.keys() == b.keys() and len(a) == 2
        for scenario in a:
            assert a[scenario] == b[scenario], scenario
        assert any(not silent for fr in a.values() for (d, _, _, silent) in fr[0] if d == "assistant")  # it talked
