"""REST API over real HTTP against SQLite and PostgreSQL: auth on every route, team
isolation (others' ids give the same 404 as missing ones), pagination, filters, bad input,
audio with range requests and signed URLs, tokens."""

from __future__ import annotations

import asyncio
import io
import time
from datetime import datetime, timedelta

import httpx
import numpy as np
import pytest
import pytest_asyncio
import soundfile as sf
from sqlalchemy import func, select

from server.api.signed import current_secret, rotate_secret, sign
from server.benchmarks.mpe.report import room_late_lines
from server.db import Attempt, Episode, EventRow, SegmentRow, Token
from server.db import Suite as SuiteRow
from server.engine.bundles import load_track
from server.engine.leasing import create_run, finish_attempt, lease_episode
from server.engine.progress import room_late_episodes, run_progress
from tests.support.world import Scripted, bridge, wait_run, world_on

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["sqlite", "postgres"])
async def world(request, tmp_path_factory, mini_suite, speech_frames):
    """alpha: a finished run (pair p1, both conditions, played by the scripted bridge) and a
    queued one; beta: a queued run; ops: an admin."""
    async with world_on(request.param, tmp_path_factory.mktemp("api"), mini_suite) as w:
        w.runs["done"] = create_run(w.db, team="alpha", model="scripted", suite_path=str(w.suite),
                                    clock="lockstep", limit=1)
        w.runs["queued"] = create_run(w.db, team="alpha", model="nobody", suite_path=str(w.suite),
                                      clock="realtime", conditions=["explicit"])
        w.runs["beta"] = create_run(w.db, team="beta", model="nobody", suite_path=str(w.suite), clock="lockstep")
        async with bridge(w, Scripted("scripted", speech_frames)) as task:
            await wait_run(w.db, w.runs["done"], [task])
        with w.db.session() as s:
            w.eps = {e.condition: e for e in s.scalars(select(Episode).where(Episode.run_id == w.runs["done"]))}
            w.beta_ep = s.scalars(select(Episode).where(Episode.run_id == w.runs["beta"])).first()
            w.queued_ep = s.scalars(select(Episode).where(Episode.run_id == w.runs["queued"])).first()
            w.suites = {r.team: r.id for r in s.scalars(select(SuiteRow))}
        yield w


def client(w, who: str | None = "alpha") -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {w.tokens[who]}"} if who else {}
    return httpx.AsyncClient(base_url=w.http, headers=headers, timeout=30)


def err(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body
    return body["error"]


# --- auth -------------------------------------------------------------------------------------


async def test_every_route_needs_a_valid_token(world):
    async with client(world, None) as c:
        schema = (await c.get("/openapi.json")).json()
        ids = {"run_id": world.runs["done"], "episode_id": world.eps["explicit"].id, "suite_id": world.suites["alpha"],
               "token_id": "1", "track": "mix"}
        assert "team token" in schema["components"]["securitySchemes"]
        checked = 0
        for path, ops in schema["paths"].items():
            url = path.format(**ids)
            for method in ops:
                for headers in ({}, {"Authorization": "Bearer mpe_wrong"}, {"Authorization": "Basic abc"}):
                    r = await c.request(method, url, headers=headers, json={} if method in ("post",) else None)
                    e = err(r, 401, "unauthorized")
                    assert r.headers["www-authenticate"].startswith("Bearer")
                    assert "Traceback" not in e["message"]
                checked += 1
        assert checked >= 16  # runs, episodes, audio, suites, tokens, metrics, me
        # a token without the read scope is refused (403) by every route it authenticates: the schema says so
        unlisted = [(m, path) for path, ops in schema["paths"].items() for m, op in ops.items()
                    if "403" not in op["responses"]]
        assert not unlisted and "403" in schema["paths"]["/v1/checks"]["post"]["responses"], unlisted
    # a revoked token stops working at once
    async with client(world, "admin") as adm:
        tok = (await adm.post("/v1/tokens", json={"team": "alpha", "label": "temp"})).json()
        async with httpx.AsyncClient(base_url=world.http, headers={"Authorization": f"Bearer {tok['token']}"}) as c:
            assert (await c.get("/v1/me")).json() == {"team": "alpha", "admin": False, "scopes": ["bridge", "read"]}
            assert (await adm.delete(f"/v1/tokens/{tok['id']}")).json()["revoked"] is True
            err(await c.get("/v1/me"), 401, "unauthorized")


async def test_errors_are_json_with_stable_codes(world):
    async with client(world) as c:
        err(await c.get("/v1/nothing-here"), 404, "not_found")
        err(await c.delete("/v1/runs"), 405, "method_not_allowed")
        err(await c.post("/v1/runs", content=b"{not json", headers={"content-type": "application/json"}),
            422, "invalid_request")
        e = err(await c.post("/v1/runs", content=b"x" * 70_000, headers={"content-type": "application/json"}),
                413, "too_large")
        assert "65536" in e["message"]

        async def chunks():
            for _ in range(20):
                yield b"y" * 8192

        err(await c.post("/v1/runs", content=chunks(), headers={"content-type": "application/json"}), 413, "too_large")
        r = await c.get("/v1/runs")
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"


# --- runs -------------------------------------------------------------------------------------


async def test_runs_are_isolated_by_team_and_paged(world):
    async with client(world, "alpha") as a, client(world, "beta") as b, client(world, "admin") as adm:
        mine = (await a.get("/v1/runs")).json()
        assert {r["id"] for r in mine["items"]} >= {world.runs["done"], world.runs["queued"]}
        assert all(r["team"] == "alpha" for r in mine["items"]) and mine["total"] == len(mine["items"])
        theirs = (await b.get("/v1/runs")).json()
        assert [r["id"] for r in theirs["items"]] == [world.runs["beta"]]
        every = (await adm.get("/v1/runs", params={"limit": 200})).json()
        assert {world.runs["done"], world.runs["beta"]} <= {r["id"] for r in every["items"]}
        assert [r["id"] for r in (await adm.get("/v1/runs", params={"team": "beta"})).json()["items"]] == [world.runs["beta"]]
        # a team filter from a non-admin cannot widen the view
        assert {r["team"] for r in (await a.get("/v1/runs", params={"team": "beta"})).json()["items"]} == {"alpha"}
        # pagination: newest first, pages are disjoint and cover everything
        p1 = (await a.get("/v1/runs", params={"limit": 1})).json()
        p2 = (await a.get("/v1/runs", params={"limit": 1, "offset": 1})).json()
        assert p1["total"] == p2["total"] == mine["total"] and p1["limit"] == 1 and p2["offset"] == 1
        assert p1["items"][0]["id"] != p2["items"][0]["id"]
        assert p1["items"][0]["created_at"] >= p2["items"][0]["created_at"]
        assert (await a.get("/v1/runs", params={"offset": 10_000})).json()["items"] == []
        for bad in ({"limit": 0}, {"limit": 201}, {"offset": -1}, {"limit": "x"}, {"status": "exploded"}):
            err(await a.get("/v1/runs", params=bad), 422, "invalid_request")
        done = (await a.get("/v1/runs", params={"status": "finished"})).json()["items"]
        assert [r["id"] for r in done] == [world.runs["done"]]
        assert [r["id"] for r in (await a.get("/v1/runs", params={"model": "nobody"})).json()["items"]] == [world.runs["queued"]]


async def test_run_detail_progress_and_404s(world):
    async with client(world, "alpha") as a, client(world, "beta") as b:
        r = (await a.get(f"/v1/runs/{world.runs['done']}")).json()
        assert r["status"] == "finished" and r["model"] == "scripted" and r["suite"]["name"] == "mini"
        assert r["progress"] == {"total": 2, "queued": 0, "running": 0, "completed": 2, "failed": 0, "cancelled": 0,
                                 "failed_attempts": 0}
        assert r["scored"] is False and r["live_episodes"] == []
        assert r["label"] == f"scripted · lockstep · mini v{r['suite']['version']} · {r['id'][:8]}"
        q = (await a.get(f"/v1/runs/{world.runs['queued']}")).json()
        assert q["label"].startswith("nobody · realtime · mini v") and q["label"] != r["label"]
        with world.db.session() as s:
            n = s.scalar(select(func.count()).select_from(Episode).where(Episode.run_id == world.runs["queued"]))
        assert q["progress"]["queued"] == q["progress"]["total"] == n == 2
        # another team's run, a missing one and a malformed one look exactly the same
        bodies = [err(await b.get(f"/v1/runs/{rid}"), 404, "not_found")
                  for rid in (world.runs["done"], "0123456789abcdef", "a.b;c", "x" * 300)]
        assert all(e == bodies[0] for e in bodies)
        for path in ("episodes", "metrics"):
            assert err(await b.get(f"/v1/runs/{world.runs['done']}/{path}"), 404, "not_found") == bodies[0]
        assert err(await b.post(f"/v1/runs/{world.runs['done']}/cancel"), 404, "not_found") == bodies[0]
        m = (await a.get(f"/v1/runs/{world.runs['done']}/metrics")).json()
        assert m == {"run_id": world.runs["done"], "scored": False, "results": None, "notes": {}}


async def test_create_run_checks_every_path(world, tmp_path):
    async with client(world, "alpha") as a, client(world, "beta") as b, client(world, "admin") as adm:
        r = await a.post("/v1/runs", json={"model": "m1", "suite_id": world.suites["alpha"], "clock": "realtime",
                                           "conditions": ["implicit"], "limit": 1, "max_attempts": 2})
        assert r.status_code == 201, r.text
        run = r.json()
        assert run["team"] == "alpha" and run["clock"] == "realtime" and run["conditions"] == ["implicit"]
        assert run["progress"]["total"] == 1 and run["max_attempts"] == 2 and run["status"] == "queued"
        assert run["text_prompt"] is False  # §4: audio only unless the run asks for a text prompt
        r = await a.post("/v1/runs", json={"model": "m2", "suite": world.suite.name, "text_prompt": True})
        assert r.status_code == 201 and r.json()["progress"]["total"] == 4  # (a suite relative to the suites root)
        assert r.json()["text_prompt"] is True
        available = (await a.get("/v1/suites/available")).json()
        assert {"path": world.suite.name, "benchmark": "duplex-mpe", "run_conditions": ["explicit", "implicit"],
                "name": "mini", "version": "1", "n_scenarios": 4} in available
        # nothing outside the suites root is reachable, and no server path leaks into errors
        outside = tmp_path / "outside"
        outside.mkdir()
        (world.suite.parent / "escape").symlink_to(outside, target_is_directory=True)
        (outside / "suite.json").write_text("{}")
        for bad in ("/etc", "../" + world.suite.name, f"{world.suite.name}/../..", "escape", "nope", "a\\b", ".",
                    f"{world.suite.name}/clips"):
            e = err(await a.post("/v1/runs", json={"model": "m", "suite": bad}), 400, "bad_request")
            assert str(world.suite.parent) not in e["message"] and str(tmp_path) not in e["message"]
        broken = world.suite.parent / "broken"
        broken.mkdir()
        (broken / "suite.json").write_text("{\"name\": 1}")
        e = err(await a.post("/v1/runs", json={"model": "m", "suite": "broken"}), 400, "bad_request")
        assert "suite 'broken'" in e["message"] and str(world.suite.parent) not in e["message"]
        for body in ({"model": "m"}, {"model": "m", "suite": "x", "suite_id": "y"}, {"model": "", "suite": "x"},
                     {"model": "bad name!", "suite": "x"}, {"model": "m", "suite": "x", "clock": "slow"},
                     {"model": "m", "suite": "x", "conditions": []}, {"model": "m", "suite": "x", "conditions": ["both"]},
                     {"model": "m", "suite": "x", "limit": 0}, {"model": "m", "suite": "x", "max_inflight": 65},
                     {"model": "m", "suite": "x", "surprise": 1}, []):
            err(await a.post("/v1/runs", json=body), 422, "invalid_request")
        # another team's suite id is as unknown as a missing one
        e1 = err(await b.post("/v1/runs", json={"model": "m", "suite_id": world.suites["alpha"]}), 404, "not_found")
        e2 = err(await b.post("/v1/runs", json={"model": "m", "suite_id": "ffffffffffffffff"}), 404, "not_found")
        assert e1 == e2
        err(await a.post("/v1/runs", json={"model": "m", "suite_id": world.suites["alpha"], "team": "beta"}), 403, "forbidden")
        r = await adm.post("/v1/runs", json={"model": "m3", "suite_id": world.suites["alpha"], "team": "beta", "limit": 1})
        assert r.status_code == 201 and r.json()["team"] == "beta"
        assert r.json()["id"] in {x["id"] for x in (await b.get("/v1/runs")).json()["items"]}


async def test_cancel(world):
    async with client(world, "alpha") as a:
        run = (await a.post("/v1/runs", json={"model": "c", "suite_id": world.suites["alpha"], "limit": 1})).json()
        r = (await a.post(f"/v1/runs/{run['id']}/cancel")).json()
        assert r["status"] == "cancelled" and r["progress"]["cancelled"] == r["progress"]["total"] == 2
        assert (await a.post(f"/v1/runs/{run['id']}/cancel")).status_code == 200  # idempotent
        e = err(await a.post(f"/v1/runs/{world.runs['done']}/cancel"), 409, "conflict")
        assert "finished" in e["message"]


async def test_unstarted_attempts_are_not_failures_for_the_cli_or_the_api(world):
    """A bridge that leaves before answering costs no attempt and is no failure: `mpe run status`
    (run_progress) and GET /v1/runs agree on every count."""
    run = create_run(world.db, team="alpha", model="leaver", suite_path=str(world.suite), clock="lockstep", limit=1,
                     conditions=["explicit"])
    for answered in (False, True):  # one unstarted attempt, then one that failed after answering
        lease = lease_episode(world.db, team="alpha", admin=False, model="leaver", clocks=["lockstep"], owner="t",
                              bridge_id="b", bridge_rate=24000, model_revision="", lease_s=20.0)
        finish_attempt(world.db, lease, ok=False, error_code="disconnected", answered=answered)
    cli = run_progress(world.db, run)
    assert (cli.total, cli.queued, cli.failed, cli.failed_attempts) == (1, 1, 0, 1)
    async with client(world, "alpha") as a:
        one = (await a.get(f"/v1/runs/{run}")).json()
        listed = next(r for r in (await a.get("/v1/runs", params={"model": "leaver"})).json()["items"])
    expected = {k: v for k, v in cli.to_json().items() if k in one["progress"]}
    assert one["progress"] == listed["progress"] == expected and len(expected) == 7
    assert one["status"] == listed["status"] == cli.status == "running"


async def test_run_defaults_come_from_the_settings(world):
    s = world.settings
    saved = s.max_attempts, s.max_inflight
    s.max_attempts, s.max_inflight = 5, 4
    try:
        async with client(world, "alpha") as a:
            body = {"model": "d", "suite_id": world.suites["alpha"], "limit": 1}
            r = (await a.post("/v1/runs", json=body)).json()
            assert (r["max_attempts"], r["max_inflight"]) == (5, 4)
            r2 = (await a.post("/v1/runs", json={**body, "max_attempts": 2, "max_inflight": 1})).json()
            assert (r2["max_attempts"], r2["max_inflight"]) == (2, 1)
            for rid in (r["id"], r2["id"]):
                await a.post(f"/v1/runs/{rid}/cancel")
    finally:
        s.max_attempts, s.max_inflight = saved


# --- episodes ---------------------------------------------------------------------------------


async def test_episode_list_filters_and_outcomes(world):
    url = f"/v1/runs/{world.runs['done']}/episodes"
    async with client(world, "alpha") as team:  # alpha's queued run plays the suite: no pairing, list in id order
        seen = (await team.get(url)).json()["items"]
        assert [e["id"] for e in seen] == sorted(e["id"] for e in seen)
        assert all(e["scenario_id"] is None and e["pair_id"] is None and e["ordinal"] is None for e in seen)
    async with client(world, "admin") as a:
        page = (await a.get(url)).json()
        assert page["total"] == 2 and [e["condition"] for e in page["items"]] == ["explicit", "implicit"]
        by = {e["condition"]: e for e in page["items"]}
        ex, im = by["explicit"], by["implicit"]
        assert ex["status"] == im["status"] == "completed" and ex["attempts"] == 1 and ex["live"] is False
        assert ex["duration_s"] > 5
        # explicit: the bridge stayed silent -> no response, every silence window clean
        assert ex["outcome"]["source"] == "live" and ex["outcome"]["t"] == "none"
        assert ex["outcome"]["failures"] == ["no_response"] and ex["outcome"]["silence"] == [3, 3]
        # implicit: it spoke inside the first window -> speech in a silence window
        assert "speech_in_silence" in im["outcome"]["failures"] and im["outcome"]["silence"][0] < 3
        only = lambda **q: a.get(url, params=q)  # noqa: E731
        assert [e["id"] for e in (await only(condition="implicit")).json()["items"]] == [im["id"]]
        assert [e["id"] for e in (await only(outcome="speech_in_silence")).json()["items"]] == [im["id"]]
        assert {e["id"] for e in (await only(outcome="no_response")).json()["items"]} <= {ex["id"], im["id"]}
        assert (await only(outcome="ok")).json()["total"] == 0
        assert (await only(outcome="unfinished")).json()["total"] == 0
        assert (await only(status="queued")).json()["total"] == 0
        p = (await only(limit=1, offset=1)).json()
        assert p["total"] == 2 and [e["id"] for e in p["items"]] == [im["id"]]
        p = (await only(outcome="no_response", limit=1)).json()
        assert len(p["items"]) == 1 and p["total"] >= 1
        err(await only(outcome="great"), 400, "bad_request")
        err(await only(condition="both"), 422, "invalid_request")
        queued = (await a.get(f"/v1/runs/{world.runs['queued']}/episodes", params={"outcome": "unfinished"})).json()
        assert queued["total"] == 2 and all(e["outcome"] is None for e in queued["items"])


async def test_episode_detail(world):
    ep = world.eps["implicit"]
    async with client(world, "alpha") as a, client(world, "beta") as b, client(world, "admin") as adm:
        # alpha's queued run plays the same suite: its team sees no script nor pairing (api.md)
        team_view = (await a.get(f"/v1/episodes/{ep.id}")).json()
        assert team_view["script"] == "withheld" and team_view["turns"] == [] and "scenario_id" not in team_view
        d = (await adm.get(f"/v1/episodes/{ep.id}")).json()
        with world.db.session() as s:
            events = s.scalars(select(EventRow).where(EventRow.attempt_id == ep.completed_attempt_id)
                               .order_by(EventRow.id)).all()
            segs = s.scalars(select(SegmentRow).where(SegmentRow.attempt_id == ep.completed_attempt_id)
                             .order_by(SegmentRow.start)).all()
            att = s.get(Attempt, ep.completed_attempt_id)
        assert d["episode_id"] == ep.id and d["status"] == "completed" and d["condition"] == "implicit"
        assert team_view["segments"] == d["segments"] and team_view["attempts"] == d["attempts"]
        assert [(e["t"], e["type"], e["data"]) for e in d["events"]] == [(e.t, e.type, e.data) for e in events]
        assert [(g["start"], g["end"]) for g in d["segments"]] == [(g.start, g.end) for g in segs] and segs
        assert [t["text"] for t in d["turns"]] == [t["text"] for t in ep.scenario["turns"]]
        assert d["duration_s"] == round(att.end_sample / 24000, 3) and d["attempt_id"] == att.id
        assert [x["id"] for x in d["attempts"]] == [att.id] and d["attempts"][0]["status"] == "completed"
        assert d["scores"] is None and d["outcome"]["source"] == "live" and "team" not in d
        assert (await a.get(f"/v1/episodes/{ep.id}", params={"attempt": att.number})).json()["attempt_id"] == att.id
        err(await a.get(f"/v1/episodes/{ep.id}", params={"attempt": 999}), 404, "not_found")
        err(await a.get(f"/v1/episodes/{ep.id}", params={"attempt": 0}), 422, "invalid_request")
        assert (await adm.get(f"/v1/episodes/{ep.id}")).status_code == 200
        q = (await a.get(f"/v1/episodes/{world.queued_ep.id}")).json()
        assert q["status"] == "queued" and q["events"] == [] and q["attempts"] == [] and q["outcome"] is None
        e1 = err(await b.get(f"/v1/episodes/{ep.id}"), 404, "not_found")
        e2 = err(await b.get("/v1/episodes/doesnotexist"), 404, "not_found")
        assert e1 == e2
        err(await a.get(f"/v1/episodes/{world.beta_ep.id}"), 404, "not_found")


async def test_episode_timeline_is_the_rules_windows(world):
    """The episode's windows come from the server, computed by the benchmark's rules: the N1-N3
    windows, the N4 window (to the end of N4Q + 3 s, deadline t_R + 2 s) and the wait after T."""
    from server.benchmarks.mpe.rules import N4_GAP, episode_windows, parse_timeline
    from server.core.events import Event

    ep = world.eps["implicit"]
    async with client(world, "admin") as a:  # alpha's queued run of the suite withholds its team's view
        d = (await a.get(f"/v1/episodes/{ep.id}")).json()
    events = [Event.from_json(e) for e in d["events"]]
    w = episode_windows(parse_timeline(events, d["end_sample"]), [(g["start"], g["end"]) for g in d["segments"]])
    wins = d["timeline"]["windows"]
    assert [(x["idx"], x["start"], x["end"]) for x in wins if x["kind"] == "silence"] == \
        [(s.turn_idx, s.start, s.end) for s in w.silence] and w.silence
    assert [(x["idx"], x["start"], x["end"], x["deadline"]) for x in wins if x["kind"] == "n4"] == \
        [(n.q_idx, n.q_start, n.q_end + N4_GAP, n.deadline) for n in w.n4]
    [t] = [x for x in wins if x["kind"] == "t"]
    assert (t["idx"], t["start"], t["end"]) == (w.t.turn_idx, w.t.e_t, w.t.wait_end)
    assert not any(x["open"] or x["verdict"]["scored"] for x in wins)


async def test_episode_pages_data_comes_from_the_benchmark(world):
    """The episode's timeline carries its room blocks and script rows (one per turn, in the
    benchmark's script columns); the run's episode list carries each outcome's cells."""
    ep = world.eps["implicit"]
    async with client(world, "admin") as a:  # alpha's queued run of the suite withholds its team's view
        d = (await a.get(f"/v1/episodes/{ep.id}")).json()
        page = (await a.get(f"/v1/runs/{world.runs['done']}/episodes")).json()
    turns = ep.scenario["turns"]
    assert [r["key"] for r in d["timeline"]["rows"]] == [f"turn-{t['idx']}" for t in turns]
    assert [r["cells"][2]["text"] for r in d["timeline"]["rows"]] == [t["text"] for t in turns]
    clips = [b for b in d["timeline"]["blocks"] if b["key"].startswith("clip-")]
    assert [(b["idx"], b["kind"]) for b in clips] == [(t["idx"], t["label"]) for t in turns]
    assert any(b["kind"] == "pre" for b in d["timeline"]["blocks"])
    for item in page["items"]:
        assert item["outcome"] is not None and len(item["cells"]) == 3
        assert item["cells"][1]["text"] == "{}/{}".format(*item["outcome"]["silence"])


async def test_frame_log(world):
    ep = world.eps["implicit"]
    with world.db.session() as s:
        att = s.get(Attempt, ep.completed_attempt_id)
    assistant = load_track(world.db, att.id, "assistant").reshape(-1, 1920)
    url = f"/v1/episodes/{ep.id}/frames"
    async with client(world, "alpha") as a, client(world, "beta") as b:
        d = (await a.get(url, params={"limit": 5000})).json()
        assert d["attempt"] == att.number and d["attempt_id"] == att.id and d["total"] == len(d["items"])
        room = [f for f in d["items"] if f["direction"] == "room"]
        asst = [f for f in d["items"] if f["direction"] == "assistant"]
        # one row per frame: every room frame sent, and (lockstep) one answer per room frame in its own slot
        assert [f["seq"] for f in room] == [f["slot"] for f in room] == list(range(att.n_frames))
        assert [f["seq"] for f in asst] == [f["slot"] for f in asst] == list(range(att.n_frames))
        assert all(f["sent_us"] is not None and f["arrived_us"] is None for f in room)
        assert all(f["arrived_us"] is not None and f["sent_us"] is None for f in asst)
        # the scripted bridge speaks from frame 40 on and sends silence otherwise
        assert [f["silent"] for f in asst] == [not frame.any() for frame in assistant[:att.n_frames]]
        assert not asst[40]["silent"] and asst[39]["silent"]

        page = (await a.get(url, params={"direction": "assistant", "limit": 10, "offset": 35})).json()
        assert page["total"] == len(asst) and [f["seq"] for f in page["items"]] == list(range(35, 45))
        r = await a.get(url, params={"format": "csv", "direction": "assistant"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
        lines = r.text.splitlines()
        assert lines[0] == "direction,seq,slot,sent_us,arrived_us,silent" and len(lines) == len(asst) + 1
        assert lines[41] == f"assistant,40,40,,{asst[40]['arrived_us']},0"
        err(await a.get(url, params={"attempt": 999}), 404, "not_found")
        err(await a.get(url, params={"limit": 5001}), 422, "invalid_request")
        err(await a.get(url, params={"format": "xml"}), 422, "invalid_request")
        q = (await a.get(f"/v1/episodes/{world.queued_ep.id}/frames")).json()
        assert q["items"] == [] and q["total"] == 0 and q["attempt"] is None
        assert err(await b.get(url), 404, "not_found") == err(await b.get("/v1/episodes/nope/frames"), 404, "not_found")


# --- audio ------------------------------------------------------------------------------------


async def test_audio_tracks_and_ranges(world):
    ep = world.eps["implicit"]
    room, assistant = load_track(world.db, ep.completed_attempt_id, "room"), load_track(world.db, ep.completed_attempt_id, "assistant")
    base = f"/v1/episodes/{ep.id}/audio"
    async with client(world, "alpha") as a:
        full = {}
        for track, want in (("room", room), ("assistant", assistant)):
            r = await a.get(f"{base}/{track}")
            assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
            assert r.headers["accept-ranges"] == "bytes" and int(r.headers["content-length"]) == len(r.content)
            pcm, rate = sf.read(io.BytesIO(r.content), dtype="int16")
            assert rate == 24000 and np.array_equal(pcm, want)
            full[track] = r.content
        mix = await a.get(f"{base}/mix")
        stereo, _ = sf.read(io.BytesIO(mix.content), dtype="int16")
        assert stereo.shape == (len(room), 2) and np.array_equal(stereo[:, 0], room) and np.array_equal(stereo[:, 1], assistant)
        body, size = mix.content, len(mix.content)
        cases = {"bytes=0-99": (0, 99), "bytes=100-": (100, size - 1), "bytes=-50": (size - 50, size - 1),
                 f"bytes=10-{size + 500}": (10, size - 1), f"bytes={size - 1}-{size - 1}": (size - 1, size - 1)}
        for header, (lo, hi) in cases.items():
            r = await a.get(f"{base}/mix", headers={"Range": header})
            assert r.status_code == 206, header
            assert r.headers["content-range"] == f"bytes {lo}-{hi}/{size}" and r.content == body[lo:hi + 1]
        for header in ("bytes=0-1,5-9", "items=0-5", "bytes=9-2", "bytes=abc", "bytes=-"):
            r = await a.get(f"{base}/mix", headers={"Range": header})
            assert r.status_code == 200 and r.content == body, header
        r = await a.get(f"{base}/mix", headers={"Range": f"bytes={size}-"})
        err(r, 416, "range_not_satisfiable")
        assert r.headers["content-range"] == f"bytes */{size}"
        err(await a.get(f"{base}/mix", headers={"Range": "bytes=-0"}), 416, "range_not_satisfiable")
        etag = mix.headers["etag"]
        assert (await a.get(f"{base}/mix", headers={"Range": "bytes=0-9", "If-Range": etag})).status_code == 206
        assert (await a.get(f"{base}/mix", headers={"Range": "bytes=0-9", "If-Range": '"old"'})).status_code == 200
        h = await a.head(f"{base}/mix", headers={"Range": "bytes=0-99"})
        assert h.status_code == 206 and h.headers["content-length"] == "100" and h.content == b""
        lv = (await a.get(f"/v1/episodes/{ep.id}/levels")).json()
        assert len(lv["room"]) == len(room) // 1920 == len(lv["assistant"])
        assert max(lv["assistant"]) > 0 and min(lv["room"]) == 0  # it spoke; the room has silent gaps
        err(await a.get(f"{base}/stereo"), 422, "invalid_request")
        err(await a.get(f"/v1/episodes/{world.queued_ep.id}/audio/mix"), 404, "not_found")
    async with client(world, "beta") as b:
        e1 = err(await b.get(f"{base}/mix"), 404, "not_found")
        assert e1 == err(await b.get("/v1/episodes/nope/audio/mix"), 404, "not_found")
        err(await b.get(f"/v1/episodes/{ep.id}/levels"), 404, "not_found")
        err(await b.get(f"/v1/episodes/{ep.id}/audio-url"), 404, "not_found")


async def test_signed_audio_urls(world):
    ep = world.eps["explicit"]
    async with client(world, "alpha") as a, client(world, None) as anon:
        signed = (await a.get(f"/v1/episodes/{ep.id}/audio-url", params={"track": "room"})).json()
        assert signed["expires_at"] > time.time() + 3000 and signed["url"].startswith(f"/v1/episodes/{ep.id}/audio/room?")
        r = await anon.get(signed["url"], headers={"Range": "bytes=0-43"})
        assert r.status_code == 206 and r.content[:4] == b"RIFF"
        q = dict(httpx.URL(signed["url"]).params)
        bad = [dict(q, sig="0" * 40), dict(q, exp=str(int(q["exp"]) + 1)), {k: v for k, v in q.items() if k != "sig"}]
        for params in bad:
            err(await anon.get(f"/v1/episodes/{ep.id}/audio/room", params=params), 401, "unauthorized")
        err(await anon.get(f"/v1/episodes/{ep.id}/audio/mix", params=q), 401, "unauthorized")  # other track
        err(await anon.get(f"/v1/episodes/{world.eps['implicit'].id}/audio/room", params=q), 401, "unauthorized")
        secret = current_secret(world.db)
        past = int(time.time()) - 5
        expired = dict(q, exp=str(past), sig=sign(secret, q["tid"], ep.id, "room", None, past))
        err(await anon.get(f"/v1/episodes/{ep.id}/audio/room", params=expired), 401, "unauthorized")
        # a URL dated further ahead than this server's URLs live: refused even with the real secret
        far = int(time.time()) + 10 * 365 * 86400
        forever = dict(q, exp=str(far), sig=sign(secret, q["tid"], ep.id, "room", None, far))
        err(await anon.get(f"/v1/episodes/{ep.id}/audio/room", params=forever), 401, "unauthorized")
        # what is stored beside a token is no key: its hash signs nothing
        with world.db.session() as s:
            tok = s.get(Token, int(q["tid"]))
        exp = int(time.time()) + 60
        by_hash = dict(q, exp=str(exp), sig=sign(tok.token_hash, q["tid"], ep.id, "room", None, exp))
        err(await anon.get(f"/v1/episodes/{ep.id}/audio/room", params=by_hash), 401, "unauthorized")
        # a valid signature for a team that cannot see the episode still gets 404
        with world.db.session() as s:
            beta = s.scalars(select(Token).where(Token.team == "beta")).first()
        forged = {"tid": beta.id, "exp": exp, "sig": sign(secret, beta.id, ep.id, "room", None, exp)}
        err(await anon.get(f"/v1/episodes/{ep.id}/audio/room", params=forged), 404, "not_found")
        # rotating the secret voids every URL signed before
        assert (await anon.get(signed["url"], headers={"Range": "bytes=0-43"})).status_code == 206
        rotate_secret(world.db)
        err(await anon.get(signed["url"]), 401, "unauthorized")
        fresh = (await a.get(f"/v1/episodes/{ep.id}/audio-url", params={"track": "room"})).json()
        assert (await anon.get(fresh["url"], headers={"Range": "bytes=0-43"})).status_code == 206


# --- suites and tokens -----------------------------------------------------------------------


async def test_suites(world):
    async with client(world, "alpha") as a, client(world, "beta") as b:
        page = (await a.get("/v1/suites")).json()
        assert [s["id"] for s in page["items"]] == [world.suites["alpha"]] and page["total"] == 1
        assert "path" not in page["items"][0]
        d = (await a.get(f"/v1/suites/{world.suites['alpha']}")).json()
        assert d["name"] == "mini" and d["available"] is True and d["conditions"] == {"explicit": 2, "implicit": 2}
        assert d["labels"]["T"] == 4 and d["labels"]["N4Q"] == 2 and d["meta"]["preamble"]["text"]
        # alpha has a run of this suite that has not ended: no script; an admin sees it
        sc = (await a.get(f"/v1/suites/{world.suites['alpha']}/scenarios", params={"limit": 3})).json()
        assert sc["total"] == 4 and len(sc["items"]) == 3
        assert all(i["labels"] is None and i["t_bucket"] is None for i in sc["items"])
        async with client(world, "admin") as adm:
            sc = (await adm.get(f"/v1/suites/{world.suites['alpha']}/scenarios", params={"limit": 3})).json()
        assert sc["items"][0]["labels"][0] == "N2" and sc["items"][0]["t_bucket"] == "middle"
        sc = (await a.get(f"/v1/suites/{world.suites['alpha']}/scenarios", params={"condition": "implicit"})).json()
        assert sc["total"] == 2 and {i["condition"] for i in sc["items"]} == {"implicit"}
        e1 = err(await b.get(f"/v1/suites/{world.suites['alpha']}"), 404, "not_found")
        assert e1 == err(await b.get("/v1/suites/none"), 404, "not_found")
        err(await b.get(f"/v1/suites/{world.suites['alpha']}/scenarios"), 404, "not_found")
        assert [s["id"] for s in (await b.get("/v1/suites")).json()["items"]] == [world.suites["beta"]]


async def test_tokens_are_admin_only(world):
    async with client(world, "alpha") as a, client(world, "admin") as adm:
        for method, url, body in (("get", "/v1/tokens", None), ("post", "/v1/tokens", {"team": "x"}),
                                  ("delete", "/v1/tokens/1", None)):
            err(await a.request(method, url, json=body), 403, "forbidden")
        page = (await adm.get("/v1/tokens", params={"limit": 200})).json()
        assert {t["team"] for t in page["items"]} >= {"alpha", "beta", "ops"}
        assert all(set(t) == {"id", "team", "admin", "scopes", "label", "revoked", "expires_at", "created_at"}
                   for t in page["items"])
        assert [t["team"] for t in (await adm.get("/v1/tokens", params={"team": "beta"})).json()["items"]] == ["beta"]
        new = (await adm.post("/v1/tokens", json={"team": "gamma", "admin": False, "label": "ci"})).json()
        assert new["token"].startswith("mpe_") and new["team"] == "gamma" and new["revoked"] is False
        with world.db.session() as s:
            assert s.get(Token, new["id"]).token_hash != new["token"]  # stored hashed
        async with httpx.AsyncClient(base_url=world.http, headers={"Authorization": f"Bearer {new['token']}"}) as g:
            assert (await g.get("/v1/runs")).json()["total"] == 0  # a new team sees nothing
        for body in ({"team": "Bad Team"}, {"team": ""}, {"team": "x", "label": "l" * 201}, {"team": "x", "extra": 1}):
            err(await adm.post("/v1/tokens", json=body), 422, "invalid_request")
        err(await adm.delete("/v1/tokens/999999"), 404, "not_found")
        err(await adm.delete("/v1/tokens/abc"), 422, "invalid_request")
        revoked = (await adm.get("/v1/tokens", params={"revoked": True})).json()["items"]
        assert all(t["revoked"] for t in revoked)


async def test_pages_are_served(world):
    async with client(world, None) as c:
        r = await c.get("/", follow_redirects=False)
        assert r.status_code in (302, 307) and r.headers["location"] == "/ui/"
        for page in ("/ui/", "/ui/signin.html", "/ui/run.html", "/ui/episode.html", "/ui/js/episode.js", "/ui/css/app.css"):
            r = await c.get(page)
            assert r.status_code == 200, page
            assert "default-src 'self'" in r.headers["content-security-policy"]
        err(await c.get("/ui/../server/app.py"), 404, "not_found")
        err(await c.get("/ui/%2e%2e/server/app.py"), 404, "not_found")


# --- once scored (runs last: it scores the finished run) --------------------------------------


async def test_scored_run_shows_metrics_and_verdicts(world):
    """Scores of the scoring subsystem (duration-only here: no ASR) flow into the API."""
    from server.scoring.runner import ScoreOptions, score_run

    res = await asyncio.to_thread(score_run, world.db, world.runs["done"], ScoreOptions(asr="none", judge="rule", workers=1))
    assert not res.failures
    ex, im = world.eps["explicit"], world.eps["implicit"]
    async with client(world, "alpha") as a, client(world, "beta") as b:
        m = (await a.get(f"/v1/runs/{world.runs['done']}/metrics")).json()
        assert m["scored"] is True and m["results"]["metrics"] == res.metrics
        assert m["results"]["analyses"]["bootstrap"]["scripted"]["explicit"]["silence_preservation"]["value"] == 1.0
        assert (await a.get(f"/v1/runs/{world.runs['done']}")).json()["scored"] is True
        err(await b.get(f"/v1/runs/{world.runs['done']}/metrics"), 404, "not_found")
        assert (await a.get(f"/v1/episodes/{im.id}")).json()["scores"] is None  # alpha's queued run plays the suite
        async with client(world, "admin") as adm:
            d = (await adm.get(f"/v1/episodes/{im.id}")).json()
        entry = next(e for e in res.episodes if e.episode_id == im.id)
        assert d["scores"] == {**entry.model_dump(mode="json"), "scoring_id": res.scoring_id}
        assert d["outcome"]["source"] == "score" and "intrusion" in d["outcome"]["failures"]
        page = (await a.get(f"/v1/runs/{world.runs['done']}/episodes")).json()
        by = {e["id"]: e["outcome"] for e in page["items"]}
        assert by[ex.id]["source"] == by[im.id]["source"] == "score"
        assert by[ex.id]["silence"] == [3, 3] and by[ex.id]["t"] == "none" and by[ex.id]["failures"] == ["no_response"]
        url = f"/v1/runs/{world.runs['done']}/episodes"
        assert [e["id"] for e in (await a.get(url, params={"outcome": "intrusion"})).json()["items"]] == [im.id]
        assert (await a.get(url, params={"outcome": "unscored"})).json()["total"] == 0
        assert (await a.get(url, params={"outcome": "speech_in_silence"})).json()["total"] == 0  # scored now


async def test_every_timestamp_served_carries_its_utc_offset(world):
    """Every field the OpenAPI schema calls ``date-time`` is served with an offset (UTC), on
    SQLite too, which keeps none; each such field is seen at least once."""
    async with client(world) as c:
        schemas = (await c.get("/openapi.json")).json()["components"]["schemas"]

        def is_datetime(prop: dict) -> bool:
            return prop.get("format") == "date-time" or any(is_datetime(p) for p in prop.get("anyOf", []))

        fields = {name for s in schemas.values() for name, prop in s.get("properties", {}).items()
                  if is_datetime(prop)}
        assert {"created_at", "finished_at", "started_at", "ended_at", "expires_at"} <= fields, fields
        ep = world.eps["explicit"].id
        served: list[tuple[str, str]] = []

        def walk(doc) -> None:
            if isinstance(doc, dict):
                served.extend((k, v) for k, v in doc.items() if k in fields and isinstance(v, str))
                for v in doc.values():
                    walk(v)
            elif isinstance(doc, list):
                for v in doc:
                    walk(v)

        for path in ("/v1/runs", f"/v1/runs/{world.runs['done']}", f"/v1/runs/{world.runs['done']}/episodes",
                     f"/v1/episodes/{ep}", "/v1/suites", f"/v1/suites/{world.suites['alpha']}"):
            r = await c.get(path)
            assert r.status_code == 200, (path, r.text)
            walk(r.json())
    async with client(world, "admin") as c:
        r = await c.post("/v1/tokens", json={"team": "alpha", "label": "dated", "expires_in_s": 86400})
        assert r.status_code == 201, r.text
        walk(r.json())
        walk((await c.get("/v1/tokens", params={"team": "alpha"})).json())
    assert {k for k, _ in served} >= {"created_at", "finished_at", "started_at", "ended_at", "expires_at"}, served
    naive = [(k, v) for k, v in served if datetime.fromisoformat(v).utcoffset() != timedelta(0)]
    assert not naive, naive


async def test_an_attempt_whose_room_frames_went_out_late_says_so(world):
    """``stats.server.room_late`` (recorded for a realtime attempt whose room frames were sent late)
    is served on the episode's attempts; a lockstep attempt has no room timing (null)."""
    ep = world.eps["explicit"]
    async with client(world) as c:
        before = (await c.get(f"/v1/episodes/{ep.id}")).json()["attempts"]
    assert [(a["room_late"], a["room_late_frames"]) for a in before] == [(None, None)] * len(before)
    with world.db.session() as s:
        att = s.get(Attempt, ep.completed_attempt_id)
        kept = att.stats
        att.stats = {**kept, "server": {**kept.get("server", {}), "room_late": True, "room_late_frames": 53,
                                        "max_room_lateness_ms": 4240.0}}
    try:
        async with client(world) as c:
            after = (await c.get(f"/v1/episodes/{ep.id}")).json()["attempts"]
        late_eps = room_late_episodes(world.db, world.runs["done"])  # what the run's report says of it
    finally:
        with world.db.session() as s:
            s.get(Attempt, ep.completed_attempt_id).stats = kept
    late = next(a for a in after if a["id"] == ep.completed_attempt_id)
    assert (late["room_late"], late["room_late_frames"], late["max_room_lateness_ms"]) == (True, 53, 4240.0)
    assert late_eps == [ep.id] and room_late_episodes(world.db, world.runs["done"]) == []
    line, = room_late_lines([{"run_id": world.runs["done"], "room_late": late_eps}])
    assert ep.id in line and "sent late" in line
    assert room_late_lines([{"run_id": world.runs["done"], "room_late": []}]) == []
