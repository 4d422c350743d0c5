"""Who may see and do what, over real HTTP and real WebSockets, on SQLite and PostgreSQL:
an episode's script is withheld from its team until the run has ended (and for ever on a
held-out suite), token scopes, expiry and revocation reaching open connections, and no
credential in a log line."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
import websockets
from sqlalchemy import select

from clients.messages import EpisodeStart
from clients.sdk import Bridge
from server.auth import create_token
from server.core.status import EpisodeStatus
from server.db import Episode, Token
from server.db import Suite as SuiteRow
from server.engine.leasing import create_run
from tests.support.world import bridge, wait_run, world_on

# What a team may see of a Duplex-MPE episode's events while its run is unfinished (docs/api.md
# "What a team sees"), written out here rather than taken from the code under test.
TEAM_EVENTS = {"preamble.start": set(), "preamble.end": set(), "clip.start": {"idx"}, "clip.end": {"idx"},
               "vad.onset": {"at", "seen_at"}, "vad.offset": {"at", "seen_at"}, "episode.end": set(), "text": set()}
SCRIPT_KEYS = {"gold_answer", "answer_keys", "attributes", "t_bucket", "n_speakers"}


class Slow(Bridge):
    """A team's bridge (no reference): silent, a little slow, so an episode is seen running."""

    clocks = ("lockstep",)

    def __init__(self, name: str, delay_s: float = 0.012):
        super().__init__()
        self.name, self.delay_s = name, delay_s

    def reset(self, episode: EpisodeStart) -> None:
        assert episode.reference is None  # a team's bridge never learns what it plays

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        time.sleep(self.delay_s)
        return None


def headers(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def get(w, token: str, path: str, **params) -> httpx.Response:
    async with httpx.AsyncClient(base_url=w.http, headers=headers(token), timeout=30) as c:
        return await c.get(path, params=params)


def assert_withheld(doc: dict, n_turns: int) -> None:
    assert doc["script"] == "withheld" and doc["turns"] == [] and doc["scores"] is None
    assert not SCRIPT_KEYS & set(doc), SCRIPT_KEYS & set(doc)
    for e in doc["events"]:
        assert e["type"] in TEAM_EVENTS and set(e["data"]) <= TEAM_EVENTS[e["type"]], e
    assert '"label"' not in json.dumps(doc) and '"text"' not in json.dumps(doc["events"])


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_the_script_is_withheld_until_the_run_ends(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite) as w:
        bridge_only = create_token(w.db, "alpha", scopes="bridge", label="gpu host")
        run = create_run(w.db, team="alpha", model="slow", suite_path=str(w.suite), clock="lockstep", limit=1,
                         conditions=["explicit"])
        with w.db.session() as s:
            ep = s.scalars(select(Episode).where(Episode.run_id == run)).one()
            suite_id = s.scalar(select(SuiteRow.id))
        n_turns = len(ep.scenario["turns"])
        assert_withheld((await get(w, w.tokens["alpha"], f"/v1/episodes/{ep.id}")).json(), n_turns)  # queued
        full = (await get(w, w.tokens["admin"], f"/v1/episodes/{ep.id}")).json()
        assert full["gold_answer"] == ep.scenario["gold_answer"] and len(full["turns"]) == n_turns

        seen_running = None
        async with bridge(w, Slow("slow"), token=bridge_only) as task:
            while seen_running is None:  # look at it while it plays, once it has events
                d = (await get(w, w.tokens["alpha"], f"/v1/episodes/{ep.id}")).json()
                if d["status"] == EpisodeStatus.running and len(d["events"]) >= 3:
                    seen_running = d
                assert not task.done()
                await asyncio.sleep(0.05)
            sc = (await get(w, w.tokens["alpha"], f"/v1/suites/{suite_id}/scenarios")).json()
            assert sc["items"] and all(i["labels"] is None for i in sc["items"])
            live = (await get(w, w.tokens["admin"], f"/v1/episodes/{ep.id}")).json()
            await wait_run(w.db, run, [task])
        assert_withheld(seen_running, n_turns)
        assert {e["type"] for e in seen_running["events"]} >= {"preamble.start", "preamble.end", "clip.start"}
        # the admin saw the clips' labels while it ran
        assert any("label" in e["data"] for e in live["events"] if e["type"] == "clip.start")

        # the run has ended: the team reads everything
        d = (await get(w, w.tokens["alpha"], f"/v1/episodes/{ep.id}")).json()
        assert "script" not in d and d["gold_answer"] == ep.scenario["gold_answer"]
        assert [t["label"] for t in d["turns"]] == [t["label"] for t in ep.scenario["turns"]]
        assert any(e["type"] == "t_wait.end" for e in d["events"]) and d["outcome"] is not None
        sc = (await get(w, w.tokens["alpha"], f"/v1/suites/{suite_id}/scenarios")).json()
        assert all(i["labels"] for i in sc["items"])
        # the bridge-only token that played it cannot read any of it
        for path in (f"/v1/episodes/{ep.id}", "/v1/runs", "/v1/me", f"/v1/episodes/{ep.id}/audio-url"):
            r = await get(w, bridge_only, path)
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (path, r.text)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_held_out_suite_shows_teams_outcomes_only(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite) as w:
        held = w.suite.parent / "held"
        shutil.copytree(w.suite, held)
        meta = json.loads((held / "suite.json").read_text())
        (held / "suite.json").write_text(json.dumps({**meta, "held_out": True}, indent=2))
        run = create_run(w.db, team="alpha", model="slow", suite_path=str(held), clock="lockstep", limit=1,
                         conditions=["explicit"])
        async with bridge(w, Slow("slow", delay_s=0), token=w.tokens["alpha"]) as task:
            await wait_run(w.db, run, [task])
        with w.db.session() as s:
            ep = s.scalars(select(Episode).where(Episode.run_id == run)).one()
            suite_id = s.scalar(select(SuiteRow.id).where(SuiteRow.path == str(held.resolve())))
        assert ep.status == EpisodeStatus.completed
        d = (await get(w, w.tokens["alpha"], f"/v1/episodes/{ep.id}")).json()
        assert_withheld(d, len(ep.scenario["turns"]))
        assert d["outcome"]["failures"] == ["no_response"]  # outcomes only
        sc = (await get(w, w.tokens["alpha"], f"/v1/suites/{suite_id}/scenarios")).json()
        assert sc["items"] and all(i["labels"] is None and i["t_bucket"] is None for i in sc["items"])
        full = (await get(w, w.tokens["admin"], f"/v1/episodes/{ep.id}")).json()
        assert full["gold_answer"] == ep.scenario["gold_answer"] and full["turns"]
        sc = (await get(w, w.tokens["admin"], f"/v1/suites/{suite_id}/scenarios")).json()
        assert all(i["labels"] for i in sc["items"])


async def _read_until_closed(ws, timeout: float) -> list[dict]:
    got = []
    async with asyncio.timeout(timeout):
        try:
            async for m in ws:
                if isinstance(m, str):
                    got.append(json.loads(m))
        except websockets.ConnectionClosed:  # closed with an error code
            pass
    return got


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_scopes_revocation_and_expiry_reach_open_connections(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite) as w:
        reader = create_token(w.db, "alpha", scopes="read")
        soon = create_token(w.db, "alpha", expires_in_s=3)
        doomed = create_token(w.db, "alpha")
        with w.db.session() as s:
            doomed_id = s.scalar(select(Token.id).where(Token.team == "alpha").order_by(Token.id.desc()))
        run = create_run(w.db, team="alpha", model="nobody", suite_path=str(w.suite), clock="lockstep", limit=1)
        with w.db.session() as s:
            ep_id = s.scalars(select(Episode.id).where(Episode.run_id == run)).first()
        # the bridge serves a model no run asks for, so it stays idle and the episode stays queued
        hello = json.dumps({"type": "hello", "protocol": 1, "model": {"name": "idle", "revision": ""},
                            "sample_rate": 24000, "clocks": ["lockstep"]})

        # a read-only token cannot serve episodes
        async with websockets.connect(f"{w.ws}/v1/bridge", additional_headers=headers(reader)) as ws:
            got = await _read_until_closed(ws, 10)
        assert got[-1]["type"] == "error" and got[-1]["code"] == "forbidden" and ws.close_code == 1008

        # open connections of a token: a bridge (idle) and two listeners (waiting on a queued episode)
        br = await websockets.connect(f"{w.ws}/v1/bridge", additional_headers=headers(doomed))
        await br.send(hello)
        listen = await websockets.connect(f"{w.ws}/v1/episodes/{ep_id}/listen", additional_headers=headers(doomed))
        expiring = await websockets.connect(f"{w.ws}/v1/episodes/{ep_id}/listen", additional_headers=headers(soon))
        assert json.loads(await listen.recv())["type"] == "waiting"
        assert json.loads(await expiring.recv())["type"] == "waiting"
        assert (await get(w, soon, "/v1/runs")).status_code == 200

        async with httpx.AsyncClient(base_url=w.http, headers=headers(w.tokens["admin"])) as adm:
            assert (await adm.delete(f"/v1/tokens/{doomed_id}")).json()["revoked"] is True
        t0 = time.monotonic()
        for ws in (br, listen, expiring):  # each closes by itself within a few seconds, saying why
            got = await _read_until_closed(ws, 15)
            assert got[-1]["type"] == "error" and got[-1]["code"] == "unauthorized", got
            assert ws.close_code == 1008
        assert time.monotonic() - t0 < 12
        for token in (doomed, soon):
            r = await get(w, token, "/v1/runs")
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        with w.db.session() as s:
            assert s.get(Episode, ep_id).status == EpisodeStatus.queued  # nobody played it

        # a bridge revoked mid-episode loses that attempt (the episode is retried elsewhere)
        playing = create_token(w.db, "alpha")
        with w.db.session() as s:
            playing_id = s.scalar(select(Token.id).order_by(Token.id.desc()))
        run2 = create_run(w.db, team="alpha", model="slow", suite_path=str(w.suite), clock="lockstep", limit=1,
                          conditions=["explicit"])
        async with bridge(w, Slow("slow", delay_s=0.05), token=playing) as task:
            with w.db.session() as s:
                ep2 = s.scalars(select(Episode).where(Episode.run_id == run2)).one().id
            while (await get(w, w.tokens["alpha"], f"/v1/episodes/{ep2}")).json()["status"] != "running":
                await asyncio.sleep(0.05)
            with w.db.session() as s:
                s.get(Token, playing_id).revoked = True
            while True:
                d = (await get(w, w.tokens["alpha"], f"/v1/episodes/{ep2}")).json()
                if d["attempts"] and d["attempts"][0]["status"] != "running":
                    break
                await asyncio.sleep(0.1)
            assert d["attempts"][0]["error_code"] == "unauthorized" and d["status"] == "queued"
            task.cancel()


async def test_no_credential_in_the_server_logs(tmp_path, mini_suite, caplog):
    """uvicorn's access and connection lines carry the request path: tokens in ``?token=`` and
    URL signatures are masked; a failed statement's log never shows its parameters."""
    async with world_on("postgres", tmp_path, mini_suite) as w:
        caplog.set_level(logging.INFO)
        for name in ("uvicorn.access", "uvicorn.error"):  # uvicorn's loggers do not propagate
            logging.getLogger(name).addHandler(caplog.handler)
            logging.getLogger(name).setLevel(logging.INFO)
        try:
            token = w.tokens["alpha"]
            run = create_run(w.db, team="alpha", model="nobody", suite_path=str(w.suite), clock="lockstep", limit=1)
            with w.db.session() as s:
                ep_id = s.scalars(select(Episode.id).where(Episode.run_id == run)).first()
            async with httpx.AsyncClient(base_url=w.http, timeout=30) as c:
                await c.get("/v1/runs", params={"token": token})  # a token where it does not belong
                url = (await c.get(f"/v1/episodes/{ep_id}/listen-url", headers=headers(token))).json()["url"]
            for path in (f"/v1/episodes/{ep_id}/listen?token={token}", url, f"/v1/bridge?token={token}x"):
                async with websockets.connect(w.ws + path) as ws:
                    try:
                        await asyncio.wait_for(ws.recv(), 2)
                    except (asyncio.TimeoutError, websockets.ConnectionClosed):
                        pass
            sig = dict(httpx.URL(url).params)["sig"]
            await asyncio.sleep(0.2)
        finally:
            for name in ("uvicorn.access", "uvicorn.error"):
                logging.getLogger(name).removeHandler(caplog.handler)
        text = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("uvicorn"))
        assert "/v1/episodes/" in text and "token=***" in text  # the lines are there, masked
        assert token not in text and token[4:20] not in text and sig not in text
        # SQL errors: the statement, never its values (a token hash, say)
        h = "f" * 64
        with pytest.raises(sa.exc.DataError) as exc:
            with w.db.session() as s:
                s.add(Token(team="x" * 65, token_hash=h, scopes="read"))  # too long a team name
        assert "INSERT INTO tokens" in str(exc.value) and h not in str(exc.value)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_only_an_admin_bridge_that_asks_is_told_what_it_plays(kind, tmp_path, mini_suite):
    """``hello.wants_reference``: an admin bridge that does not ask plays like any bridge under
    test (no reference); one that asks gets it; a team's bridge that asks is refused."""

    class Asks(Slow):
        wants_reference = True

        def reset(self, episode: EpisodeStart) -> None:
            self.seen = episode.reference

    async with world_on(kind, tmp_path, mini_suite) as w:
        async with websockets.connect(f"{w.ws}/v1/bridge", additional_headers=headers(w.tokens["alpha"])) as ws:
            await ws.send(json.dumps({"type": "hello", "protocol": 1, "model": {"name": "m", "revision": ""},
                                      "wants_reference": True}))
            got = await _read_until_closed(ws, 10)
        assert got[-1]["code"] == "forbidden" and ws.close_code == 1008
        for model, b, expect in (("plain", Slow("plain", delay_s=0), None), ("asks", Asks("asks", delay_s=0), "s-p1")):
            run = create_run(w.db, team="alpha", model=model, suite_path=str(w.suite), clock="lockstep", limit=1,
                             conditions=["explicit"])
            async with bridge(w, b, token=w.tokens["admin"]) as task:  # an admin's bridge serves alpha's run
                await wait_run(w.db, run, [task])
            if expect is None:  # Slow.reset asserts there is no reference
                with w.db.session() as s:
                    assert s.scalars(select(Episode.status).where(Episode.run_id == run)).one() == "completed"
            else:
                assert b.seen.scenario_id == expect and b.seen.condition == "explicit"


async def post(w, token: str, path: str, body: dict | None = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=w.http, headers=headers(token), timeout=30) as c:
        return await c.post(path, json=body)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_running_episode_is_not_paired_with_its_scenario(kind, tmp_path, mini_suite):
    """The episode ids a bridge is given cannot be joined to scenario ids by a team token while the
    run plays (neither in the run's episode list nor in an episode's document); admins can."""
    async with world_on(kind, tmp_path, mini_suite) as w:
        run = create_run(w.db, team="alpha", model="slow", suite_path=str(w.suite), clock="lockstep", limit=1)
        with w.db.session() as s:
            eps = s.scalars(select(Episode).where(Episode.run_id == run)).all()
        assert len(eps) >= 2
        listed = (await get(w, w.tokens["alpha"], f"/v1/runs/{run}/episodes")).json()["items"]
        assert {i["id"] for i in listed} == {e.id for e in eps}
        assert all(i["scenario_id"] is None and i["pair_id"] is None and i["ordinal"] is None for i in listed)
        for ep in eps:
            doc = (await get(w, w.tokens["alpha"], f"/v1/episodes/{ep.id}")).json()
            assert not {"scenario_id", "pair_id", "ordinal"} & set(doc), doc
            assert ep.scenario_id not in json.dumps(doc)
        admin = (await get(w, w.tokens["admin"], f"/v1/runs/{run}/episodes")).json()["items"]
        assert {i["id"]: i["scenario_id"] for i in admin} == {e.id: e.scenario_id for e in eps}
        assert (await get(w, w.tokens["admin"], f"/v1/episodes/{eps[0].id}")).json()["scenario_id"] == eps[0].scenario_id

        assert (await post(w, w.tokens["alpha"], f"/v1/runs/{run}/cancel")).status_code == 200
        listed = (await get(w, w.tokens["alpha"], f"/v1/runs/{run}/episodes")).json()["items"]
        assert {i["id"]: i["scenario_id"] for i in listed} == {e.id: e.scenario_id for e in eps}  # ended: shown


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_cancelled_throwaway_run_does_not_show_the_script_another_run_plays(kind, tmp_path, mini_suite):
    """A team token cannot read the gold answers of a running run by creating and cancelling
    another run of the same suite: the script stays withheld while any run of the team on that
    suite content has not ended, and shows again once every one has."""
    async with world_on(kind, tmp_path, mini_suite) as w:
        alpha = w.tokens["alpha"]
        real = create_run(w.db, team="alpha", model="slow", suite_path=str(w.suite), clock="lockstep", limit=1,
                          conditions=["explicit"])
        r = await post(w, alpha, "/v1/runs", {"model": "throwaway", "suite": w.suite.name, "clock": "lockstep",
                                               "limit": 1, "conditions": ["explicit"]})
        assert r.status_code == 201, r.text
        throwaway = r.json()["id"]
        assert (await post(w, alpha, f"/v1/runs/{throwaway}/cancel")).json()["status"] == "cancelled"
        with w.db.session() as s:
            ep = s.scalars(select(Episode).where(Episode.run_id == throwaway)).one()
            suite_id = s.scalar(select(SuiteRow.id))
        n_turns = len(ep.scenario["turns"])
        assert_withheld((await get(w, alpha, f"/v1/episodes/{ep.id}")).json(), n_turns)
        sc = (await get(w, alpha, f"/v1/suites/{suite_id}/scenarios")).json()
        assert sc["items"] and all(i["labels"] is None for i in sc["items"])
        full = (await get(w, w.tokens["admin"], f"/v1/episodes/{ep.id}")).json()
        assert full["gold_answer"] == ep.scenario["gold_answer"]  # admins see everything

        assert (await post(w, alpha, f"/v1/runs/{real}/cancel")).status_code == 200  # every run has ended
        d = (await get(w, alpha, f"/v1/episodes/{ep.id}")).json()
        assert "script" not in d and d["gold_answer"] == ep.scenario["gold_answer"] and len(d["turns"]) == n_turns
