#!/usr/bin/env python
"""Turn segmentation (``mpe segment``) against recordings with known turns: turn F1 and boundary error.

The recordings: every episode of the built-in ``mtr-mini`` suite (2 dialogues of 4 rounds: smooth,
interruption, pause, background, backchannel) in both history modes (``free``: one episode per
dialogue; ``gt``: one per round, earlier rounds as ground-truth history), played in lockstep by
the reference bridges ``mtr-oracle`` (replies 0.3 s after the user, stops 0.4 s into a barge-in,
talks through background voices and backchannels), ``silent`` and ``always-talk`` (talks all the
time, over every user turn). Each episode runs through the engine's episode core — the real round
scheduler, room mixer and speech detector, frame by frame, the loop a lockstep episode of the
server runs — and is written as a stereo WAV (left = the room, i.e. the user's side; right = the
model), then segmented from that file as ``mpe segment FILE`` does.

**Known turns** come from the episode's events: every user turn (``user.start`` → ``user.end``; a
pause round's turn spans the pause) and every barge-in (``barge_in.start`` → ``barge_in.end``),
history rounds included; background voices and backchannels are not turns. Each boundary is moved
in by the clip's own leading / trailing near-silence (samples under −40 dBFS), so it is where the
speech starts and stops.

Usage::

    python bench/segmentation.py                       # offline backend, n = 6
    python bench/segmentation.py --backend claude --n 6   # needs ANTHROPIC_API_KEY (cached)
    python bench/segmentation.py --json                # the figures as JSON
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clients.messages import EpisodeStart, Reference  # noqa: E402
from server.benchmarks.mtr.segmentation.evaluation import (  # noqa: E402
    EMPTY,
    TOLERANCE,
    TurnScore,
    audible_extent,
    score_turns,
)
from server.benchmarks.mtr.segmentation.schema import Span  # noqa: E402
from server.core.audio import write_wav  # noqa: E402
from server.core.events import Event  # noqa: E402
from server.core.timebase import STREAM_RATE  # noqa: E402

BRIDGES = ("mtr-oracle", "silent", "always-talk")


def known_turns(events: list[Event], dialogue, suite) -> list[Span]:
    """The true user turns of an episode (module docstring)."""
    rounds = {r.round: r for r in dialogue.rounds}
    starts: dict[tuple[str, int], int] = {}
    out = []
    for e in events:
        kind, _, edge = e.type.partition(".")
        if kind not in ("user", "barge_in") or edge not in ("start", "end"):
            continue
        n = e.data["round"]
        if edge == "start":
            starts.setdefault((kind, n), e.t)  # a pause round: the first part starts the turn
            continue
        r = rounds[n]
        if kind == "user":
            first = r.user.clip
            last = r.pause.continuation.clip if r.pause else r.user.clip
        else:
            first = last = r.barge_in.clip
        lead = audible_extent(suite.load_clip(first))[0]
        trail = audible_extent(suite.load_clip(last))[1]
        out.append(Span(start=starts.pop((kind, n)) + lead, end=e.t - trail))
    return sorted(out, key=lambda s: s.start)


def make_bridge(name: str, data_dir: Path, suite_path: Path):
    if name == "mtr-oracle":
        from server.benchmarks.mtr.oracle import MTROracle

        return MTROracle(data_dir, str(suite_path))
    if name == "silent":
        from model_bridges.reference import Silent

        return Silent()
    from server.cli.bridges import AlwaysTalk

    return AlwaysTalk(data_dir)


def play(suite_path: Path, spec, bridge) -> tuple[np.ndarray, np.ndarray, list[Event]]:
    """One lockstep episode through the episode core: (room track, model track, events)."""
    from server.engine.clips import open_episode

    core = open_episode(str(suite_path), spec.scenario, suite_hash=None, audio_hash=None)
    bridge.reset(EpisodeStart(episode_id="bench", clock="lockstep", sample_rate=STREAM_RATE,
                              frame_samples=bridge.frame_samples, context_frames=core.context_frames,
                              reference=Reference(scenario_id=spec.scenario_id, condition=spec.condition)))
    room, model, events = [], [], []
    silence = np.zeros(bridge.frame_samples, dtype=np.int16)
    while (item := core.next_room()) is not None:
        events += item.events
        if item.context is not None:
            bridge.force(item.seq, item.context)
        out = bridge.step(item.seq, item.pcm)
        fed = core.feed_assistant(silence if out is None else out)
        room.append(item.pcm)
        model.append(fed.pcm)
    core.finish()
    return np.concatenate(room), np.concatenate(model), events


def build_recordings(data_dir: Path, out_dir: Path, bridges=BRIDGES) -> list[dict]:
    """Every episode of mtr-mini × modes × bridges as a stereo WAV, with its known turns."""
    from server.benchmarks.mtr.dataset.builtin import build_builtin
    from server.benchmarks.mtr.suite import Suite
    from server.engine.clips import load_suite
    from server.engine.registry import get_benchmark

    suite_path = Path(build_builtin("mtr-mini", data_dir))
    loaded = load_suite(suite_path)
    suite = Suite.load(suite_path)
    specs = get_benchmark(loaded.benchmark.name).episodes(loaded.suite, ["free", "gt"], None)
    out_dir.mkdir(parents=True, exist_ok=True)
    recs = []
    for name in bridges:
        bridge = make_bridge(name, data_dir, suite_path)
        for spec in specs:
            room, model, events = play(suite_path, spec, bridge)
            path = out_dir / f"{name}-{spec.condition}-{spec.scenario_id}.wav"
            write_wav(path, np.stack([room, model], axis=1))
            d = suite.dialogue(spec.scenario.pair_id)
            features = sorted({r.feature for r in d.rounds})
            recs.append({"path": path, "bridge": name, "mode": spec.condition, "episode": spec.scenario_id,
                         "features": features, "turns": known_turns(events, d, suite)})
    return recs


def main(argv: list[str] | None = None) -> int:
    from server.benchmarks.mtr.segmentation.backends import make_proposer
    from server.benchmarks.mtr.segmentation.inputs import read_recording, recording_input
    from server.benchmarks.mtr.segmentation.segment import segment

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="offline", help="offline | claude[:MODEL]")
    p.add_argument("--n", type=int, default=6)
    p.add_argument("--tolerance", type=float, default=TOLERANCE / STREAM_RATE, help="seconds")
    p.add_argument("--data-dir", type=Path, default=ROOT / ".mpe", help="built-in suites and the clip cache")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "segmentation", help="where the recordings go")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", action="store_true", help="every recording's true and found turns")
    args = p.parse_args(argv)
    tol = round(args.tolerance * STREAM_RATE)
    t0 = time.perf_counter()
    recs = build_recordings(args.data_dir, args.out)
    t_build = time.perf_counter() - t0
    proposer = make_proposer(args.backend, cache_dir=args.data_dir / "llm-cache" / "segment")
    by: dict[tuple[str, str], TurnScore] = defaultdict(lambda: EMPTY)
    total = EMPTY
    t1 = time.perf_counter()
    rows = []
    for r in recs:
        res = segment(recording_input(read_recording([r["path"]])), proposer, n=args.n)
        found = [Span(start=t.start, end=t.end) for t in res.turns]
        s = score_turns(r["turns"], found, tol)
        by[(r["bridge"], r["mode"])] += s
        total += s
        rows.append({"recording": r["path"].name, "true": s.true, "found": s.found, "matched": s.matched,
                     "f1": round(s.f1, 3)})
        if args.verbose:
            print(r["path"].name, f"F1 {s.f1:.2f}")
            print("  true ", [(t.start_s, t.end_s) for t in r["turns"]])
            print("  found", [(t.start_s, t.end_s) for t in found])
    t_seg = time.perf_counter() - t1

    def fig(s: TurnScore) -> dict:
        return {"true": s.true, "found": s.found, "matched": s.matched, "precision": s.precision,
                "recall": s.recall, "f1": round(s.f1, 4), "mae_s": None if s.mae_s is None else round(s.mae_s, 4)}

    result = {"backend": proposer.info().model_dump(), "n": args.n, "tolerance_s": tol / STREAM_RATE,
              "recordings": len(recs), "by_bridge_mode": {f"{b} {m}": fig(s) for (b, m), s in sorted(by.items())},
              "all": fig(total), "per_recording": rows}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{len(recs)} recordings built in {t_build:.1f} s, segmented ({args.backend}, n = {args.n}) "
          f"in {t_seg:.1f} s; tolerance {tol / STREAM_RATE:.2f} s")
    print(f"{'bridge':12s} {'mode':5s} {'true':>5s} {'found':>5s} {'match':>5s} {'F1':>6s} {'MAE s':>6s}")
    for (b, m), s in sorted(by.items()):
        mae = "-" if s.mae_s is None else f"{s.mae_s:.3f}"
        print(f"{b:12s} {m:5s} {s.true:5d} {s.found:5d} {s.matched:5d} {s.f1:6.3f} {mae:>6s}")
    mae = "-" if total.mae_s is None else f"{total.mae_s:.3f}"
    print(f"{'all':18s} {total.true:5d} {total.found:5d} {total.matched:5d} {total.f1:6.3f} {mae:>6s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
