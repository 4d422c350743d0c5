"""Are two trees' scores the same? Compare the scorings of the runs in two data directories, each
read by the tree that made it (e.g. ``mpe demo`` run by two commits):

    python bench/compare_scorings.py TREE_A DATA_A TREE_B DATA_B

For every run (matched by suite name and model) it compares ``mpe report RUN --json`` and
``mpe score RUN --json`` of both sides, leaving out what names a row of one database (ids, paths,
times, the run's short id in its label). Prints each run identical or the first lines of the
difference; exits 1 when any differs.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys

LOCAL = {"source", "ref", "created_at", "id", "started_at", "finished_at", "wall_s", "path"}


def mpe(tree: str, data: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=tree, MPE_DATA_DIR=data)
    env.pop("DATABASE_URL", None)
    p = subprocess.run([sys.executable, "-m", "server.cli", *args], env=env, capture_output=True, text=True, cwd=tree)
    if p.returncode:
        raise SystemExit(f"mpe {' '.join(args)} failed in {tree}: {p.stderr[-2000:]}")
    return p.stdout


def local_free(x):
    """``x`` without what differs between two databases holding the same results."""
    if isinstance(x, str):
        return re.sub(r" · [0-9a-f]{8}$", " · RUN", x)
    if isinstance(x, dict):
        return {k: local_free(v) for k, v in sorted(x.items()) if k not in LOCAL and not k.endswith("_id")}
    if isinstance(x, list):
        return [local_free(v) for v in x]
    return x


def scorings(tree: str, data: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for r in json.loads(mpe(tree, data, "run", "list", "--json")):
        key = f"{r['suite']['name']}/{r['model']}"
        out[f"{key} report"] = local_free(json.loads(mpe(tree, data, "report", r["run_id"], "--json")))
        out[f"{key} score"] = local_free(json.loads(mpe(tree, data, "score", r["run_id"], "--json")))
    return out


def main() -> int:
    tree_a, data_a, tree_b, data_b = sys.argv[1:5]
    a, b = scorings(tree_a, data_a), scorings(tree_b, data_b)
    if sorted(a) != sorted(b):
        print(f"different runs: {sorted(set(a) ^ set(b))}")
        return 1
    same = 0
    for key in sorted(a):
        ja, jb = (json.dumps(x, sort_keys=True, indent=1).splitlines() for x in (a[key], b[key]))
        if ja == jb:
            same += 1
            print(f"identical: {key}")
        else:
            print(f"DIFFERENT: {key}")
            print("\n".join(list(difflib.unified_diff(ja, jb, lineterm=""))[:40]))
    print(f"{same}/{len(a)} identical")
    return 0 if same == len(a) else 1


if __name__ == "__main__":
    sys.exit(main())
