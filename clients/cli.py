"""``duplex-mpe-client``: the client install's command line.

``duplex-mpe-client check --bridge FILE.py:NAME`` checks a bridge against the protocol on the
GPU host, with the bridge's own token (the bridge scope is enough): ``NAME`` is the bridge class
(or a function of no arguments that returns the bridge) in that file or module. The token comes
from ``MPE_TOKEN`` or ``--token-file`` (a process list shows neither). Exit status 0 when no check
failed, 1 when one did, 2 on an error (one line: a refused token, a wrong address, a bridge that
cannot be loaded).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path

from clients.check import check_bridge, render
from clients.checkreport import CheckReport
from clients.errors import MPEError
from clients.sdk import BaseBridge, BridgeOptions

log = logging.getLogger("mpe.sdk")


def load_bridge(spec: str) -> BaseBridge:
    """The bridge named by ``FILE.py:NAME`` or ``MODULE:NAME`` (a class or a function of no arguments)."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise MPEError(f"--bridge {spec!r}: expected FILE.py:NAME or MODULE:NAME (the bridge class)", code="bad_config")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise MPEError(f"--bridge {spec!r}: no file {where}", code="bad_config")
            sys.path.insert(0, str(path.resolve().parent))  # its own imports next to it
            loader = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[path.stem] = module
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except MPEError:
        raise
    except Exception as exc:  # the team's own module failed to import: say where, in one line
        raise MPEError(f"--bridge {spec!r}: importing it raised {type(exc).__name__}: {exc}", code="bad_config") from None
    made = getattr(module, name, None)
    if made is None:
        raise MPEError(f"--bridge {spec!r}: {where} has no {name}", code="bad_config")
    bridge = made() if callable(made) else made
    if not isinstance(bridge, BaseBridge):
        raise MPEError(f"--bridge {spec!r}: {name} is not a Bridge or AsyncBridge (clients.sdk)", code="bad_config")
    return bridge


def _token(args: argparse.Namespace) -> str:
    if args.token_file is not None:
        try:
            return Path(args.token_file).read_text().strip()
        except OSError as exc:
            raise MPEError(f"--token-file: {exc.strerror}: {args.token_file}", code="bad_config") from None
    token = os.environ.get("MPE_TOKEN", "").strip()
    if not token:
        raise MPEError("a token of your team is needed (the bridge's token is enough): MPE_TOKEN or --token-file",
                       code="unauthorized")
    return token


def _follow(report: CheckReport, last: list) -> None:
    state = (report.attempts, report.running, len(report.bridges))
    if not last:
        runs = ", ".join(f"{r.clock} {r.run_id}" for r in report.runs)
        log.info("check started (runs: %s); serving its episodes in check mode", runs)
    if state != (last[0] if last else None):
        total = sum(r.episodes for r in report.runs)
        log.info("attempts ended: %d of %d, running: %d", report.attempts, total, report.running)
    last[:] = [state]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="duplex-mpe-client", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="check a bridge against the protocol (the bridge's token is enough)")
    c.add_argument("--bridge", required=True, help="FILE.py:NAME or MODULE:NAME: the bridge class (or a function "
                                                   "of no arguments that returns the bridge)")
    c.add_argument("--server", default="ws://127.0.0.1:8600", help="the server, as the bridge is given it")
    c.add_argument("--token-file", help="a file holding the token (default: MPE_TOKEN)")
    c.add_argument("--clocks", help="clocks to check, comma-separated (default: those the bridge announces)")
    c.add_argument("--wait", type=float, default=120.0, help="give up after this many seconds without progress")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("mpe").setLevel(logging.INFO)
    try:
        bridge = load_bridge(args.bridge)
        options = BridgeOptions(server=args.server, token=_token(args))
        clocks = [x.strip() for x in args.clocks.split(",") if x.strip()] if args.clocks else None
        last: list = []
        report = asyncio.run(check_bridge(bridge, options, clocks=clocks, wait_s=args.wait,
                                          on_update=lambda r: _follow(r, last)))
    except MPEError as exc:
        log.error("%s (%s)", exc, exc.code)
        return 2
    except KeyboardInterrupt:
        return 130
    print(json.dumps(report.model_dump(mode="json")) if args.json else render(report))
    return 0 if report.ok else 1


def run() -> None:
    """The console script's entry point."""
    raise SystemExit(main())


if __name__ == "__main__":
    run()
