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

from clients.errors import MPEError
from server.settings import Settings, load_settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Duplex-MPE benchmark server.")
db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")
token_app = typer.Typer(no_args_is_help=True, help="API tokens.")
run_app = typer.Typer(no_args_is_help=True, help="Benchmark runs.")
app.add_typer(db_app, name="db")
app.add_typer(token_app, name="token")
app.add_typer(run_app, name="run")
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
def serve(host: str = typer.Option(None, help="bind address"), port: int = typer.Option(None, help="port")) -> None:
    """Run the server (bridges connect to /v1/bridge)."""
    import uvicorn

    from server.app import create_app, uvicorn_config

    s = load_settings()
    logging.getLogger("mpe").setLevel(logging.INFO)
    uvicorn.Server(uvicorn_config(create_app(s), host or s.host, port or s.port, log_level="info")).run()


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Bring the database schema up to date (alembic upgrade head)."""
    from server.db import upgrade

    s = load_settings()
    upgrade(s.db_url)
    console.print("database is at head")


@token_app.command("create")
def token_create(team: str = typer.Option(..., help="team that owns the token"),
                 admin: bool = typer.Option(False, help="admin token (sees all teams)"),
                 label: str = typer.Option("", help="free-form note")) -> None:
    """Create an API token and print it (shown once; stored hashed)."""
    from server.auth import create_token

    try:
        print(create_token(_db(load_settings()), team, admin=admin, label=label))
    except ValueError as exc:
        raise typer.BadParameter(str(exc))


@run_app.command("create")
def run_create(model: str = typer.Option(..., help="model name the bridges announce"),
               suite: Path = typer.Option(..., exists=True, file_okay=False, help="suite directory"),
               clock: str = typer.Option("lockstep", help="lockstep | realtime"),
               conditions: str = typer.Option("explicit,implicit", help="comma-separated"),
               limit: Optional[int] = typer.Option(None, help="only the first N pairs"),
               team: str = typer.Option("local", help="team that owns the run"),
               max_attempts: Optional[int] = typer.Option(None, help="attempts per episode (MPE_MAX_ATTEMPTS)"),
               max_inflight: Optional[int] = typer.Option(None, help="lockstep: frames in flight (MPE_MAX_INFLIGHT)"),
               as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Queue a run (one episode per scenario version) and print its id."""
    from server.engine.leasing import create_run
    from server.engine.progress import run_progress

    settings = load_settings()
    db = _db(settings)
    run_id = create_run(db, team=team, model=model, suite_path=str(suite), clock=clock,
                        conditions=[c.strip() for c in conditions.split(",") if c.strip()], limit=limit,
                        max_attempts=settings.max_attempts if max_attempts is None else max_attempts,
                        max_inflight=settings.max_inflight if max_inflight is None else max_inflight)
    print(json.dumps(run_progress(db, run_id).to_json()) if as_json else run_id)


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


@app.command()
def bridge(name: str = typer.Argument(..., help="registered bridge name (see --list)"),
           server: str = typer.Option("ws://127.0.0.1:8600", help="server URL"),
           token: str = typer.Option(None, envvar="MPE_TOKEN", help="API token (or MPE_TOKEN)"),
           opt: list[str] = typer.Option([], help="bridge option key=value (repeatable)"),
           endpoint: Optional[str] = typer.Option(None, help="endpoint bridges: URL of the model's own server"),
           max_episodes: Optional[int] = typer.Option(None, help="exit after this many episodes")) -> None:
    """Run a registered model bridge against a server."""
    from clients.sdk import BridgeOptions, serve_bridge
    from server.bridges import create_bridge

    bad = [o for o in opt if "=" not in o]
    if bad:
        raise typer.BadParameter(f"--opt expects key=value, got {bad[0]!r}")
    options = dict(o.split("=", 1) for o in opt)
    if endpoint:
        options["endpoint"] = endpoint
    try:
        b = create_bridge(name, **options)
    except KeyError as exc:
        raise typer.BadParameter(exc.args[0]) from None
    logging.getLogger("mpe").setLevel(logging.INFO)
    asyncio.run(serve_bridge(b, BridgeOptions(server=server, token=token, max_episodes=max_episodes)))


@app.command("export")
def export(run_id: str, out: Path = typer.Option(..., help="output directory")) -> None:
    """Write episode bundles (episode.json, room.wav, assistant.wav) of a run's completed episodes."""
    from server.engine.export import export_run

    db = _db(load_settings())
    with _progress() as bar:
        task = bar.add_task("export", total=None)
        paths = export_run(db, run_id, out, progress=lambda i, n: bar.update(task, completed=i, total=n))
    console.print(f"wrote {len(paths)} bundles to {out}")


@app.command()
def demo(models: str = typer.Option("silent,always-talk,oracle", help="reference bridges to run"),
         clock: str = typer.Option("lockstep", help="lockstep | realtime")) -> None:
    """Run the reference bridges on the built-in suite, end to end, and summarise each episode."""
    from server.demo import run_demo

    s = load_settings()
    asyncio.run(run_demo(s, [m.strip() for m in models.split(",") if m.strip()], clock=clock, console=console))


# Sub-commands that live with their subsystems register here (one line each).
from server.benchmarks.mpe.dataset.cli import dataset_app  # noqa: E402
from server.scoring_cli import register as register_scoring  # noqa: E402

app.add_typer(dataset_app, name="dataset")
register_scoring(app)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


if __name__ == "__main__":
    main()
