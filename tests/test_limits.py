"""Limits (docs/api.md "Limits"): the pure token bucket, rate limiter and slots on literal clock
values, the server's limits on an injected clock, then over real HTTP and WebSockets against
the in-process server on SQLite and PostgreSQL: a team's bridges and listen sockets, an
episode's listeners (waiting ones included), a team's queued episodes (REST and `mpe run
create`), REST requests per token and connection attempts per address, and the SDK waiting a
refusal out."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import websockets
from sqlalchemy import delete, func, select, update

from clients.errors import CLOSE_CODES, RETRY_LATER_CODES, AuthError, RetryLater
from clients.sdk import BridgeClient, BridgeOptions
from server.api.errors import HTTP_STATUS
from server.auth import Principal, Scope, create_token
from server.core.limits import RateLimiter, SlotKind, Slots, TokenBucket
from server.db import ConnectionSlot, Database, Episode
from server.engine.leasing import cancel_run, create_run
from server.engine.limits import ServerLimits, worker_rates
from server.engine.shared_slots import SharedSlots
from server.settings import Settings
from tests.support.databases import database_url
from tests.support.servers import free_port, start_server
from tests.support.world import Quiet, Scripted, bridge, make_settings, until, wait_run, world_on

KINDS = pytest.mark.parametrize("kind", ["sqlite", "postgres"])
T = 10.0  # a bound on every wait (each should take well under a second)
DOCS = Path(__file__).resolve().parent.parent / "docs"
HELLO = json.dumps({"type": "hello", "protocol": 1, "model": {"name": "x"}, "clocks": ["lockstep"]})


# --- the pure core on literal clock values ------------------------------------------------


def test_a_token_bucket_allows_its_burst_then_its_rate():
    b = TokenBucket.full(burst=3, rate=2.0, now=100.0)
    assert [b.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take(100.0) == 0.5  # empty: the next token comes 1/rate s later
    assert b.wait(100.25) == 0.25 and b.tokens == 0.5  # waiting takes nothing
    assert b.take(100.5) == 0.0 and b.take(100.5) == 0.5
    assert b.take(100.5, cost=2) == 1.0  # a dearer action waits for more
    assert b.take(100.5, cost=4) == float("inf")  # more than the bucket ever holds
    assert b.wait(1000.0) == 0.0 and b.tokens == 3  # a long pause refills it to the burst, no further
    assert [b.take(1000.0) for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]
    assert b.take(999.0) == 0.5 and b.tokens == 0  # a clock that goes back gives nothing


def test_a_rate_limiter_keeps_one_bucket_per_key_and_a_bounded_number_of_keys():
    lim = RateLimiter(burst=2, rate=1.0, max_keys=2)
    assert [lim.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 1.0]
    assert lim.take("b", 0.0) == 0.0  # another key has its own bucket
    assert lim.wait("a", 0.5) == 0.5 and lim.wait("never", 0.5) == 0.0
    assert list(lim.buckets) == ["a", "b"]  # a key only asked about is not kept
    lim.take("b", 0.5)
    lim.take("c", 0.5)  # a third key: the least recently used one ("a") goes
    assert list(lim.buckets) == ["b", "c"]
    off = RateLimiter(burst=1, rate=0)
    assert [off.take("a", 0.0) for _ in range(100)] == [0.0] * 100 and not off.buckets
    with pytest.raises(ValueError):
        RateLimiter(burst=0, rate=1.0)


def test_slots_count_holders_per_key_up_to_their_limit():
    s = Slots(2)
    assert [s.acquire("alpha") for _ in range(3)] == [True, True, False]
    assert s.acquire("beta") and s.count("alpha") == 2 and s.count("beta") == 1
    s.release("alpha")
    assert s.acquire("alpha") and not s.acquire("alpha")
    for key in ("alpha", "alpha", "beta"):
        s.release(key)
    assert s.counts == {}  # only keys in use are kept
    unlimited = Slots(None)
    assert all(unlimited.acquire("x") for _ in range(1000)) and unlimited.count("x") == 1000


def test_the_server_limits_on_an_injected_clock(tmp_path):
    now = [0.0]
    limits = ServerLimits(Settings(data_dir=tmp_path, rest_burst=2, rest_rate_per_s=4, connect_burst=2,
                                   connect_rate_per_s=1, max_bridges_per_team=1, max_listeners_per_team=1,
                                   max_listeners_per_episode=2), clock=lambda: now[0])
    alpha = Principal(team="alpha", scopes=frozenset({Scope.bridge, Scope.read}), token_id=1)
    alpha2 = Principal(team="alpha", scopes=frozenset({Scope.read}), token_id=2)
    admin = Principal(team="ops", scopes=frozenset({Scope.admin}), token_id=3)
    # REST requests per token
    limits.request(alpha)
    limits.request(alpha)
    with pytest.raises(RetryLater) as over:
        limits.request(alpha)
    assert (over.value.code, over.value.retry_after_s) == ("rate_limited", 0.25)
    limits.request(alpha2)  # another token of the team has its own bucket
    now[0] = 0.25
    limits.request(alpha)
    # connection attempts and failed authentications per address
    limits.connection("10.0.0.1")
    with pytest.raises(AuthError):
        limits.authenticate("10.0.0.1", _refuse_token)  # a failed authentication costs one more
    with pytest.raises(RetryLater) as over:
        limits.check_address("10.0.0.1")
    assert over.value.code == "rate_limited" and over.value.retry_after_s == 1.0
    limits.check_address("10.0.0.2")  # another address is not affected
    now[0] = 1.25
    limits.check_address("10.0.0.1")
    limits.connection("10.0.0.1")
    with pytest.raises(RetryLater):
        limits.connection("10.0.0.1")
    # bridges per team; admins are exempt
    slot = limits.bridge(alpha)
    with pytest.raises(RetryLater) as over:
        limits.bridge(alpha2)
    assert over.value.code == "too_many_bridges"
    admin_slots = [limits.bridge(admin) for _ in range(5)]
    slot.release()
    slot.release()  # idempotent
    limits.bridge(alpha2).release()
    for s in admin_slots:
        s.release()
    # listeners per team and per episode; admins count on the episode, not on their team
    held = limits.listener(alpha, "ep1")
    with pytest.raises(RetryLater) as over:
        limits.listener(alpha2, "ep2")
    assert over.value.code == "too_many_listeners"
    on_ep1 = limits.listener(admin, "ep1")
    with pytest.raises(RetryLater) as over:
        limits.listener(admin, "ep1")
    assert over.value.code == "busy"
    assert limits.episode_listeners.counts == {"ep1": 2} and limits.team_listeners.counts == {"alpha": 1}
    held.release()
    on_ep1.release()
    assert limits.episode_listeners.counts == {} and limits.team_listeners.counts == {}


def _refuse_token():
    raise AuthError("invalid, revoked or expired token")


def test_the_codes_have_one_status_and_close_code_and_are_documented():
    assert RETRY_LATER_CODES == {"rate_limited", "too_many_bridges", "too_many_listeners", "too_many_queued", "busy"}
    assert {c: CLOSE_CODES[c] for c in ("rate_limited", "too_many_bridges", "too_many_listeners")} == \
        {"rate_limited": 1013, "too_many_bridges": 1013, "too_many_listeners": 1013}
    assert (HTTP_STATUS["rate_limited"], HTTP_STATUS["too_many_queued"]) == (429, 429)
    protocol, api = (DOCS / "protocol.md").read_text(), (DOCS / "api.md").read_text()
    for code in ("rate_limited", "too_many_bridges"):  # the bridge socket's (the listen socket's: api.md)
        assert f"| `{code}` | 1013 |" in protocol
    assert "`too_many_listeners`, close 1013" in api and "`busy`, close 1013" in api
    for code in ("rate_limited", "too_many_queued"):
        assert f"| `{code}` | 429 |" in api
    limits = api[api.index("## Limits"):]
    limits = limits[:limits.index("\n## ", 1)]
    for name in ("max_bridges_per_team", "max_listeners_per_team", "max_listeners_per_episode",
                 "max_queued_episodes_per_team", "rest_burst", "rest_rate_per_s", "connect_burst",
                 "connect_rate_per_s"):
        env = f"MPE_{name.upper()}"
        row = next((line for line in limits.splitlines() if f"`{env}`" in line), None)
        assert row is not None, f"{env} is not in docs/api.md Limits"
        value = Settings.model_fields[name].default
        shown = f"{value:,}".replace(",", " ") if isinstance(value, int) else f"{value:g}"
        assert f"| {shown} |" in row, (env, shown, row)


# --- over the wire ------------------------------------------------------------------------


async def bridge_socket(w, token: str) -> tuple[websockets.ClientConnection, dict]:
    """Connect as a bridge and say hello; the server's first message (``welcome`` or ``error``)."""
    ws = await websockets.connect(f"{w.ws}/v1/bridge", additional_headers={"Authorization": f"Bearer {token}"},
                                  open_timeout=T)
    try:
        await ws.send(HELLO)
    except websockets.ConnectionClosed:
        pass  # refused before it could say hello: the error is still there to read
    return ws, json.loads(await asyncio.wait_for(ws.recv(), T))


async def listen_socket(url: str) -> tuple[websockets.ClientConnection, dict]:
    ws = await websockets.connect(url, open_timeout=T)
    return ws, json.loads(await asyncio.wait_for(ws.recv(), T))


async def closed_with(ws) -> int:
    """The close code of a socket the server closes now."""
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), T)
    return ws.close_code


async def refused(connect, *args) -> tuple[dict, int]:
    ws, first = await connect(*args)
    assert first["type"] == "error", first
    return first, await closed_with(ws)


async def eventually(connect, *args, accept: str) -> websockets.ClientConnection:
    """Connect until the first message is ``accept`` (a slot is given back once the server has
    seen its socket close)."""
    for _ in range(100):
        ws, first = await connect(*args)
        if first["type"] == accept:
            return ws
        await ws.close()
        await asyncio.sleep(0.05)
    raise AssertionError(f"never got {accept!r}: last {first}")


def queued_episode(w, team: str, model: str = "nobody") -> tuple[str, str]:
    """A new run of one episode for ``team``: its id and the episode's."""
    run = create_run(w.db, team=team, model=model, suite_path=str(w.suite), clock="lockstep", limit=1,
                     conditions=["explicit"])
    with w.db.session() as s:
        return run, s.scalars(select(Episode.id).where(Episode.run_id == run)).one()


class Clock:
    """A clock for the server's limits that stands still until :meth:`run`, then goes on from
    where it stood: the test decides when buckets refill."""

    def __init__(self) -> None:
        self.base, self.since = time.monotonic(), None

    def __call__(self) -> float:
        return self.base if self.since is None else self.base + time.monotonic() - self.since

    def run(self) -> None:
        self.since = time.monotonic()


@KINDS
async def test_a_teams_bridge_over_its_limit_is_refused_while_another_team_connects(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite, max_bridges_per_team=2) as w:
        held = []
        for _ in range(2):
            ws, first = await bridge_socket(w, w.tokens["alpha"])
            assert first["type"] == "welcome", first
            held.append(ws)
        err, close = await refused(bridge_socket, w, w.tokens["alpha"])
        assert (err["code"], close) == ("too_many_bridges", 1013)
        assert "team alpha has 2 bridges" in err["message"] and "MPE_MAX_BRIDGES_PER_TEAM" in err["message"]
        ws, first = await bridge_socket(w, w.tokens["beta"])  # another team is not affected
        assert first["type"] == "welcome", first
        held.append(ws)
        for _ in range(3):  # admin tokens are exempt
            ws, first = await bridge_socket(w, w.tokens["admin"])
            assert first["type"] == "welcome", first
            held.append(ws)
        await held.pop(0).close()  # a bridge of alpha leaves: its slot comes back
        held.append(await eventually(bridge_socket, w, w.tokens["alpha"], accept="welcome"))
        err, close = await refused(bridge_socket, w, w.tokens["alpha"])
        assert (err["code"], close) == ("too_many_bridges", 1013)
        for ws in held:
            await ws.close()


@KINDS
async def test_the_sdk_waits_out_a_refusal_and_then_connects(kind, tmp_path, mini_suite, caplog):
    caplog.set_level(logging.WARNING, logger="mpe.sdk")
    async with world_on(kind, tmp_path, mini_suite, max_bridges_per_team=1) as w:
        ws, first = await bridge_socket(w, w.tokens["alpha"])
        assert first["type"] == "welcome"
        client = BridgeClient(Quiet(), BridgeOptions(server=w.ws, token=w.tokens["alpha"], backoff_min_s=0.05,
                                                     backoff_max_s=0.2))
        task = asyncio.create_task(client.run())
        try:
            await until(lambda: any("too_many_bridges" in r.getMessage() for r in caplog.records) or task.done(),
                        "the SDK to be refused")
            assert not task.done() and client.bridge_id is None  # refused, and not given up
            await ws.close()
            await until(lambda: client.bridge_id is not None or task.done(), "the SDK to connect")
            assert not task.done() and client.bridge_id is not None
        finally:
            client.stop()
            await asyncio.gather(task, return_exceptions=True)
        assert task.exception() is None


@KINDS
async def test_listeners_waiting_for_a_queued_episode_count_against_its_cap(kind, tmp_path, mini_suite,
                                                                             speech_frames):
    async with world_on(kind, tmp_path, mini_suite, max_listeners_per_episode=2) as w:
        run, ep = queued_episode(w, "alpha", model="scripted")
        url = f"{w.ws}/v1/episodes/{ep}/listen?token="
        first_ws, first = await listen_socket(url + w.tokens["alpha"])
        admin_ws, admin_first = await listen_socket(url + w.tokens["admin"])  # admins count on the episode too
        assert first["type"] == admin_first["type"] == "waiting"
        err, close = await refused(listen_socket, url + w.tokens["alpha"])
        assert (err["code"], close) == ("busy", 1013) and "MPE_MAX_LISTENERS_PER_EPISODE" in err["message"]
        _, other = queued_episode(w, "alpha")
        ws, msg = await listen_socket(f"{w.ws}/v1/episodes/{other}/listen?token={w.tokens['alpha']}")
        assert msg["type"] == "waiting"  # another episode has room
        await ws.close()
        await first_ws.close()  # a listener leaves: its place comes back
        third = await eventually(listen_socket, url + w.tokens["alpha"], accept="waiting")
        err, close = await refused(listen_socket, url + w.tokens["beta"])
        assert (err["code"], close) == ("not_found", 1008)  # another team's full episode is not revealed as busy
        # the episode starts: the two waiting listeners are attached to it, and a third is still refused
        async with bridge(w, Scripted("scripted", speech_frames, delay_s=0.02)) as task:
            assert json.loads(await asyncio.wait_for(admin_ws.recv(), T))["type"] == "hello"
            ch = w.hub.get(ep)
            await until(lambda: len(ch.listeners) == 2, "both waiting listeners to be attached")
            err, close = await refused(listen_socket, url + w.tokens["alpha"])
            assert (err["code"], close) == ("busy", 1013)
            assert len(ch.listeners) == 2 and ch.ended is None  # (still live)
            cancel_run(w.db, run)  # enough heard
            await wait_run(w.db, run, [task])
        for ws in (admin_ws, third):
            await ws.close()


@KINDS
async def test_a_teams_listen_sockets_are_limited_waiting_ones_included(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite, max_listeners_per_team=2) as w:
        eps = [queued_episode(w, "alpha")[1] for _ in range(2)]
        _, beta_ep = queued_episode(w, "beta")
        base = f"{w.ws}/v1/episodes"
        held = []
        for ep in eps:
            ws, msg = await listen_socket(f"{base}/{ep}/listen?token={w.tokens['alpha']}")
            assert msg["type"] == "waiting"
            held.append(ws)
        err, close = await refused(listen_socket, f"{base}/{eps[0]}/listen?token={w.tokens['alpha']}")
        assert (err["code"], close) == ("too_many_listeners", 1013)
        assert "team alpha has 2 listen sockets" in err["message"] and "MPE_MAX_LISTENERS_PER_TEAM" in err["message"]
        for url in (f"{base}/{beta_ep}/listen?token={w.tokens['beta']}",  # another team is not affected
                    f"{base}/{eps[0]}/listen?token={w.tokens['admin']}",  # admins are exempt
                    f"{base}/{eps[1]}/listen?token={w.tokens['admin']}",
                    f"{base}/{eps[1]}/listen?token={w.tokens['admin']}"):
            ws, msg = await listen_socket(url)
            assert msg["type"] == "waiting", (url, msg)
            held.append(ws)
        await held.pop(0).close()
        held.append(await eventually(listen_socket, f"{base}/{eps[1]}/listen?token={w.tokens['alpha']}",
                                     accept="waiting"))
        for ws in held:
            await ws.close()


def mpe(w, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = dict(os.environ, DATABASE_URL=w.settings.db_url, MPE_DATA_DIR=str(w.settings.data_dir), **env)
    return subprocess.run([sys.executable, "-m", "server.cli", *args], env=full, capture_output=True, text=True,
                          timeout=300)


@KINDS
async def test_a_teams_queued_episodes_are_limited_when_runs_are_created(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite, max_queued_episodes_per_team=3) as w:
        run = {"model": "m", "suite": mini_suite.name, "limit": 1}  # one pair: 2 episodes

        def client(who: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(base_url=w.http, headers={"Authorization": f"Bearer {w.tokens[who]}"})

        async with client("alpha") as alpha, client("beta") as beta, client("admin") as admin:
            first = await alpha.post("/v1/runs", json=run)
            assert first.status_code == 201, first.text
            over = await alpha.post("/v1/runs", json=run)
            assert over.status_code == 429, over.text
            e = over.json()["error"]
            assert e["code"] == "too_many_queued"
            assert "team alpha has 2 episodes queued and this run would add 2" in e["message"]
            assert "limit of 3 queued episodes per team" in e["message"]
            over = await admin.post("/v1/runs", json=run | {"team": "alpha"})  # whoever creates it
            assert over.status_code == 429 and over.json()["error"]["code"] == "too_many_queued"
            assert (await beta.post("/v1/runs", json=run)).status_code == 201  # another team's queue
            # mpe run create: the same limit, the same message
            env = {"MPE_MAX_QUEUED_EPISODES_PER_TEAM": "3"}
            cli = ("run", "create", "--model", "m", "--suite", str(w.suite), "--team", "alpha", "--limit", "1")
            p = mpe(w, *cli, env=env)
            assert p.returncode == 2, (p.stdout, p.stderr)
            assert "too_many_queued" in p.stderr and "Traceback" not in p.stderr
            assert "team alpha has 2 episodes queued and this run would add 2" in " ".join(p.stderr.split())
            p = mpe(w, *cli, "--conditions", "explicit", env=env)  # one episode more fits
            assert p.returncode == 0, p.stderr
            over = await alpha.post("/v1/runs", json=run | {"conditions": ["explicit"]})
            assert over.status_code == 429 and "has 3 episodes queued" in over.json()["error"]["message"]
            cancel_run(w.db, first.json()["id"])  # a cancelled run's episodes are no longer queued
            assert (await alpha.post("/v1/runs", json=run)).status_code == 201


@KINDS
async def test_rest_requests_over_a_tokens_rate_get_429_then_200_once_it_refills(kind, tmp_path, mini_suite):
    async with world_on(kind, tmp_path, mini_suite, rest_burst=3, rest_rate_per_s=4) as w:
        w.limits.clock = clock = Clock()  # standing still: nothing refills until clock.run()
        async with httpx.AsyncClient(base_url=w.http) as c:
            alpha = {"Authorization": f"Bearer {w.tokens['alpha']}"}
            codes = [(await c.get(path, headers=alpha)).status_code for path in ("/v1/me", "/v1/runs", "/v1/me")]
            assert codes == [200, 200, 200]
            over = await c.get("/v1/runs", headers=alpha)  # the burst is spent
            assert over.status_code == 429, over.text
            e = over.json()["error"]
            assert e["code"] == "rate_limited" and "this token" in e["message"] and e["retry_after_s"] == 0.25
            assert over.headers["retry-after"] == "1"  # whole seconds, rounded up
            beta = {"Authorization": f"Bearer {w.tokens['beta']}"}
            assert (await c.get("/v1/me", headers=beta)).status_code == 200  # another token has its own rate
            assert (await c.get("/v1/me", headers=alpha)).status_code == 429
            clock.run()
            await asyncio.sleep(e["retry_after_s"])
            for _ in range(50):  # refilled: allowed again
                r = await c.get("/v1/me", headers=alpha)
                if r.status_code == 200:
                    break
                await asyncio.sleep(r.json()["error"]["retry_after_s"])
            assert r.status_code == 200 and r.json()["team"] == "alpha"


@KINDS
async def test_connection_attempts_and_failed_authentications_over_an_addresss_rate_are_refused(
        kind, tmp_path, mini_suite, caplog):
    caplog.set_level(logging.WARNING, logger="mpe.sdk")
    async with world_on(kind, tmp_path, mini_suite, connect_burst=4, connect_rate_per_s=2) as w:
        w.limits.clock = clock = Clock()  # standing still: nothing refills until clock.run()
        _, ep = queued_episode(w, "alpha")
        listen_url = f"{w.ws}/v1/episodes/{ep}/listen?token={w.tokens['alpha']}"
        async with httpx.AsyncClient(base_url=w.http) as c:
            # failed authentications cost the address: REST with a wrong token, then a bridge with one
            wrong = {"Authorization": "Bearer mpe_wrong"}
            assert (await c.get("/v1/me", headers=wrong)).status_code == 401
            err, close = await refused(bridge_socket, w, "mpe_wrong")  # an attempt and a failure: two
            assert (err["code"], close) == ("unauthorized", 1008)
            ws, first = await listen_socket(listen_url)  # the last attempt left: 4 - 1 - 2
            assert first["type"] == "waiting", first
            err, close = await refused(listen_socket, listen_url)
            assert (err["code"], close) == ("rate_limited", 1013) and "your address" in err["message"]
            assert err["retry_after_s"] == 0.5
            err, close = await refused(bridge_socket, w, w.tokens["alpha"])  # bridges too
            assert (err["code"], close) == ("rate_limited", 1013) and err["retry_after_s"] == 0.5
            r = await c.get("/v1/me", headers={"Authorization": f"Bearer {w.tokens['alpha']}"})
            assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"  # REST from there too
            assert r.headers["retry-after"] == "1"
            # the SDK is refused too, takes the hint, and connects once the address may again
            client = BridgeClient(Quiet(), BridgeOptions(server=w.ws, token=w.tokens["alpha"], backoff_min_s=0.05))
            task = asyncio.create_task(client.run())
            try:
                await until(lambda: any("rate_limited" in r.getMessage() for r in caplog.records) or task.done(),
                            "the SDK to be refused")
                assert not task.done() and client.bridge_id is None
                clock.run()
                await until(lambda: client.bridge_id is not None or task.done(), "the SDK to connect")
                assert not task.done() and client.bridge_id is not None
            finally:
                client.stop()
                await asyncio.gather(task, return_exceptions=True)
            assert task.exception() is None
        await ws.close()


# --- across server processes (PostgreSQL) ---------------------------------------------------


def test_shared_slots_count_every_process_and_a_dead_ones_expire(tmp_path):
    """Two processes' slot tables on one database (two SharedSlots, as two servers hold them): a
    team's limit counts both, per kind; a slot given back frees at once; renewal keeps a slot; the
    slots of a process that stopped renewing stop counting once expired, and are deleted."""
    with database_url("postgres", tmp_path) as url:
        db = Database(url)
        try:
            a, b = SharedSlots(db, "proc-a", ttl_s=30.0), SharedSlots(db, "proc-b", ttl_s=30.0)
            first = a.acquire("alpha", SlotKind.bridge, 2)
            assert first is not None and b.acquire("alpha", SlotKind.bridge, 2) is not None
            assert a.acquire("alpha", SlotKind.bridge, 2) is None and b.acquire("alpha", SlotKind.bridge, 2) is None
            assert b.acquire("alpha", SlotKind.listener, 1) is not None  # another kind: its own count
            assert b.acquire("beta", SlotKind.bridge, 2) is not None  # another team: its own count
            a.release(first)
            a.release(first)  # idempotent
            assert b.acquire("alpha", SlotKind.bridge, 2) is not None
            assert (a.count("alpha", SlotKind.bridge), b.count("alpha", SlotKind.listener)) == (2, 1)
            # b dies: its rows are left to expire (here: moved to the past, as a renewal that stopped)
            with db.session() as s:
                s.execute(update(ConnectionSlot).where(ConnectionSlot.server_id == "proc-b")
                          .values(expires_at=func.now() - timedelta(seconds=1)))
            assert a.count("alpha", SlotKind.bridge) == 0
            a.renew()  # a's own (none of alpha's left) are untouched by b's death
            assert a.acquire("alpha", SlotKind.bridge, 2) is not None and a.acquire("alpha", SlotKind.bridge, 2)
            with db.session() as s:  # taking a slot of alpha deleted alpha's expired rows
                left = s.execute(select(ConnectionSlot.server_id, ConnectionSlot.team)
                                 .order_by(ConnectionSlot.server_id)).all()
            assert [tuple(r) for r in left] == [("proc-a", "alpha"), ("proc-a", "alpha"), ("proc-b", "beta")]
            # a renewal re-inserts a slot the database lost, and pushes the expiry on
            with db.session() as s:
                s.execute(delete(ConnectionSlot).where(ConnectionSlot.server_id == "proc-a"))
            a.renew()
            assert a.count("alpha", SlotKind.bridge) == 2
        finally:
            db.dispose()


async def test_a_teams_bridges_are_limited_across_two_server_processes(tmp_path, mini_suite):
    """Two real ``mpe serve`` processes on one PostgreSQL, a limit of 2 bridges per team: one bridge
    on each, and a third is refused (``too_many_bridges``, 1013) on either; one that leaves frees
    its slot for the other process; a team's listen socket on one process counts on the other; a
    process killed (SIGKILL) holds its slots until they expire, then the other takes them."""
    with database_url("postgres", tmp_path) as url:
        settings = make_settings(url, tmp_path)
        db = await asyncio.to_thread(Database, url)
        token = create_token(db, "alpha")
        procs = []
        try:
            servers = []
            for name in ("proc-a", "proc-b"):
                port = free_port()
                procs.append(await asyncio.to_thread(start_server, settings, port, env={
                    "MPE_SERVER_ID": name, "MPE_MAX_BRIDGES_PER_TEAM": "2", "MPE_MAX_LISTENERS_PER_TEAM": "1",
                    "MPE_SLOT_TTL_S": "3"}))
                servers.append(type("Server", (), {"ws": f"ws://127.0.0.1:{port}"}))
            a, b = servers
            on_a, first = await bridge_socket(a, token)
            on_b, second = await bridge_socket(b, token)
            assert (first["type"], second["type"]) == ("welcome", "welcome")
            for server in (a, b):  # the third, whichever process it reaches
                err, code = await refused(bridge_socket, server, token)
                assert (err["code"], code) == ("too_many_bridges", 1013)
                assert "to the servers of this database" in err["message"]
            await on_a.close()
            again = await eventually(bridge_socket, b, token, accept="welcome")  # a's slot, now b's
            run = create_run(db, team="alpha", model="nobody", suite_path=str(mini_suite), clock="lockstep",
                             limit=1, conditions=["explicit"])
            with db.session() as s:
                ep = s.scalars(select(Episode.id).where(Episode.run_id == run)).one()
            listening, msg = await listen_socket(f"{a.ws}/v1/episodes/{ep}/listen?token={token}")
            assert msg["type"] == "waiting"
            err, code = await refused(listen_socket, f"{b.ws}/v1/episodes/{ep}/listen?token={token}")
            assert (err["code"], code) == ("too_many_listeners", 1013)
            await listening.close()
            procs[1].kill()  # b dies holding both slots
            procs[1].wait()
            with db.session() as s:
                assert s.scalar(select(func.count()).select_from(ConnectionSlot)
                                .where(ConnectionSlot.server_id == "proc-b")) == 2
            for ws in (on_b, again):
                await ws.close()
            held = [await eventually(bridge_socket, a, token, accept="welcome") for _ in range(2)]  # once expired
            err, code = await refused(bridge_socket, a, token)
            assert err["code"] == "too_many_bridges"
            with db.session() as s:
                assert s.scalars(select(ConnectionSlot.server_id)).all() == ["proc-a", "proc-a"]
            for ws in held:
                await ws.close()
        finally:
            for p in procs:
                p.kill()
                p.wait()
            db.dispose()


def test_each_worker_enforces_its_share_of_the_rates(tmp_path):
    s = Settings(data_dir=tmp_path, rest_burst=120, rest_rate_per_s=20, connect_burst=3, connect_rate_per_s=10)
    assert worker_rates(s, 1) == {"rest_burst": 120, "rest_rate_per_s": 20, "connect_burst": 3, "connect_rate_per_s": 10}
    assert worker_rates(s, 4) == {"rest_burst": 30, "rest_rate_per_s": 5, "connect_burst": 1, "connect_rate_per_s": 2.5}
    off = Settings(data_dir=tmp_path, rest_rate_per_s=0, connect_rate_per_s=0)
    assert (worker_rates(off, 3)["rest_rate_per_s"], worker_rates(off, 3)["connect_rate_per_s"]) == (0, 0)  # off stays off
