"""§8: a run is pinned to its suite's content. A suite changed on disk under a queued run ends
the run (failed, with the reason) instead of playing other audio than the run was created with;
the bridge is not blamed and stays connected."""

from __future__ import annotations

import asyncio
import json
import shutil
import time

import numpy as np
import pytest
import soundfile as sf
from sqlalchemy import select

from clients.sdk import BridgeClient, BridgeOptions
from server.app import BackgroundServer
from server.auth import create_token
from server.cli.bridges import create_bridge
from server.db import Attempt, Episode, Run
from server.engine.leasing import create_run


def _rewrite_clip(suite, rel):
    """Same length, other audio (half volume): only the clip's bytes change."""
    pcm, rate = sf.read(str(suite / rel), dtype="int16")
    sf.write(str(suite / rel), (pcm // 2).astype(np.int16), rate, subtype="PCM_16")


def _rewrite_manifest(suite):
    lines = (suite / "scenarios.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["turns"][0]["text"] += " Really."
    lines[0] = json.dumps(first, sort_keys=True)
    (suite / "scenarios.jsonl").write_text("\n".join(lines) + "\n")


async def _until_ended(db, run_id, client_task, timeout=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        with db.session() as s:
            run = s.get(Run, run_id)
            if run.status not in ("queued", "running"):
                return run
        assert not client_task.done(), "the bridge must not be disconnected for a suite problem"
        await asyncio.sleep(0.05)
    raise AssertionError("the run did not end")


@pytest.mark.parametrize("change", ["clip", "manifest"])
async def test_changed_suite_fails_the_run_not_the_bridge(db, settings, mini_suite, tmp_path, change):
    suite = tmp_path / "suite"
    shutil.copytree(mini_suite, suite)
    tok = create_token(db, "local")
    run_id = create_run(db, team="local", model="silent", suite_path=str(suite), clock="lockstep", limit=1)
    with db.session() as s:
        first = s.scalars(select(Episode).where(Episode.run_id == run_id).order_by(Episode.lease_rank)).first()  # leased first
        assert first.audio_hash  # pinned when the run was created
        rel = first.scenario["turns"][1]["clip"]
    if change == "clip":
        _rewrite_clip(suite, rel)
    else:
        _rewrite_manifest(suite)

    async with BackgroundServer(settings) as server:
        client = BridgeClient(create_bridge("silent"), BridgeOptions(server=server.url, token=tok, backoff_min_s=0.05))
        task = asyncio.create_task(client.run())
        try:
            run = await _until_ended(db, run_id, task)
        finally:
            client.stop()
            await asyncio.gather(task, return_exceptions=True)

    assert run.status == "failed" and "changed" in run.error and run.finished_at is not None
    with db.session() as s:
        eps = s.scalars(select(Episode).where(Episode.run_id == run_id)).all()
        atts = s.scalars(select(Attempt).join(Episode).where(Episode.run_id == run_id)).all()
    assert {e.status for e in eps} == {"cancelled"}
    assert len(atts) == 1 and atts[0].status == "failed" and atts[0].error_code == "suite_changed"
    assert atts[0].n_frames == 0  # nothing was played


def test_unchanged_suite_is_not_refused(db, mini_suite, tmp_path):
    """The pin is exact: re-reading an untouched suite gives the hashes the run recorded."""
    from server.engine.clips import episode_audio, load_suite

    suite = tmp_path / "suite"
    shutil.copytree(mini_suite, suite)
    run_id = create_run(db, team="local", model="silent", suite_path=str(suite), clock="lockstep")
    loaded = load_suite(suite)
    with db.session() as s:
        eps = s.scalars(select(Episode).where(Episode.run_id == run_id)).all()
    assert eps and all(episode_audio(loaded, loaded.benchmark.snapshot(e.scenario, e.id))[1] == e.audio_hash for e in eps)
    assert len({e.audio_hash for e in eps}) == len(eps)  # each version plays its own clips
