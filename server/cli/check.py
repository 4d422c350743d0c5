"""``mpe bridge check``: the conformance check a team runs against its own bridge.

Only the server has to be reachable: the command asks the server's REST API for a check
(``POST /v1/checks``: short probe runs for the model, in the clocks asked for), the team
starts its bridge in check mode (``hello.check``; the client install's ``duplex-mpe-client check``
does both in one process), and the command follows the report (``GET /v1/checks``) until the
check's runs end, then prints the pass/fail table with advice (or ``--json``). Clocks the
bridge does not announce are cancelled and skipped; when nothing happens for ``--wait``
seconds the check gives up and reports what it saw.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clients.check import http_base
from clients.checkreport import CheckReport, Verdict
from clients.errors import MPEError
from clients.messages import CLOCKS
from server.auth import read_token
from server.core.status import ACTIVE_RUN

console = Console(stderr=True)
out = Console()  # the table goes to stdout
STYLE = {Verdict.passed: "green", Verdict.warn: "yellow", Verdict.failed: "bold red", Verdict.skipped: "dim"}


@dataclass
class CheckOptions:
    """What ``mpe bridge check`` was asked for."""

    server: str  # the server's URL as bridges are given it (ws://HOST:PORT), or its http:// URL
    token: str
    model: str
    clocks: list[str] = field(default_factory=lambda: list(CLOCKS))
    team: str | None = None
    wait_s: float = 120.0  # give up after this long with no attempt running and nothing new
    poll_s: float = 1.0


class CheckClient:
    """The REST calls of a check; errors become MPEErrors with the server's code and message."""

    def __init__(self, http: httpx.AsyncClient):
        self.http = http

    async def _call(self, method: str, path: str, **kw) -> dict:
        try:
            r = await self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise MPEError(f"cannot reach the server at {self.http.base_url}: {exc}", code="unreachable") from None
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code >= 400:
            err = body.get("error") if isinstance(body, dict) else None
            if isinstance(err, dict):
                raise MPEError(str(err.get("message", "")), code=str(err.get("code", "internal")))
            raise MPEError(f"the server answered HTTP {r.status_code} at {r.url} (is this a Duplex-MPE server?)",
                           code="bad_response")
        return body

    async def start(self, options: CheckOptions) -> CheckReport:
        body = {"model": options.model, "clocks": options.clocks}
        if options.team:
            body["team"] = options.team
        return CheckReport.model_validate(await self._call("POST", "/v1/checks", json=body))

    async def report(self, run_ids: list[str]) -> CheckReport:
        return CheckReport.model_validate(await self._call("GET", "/v1/checks", params=[("run", i) for i in run_ids]))

    async def cancel(self, run_id: str) -> None:
        await self._call("POST", "/v1/checks/cancel", params=[("run", run_id)])


async def run_check(options: CheckOptions, on_update: Callable[[CheckReport], None] | None = None) -> CheckReport:
    """Start a check on the server and follow it to its end; returns the final report."""
    headers = {"Authorization": f"Bearer {options.token}"}
    # creating the check may voice the probe suite on the server first (a few seconds)
    async with httpx.AsyncClient(base_url=http_base(options.server), headers=headers, timeout=300) as http:
        api = CheckClient(http)
        report = await api.start(options)
        ids = [r.run_id for r in report.runs]
        seen, idle_since = None, time.monotonic()
        while True:
            if on_update is not None:
                on_update(report)
            for r in report.runs:  # a clock the bridge does not announce would wait forever
                if r.announced is False and r.status in ACTIVE_RUN:
                    await api.cancel(r.run_id)
            if report.done:
                return report
            state = (report.attempts, report.running, tuple(b.bridge_id for b in report.bridges))
            if state != seen or report.running:
                seen, idle_since = state, time.monotonic()
            elif time.monotonic() - idle_since > options.wait_s:
                for r in report.runs:
                    if r.status in ACTIVE_RUN:
                        await api.cancel(r.run_id)
                return await api.report(ids)
            await asyncio.sleep(options.poll_s)
            report = await api.report(ids)


class Follower:
    """One line on stderr whenever the check moves on."""

    def __init__(self, options: CheckOptions):
        self.options, self.last = options, None

    def __call__(self, report: CheckReport) -> None:
        if self.last is None:
            runs = ", ".join(f"{r.clock} {r.run_id}" for r in report.runs)
            console.print(f"check queued (runs: {runs}). Start your bridge now in check mode (\"check\": true in "
                          f"hello; SDK: BridgeOptions(check=True)): model name "
                          f"[bold]{escape(report.model)}[/bold], a token of your team, server {self.options.server}; "
                          f"giving up after {self.options.wait_s:g} s without progress.")
        state = (report.attempts, report.running, len(report.bridges))
        if state != self.last:
            bridges = ", ".join(f"{b.bridge_id} ({'+'.join(b.clocks)})" for b in report.bridges) or "none yet"
            total = sum(r.episodes for r in report.runs if r.announced is not False)
            console.print(f"bridges: {bridges}; attempts ended: {report.attempts} of {total}, running: "
                          f"{report.running}")
        self.last = state


def render(report: CheckReport, con: Console) -> None:
    """The pass/fail table, then the advice for every line that did not pass."""
    table = Table(title=f"Bridge check of model '{escape(report.model)}'", show_lines=False)
    for col in ("check", "clock", "result", "observed"):
        table.add_column(col, overflow="fold")
    for line in report.lines:
        table.add_row(line.title, line.clock or "-", f"[{STYLE[line.verdict]}]{line.verdict.value}[/]",
                      escape(line.detail))
    con.print(table)
    advice = [x for x in report.lines if x.advice and x.verdict in (Verdict.failed, Verdict.warn)]
    for x in advice:
        con.print(f"[{STYLE[x.verdict]}]{x.verdict.value}[/] {x.title}{f' ({x.clock})' if x.clock else ''}: "
                  f"{escape(x.advice)}")
    failed = sum(x.verdict == Verdict.failed for x in report.lines)
    con.print("[green]PASS[/green]: the bridge follows the protocol" if not failed else
              f"[bold red]FAIL[/bold red]: {failed} of {len(report.lines)} checks failed")


def check(model: str = typer.Option(..., help="the model name your bridge announces (hello.model.name)"),
          server: str = typer.Option("ws://127.0.0.1:8600", help="the server, as your bridge is given it "
                                                                 "(ws://HOST:PORT; an http:// URL works too)"),
          token: Optional[str] = typer.Option(None, envvar="MPE_TOKEN", help="a token of your team (better: "
                                              "MPE_TOKEN or --token-file, which no process list shows)"),
          token_file: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="a file holding the token"),
          clocks: str = typer.Option("lockstep,realtime", help="clocks to check, comma-separated (a clock your "
                                                               "bridge does not announce is skipped)"),
          wait: float = typer.Option(120.0, min=1, help="give up after this many seconds without progress"),
          team: Optional[str] = typer.Option(None, help="admin tokens only: the team whose bridge to check"),
          as_json: bool = typer.Option(False, "--json", help="print the report as JSON")) -> None:
    """Check your bridge against the protocol (start your bridge while this waits).

    The server plays the bridge two short probe episodes per clock (speech, silence, a request,
    an interruption) and judges frames, seq, timing, speech, reaction and reset. Exit status 0
    when no check failed, 1 when one did, 2 on an error (e.g. a wrong token)."""
    token = read_token(token, token_file)
    if not token:
        raise typer.BadParameter("a token of your team is needed: --token, --token-file or MPE_TOKEN",
                                 param_hint="--token")
    options = CheckOptions(server=server, token=token, model=model, team=team, wait_s=wait,
                           clocks=[c.strip() for c in clocks.split(",") if c.strip()])
    report = asyncio.run(run_check(options, on_update=Follower(options)))
    if as_json:
        print(json.dumps(report.model_dump(mode="json")))
    else:
        render(report, out)
    raise typer.Exit(0 if report.ok else 1)


def register(bridge_app: typer.Typer) -> None:
    """Add ``check`` to the ``mpe bridge`` commands."""
    bridge_app.command("check")(check)
