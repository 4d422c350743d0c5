#!/usr/bin/env python
"""The cascade's robustness tables: MTR-DuplexBench per-feature success and the Duplex-MPE
quantities on the mini suites voiced differently from the defaults, beside the papers' figures.

Part ``mtr`` — variants of ``mtr-mini`` (same texts, same seed; each re-synthesised and re-fitted):

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

Part ``mpe`` — the first ``--pairs`` pairs of the Duplex-MPE ``mini`` suite (both conditions), the
same text voiced by each of ``--voicings``: ``piper`` (the default), ``espeak`` (espeak-ng) and
``kokoro`` (Kokoro-82M, the ``kokoro`` extra; skipped with a note where it is not installed). Each is
played by the cascade (multi-party mode, its defaults, ``--llm`` decider) through the real server in
lockstep and scored offline (faster-whisper tiny.en, rule judge); the six Duplex-MPE quantities per
voicing and condition. The Duplex-MPE paper publishes no cascade figures; the table and what it
shows are in docs/mtr.md ("The cascaded baseline", "Duplex-MPE on other voices").

Usage::

    python bench/cascade.py                          # both parts, every variant and voicing, llm=rule
    python bench/cascade.py --parts mpe --pairs 2 --voicings piper,espeak,kokoro
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
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from server.benchmarks.mpe.dataset.builtin import build_builtin as build_mpe_builtin  # noqa: E402
from server.benchmarks.mpe.dataset.synth import synthesize_suite as synthesize_mpe_suite  # noqa: E402
from server.benchmarks.mpe.metrics import METRICS  # noqa: E402
from server.benchmarks.mpe.suite import Suite as MPESuite  # noqa: E402
from server.benchmarks.mpe.suite import write_suite as write_mpe_suite  # noqa: E402
from server.benchmarks.mtr.dataset.builtin import build_builtin  # noqa: E402
from server.benchmarks.mtr.dataset.synth import synthesize_suite  # noqa: E402
from server.benchmarks.mtr.suite import FEATURES, Suite  # noqa: E402
from server.engine.suitedir import write_suite_files  # noqa: E402
from server.tts import ENGINE_NAMES  # noqa: E402
from server.tts.kokoro import kokoro_available  # noqa: E402

VARIANTS = ("default", "espeak", "long-pauses", "long-backchannels", "third-person")
LONG_PAUSE_S = (3.5, 5.0)
VOICINGS = ENGINE_NAMES  # piper (the default), espeak, kokoro
MPE_CONDITIONS = ("explicit", "implicit")
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


def mpe_suite(voicing: str, base: Path, out: Path, data_dir: Path, pairs: int) -> Path:
    """The first ``pairs`` pairs of the text-only suite ``base``, voiced by the TTS engine ``voicing``
    (its default voice map; the preamble too)."""
    root = out / f"mini-{voicing}"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(base, root)
    suite = MPESuite.load(root)
    keep = set(list(dict.fromkeys(sc.pair_id for sc in suite.scenarios))[:pairs])
    write_mpe_suite(root, suite.meta.model_copy(update={"name": f"mini-{voicing}"}),
                    [sc for sc in suite.scenarios if sc.pair_id in keep])
    synthesize_mpe_suite(root, data_dir=data_dir, engine_name=voicing, workers=1)
    return root


@dataclass(frozen=True)
class Played:
    """One run of the cascade on one suite: the benchmark's metrics of its ``cascade`` model
    (condition -> quantity -> value), and the median reply latency of the bridge's last episode."""

    metrics: dict
    median_latency_ms: int | None
    decider: str


async def play(suite: Path, data_dir: Path, llm: str, *, benchmark: Literal["mtr", "mpe"] = "mtr") -> Played:
    """The cascade on ``suite`` through the real server in lockstep: MTR in two-party mode, history
    ``free``, scored on speech timing; Duplex-MPE in its default (multi-party) mode, both conditions,
    scored offline (tiny.en, rule judge)."""
    from clients.sdk import BridgeClient, BridgeOptions
    from server.app import BackgroundServer
    from server.auth import create_token
    from server.benchmarks.mpe.metrics import compute_metrics as mpe_metrics
    from server.benchmarks.mtr.metrics import compute_metrics as mtr_metrics
    from server.cli.bridges import create_bridge
    from server.db import Database
    from server.engine.leasing import create_run
    from server.engine.progress import run_progress
    from server.scoring.runner import ScoreOptions, score_run
    from server.settings import Settings

    mtr = benchmark == "mtr"
    work = Path(tempfile.mkdtemp(prefix="cascade-bench-"))
    suites_root = work / "suites"
    shutil.copytree(suite, suites_root / suite.name)
    settings = Settings(data_dir=data_dir, DATABASE_URL=f"sqlite:///{work}/db.sqlite", suites_root=suites_root)
    settings.ensure_dirs()
    db = Database(settings.db_url)
    token = create_token(db, "bench", label="bench")
    run = create_run(db, team="bench", model="cascade", suite_path=str(suites_root / suite.name), clock="lockstep",
                     conditions=["free"] if mtr else list(MPE_CONDITIONS))
    bridge = create_bridge("cascade", data_dir=str(data_dir), llm=llm, **({"mode": "two-party"} if mtr else {}))
    async with BackgroundServer(settings) as server:
        client = BridgeClient(bridge, BridgeOptions(server=server.url, token=token))
        task = asyncio.create_task(client.run())
        while run_progress(db, run).active:
            if task.done() and task.exception():
                raise task.exception()  # type: ignore[misc]
            await asyncio.sleep(0.5)
        client.stop()
        await asyncio.gather(task, return_exceptions=True)
    if mtr:
        res = score_run(db, run, ScoreOptions(asr="none", workers=1))
        metrics = mtr_metrics(res.episodes)["cascade"]["free"]
    else:
        res = score_run(db, run, ScoreOptions(asr="faster-whisper", judge="rule", workers=1))
        metrics = mpe_metrics(res.episodes)["cascade"]
    spoken = [t for t in bridge.records if t.outcome == "spoken"]
    lat = sorted(t.latency_ms for t in spoken if t.latency_ms is not None)
    db.dispose()
    return Played(metrics, lat[len(lat) // 2] if lat else None, bridge.decider.describe()["model"])


def mtr_table(rows: dict[str, Played], llm: str) -> None:
    print(f"\ncascade (llm={llm}, {next(iter(rows.values())).decider if rows else ''}), MTR-DuplexBench mtr-mini, "
          "history free, success % per feature (mean over rounds); median reply latency")
    feats = list(FEATURES)
    print("| variant | " + " | ".join(feats) + " | latency ms |")
    print("|---" * (len(feats) + 2) + "|")
    for name, row in rows.items():
        m = row.metrics
        cells = [f"{100 * m[f]['value']:.0f}" if f in m and m[f].get("value") is not None else "-" for f in feats]
        print(f"| {name} | " + " | ".join(cells) + f" | {row.median_latency_ms} |")


def mpe_cell(q: dict) -> str:
    pct = "–" if q["value"] is None else f"{100 * q['value']:.0f} %"
    return f"{pct} ({q['num']}/{q['den']})"


def mpe_table(rows: dict[str, Played], llm: str, pairs: int) -> None:
    print(f"\ncascade (llm={llm}, {next(iter(rows.values())).decider if rows else ''}), Duplex-MPE mini, first {pairs} "
          "pair(s), lockstep, tiny.en + rule judge")
    names = list(METRICS)
    print("| voicing | condition | " + " | ".join(METRICS[n].title for n in names) + " |")
    print("|---" * (len(names) + 2) + "|")
    for voicing, row in rows.items():
        for cond in MPE_CONDITIONS:
            m = row.metrics.get(cond)
            cells = [mpe_cell(m[n]) if m else "-" for n in names]
            print(f"| {voicing} | {cond} | " + " | ".join(cells) + " |")
    print("| *the Duplex-MPE paper's cascade* | | *no figures published* |" + " |" * (len(names) - 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="mtr,mpe", help="mtr, mpe or both")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="the mtr-mini variants")
    ap.add_argument("--voicings", default=",".join(VOICINGS), help="the TTS engines voicing Duplex-MPE mini")
    ap.add_argument("--pairs", type=int, default=2, help="Duplex-MPE mini pairs played per voicing")
    ap.add_argument("--llm", default="rule")
    ap.add_argument("--data-dir", default=None, help="TTS clip cache and suites (default: a temporary directory)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if bad := parts - {"mtr", "mpe"}:
        ap.error(f"unknown part(s): {', '.join(sorted(bad))} (mtr, mpe)")
    if bad := set(args.voicings.split(",")) - set(VOICINGS):
        ap.error(f"unknown voicing(s): {', '.join(sorted(bad))} ({', '.join(VOICINGS)})")
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="cascade-bench-data-"))
    t0 = time.perf_counter()
    mtr_rows: dict[str, Played] = {}
    if "mtr" in parts:
        base = build_builtin("mtr-mini", data_dir)
        for name in args.variants.split(","):
            t1 = time.perf_counter()
            suite = variant_suite(name, base, data_dir / "variants", data_dir)
            mtr_rows[name] = asyncio.run(play(suite, data_dir, args.llm))
            print(f"mtr {name}: done in {time.perf_counter() - t1:.0f} s", flush=True)
    mpe_rows: dict[str, Played] = {}
    if "mpe" in parts:
        text = build_mpe_builtin("mini", data_dir, audio=False)
        for voicing in args.voicings.split(","):
            if voicing == "kokoro" and not kokoro_available():
                print("mpe kokoro: skipped, the kokoro extra is not installed (pip install 'duplex-mpe[kokoro]')")
                continue
            t1 = time.perf_counter()
            suite = mpe_suite(voicing, text, data_dir / "mpe-voicings", data_dir, args.pairs)
            t2 = time.perf_counter()
            mpe_rows[voicing] = asyncio.run(play(suite, data_dir, args.llm, benchmark="mpe"))
            print(f"mpe {voicing}: voiced in {t2 - t1:.0f} s, played and scored in {time.perf_counter() - t2:.0f} s",
                  flush=True)
    if mtr_rows:
        mtr_table(mtr_rows, args.llm)
    if mpe_rows:
        mpe_table(mpe_rows, args.llm, args.pairs)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
