"""The bridge check from the client install: start a check of this bridge's model on the server
(``POST /v1/checks``), serve its episodes in check mode (``hello.check``: the check's episodes
only, never a real run's), follow the report (``GET /v1/checks``) until the check's runs end, and
return it. The token the bridge serves with is enough (the bridge scope); no server package.

The REST calls use the standard library (``urllib``) in a worker thread, so the client install
needs nothing beyond the SDK's own dependencies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence

from clients.checkreport import CheckReport, Verdict
from clients.errors import MPEError
from clients.redact import redact
from clients.sdk import BaseBridge, BridgeClient, BridgeOptions

log = logging.getLogger("mpe.sdk.check")

ACTIVE = ("queued", "running")  # a check run that has not ended
START_TIMEOUT_S = 300.0  # the first check on a server voices its probe suite (a few seconds, more on a slow host)


def http_base(server: str) -> str:
    """The REST base URL of a server given as bridges are given it (``ws://HOST:PORT[/v1/bridge]``,
    or its ``http(s)://`` address)."""
    base = server.strip().rstrip("/")
    if base.endswith("/v1/bridge"):
        base = base[: -len("/v1/bridge")]
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if base.startswith(ws):
            return http + base[len(ws):]
    return base


class CheckAPI:
    """The REST calls of a check; an error answer becomes an MPEError with the server's code and
    message (one line)."""

    def __init__(self, server: str, token: str | None):
        self.base, self.token = http_base(server), token

    def _call(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), body: dict | None = None,
              timeout: float = 30.0) -> dict:
        url = self.base + path + (("?" + urllib.parse.urlencode(list(query))) if query else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read()).get("error")
            except (ValueError, AttributeError):
                err = None
            if isinstance(err, dict):
                raise MPEError(str(err.get("message", "")), code=str(err.get("code", "internal"))) from None
            raise MPEError(f"{redact(url)} answered HTTP {exc.code}: not a Duplex-MPE server's API (give the "
                           "server's address, ws://HOST:PORT)", code="bad_response") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise MPEError(f"cannot reach the server at {redact(self.base)} ({reason}): is it running there?",
                           code="cannot_connect") from None
        except ValueError:
            raise MPEError(f"{redact(url)} did not answer JSON: not a Duplex-MPE server's API",
                           code="bad_response") from None

    def start(self, model: str, clocks: Sequence[str]) -> CheckReport:
        return CheckReport.model_validate(self._call("POST", "/v1/checks", body={"model": model, "clocks": list(clocks)},
                                                     timeout=START_TIMEOUT_S))

    def report(self, run_ids: Sequence[str]) -> CheckReport:
        return CheckReport.model_validate(self._call("GET", "/v1/checks", query=[("run", i) for i in run_ids]))

    def cancel(self, run_ids: Sequence[str]) -> CheckReport:
        return CheckReport.model_validate(self._call("POST", "/v1/checks/cancel",
                                                     query=[("run", i) for i in run_ids]))


async def check_bridge(bridge: BaseBridge, options: BridgeOptions, *, clocks: Sequence[str] | None = None,
                       wait_s: float = 120.0, poll_s: float = 1.0,
                       on_update: Callable[[CheckReport], None] | None = None) -> CheckReport:
    """Check ``bridge`` against the server of ``options``: start a check of its model (``clocks``:
    the bridge's own by default), serve the check's episodes in check mode, and return the report
    once the check's runs have ended. When nothing moves for ``wait_s`` seconds the check's runs are
    cancelled and the report says what was seen. MPEError (one line) on a refused token, a wrong
    address, a bridge class protocol 1 cannot carry."""
    opts = dataclasses.replace(options, check=True, max_episodes=None, exit_when_idle_s=None)
    client = BridgeClient(bridge, opts)
    client._url()  # a wrong address fails here, in one line, before anything is started
    client._hello()
    api = CheckAPI(options.server, options.token)
    report = await asyncio.to_thread(api.start, bridge.name, list(clocks or bridge.clocks))
    ids = [r.run_id for r in report.runs]
    serving = asyncio.create_task(client.run())
    try:
        seen, idle_since = None, time.monotonic()
        while True:
            if on_update is not None:
                on_update(report)
            if report.done:
                return report
            if serving.done():  # the bridge stopped (a fatal error): what it raised ends the check
                await serving
                report = await asyncio.to_thread(api.cancel, ids)
                continue
            state = (report.attempts, report.running, tuple(b.bridge_id for b in report.bridges))
            if state != seen or report.running:
                seen, idle_since = state, time.monotonic()
            elif time.monotonic() - idle_since > wait_s:
                return await asyncio.to_thread(api.cancel, ids)
            await asyncio.sleep(poll_s)
            report = await asyncio.to_thread(api.report, ids)
    finally:
        client.stop()
        await asyncio.gather(serving, return_exceptions=True)


def render(report: CheckReport) -> str:
    """The report as plain text: one line per check (verdict, check, clock, what was observed), then
    the advice for every line that did not pass, then PASS or FAIL."""
    rows = [(x.verdict.value.upper(), x.title, x.clock or "-", x.detail) for x in report.lines]
    w = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
    out = [f"Bridge check of model '{report.model}'"]
    out += [f"{v:<{w[0]}}  {t:<{w[1]}}  {c:<{w[2]}}  {d}" for v, t, c, d in rows]
    for x in report.lines:
        if x.advice and x.verdict in (Verdict.failed, Verdict.warn):
            out.append(f"{x.verdict.value} {x.title}{f' ({x.clock})' if x.clock else ''}: {x.advice}")
    failed = sum(x.verdict == Verdict.failed for x in report.lines)
    out.append("PASS: the bridge follows the protocol" if not failed else
               f"FAIL: {failed} of {len(report.lines)} checks failed")
    return "\n".join(out)
