"""Property-based fuzzing (Hypothesis) of every REST route over real HTTP, against one in-process
server per database (SQLite, then a shorter PostgreSQL pass).

The routes come from the server's own ``/openapi.json``: for each, Hypothesis draws its path
parameters (real ids of the world's runs, episodes, suites and tokens, and any text), its query
parameters from their schema (values in and just out of range, huge numbers, other types, odd
text, unknown parameters), a JSON body (the route's valid bodies mutated, any JSON value, bytes
that are not JSON) and a token (a team's, an admin's, a bridge-only one, none, a wrong one).
Properties: never a 5xx; every error is the documented body with its stable code and the HTTP
status docs/api.md gives it; no response (error or not) names a server path or carries a
traceback or SQL. The world holds a finished episode with audio and a frame log, queued runs of
two teams, the bridge check's probe suite, and hostile suite directories below the suites root.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from clients.messages import EpisodeStart
from clients.sdk import Bridge
from server.api.errors import HTTP_STATUS
from server.auth import create_token
from server.bridgecheck.suite import CHECK_SUITE_NAME, build_check_suite
from server.db import Episode, Token
from server.db import Suite as SuiteRow
from server.engine.leasing import create_run
from tests.support.fuzz import LEAKS, dumps, fuzz, json_values, mutated, odd_text
from tests.support.world import ServedWorld, bridge, wait_run


class Silent(Bridge):
    """Plays every episode in silence."""

    name = "silent"
    clocks = ("lockstep", "realtime")

    def reset(self, episode: EpisodeStart) -> None:
        pass

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        return None


def hostile_suites(root: Path, mini: Path) -> list[str]:
    """Suite directories below the suites root that were each a 500 (or worse) before: a suite.json
    nested too deeply (GET /v1/suites/available), a NaN duration (validation passed, PostgreSQL
    refused the scenario), a NUL in a name, a clip name too long for the filesystem."""
    made = {}
    for name, edit in {
        "deep": lambda meta, lines: ("[" * 5000 + "]" * 5000, lines),
        "nan": lambda meta, lines: (meta, lines.replace('"duration_s":', '"duration_s":NaN,"x":', 1)),
        "nul": lambda meta, lines: (meta.replace('"name": "mini"', '"name": "mini\\u0000"'), lines),
        "long-clip": lambda meta, lines: (meta, lines.replace('"clip":"clips/', '"clip":"clips/' + "a" * 300, 1)),
    }.items():
        d = root / "hostile" / name
        shutil.copytree(mini, d)
        meta, lines = edit((d / "suite.json").read_text(), (d / "scenarios.jsonl").read_text())
        (d / "suite.json").write_text(meta)
        (d / "scenarios.jsonl").write_text(lines)
        made[name] = f"hostile/{name}"
    return list(made.values())


async def _setup(w) -> dict:
    """The world's content: alpha's finished episode (played by a silent bridge) and queued run,
    beta's queued run, a bridge-only token; every id the fuzzing draws from."""
    done = create_run(w.db, team="alpha", model="silent", suite_path=str(w.suite), clock="lockstep", limit=1,
                      conditions=["explicit"])
    create_run(w.db, team="alpha", model="nobody", suite_path=str(w.suite), clock="realtime")
    create_run(w.db, team="beta", model="nobody", suite_path=str(w.suite), clock="lockstep", limit=1)
    async with bridge(w, Silent(), token=w.tokens["alpha"]) as task:
        await wait_run(w.db, done, [task])
    w.tokens["bridge"] = create_token(w.db, "alpha", scopes="bridge", label="bridge only")
    with w.db.session() as s:
        ids = {
            "run_id": [r for (r,) in s.execute(select(Episode.run_id).distinct())],
            "episode_id": [e for (e,) in s.execute(select(Episode.id))],
            "suite_id": [i for (i,) in s.execute(select(SuiteRow.id))],
            "max_token": s.scalar(select(func.max(Token.id))),
        }
    ids["done"] = done
    ids["suites"] = ["mini", "mini/", "./mini", "hostile", *hostile_suites(w.settings.suites_root, w.suite),
                     "bridge-check", "../mini", "/etc", "mini/../mini"]
    shutil.copytree(build_check_suite(w.probe_cache), w.settings.data_dir / "suites" / CHECK_SUITE_NAME)
    return ids


@pytest.fixture(scope="session")
def probe_cache(pytestconfig) -> Path:
    """Where the bridge check's probe suite is voiced once (shared with tests/test_bridge_check.py)."""
    return Path(pytestconfig.cache.mkdir("bridge-check"))


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request, tmp_path_factory, mini_suite, probe_cache):
    async def setup(w):
        w.probe_cache = probe_cache
        return await _setup(w)

    # the rate limits off: the fuzzer sends thousands of requests on a few tokens (the limits have
    # their own tests in test_limits.py)
    with ServedWorld(request.param, tmp_path_factory.mktemp(f"fuzz-api-{request.param}"), mini_suite, setup,
                     rest_rate_per_s=0, connect_rate_per_s=0) as sw:
        with httpx.Client(base_url=sw.world.http, timeout=60) as client:
            sw.client = client
            sw.schema = client.get("/openapi.json").json()
            yield sw


# --- requests drawn from the OpenAPI schema -----------------------------------------------------


def _resolve(schema: dict, spec: dict) -> dict:
    """A parameter's schema without its ``$ref`` and its ``| null``."""
    if "$ref" in spec:
        spec = schema["components"]["schemas"][spec["$ref"].rsplit("/", 1)[1]]
    options = [o for o in spec.get("anyOf", []) if o.get("type") != "null"]
    return _resolve(schema, options[0]) if len(options) == 1 else spec


def mostly(valid: st.SearchStrategy, other: st.SearchStrategy, odds: int = 5) -> st.SearchStrategy:
    """``valid`` ``odds`` times out of ``odds + 1``, else ``other``."""
    return st.sampled_from(range(odds + 1)).flatmap(lambda i: other if i == odds // 2 else valid)


def _ints(spec: dict) -> tuple[st.SearchStrategy[str], st.SearchStrategy[str]]:
    """Integers in the schema's range, and integers around and far beyond it, as text."""
    lo = spec.get("minimum", spec.get("exclusiveMinimum", -1) + 1)
    hi = spec.get("maximum", spec.get("exclusiveMaximum", 2**31) - 1)
    valid = st.sampled_from([lo, hi]) | st.integers(lo, min(hi, lo + 1000))
    edges = [lo - 1, hi + 1, 0, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 10**30, -(10**30)]
    hostile = st.one_of(st.sampled_from(edges).map(str), st.integers().map(str),
                        st.sampled_from(["9" * 5000, "1.5", "1e3", "0x10", " 1", "+1", "-0", "٣"]))
    return valid.map(str), hostile


#: meaningful values of the string parameters that take any text
WORDS = {"model": ["silent", "nobody", "fuzz-m"], "team": ["alpha", "beta", "ops", "gamma"],
         "outcome": ["ok", "no_response", "incorrect", "intrusion", "unfinished", "unscored", "smooth_fail"],
         "sig": ["0" * 40]}


def values_for(sw: ServedWorld, name: str, spec: dict) -> st.SearchStrategy:
    """Values of one path or query parameter: mostly valid ones by its schema (the world's ids for
    id parameters), else values just out of range, of another type, or any text."""
    spec = _resolve(sw.schema, spec)
    hostile = odd_text | st.sampled_from(["", " ", "x" * 300, "%", "..", "null", "[]", "{}", "true"])
    if name in ("run_id", "episode_id", "suite_id"):
        other = {"run_id": "episode_id", "episode_id": "run_id", "suite_id": "run_id"}[name]
        valid = st.sampled_from(sw.ids[name])
        hostile = st.sampled_from(sw.ids[other]) | st.sampled_from(["x" * 64, "x" * 65, "../x"]) | hostile
    elif name == "token_id":  # never the world's own tokens: revoking them would end the fuzzing
        first = sw.ids["max_token"] + 1
        valid = st.integers(first, first + 30).map(str)
        hostile = _ints(spec)[1].filter(lambda v: not (v.isdigit() and len(v) < 19 and int(v) < first)) | hostile
    elif name == "exp":  # a signed URL's expiry
        valid = st.integers(0, 4000).map(lambda d: str(int(time.time()) + d))
        hostile = _ints(spec)[1] | hostile
    elif spec.get("type") == "array":
        valid = st.lists(values_for(sw, "run_id" if name == "run" else name, spec["items"]), min_size=1, max_size=2)
        return valid | st.lists(hostile, max_size=3)
    elif "enum" in spec:
        valid = st.sampled_from(spec["enum"])
    elif spec.get("type") == "integer":
        valid, far = _ints(spec)
        hostile = far | hostile
    elif spec.get("type") == "boolean":
        valid = st.sampled_from(["true", "false"])
        hostile = st.sampled_from(["1", "0", "yes", "off", "TRUE"]) | hostile
    else:
        assert spec.get("type") == "string" or not spec, (name, spec)  # a new kind of parameter: teach the fuzzer
        valid = st.sampled_from(WORDS.get(name, ["x"]))
    return mostly(valid, hostile)


def bodies(sw: ServedWorld, ref: str) -> st.SearchStrategy:
    """JSON bodies of a route: its valid ones mutated, any JSON value, or bytes that are not JSON."""
    suites = st.sampled_from(sw.ids["suites"])
    valid = {
        "RunCreate": [{"model": "fuzz-m", "suite": "mini", "clock": "lockstep", "conditions": ["explicit"], "limit": 1},
                      {"model": "fuzz-m", "suite_id": sw.ids["suite_id"][0], "clock": "realtime", "max_attempts": 1,
                       "max_inflight": 2, "text_prompt": True, "team": "beta"}],
        "TokenCreate": [{"team": "gamma", "scopes": ["read"], "expires_in_s": 3600, "label": "fuzz"},
                        {"team": "gamma", "admin": False}],
        "CheckCreate": [{"model": "fuzz-check", "clocks": ["lockstep"]}, {"model": "fuzz-check", "team": "alpha"}],
    }[ref]
    named = st.sampled_from(valid).flatmap(lambda b: suites.map(lambda s: {**b, "suite": s} if "suite" in b else b))
    hostile = st.one_of(
        st.sampled_from(valid).flatmap(mutated).map(lambda b: ("json", b)),
        st.sampled_from(valid).flatmap(mutated).map(lambda b: ("json", b)),
        json_values.map(lambda b: ("json", b)),
        st.sampled_from([b"", b"{", b"\xff\xfe", b'{"model": "m"' * 2000, b"[" * 10_000, b"\x00"]).map(
            lambda b: ("bytes", b)),
    )
    return mostly(named.map(lambda b: ("json", b)), hostile, odds=1)


def _encode(value: str) -> str:
    return quote(value, safe="", errors="surrogatepass")


@st.composite
def requests(draw, sw: ServedWorld):
    """One request to one route of the schema (or HEAD of the audio route)."""
    routes = [(method, path, op) for path, ops in sw.schema["paths"].items() for method, op in ops.items()]
    routes.append(("head", "/v1/episodes/{episode_id}/audio/{track}",
                   sw.schema["paths"]["/v1/episodes/{episode_id}/audio/{track}"]["get"]))
    method, path, op = draw(st.sampled_from(routes), label="route")
    # the audio route's signed-URL form: no token, its tid, exp and sig always sent
    signed = "audio/{track}" in path and draw(st.integers(0, 2), label="signed") == 0
    url, query = path, []
    for p in op.get("parameters", []):
        if p["in"] == "path":
            value = draw(values_for(sw, p["name"], p["schema"]), label=p["name"])
            url = url.replace("{" + p["name"] + "}", _encode(value))
        elif p["in"] == "query" and ((signed and p["name"] in ("tid", "exp", "sig"))
                                     or draw(st.integers(0, 2), label=f"send {p['name']}") > 0):
            value = draw(values_for(sw, p["name"], p["schema"]), label=p["name"])
            query += [(p["name"], v) for v in (value if isinstance(value, list) else [value])]
    if draw(st.integers(0, 9), label="extra query") == 0:
        query.append((draw(odd_text, label="extra name"), draw(odd_text, label="extra value")))
    if query:
        url += "?" + "&".join(f"{_encode(k)}={_encode(v)}" for k, v in query)
    headers = {}
    usual = "admin" if path.startswith("/v1/tokens") else "alpha"  # the token the route is for
    who = None if signed else draw(st.sampled_from([usual] * 4 + ["admin", "beta", "bridge", None, "wrong"]),
                                   label="token")
    if who == "wrong":
        headers["Authorization"] = draw(st.sampled_from(["Bearer mpe_wrong", "Basic abc", "Bearer", "bearer  x"]))
    elif who is not None:
        headers["Authorization"] = f"Bearer {sw.world.tokens[who]}"
    if "audio/{track}" in path and draw(st.booleans(), label="range"):
        headers["Range"] = draw(st.sampled_from(["bytes=0-10", "bytes=-5", "bytes=10-", "bytes=5-1", "bytes=0-0,5-9",
                                                 "bytes=" + "9" * 40 + "-", "items=0-1"])
                                 | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20).map(
                                     lambda t: ("bytes=" + t).strip()))  # what an HTTP header can carry
    content = None
    if "requestBody" in op:
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        kind, body = draw(bodies(sw, ref), label="body")
        content = dumps(body).encode() if kind == "json" else body  # NaN, 1e999, 5000 digits as they are
        headers["Content-Type"] = "application/json"
    return method.upper(), url, headers, content, f"{method.upper()} {path}"


def check_response(sw: ServedWorld, r: httpx.Response) -> None:
    """Never a 5xx; errors are the documented body, code and status; nothing leaks."""
    assert r.status_code < 500, (r.status_code, r.text[:500])
    if r.request.method == "HEAD" or r.headers.get("content-type", "").startswith("audio/"):
        return
    text = r.text
    for p in {str(sw.tmp), str(sw.tmp.resolve()), str(sw.world.settings.data_dir), str(sw.suite.parent)}:
        assert p not in text, f"a server path in the response: {text[:300]}"
    assert not LEAKS.search(text), text[:300]
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]) <= {"code", "message",
                                                                                    "retry_after_s"}, body
        code = body["error"]["code"]
        assert HTTP_STATUS.get(code, r.status_code) == r.status_code, (code, r.status_code)
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], body


def test_every_route_is_fuzzed(served):
    """The fuzzing below draws from every route of the schema, each parameter of a known kind."""
    routes = [(m, p) for p, ops in served.schema["paths"].items() for m in ops]
    assert len(routes) >= 22, routes
    for path, ops in served.schema["paths"].items():
        for op in ops.values():
            for p in op.get("parameters", []):
                values_for(served, p["name"], p["schema"])  # raises for a parameter it cannot draw


def _fuzz_routes(served, n: int) -> Counter:
    """``n`` generated requests; how each route answered them."""
    answers: Counter = Counter()

    @fuzz(n)
    @given(req=requests(served))
    def run(req):
        method, url, headers, content, route = req
        r = served.client.request(method, url, headers=headers, content=content)
        answers[route, r.status_code] += 1
        check_response(served, r)

    run()
    return answers


def test_routes_take_any_request(served):
    """Generated requests to every route (SQLite: 1500 of them; PostgreSQL: 500). The fuzzing gets
    past authentication and validation: a quarter of the requests, and some of most routes', are
    answered by the route's own code (neither 401, 403 nor 422)."""
    answers = _fuzz_routes(served, 1500 if served.kind == "sqlite" else 500)
    inside: Counter = Counter()
    for (route, status), n in answers.items():
        inside[route] += n if status not in (401, 403, 422) else 0
    inside = +inside  # the routes some request got into
    routes = {route for route, _ in answers}
    assert sum(inside.values()) >= 0.25 * sum(answers.values()), answers
    assert len(inside) >= 0.75 * len(routes), routes - set(inside)


#: the minimal requests that were a 500 before (each on SQLite, PostgreSQL or both)
REGRESSIONS = [
    (None, "GET", "/v1/episodes/{episode}/audio/mix?tid=9223372036854775808&exp=1&sig=x", None, 401),
    (None, "GET", "/v1/episodes/{episode}/audio/mix?tid=2147483648&exp=1&sig=x", None, 401),
    # found by the fuzzing: a signature with a non-ASCII character (hmac.compare_digest refused the str)
    (None, "GET", "/v1/episodes/{episode}/audio/room?tid=1&exp={exp}&sig=%C2%80", None, 401),
    ("admin", "DELETE", "/v1/tokens/9223372036854775808", None, 422),
    ("admin", "DELETE", "/v1/tokens/2147483648", None, 422),
    ("alpha", "GET", "/v1/suites/available", None, 200),
    ("alpha", "POST", "/v1/runs", {"model": "m", "suite": "hostile/nan"}, 400),
    ("alpha", "POST", "/v1/runs", {"model": "m", "suite": "hostile/nul"}, 400),
    ("alpha", "POST", "/v1/runs", {"model": "m", "suite": "hostile/deep"}, 400),
    ("alpha", "POST", "/v1/runs", {"model": "m", "suite": "hostile/long-clip"}, 400),
]


@pytest.mark.parametrize("who, method, url, body, status", REGRESSIONS)
def test_route_regressions(served, who, method, url, body, status):
    headers = {"Authorization": f"Bearer {served.world.tokens[who]}"} if who else {}
    url = url.format(episode=served.ids["episode_id"][0], exp=int(time.time()) + 60)
    r = served.client.request(method, url, json=body, headers=headers)
    check_response(served, r)
    assert r.status_code == status, r.text
    if url == "/v1/suites/available":  # the readable suites are listed, the broken ones left out
        assert {d["path"] for d in r.json()} >= {"mini", "hostile/long-clip"}, r.json()
