"""``python -m model_bridges MODEL --server URL --token-file FILE [--opt key=value ...]``: run one of
this package's bridges with the SDK alone (a bridge host set up by ``python -m model_bridges.setup``
has no server and no ``mpe`` command)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clients.sdk import BridgeOptions, run_bridge
from model_bridges import create_bridge


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m model_bridges", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a bridge of this package: moshi, minicpm-o, voila, freeze-omni, moshi-ws, …")
    p.add_argument("--server", default="ws://127.0.0.1:8600")
    p.add_argument("--token-file", help="a file holding the team token (default: $MPE_TOKEN)")
    p.add_argument("--max-episodes", type=int, default=None)
    p.add_argument("--opt", action="append", default=[], help="bridge option key=value (repeatable)")
    a = p.parse_args(argv)
    import os

    token = Path(a.token_file).read_text().strip() if a.token_file else os.environ.get("MPE_TOKEN")
    options = {}
    for o in a.opt:
        key, sep, value = o.partition("=")
        if not sep:
            p.error(f"--opt {o!r}: key=value")
        options[key] = value
    bridge = create_bridge(a.model, **options)
    client = run_bridge(bridge, BridgeOptions(server=a.server, token=token, max_episodes=a.max_episodes,
                                              reconnect=a.max_episodes is None))
    print(f"{a.model}: {client.episodes_done} episode(s) served")
    return 0


if __name__ == "__main__":
    sys.exit(main())
