"""The ``mpe`` command line (typer). Settings are built once here and injected."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from typer.core import TyperGroup

from clients.errors import MPEError
from server.settings import Settings, load_settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Duplex-MPE benchmark server.")
db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")
token_app = typer.Typer(no_args_is_help=True, help="API tokens.")
run_app = typer.Typer(no_args_is_help=True, help="Benchmark runs.")
secret_app = typer.Typer(no_args_is_help=True, help="The server's secret for signed URLs.")


class _BridgeGroup(TyperGroup):
    """``mpe bridge NAME …`` and ``mpe bridge --class …`` are short for ``mpe bridge run …``; a
    sub-command's name (``list``, …) is that sub-command."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)


bridge_app = typer.Typer(cls=_BridgeGroup, no_args_is_help=True,
                         subcommand_metavar="NAME | --class MODULE:CLASS | COMMAND [ARGS]...", help=(
    "Run a model bridge against a server: `mpe bridge NAME [OPTIONS]` (a built-in or installed bridge) or "
    "`mpe bridge --class MODULE:CLASS [OPTIONS]` (any bridge class on the Python path), both short for "
    "`mpe bridge run …` (its options: `mpe bridge run --help`). `mpe bridge list` shows the bridges by name."))
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(secret_app, name="secret")
app.add_typer(run_app, name="run")
app.add_typer(bridge_app, name="bridge")
console = Console(stderr=True)


def _db(settings: Settings):
    from server.db import Database

    return Database(settings.db_url)  # brings the schema to head first


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except MPEError as exc:  # every expected failure (bad suite, bad request, ...) is an MPEError
        console.print(f"[red]error[/red] ({exc.code}): {exc}")
        sys.exit(2)


@app.command()
def serve(host: str = typer.Option(None, help="bind address"), port: int = typer.Option(None, help="port"),
          workers: int = typer.Option(1, min=1, help="server processes sharing the port (SO_REUSEPORT); more than "
                                      "1 needs PostgreSQL (docs/api.md \"Several server processes\")")) -> None:
    """Run the server (bridges connect to /v1/bridge)."""
    s = load_settings()
    logging.getLogger("mpe").setLevel(logging.INFO)
    if workers > 1:  # the supervisor; each worker process loads the application itself
        from server.cli.supervisor import serve_workers

        sys.exit(serve_workers(s, workers, host or s.host, port or s.port))
    import uvicorn

    from server.app import create_app, uvicorn_config

    uvicorn.Server(uvicorn_config(create_app(s), host or s.host, port or s.port, s.http_idle_timeout_s,
                                log_level="info")).run()


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Bring the database schema up to date (alembic upgrade head)."""
    from server.db import upgrade

    s = load_settings()
    upgrade(s.db_url)
    console.print("database is at head")


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration_s(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h`` or ``30d`` in seconds."""
    unit = text[-1:].lower()
    number = text[:-1] if unit in DURATION_UNITS else text
    try:
        value = float(number) * DURATION_UNITS.get(unit, 1)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a duration (e.g. 3600, 15m, 12h, 30d)") from None
    if not value > 0:  # NaN included; the upper bound is create_token's
        raise typer.BadParameter("a duration must be positive")
    return value


@token_app.command("create")
def token_create(team: str = typer.Option(..., help="team that owns the token"),
                 admin: bool = typer.Option(False, help="admin token (sees all teams; the same as --scope admin)"),
                 scope: Optional[str] = typer.Option(None, help="comma-separated: bridge (serve episodes), read "
                                                     "(the team's REST API, pages, listening), admin (default: "
                                                     "bridge,read; give a bridge host a bridge token)"),
                 expires_in: Optional[str] = typer.Option(None, help="lifetime, e.g. 3600, 12h, 30d (default: "
                                                          "until revoked)"),
                 label: str = typer.Option("", help="free-form note")) -> None:
    """Create an API token and print it (shown once; stored hashed)."""
    from server.auth import create_token

    try:
        print(create_token(_db(load_settings()), team, admin=admin, scopes=scope, label=label,
                           expires_in_s=_duration_s(expires_in) if expires_in else None))
    except ValueError as exc:
        raise typer.BadParameter(str(exc))


@token_app.command("list")
def token_list(team: Optional[str] = typer.Option(None, help="only this team's tokens"),
               as_json: bool = typer.Option(False, "--json", help="one JSON object per token")) -> None:
    """List the tokens (never their secrets): id, team, scopes, expiry, revoked, label."""
    from sqlalchemy import select

    from server.db import Token

    with _db(load_settings()).session() as s:
        rows = s.scalars(select(Token).where(*([Token.team == team] if team else [])).order_by(Token.id)).all()
    for t in rows:
        item = dict(id=t.id, team=t.team, scopes=t.scopes, revoked=t.revoked, label=t.label,
                    expires_at=t.expires_at.isoformat() if t.expires_at else None)
        print(json.dumps(item) if as_json else
              f"{t.id}\t{t.team}\t{t.scopes}\t{'revoked' if t.revoked else 'active'}\t"
              f"{item['expires_at'] or 'no expiry'}\t{t.label}")


@token_app.command("revoke")
def token_revoke(token_id: int = typer.Argument(..., help="the token's id (mpe token list)")) -> None:
    """Revoke a token: its requests and signed URLs fail at once, its open sockets close within seconds."""
    from server.db import Token

    with _db(load_settings()).session() as s:
        row = s.get(Token, token_id)
        if row is None:
            raise typer.BadParameter(f"no token {token_id}")
        row.revoked = True
    console.print(f"token {token_id} revoked")


@secret_app.command("rotate")
def secret_rotate() -> None:
    """Make a new secret for signed URLs (audio, listening): every URL signed before stops working."""
    from server.api.signed import rotate_secret

    rotate_secret(_db(load_settings()))
    console.print("signed URLs now use a new secret; older ones no longer work")


def _csv(value: str | None) -> list[str] | None:
    return None if value is None else [c.strip() for c in value.split(",") if c.strip()]


@run_app.command("create")
def run_create(model: str = typer.Option(..., help="model name the bridges announce"),
               suite: Path = typer.Option(..., exists=True, file_okay=False, help="suite directory"),
               clock: str = typer.Option("lockstep", help="lockstep | realtime"),
               conditions: Optional[str] = typer.Option(None, help="comma-separated (default: every condition of "
                                                        "the suite's benchmark; Duplex-MPE: explicit,implicit)"),
               history: Optional[str] = typer.Option(None, help="MTR-DuplexBench history modes, comma-separated: gt "
                                                     "(the published protocol: ground-truth history, one episode "
                                                     "per round) and/or free (one live episode per dialogue)"),
               limit: Optional[int] = typer.Option(None, help="only the first N pairs (a pair is one scenario in both "
                                                   "conditions: 2N episodes, or N with one condition)"),
               team: str = typer.Option("local", help="team that owns the run"),
               max_attempts: Optional[int] = typer.Option(None, help="attempts per episode (MPE_MAX_ATTEMPTS)"),
               max_inflight: Optional[int] = typer.Option(None, help="lockstep: frames in flight (MPE_MAX_INFLIGHT)"),
               text_prompt: bool = typer.Option(False, "--text-prompt",
                                                help="also give the bridges the benchmark's duty as a text prompt "
                                                     "(default: audio only, the same input for every model)"),
               impair: Optional[str] = typer.Option(None, help="realtime: the network the assistant stream goes "
                                                    "through, e.g. latency=80ms,jitter=20ms,loss=1% (also rto=, "
                                                    "seed=)"),
               as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Queue a run (one episode per scenario version) and print its id."""
    from server.core.impairment import Impairment
    from server.engine.leasing import create_run
    from server.engine.matching import context_note
    from server.engine.progress import run_progress

    if history and conditions:
        raise typer.BadParameter("give --history (MTR-DuplexBench) or --conditions, not both")
    try:
        network = None if impair is None else Impairment.parse(impair)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--impair") from None
    settings = load_settings()
    db = _db(settings)
    run_id = create_run(db, team=team, model=model, suite_path=str(suite), clock=clock, impair=network,
                        conditions=_csv(history or conditions), limit=limit,
                        max_attempts=settings.max_attempts if max_attempts is None else max_attempts,
                        max_inflight=settings.max_inflight if max_inflight is None else max_inflight,
                        text_prompt=text_prompt, max_queued=settings.queue_limit())
    print(json.dumps(run_progress(db, run_id).to_json()) if as_json else run_id)
    note = context_note(db, run_id)  # episodes that no connected bridge can take yet (protocol.md §5.1)
    if note:
        print(note, file=sys.stderr)


@run_app.command("list")
def run_list(status: Optional[str] = typer.Option(None, help="only runs in this state: queued | running | finished "
                                                  "| failed | cancelled"),
             model: Optional[str] = typer.Option(None, help="only runs of this model name"),
             team: Optional[str] = typer.Option(None, help="only this team's runs (default: every team)"),
             limit: int = typer.Option(50, min=0, help="the newest N runs (0: all)"),
             as_json: bool = typer.Option(False, "--json", help="print a JSON list")) -> None:
    """List runs, newest first, with their progress (every team's: this command reads the database)."""
    from sqlalchemy import select

    from server.core.status import RunStatus
    from server.db import Run
    from server.db import Suite as SuiteRow
    from server.engine.progress import run_label, runs_progress

    if status is not None and status not in set(RunStatus):
        raise typer.BadParameter(f"status must be one of {', '.join(RunStatus)}", param_hint="--status")
    db = _db(load_settings())
    q = (select(Run.id, SuiteRow.name, SuiteRow.version, Run.created_at).join(SuiteRow, SuiteRow.id == Run.suite_id)
         .where(*(c for c in (Run.status == status if status else None, Run.model_name == model if model else None,
                              Run.team == team if team else None) if c is not None))
         .order_by(Run.created_at.desc(), Run.id))
    with db.session() as s:
        rows = s.execute(q.limit(limit) if limit else q).all()
    progress = runs_progress(db, [r.id for r in rows])
    if as_json:
        print(json.dumps([progress[i].to_json() | {
            "label": run_label(progress[i].model, progress[i].clock, name, version, i),
            "suite": {"name": name, "version": version}, "created_at": created.isoformat()}
            for i, name, version, created in rows]))
        return
    head = ("RUN", "MODEL", "CLOCK", "SUITE", "TEAM", "STATUS", "DONE", "RUNNING", "FAILED", "CREATED")
    table = [head] + [(p.run_id, p.model, p.clock, f"{name} v{version}", p.team, p.status.value, f"{p.done}/{p.total}",
                       str(p.running), str(p.failed), created.strftime("%Y-%m-%d %H:%M"))
                      for p, (_, name, version, created) in ((progress[r.id], r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if not rows:
        console.print("no runs match")


@run_app.command("status")
def run_status(run_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show a run's progress."""
    from server.engine.progress import run_progress

    p = run_progress(_db(load_settings()), run_id).to_json()
    print(json.dumps(p) if as_json else "  ".join(f"{k}={v}" for k, v in p.items()))


@run_app.command("cancel")
def run_cancel(run_id: str) -> None:
    """Cancel a run (queued episodes are dropped, running ones end at their next flush)."""
    from server.engine.leasing import cancel_run

    cancel_run(_db(load_settings()), run_id)


@run_app.command("wait")
def run_wait(run_id: str, timeout: float = typer.Option(0, help="give up after this many seconds (0 = never)")) -> None:
    """Wait for a run to end, showing progress; exit 1 if episodes failed or the run failed."""
    from server.core.status import RunStatus
    from server.engine.progress import run_progress

    db = _db(load_settings())
    t0 = time.monotonic()
    with _progress() as bar:
        task = bar.add_task(run_id, total=None)
        while True:
            p = run_progress(db, run_id)
            bar.update(task, total=p.total, completed=p.done,
                       description=f"{run_id} running={p.running} failed={p.failed}")
            if not p.active:
                break
            if timeout and time.monotonic() - t0 > timeout:
                console.print("[yellow]timed out[/yellow]")
                raise typer.Exit(3)
            time.sleep(0.5)
    print(json.dumps(p.to_json()))
    if p.failed or p.status == RunStatus.failed:
        raise typer.Exit(1)


@bridge_app.command("run")
def bridge_run(name: Optional[str] = typer.Argument(None, metavar="NAME",
                                                   help="a bridge's name: built in or installed (mpe bridge list)"),
               cls: Optional[str] = typer.Option(None, "--class", metavar="MODULE:CLASS",
                                                 help="a bridge class on the Python path (the current directory "
                                                      "first), e.g. my_bridge:MyBridge"),
               server: str = typer.Option("ws://127.0.0.1:8600", help="server address (ws://HOST:PORT; /v1/bridge "
                                                                      "is added)"),
               token: str = typer.Option(None, envvar="MPE_TOKEN", help="API token (better: MPE_TOKEN or "
                                         "--token-file, which no process list shows)"),
               token_file: Optional[Path] = typer.Option(None, exists=True, dir_okay=False,
                                                         help="a file holding the token"),
               opt: list[str] = typer.Option([], help="bridge option key=value, a keyword argument of the bridge's "
                                                      "constructor (repeatable)"),
               endpoint: Optional[str] = typer.Option(None, help="endpoint bridges: URL of the model's own server"),
               checkpoint: Optional[str] = typer.Option(None, help="in-process bridges: a checkpoint directory or a "
                                                         "hub id in the local hub cache (never downloaded)"),
               device: Optional[str] = typer.Option(None, help="in-process bridges: cpu, cuda, cuda:1, …"),
               dtype: Optional[str] = typer.Option(None, help="in-process bridges: float32, bfloat16 or float16"),
               max_episodes: Optional[int] = typer.Option(None, help="exit after this many episodes"),
               exit_when_idle: Optional[float] = typer.Option(None, "--exit-when-idle", metavar="SECONDS",
                                                              help="exit after this many seconds without an "
                                                                   "episode")) -> None:
    """Run a bridge against a server until stopped (--max-episodes, --exit-when-idle or Ctrl-C)."""
    from clients.sdk import BridgeOptions, serve_bridge
    from server.auth import read_token
    from server.cli.bridges import create_bridge, create_bridge_from

    if (name is None) == (cls is None):
        raise typer.BadParameter("give a bridge NAME or --class MODULE:CLASS (one of them)")
    bad = [o for o in opt if "=" not in o]
    if bad:
        raise typer.BadParameter(f"--opt expects key=value, got {bad[0]!r}")
    options = dict(o.split("=", 1) for o in opt)
    for key, value in (("endpoint", endpoint), ("checkpoint", checkpoint), ("device", device), ("dtype", dtype)):
        if value:
            options[key] = value
    # an in-process bridge loads its model here: a missing checkpoint is main()'s one line, exit status 2
    b = create_bridge_from(cls, **options) if cls else create_bridge(name, **options)
    logging.getLogger("mpe").setLevel(logging.INFO)  # the SDK's one-line records: connection, status, episodes
    asyncio.run(serve_bridge(b, BridgeOptions(server=server, token=read_token(token, token_file),
                                              max_episodes=max_episodes,
                                              exit_when_idle_s=exit_when_idle)))


@bridge_app.command("list")
def bridge_list() -> None:
    """List the bridges `mpe bridge NAME` runs, one a line: name, where it comes from, what it does."""
    from server.cli.bridges import ENTRY_POINT_GROUP, available_bridges

    infos = available_bridges()
    wn, ws = max(len(i.name) for i in infos), max(len(i.source) for i in infos)
    for i in infos:
        print(f"{i.name.ljust(wn)}  {i.source.ljust(ws)}  {i.summary}".rstrip())
    console.print(f"Other bridges: mpe bridge --class MODULE:CLASS, or a package's entry point in group "
                  f"{ENTRY_POINT_GROUP}.", highlight=False)


@app.command("export")
def export(run_id: str, out: Path = typer.Option(..., help="output directory")) -> None:
    """Write episode bundles (episode.json, room.wav, assistant.wav, frames.csv) of a run's completed episodes."""
    from server.engine.bundles import export_run

    db = _db(load_settings())
    with _progress() as bar:
        task = bar.add_task("export", total=None)
        paths = export_run(db, run_id, out, progress=lambda i, n: bar.update(task, completed=i, total=n))
    console.print(f"wrote {len(paths)} bundles to {out}")


@app.command()
def demo(models: str = typer.Option("silent,always-talk,oracle,cascade", help="bridges to run"),
         clock: str = typer.Option("lockstep", help="lockstep | realtime"),
         cascade_pairs: Optional[int] = typer.Option(None, min=0, help="pairs of the suite the cascade runs "
                                                     "(0: all; default: server.cli.demo.CASCADE_PAIRS)")) -> None:
    """Run the reference bridges and the cascaded baseline on the built-in suite, end to end, and summarise each episode."""
    from server.cli.demo import CASCADE_PAIRS, run_demo

    s = load_settings()
    asyncio.run(run_demo(s, [m.strip() for m in models.split(",") if m.strip()], clock=clock, console=console,
                         cascade_pairs=CASCADE_PAIRS if cascade_pairs is None else cascade_pairs))


# Sub-commands that live with their subsystems register here (one line each).
from server.cli.check import register as register_check  # noqa: E402
from server.cli.dataset import dataset_app  # noqa: E402
from server.cli.scoring import register as register_scoring  # noqa: E402

app.add_typer(dataset_app, name="dataset")
register_scoring(app)
register_check(bridge_app)  # mpe bridge check


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


if __name__ == "__main__":
    main()
