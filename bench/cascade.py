#!/usr/bin/env python
"""The cascade's robustness table: MTR-DuplexBench per-feature success on the mini suite voiced
differently from the defaults, beside the paper's cascade figures.

Variants of ``mtr-mini`` (same texts, same seed; each re-synthesised and re-fitted):

* ``default`` — piper, the generator's ranges;
* ``espeak`` — every role spoken by espeak-ng instead of piper;
* ``long-pauses`` — mid-utterance pauses of 3.5–5.0 s (the generator draws 1.5–3.0 s);
* ``long-backchannels`` — backchannels of several words ("Oh really, I did not know that.") instead
  of one-word ones;
* ``third-person`` — the background voice a third person in the room (unfiltered, another voice)
  instead of a broadcast.

Each variant is played by the cascade (two-party mode, its defaults, ``--llm`` decider) through the
real server in lockstep, history mode ``free`` (one episode per dialogue: a multi-round
conversation), and scored on speech timing (no ASR). Reference figures and the paper's cascade are
in docs/mtr.md ("The cascaded baseline").

Usage::

    python bench/cascade.py                          # every variant, llm=rule
    python bench/cascade.py --variants default,espeak --llm openai:http://127.0.0.1:8080/v1
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from server.benchmarks.mtr.dataset.builtin import build_builtin  # noqa: E402
from server.benchmarks.mtr.dataset.synth import synthesize_suite  # noqa: E402
from server.benchmarks.mtr.suite import FEATURES, Suite  # noqa: E402
from server.engine.suitedir import write_suite_files  # noqa: E402

VARIANTS = ("default", "espeak", "long-pauses", "long-backchannels", "third-person")
LONG_PAUSE_S = (3.5, 5.0)
LONG_BACKCHANNELS = ("Oh really, I did not know that.", "Right, that makes a lot of sense.",
                     "Yeah, I see what you mean.", "Okay, go on then.")


def variant_suite(name: str, base: Path, out: Path, data_dir: Path) -> Path:
    """A copy of the text of ``base`` changed as the variant says, then voiced."""
    root = out / name
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(base, root)
    if name == "default":
        return root
    suite = Suite.load(root)
    rng = random.Random(7)
    dialogues = []
    for d in suite.dialogues:
        d = d.model_copy(deep=True)
        for r in d.rounds:
            if name == "long-pauses" and r.pause is not None:
                r.pause.length_s = round(rng.uniform(*LONG_PAUSE_S), 2)
            if name == "long-backchannels":
                for b in r.backchannels:
                    b.text = rng.choice(LONG_BACKCHANNELS)
            if name == "third-person" and r.background is not None:
                r.background.kind = "speaker"
        dialogues.append(d)
    write_suite_files(root, suite.meta.model_copy(update={"name": f"mtr-mini-{name}", "audio": "pending"}), dialogues)
    synthesize_suite(root, data_dir=data_dir, engine_name="espeak" if name == "espeak" else "piper", workers=1)
    return root


async def play(suite: Path, data_dir: Path, llm: str) -> dict:
    """The cascade on ``suite`` through the real server (lockstep, ``free``); its MTR metrics."""
    from clients.sdk import BridgeClient, BridgeOptions
    from server.app import BackgroundServer
    from server.auth import create_token
    from server.benchmarks.mtr.metrics import compute_metrics
    from server.cli.bridges import create_bridge
    from server.db import Database
    from server.engine.leasing import create_run
    from server.engine.progress import run_progress
    from server.scoring.runner import ScoreOptions, score_run
    from server.settings import Settings

    work = Path(tempfile.mkdtemp(prefix="cascade-bench-"))
    suites_root = work / "suites"
    shutil.copytree(suite, suites_root / suite.name)
    settings = Settings(data_dir=data_dir, DATABASE_URL=f"sqlite:///{work}/db.sqlite", suites_root=suites_root)
    settings.ensure_dirs()
    db = Database(settings.db_url)
    token = create_token(db, "bench", label="bench")
    run = create_run(db, team="bench", model="cascade", suite_path=str(suites_root / suite.name), clock="lockstep",
                     conditions=["free"])
    bridge = create_bridge("cascade", data_dir=str(data_dir), llm=llm, mode="two-party")
    async with BackgroundServer(settings) as server:
        client = BridgeClient(bridge, BridgeOptions(server=server.url, token=token))
        task = asyncio.create_task(client.run())
        while run_progress(db, run).active:
            if task.done() and task.exception():
                raise task.exception()  # type: ignore[misc]
            await asyncio.sleep(0.5)
        client.stop()
        await asyncio.gather(task, return_exceptions=True)
    res = score_run(db, run, ScoreOptions(asr="none", workers=1))
    metrics = compute_metrics(res.episodes)["cascade"]["free"]
    spoken = [t for t in bridge.records if t.outcome == "spoken"]
    lat = sorted(t.latency_ms for t in spoken if t.latency_ms is not None)
    db.dispose()
    return {"metrics": metrics, "median_latency_ms": lat[len(lat) // 2] if lat else None,
            "decider": bridge.decider.describe()["model"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--llm", default="rule")
    ap.add_argument("--data-dir", default=None, help="TTS clip cache and suites (default: a temporary directory)")
    args = ap.parse_args()
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="cascade-bench-data-"))
    t0 = time.perf_counter()
    base = build_builtin("mtr-mini", data_dir)
    rows = {}
    for name in args.variants.split(","):
        t1 = time.perf_counter()
        suite = variant_suite(name, base, data_dir / "variants", data_dir)
        rows[name] = asyncio.run(play(suite, data_dir, args.llm))
        print(f"{name}: done in {time.perf_counter() - t1:.0f} s", flush=True)
    print(f"\ncascade (llm={args.llm}, {next(iter(rows.values()))['decider'] if rows else ''}), history free, "
          "success % per feature (mean over rounds); median reply latency")
    feats = list(FEATURES)
    print("| variant | " + " | ".join(feats) + " | latency ms |")
    print("|---" * (len(feats) + 2) + "|")
    for name, row in rows.items():
        m = row["metrics"]
        cells = [f"{100 * m[f]['value']:.0f}" if f in m and m[f].get("value") is not None else "-" for f in feats]
        print(f"| {name} | " + " | ".join(cells) + f" | {row['median_latency_ms']} |")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
