"""Network impairment of a realtime run's assistant stream (``--impair``; server.core.impairment):
the pure model on literal inputs, its validation at every door (CLI spec, REST body, run creation),
and a realtime episode through it, whose recording shows the delay."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select

from server.api.schemas import RunCreate
from server.core.impairment import RTO_MS, ImpairedArrivals, Impairment
from server.db import Attempt, Episode, FrameRow, Run
from server.engine.bundles import episode_document
from server.engine.leasing import BadRequest, create_run
from tests.support.world import Scripted, bridge, wait_run, world_on


def test_specs_parse_with_units_and_bad_parts_are_named():
    assert Impairment.parse("latency=80ms,jitter=20ms,loss=1%") == Impairment(latency_ms=80, jitter_ms=20, loss=0.01)
    assert Impairment.parse(" latency=0.1s , loss=0.05, rto=300, seed=7 ") == \
        Impairment(latency_ms=100, loss=0.05, rto_ms=300, seed=7)
    assert not Impairment.parse("").active and not Impairment.parse("loss=0.1,rto=0").active
    for spec, says in [("latency", "'latency' is not one of"), ("delay=5ms", "'delay=5ms' is not one of"),
                       ("latency=fast", "not a number of milliseconds"), ("loss=x", "'loss=x': not a number ("),
                       ("latency=1ms,latency=2ms", "latency given twice"), ("loss=0.9", "loss: Input should be less"),
                       ("jitter=-1ms", "jitter: Input should be greater"), ("seed=1.5", "not a number")]:
        with pytest.raises(ValueError) as e:
            Impairment.parse(spec)
        assert says in str(e.value), (spec, str(e.value))


def test_arrivals_are_delayed_keep_their_order_and_repeat_per_episode():
    late = ImpairedArrivals(Impairment(latency_ms=100), "s1:explicit")
    assert [round(late(t), 6) for t in (0.0, 0.08, 0.16)] == [0.1, 0.18, 0.26]

    jittery = ImpairedArrivals(Impairment(latency_ms=10, jitter_ms=500, seed=3), "s1:explicit")
    times = [jittery(i * 0.08) for i in range(200)]
    assert times == sorted(times)  # a frame never overtakes the one ahead (TCP keeps order)
    assert all(t - i * 0.08 >= 0.01 - 1e-9 for i, t in enumerate(times))
    assert max(t - i * 0.08 for i, t in enumerate(times)) > 0.4  # the jitter is drawn over its range
    again = ImpairedArrivals(Impairment(latency_ms=10, jitter_ms=500, seed=3), "s1:explicit")
    assert [again(i * 0.08) for i in range(200)] == times  # the same episode: the same draws
    other = ImpairedArrivals(Impairment(latency_ms=10, jitter_ms=500, seed=3), "s2:explicit")
    assert [other(i * 0.08) for i in range(200)] != times

    lossy = ImpairedArrivals(Impairment(loss=0.2, seed=1), "s1:explicit")
    out = [lossy(i * 0.08) for i in range(500)]
    assert 60 < lossy.lost < 140  # about a fifth of 500
    delays = [t - i * 0.08 for i, t in enumerate(out)]
    assert max(delays) == pytest.approx(RTO_MS / 1000)  # a lost frame comes one timeout later...
    held = [d for d in delays if 0 < d < RTO_MS / 1000]
    assert held  # ...and frames behind it wait for it
    assert lossy.stats() == {"lost_frames": lossy.lost, "max_added_delay_ms": RTO_MS}


def test_the_rest_body_validates_impair():
    body = {"suite_id": "x", "model": "m", "clock": "realtime"}
    assert RunCreate(**body, impair={"latency_ms": 50}).impair == Impairment(latency_ms=50)
    for bad in ({"latency_ms": -1}, {"loss": 0.9}, {"latency": 50}):
        with pytest.raises(ValueError):
            RunCreate(**body, impair=bad)


async def test_a_realtime_run_through_an_impaired_network(tmp_path, mini_suite, speech_frames):
    """400 ms of one-way latency: every assistant frame is recorded arriving at least 400 ms after
    its room frame left and is placed five or more slots after its seq; the run and its bundle say
    what the network was; a lockstep run cannot be impaired."""
    async with world_on("sqlite", tmp_path, mini_suite) as w:
        with pytest.raises(BadRequest, match="realtime runs only"):
            create_run(w.db, team="ops", model="scripted", suite_path=str(w.suite), clock="lockstep",
                       impair=Impairment(latency_ms=400))
        imp = Impairment(latency_ms=400)
        run = create_run(w.db, team="ops", model="scripted", suite_path=str(w.suite), clock="realtime", limit=1,
                         conditions=["implicit"], impair=imp)
        async with bridge(w, Scripted("scripted", speech_frames)) as task:
            p = await wait_run(w.db, run, [task])
        assert p.completed == 1
        with w.db.session() as s:
            att = s.scalars(select(Attempt).join(Episode).where(Episode.run_id == run)).one()
            sent = dict(s.execute(select(FrameRow.seq, FrameRow.sent_us).where(
                FrameRow.attempt_id == att.id, FrameRow.direction == "room")).all())
            got = s.execute(select(FrameRow.seq, FrameRow.slot, FrameRow.arrived_us).where(
                FrameRow.attempt_id == att.id, FrameRow.direction == "assistant")).all()
            assert s.get(Run, run).impair == imp.model_dump()
            ep_id = att.episode_id
        assert len(got) > 20  # the bridge talked
        assert all(arrived - sent[seq] >= 400_000 for seq, _, arrived in got)
        assert all(slot - seq >= 5 for seq, slot, _ in got)
        assert att.settings["impair"] == imp.model_dump()
        assert att.stats["server"]["impairment"] == {"lost_frames": 0, "max_added_delay_ms": 400.0}
        assert episode_document(w.db, ep_id)["settings"]["impair"] == imp.model_dump()
        async with httpx.AsyncClient(base_url=w.http, headers={"Authorization": f"Bearer {w.tokens['admin']}"}) as c:
            r = await c.get(f"/v1/runs/{run}")
            assert r.json()["impair"]["latency_ms"] == 400
            r = await c.post("/v1/runs", json={"suite": "mini", "model": "m", "clock": "lockstep",
                                               "impair": {"latency_ms": 10}})
            assert r.status_code == 400 and "realtime runs only" in r.json()["error"]["message"]


def test_the_cli_names_a_bad_impair_spec(tmp_path, mini_suite, monkeypatch):
    from typer.testing import CliRunner

    from server.cli import app
    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    r = CliRunner().invoke(app, ["run", "create", "--model", "m", "--suite", str(mini_suite), "--clock", "realtime",
                                 "--impair", "latency=fast"])
    said = " ".join(r.output.replace("│", " ").split())  # the error box, unwrapped
    assert r.exit_code == 2 and "'latency=fast': not a number of milliseconds" in said
    r = CliRunner().invoke(app, ["run", "create", "--model", "m", "--suite", str(mini_suite), "--clock", "lockstep",
                                 "--impair", "latency=20ms"])
    assert r.exit_code != 0 and "realtime runs only" in (r.output + str(r.exception))
