#!/usr/bin/env python
"""A prepared check of an in-process model bridge on its host (a GPU host, or the CPU here).

``python bench/gpu_smoke.py MODEL --checkpoint DIR [--device cuda] [--dtype bfloat16]``

It builds the bridge the way ``mpe bridge MODEL`` does (loading, warm-up), then:

``lockstep``
    Two episodes of ``--seconds`` of room audio (``--room WAV``, 24 kHz mono; by default a
    synthetic voice-like signal) stepped frame by frame as fast as the model goes, with a reset
    before each: per-frame compute p50/p99, the real-time factor (compute time / audio time), the
    reset cost, and whether the two episodes gave the same output (they must: same input, same
    seed, fresh state).
``realtime``
    One episode paced on the wall clock like the server's realtime clock (room frame *n* arrives at
    ``t0 + n·80 ms``; DESIGN §4): each frame is stepped when it has arrived and the previous step is
    done. Lateness = the answer's completion minus its slot's end (``t0 + (n+1)·80 ms``); a frame
    whose lateness is above zero is an underrun (a slot the listener hears as silence or late).

The bridge is called exactly as the SDK calls it (``reset``, ``step``), in this process, without
a server or network: these figures are the model's own; docs/benchmarks.md has the engine's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clients.messages import EpisodeStart  # noqa: E402
from model_bridges import create_bridge  # noqa: E402

SLOT_S = 0.08
FRAME, RATE = 1920, 24_000  # the wire default; a bridge that speaks 16 kHz (voila) sets them in main()


def room_audio(path: str | None, seconds: float) -> np.ndarray:
    n = int(seconds / SLOT_S) * FRAME
    if path:
        import soundfile as sf

        x, rate = sf.read(path, dtype="int16", always_2d=True)
        if rate != 24_000:
            raise SystemExit(f"{path}: {rate} Hz, expected 24000")
        x = x[:, 0]
        if RATE != rate:  # the bridge speaks 16 kHz: resampled as the server would
            import soxr

            x = np.round(soxr.resample(x.astype(np.float32), rate, RATE)).astype(np.int16)
        x = np.resize(x, n)
    else:  # a voice-like signal: a gliding harmonic tone with syllable-rate bursts, over low noise
        t = np.arange(n) / RATE
        f0 = 140 + 30 * np.sin(2 * np.pi * 0.5 * t)
        env = (np.sin(2 * np.pi * 4 * t) > -0.2) * (np.sin(2 * np.pi * 0.25 * t) > -0.5)
        x = (env * 5000 * np.sin(2 * np.pi * np.cumsum(f0) / RATE) +
             np.random.default_rng(0).normal(0, 300, n)).astype(np.int16)
    return x.astype(np.int16)


def start(clock: str) -> EpisodeStart:
    return EpisodeStart(episode_id=f"smoke-{clock}", clock=clock, sample_rate=RATE, frame_samples=FRAME)


def lockstep(bridge, room: np.ndarray) -> tuple[np.ndarray, list[float], float]:
    t0 = time.perf_counter()
    bridge.reset(start("lockstep"))
    reset_s = time.perf_counter() - t0
    out, times = [], []
    for seq in range(len(room) // FRAME):
        t = time.perf_counter()
        pcm = bridge.step(seq, room[seq * FRAME:(seq + 1) * FRAME])
        times.append(time.perf_counter() - t)
        out.append(np.zeros(FRAME, np.int16) if pcm is None else pcm)
    return np.concatenate(out), times, reset_s


def realtime(bridge, room: np.ndarray) -> list[float]:
    bridge.reset(start("realtime"))
    late = []
    t0 = time.perf_counter()
    for seq in range(len(room) // FRAME):
        arrive = t0 + seq * SLOT_S
        now = time.perf_counter()
        if now < arrive:
            time.sleep(arrive - now)
        bridge.step(seq, room[seq * FRAME:(seq + 1) * FRAME])
        late.append(time.perf_counter() - (arrive + SLOT_S))
    return late


def ms(values, q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="an in-process bridge: moshi, minicpm-o, voila, freeze-omni")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="")
    p.add_argument("--seconds", type=float, default=8.0, help="length of each lockstep episode")
    p.add_argument("--realtime-seconds", type=float, default=8.0)
    p.add_argument("--room", help="room audio, a 24 kHz mono WAV (default: synthetic; resampled for a 16 kHz "
                                  "bridge)")
    p.add_argument("--opt", action="append", default=[], help="bridge option key=value (repeatable)")
    a = p.parse_args()
    options = dict(o.split("=", 1) for o in a.opt)
    t = time.perf_counter()
    bridge = create_bridge(a.model, checkpoint=a.checkpoint, device=a.device, dtype=a.dtype, **options)
    global FRAME, RATE
    FRAME, RATE = bridge.frame_samples, bridge.sample_rate
    print(f"{a.model}: loaded and warmed up in {time.perf_counter() - t:.1f} s on {a.device}; "
          f"{bridge.model_stats().get('parameters', '')}")
    room = room_audio(a.room, a.seconds)
    first, times1, reset1 = lockstep(bridge, room)
    second, times2, reset2 = lockstep(bridge, room)
    times = times1 + times2
    rtf = sum(times) / (len(times) * SLOT_S)
    print(f"lockstep: 2 episodes x {len(times1)} frames; compute per frame p50 {ms(times, 50):.1f} ms, "
          f"p99 {ms(times, 99):.1f} ms; real-time factor {rtf:.3f}; reset {reset1 * 1000:.1f} / "
          f"{reset2 * 1000:.1f} ms; second episode identical to the first: {np.array_equal(first, second)}")
    late = realtime(bridge, room_audio(a.room, a.realtime_seconds))
    under = sum(x > 0 for x in late)
    print(f"realtime: {len(late)} frames; lateness p50 {ms(late, 50):+.1f} ms, p99 {ms(late, 99):+.1f} ms, "
          f"max {max(late) * 1000:+.1f} ms (negative: early); underruns {under} ({under / len(late):.1%})")


if __name__ == "__main__":
    main()
