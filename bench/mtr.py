#!/usr/bin/env python
"""MTR-DuplexBench benchmark: what the ``gt`` history costs, and how fast MTR episodes run.

Parts:

``stream``
    Stream time of one ten-round dialogue in ``gt`` mode (ten episodes: round k replays rounds
    1…k−1 as history first) against ``free`` mode (one episode), for the first ``--dialogues``
    dialogues of the built-in ``mtr-features`` suite (text-only: clip lengths from the manifest's
    durations). The model is scripted ideally (it replies 0.3 s after each user turn with the
    ground-truth reply, stops 0.4 s into a barge-in), so the figure is the protocol's own cost.
    Pure: the real round scheduler, no audio.
``lockstep``
    Throughput of the episode core in lockstep — the real scheduler, room mixer and Silero
    speech detector, frame by frame, in process — in stream seconds per wall second, for the
    built-in ``mtr-mini`` episodes (both modes) and, as the baseline measured in the same run,
    the Duplex-MPE ``mini`` episodes. The assistant is silent (the detector still runs on every
    frame). The end-to-end engine (WebSockets, leasing, recording) is ``bench/engine.py``.

Usage::

    python bench/mtr.py                  # both parts (a few minutes the first time: voices mtr-mini)
    python bench/mtr.py --parts stream --dialogues 200
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.benchmarks.mtr.scheduler import FRAME, RoundScheduler  # noqa: E402
from server.benchmarks.mtr.suite import Dialogue, MTRScenario  # noqa: E402
from server.core.timebase import STREAM_RATE, SpeechEvent  # noqa: E402

S = STREAM_RATE


def scripted_stream(d: Dialogue, mode: str, live: int | None) -> int:
    """Samples of one episode with the ideal scripted model (detector lag: two frames)."""
    lengths = {k: round(c.duration_s * S) for r in d.rounds for k, c in r.clips()}
    replies = {(r.round, "user"): lengths[f"r{r.round:02d}.assistant"] for r in d.rounds}
    replies.update({(r.round, "barge_in"): lengths[f"r{r.round:02d}.barge_in_response"]
                    for r in d.rounds if r.barge_in})
    sched = RoundScheduler(d, mode, live, lengths)
    spans: list[list[int]] = []
    sent: set[tuple[str, int]] = set()
    lag = 2 * FRAME
    while (plan := sched.next_frame()) is not None:
        for e in plan.events:
            if e.type == "wait.start":
                start = e.t + int(0.3 * S)
                spans.append([start, start + replies[(e.data["round"], e.data["after"])]])
            elif e.type == "barge_in.start" and "speaking" in e.data and spans:
                spans[-1][1] = min(spans[-1][1], e.t + int(0.4 * S))
        now = (plan.seq + 1) * FRAME
        out = []
        for s, t in spans:
            for kind, at in (("onset", s), ("offset", t)):
                if at + lag <= now and (kind, at) not in sent:
                    sent.add((kind, at))
                    out.append(SpeechEvent(kind, at, at + lag))
        sched.observe(sorted(out, key=lambda x: x.at), now)
    assert sched.end_sample is not None
    return sched.end_sample


def part_stream(data_dir: Path, n: int) -> None:
    from server.benchmarks.mtr.dataset.builtin import build_builtin
    from server.benchmarks.mtr.suite import Suite

    suite = Suite.load(build_builtin("mtr-features", data_dir, audio=False))
    rows = []
    for d in suite.dialogues[:n]:
        free = scripted_stream(d, "free", None)
        gt = sum(scripted_stream(d, "gt", r.round) for r in d.rounds)
        rows.append((d.set, len(d.rounds), free / S, gt / S))
    free_s = np.array([r[2] for r in rows])
    gt_s = np.array([r[3] for r in rows])
    print(f"stream time per dialogue ({len(rows)} dialogues of mtr-features, {rows[0][1]} rounds each):")
    print(f"  free: mean {free_s.mean():7.1f} s   (one episode)")
    print(f"  gt:   mean {gt_s.mean():7.1f} s   (one episode per round, history replayed)")
    print(f"  gt / free: mean {np.mean(gt_s / free_s):.2f}x  (min {np.min(gt_s / free_s):.2f}, "
          f"max {np.max(gt_s / free_s):.2f})")


def core_throughput(suite_path: Path, scenarios: list[MTRScenario]) -> tuple[float, float]:
    """(stream seconds, wall seconds) of running the episodes' cores with a silent assistant."""
    from server.engine.clips import open_episode

    stream = wall = 0.0
    silence = np.zeros(FRAME, dtype=np.int16)
    for sc in scenarios:
        core = open_episode(str(suite_path), sc, suite_hash=None, audio_hash=None)
        t0 = time.perf_counter()
        n = 0
        while core.next_room() is not None:
            core.feed_assistant(silence)
            n += 1
        wall += time.perf_counter() - t0
        stream += n * FRAME / S
    return stream, wall


def part_lockstep(data_dir: Path) -> None:
    from server.benchmarks.mpe.dataset.builtin import build_builtin as build_mpe
    from server.benchmarks.mtr.dataset.builtin import build_builtin as build_mtr
    from server.engine.clips import load_suite
    from server.engine.registry import get_benchmark

    results = {}
    for label, path, conditions in (("Duplex-MPE mini", build_mpe("mini", data_dir), ["explicit", "implicit"]),
                                    ("MTR mtr-mini", build_mtr("mtr-mini", data_dir), ["gt", "free"])):
        loaded = load_suite(path)
        bench = get_benchmark(loaded.benchmark.name)
        specs = bench.episodes(loaded.suite, conditions, None)
        stream, wall = core_throughput(path, [s.scenario for s in specs])
        results[label] = stream / wall
        print(f"  {label:16s} {len(specs):3d} episodes  {stream:8.1f} stream s in {wall:6.1f} wall s: "
              f"{stream / wall:6.1f} stream s per wall s")
    base = results["Duplex-MPE mini"]
    print(f"  MTR / Duplex-MPE throughput: {results['MTR mtr-mini'] / base:.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="stream,lockstep")
    p.add_argument("--dialogues", type=int, default=40, help="stream part: dialogues of mtr-features")
    p.add_argument("--data-dir", type=Path, default=ROOT / ".mpe", help="built-in suites and the clip cache")
    args = p.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    if "stream" in parts:
        part_stream(args.data_dir, args.dialogues)
    if "lockstep" in parts:
        print("lockstep throughput of the episode core (silent assistant, real detector):")
        part_lockstep(args.data_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
