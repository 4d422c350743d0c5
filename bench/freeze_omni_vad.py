#!/usr/bin/env python
"""Freeze-Omni's turn-taking under silero-vad 5.1.2 (the authors' pin) and 6.2.3 (this project's).

Freeze-Omni hears a user only after its VAD says ``sl`` (speech start), and a dialogue it listens to
ends on the VAD's ``el`` (2 s of silence) unless its state classifier ends it first. Both come from
the authors' ``web/vad.py`` (VITA-MLLM/Freeze-Omni at 3e17af43), which drives silero-vad's
``VADIterator``:

- 160 ms chunks (2560 samples at 16 kHz, web/vad.py:16-22), each cut into five 512-sample windows,
  the iterator called on each and the chunk's last non-empty answer kept (web/vad.py:52-59);
- ``VADIterator(threshold=0.8, min_silence_duration_ms=2000, speech_pad_ms=30)`` (web/vad.py:37-41):
  start at a window with probability >= 0.8, end after 2 s of windows below 0.65 (0.8 - 0.15,
  silero_vad/utils_vad.py, the same rule in 5.1.2 and 6.2.3: only the rounding of the returned
  seconds differs, which the status does not use);
- the status (web/vad.py:99-117): in a dialogue an end gives ``el`` and resets the iterator (the
  model's state too), otherwise ``cl``; out of one a start gives ``sl`` and opens the dialogue;
- on ``el`` the server closes the dialogue (bin/server.py:222-223); the bridge does the same
  (model_bridges/freeze_omni.py, ``prefill``).

The state classifier (``ss``: answer now, ``el``: not for me) needs the model's weights and is not
run: here a dialogue ends on the VAD's ``el`` only, so every decision compared is the VAD's. The
room reaches the VAD as the bridge feeds it (``Rechunker``: 24 kHz int16 → 16 kHz float32 chunks).

The rooms are this project's own synthetic voices (piper): every episode of an MTR suite (default
the built-in ``mtr-mini``, played by the ``mtr-oracle`` bridge so barge-ins fall in replies; the room
holds the user's side only) and of the Duplex-MPE ``mini`` suite, each as recorded and with
variations (−12 dB, and white noise at 20 dB SNR). Both versions get the same chunks; their ``sl``
and ``el`` are matched in time order (``compare``) and attributed to the scripted span they belong
to: a start to the speech it falls in, an end to the speech it follows. The figures are a
comparison of two models on the same input, not a fit: nothing is tuned from them.

Usage::

    python bench/freeze_omni_vad.py                       # pip-downloads silero-vad 5.1.2 (no install)
    python bench/freeze_omni_vad.py --v5 silero_vad-5.1.2-py3-none-any.whl   # or its directory / .jit
    python bench/freeze_omni_vad.py --suite DIR --json    # another MTR suite, JSON out
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clients.codec import FRAME_SAMPLES, STREAM_RATE  # noqa: E402
from model_bridges.freeze_omni import load_vad_jit, vad_weights_file  # noqa: E402
from model_bridges.playout import Rechunker  # noqa: E402

CHUNK = 2560  # web/vad.py:16-22: 16 frames of 160 samples
WINDOW = 512  # web/vad.py:55
VAD_RATE = 16_000  # web/vad.py: the VAD hears 16 kHz
CHUNK_S = CHUNK / VAD_RATE
THRESHOLD, MIN_SILENCE_MS, SPEECH_PAD_MS = 0.8, 2000, 30  # web/vad.py:37-41
MATCH_S = 1.0  # two versions' decisions of one kind this close are the same decision
SLACK_S = 0.5  # a start this far outside a span's clip times still belongs to it (clip edges hold silence)
V5 = "silero-vad==5.1.2"

Status = Literal["sl", "el"]


@dataclass(frozen=True)
class Decision:
    t: float  # seconds from the episode start: the end of the chunk that gave it
    status: Status


@dataclass(frozen=True)
class Span:
    kind: str
    start: float
    end: float


@dataclass(frozen=True)
class Row:
    """One decision of either version, matched with the other's or not (``None``)."""
    status: Status
    kind: str  # the span it is attributed to
    t_a: float | None
    t_b: float | None


# the pure part ------------------------------------------------------------------------------------

def attribute(d_status: Status, t: float, spans: Sequence[Span]) -> str:
    """A start belongs to the latest-starting span it falls in; an end to the span that ended last
    before it (the speech whose silence ended the dialogue). ``none`` if there is no such span."""
    if d_status == "sl":
        inside = [s for s in spans if s.start - SLACK_S <= t <= s.end + SLACK_S]
        return max(inside, key=lambda s: s.start).kind if inside else "none"
    before = [s for s in spans if s.end <= t]
    return max(before, key=lambda s: s.end).kind if before else "none"


def compare(a: Sequence[Decision], b: Sequence[Decision], spans: Sequence[Span],
            match_s: float = MATCH_S) -> list[Row]:
    """Match version A's and B's decisions of each status in time order: two within ``match_s`` are
    one decision (a row with both times), the earlier of two further apart is one version's only."""
    rows: list[Row] = []
    for status in ("sl", "el"):
        xs = [d.t for d in a if d.status == status]
        ys = [d.t for d in b if d.status == status]
        i = j = 0
        while i < len(xs) or j < len(ys):
            x = xs[i] if i < len(xs) else None
            y = ys[j] if j < len(ys) else None
            if x is not None and y is not None and abs(x - y) <= match_s:
                rows.append(Row(status, attribute(status, min(x, y), spans), x, y))
                i, j = i + 1, j + 1
            elif y is None or (x is not None and x < y):
                rows.append(Row(status, attribute(status, x, spans), x, None))
                i += 1
            else:
                rows.append(Row(status, attribute(status, y, spans), None, y))
                j += 1
    return rows


@dataclass(frozen=True)
class Summary:
    status: Status
    kind: str
    both: int
    only_a: int
    only_b: int
    same_chunk: int  # of ``both``: the same 160 ms chunk
    dt_ms: tuple[int, ...]  # of ``both``: B − A, sorted


def summarise(rows: Sequence[Row]) -> list[Summary]:
    groups: dict[tuple[Status, str], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r.status, r.kind)].append(r)
    out = []
    for (status, kind), rs in sorted(groups.items()):
        dts = sorted(round(1000 * (r.t_b - r.t_a)) for r in rs if r.t_a is not None and r.t_b is not None)
        out.append(Summary(status, kind, len(dts), sum(r.t_b is None for r in rs), sum(r.t_a is None for r in rs),
                           sum(d == 0 for d in dts), tuple(dts)))
    return out


# the state machine (web/vad.py, with the classifier left out) ----------------------------------------

class Recorded:
    """A silero model whose probabilities are kept (the iterator only sees them)."""

    def __init__(self, model):
        self.model, self.probs = model, []

    def __call__(self, x, sr):
        p = self.model(x, sr)
        self.probs.append(float(p.item()))
        return p

    def reset_states(self):
        self.model.reset_states()


def decisions(model, chunks: Sequence[np.ndarray]) -> tuple[list[Decision], list[float]]:
    """Freeze-Omni's VAD statuses for a room (module docstring) and the window probabilities."""
    import torch
    from silero_vad.utils_vad import VADIterator

    rec = Recorded(model)
    it = VADIterator(rec, threshold=THRESHOLD, sampling_rate=VAD_RATE, min_silence_duration_ms=MIN_SILENCE_MS,
                     speech_pad_ms=SPEECH_PAD_MS)
    it.reset_states()
    in_dialog, out = False, []
    with torch.no_grad():
        for n, chunk in enumerate(chunks):
            audio = torch.from_numpy(np.ascontiguousarray(chunk, dtype=np.float32))
            said = None
            for i in range(len(audio) // WINDOW):
                d = it(audio[i * WINDOW:(i + 1) * WINDOW], return_seconds=True)
                if d is not None:
                    said = d
            t = (n + 1) * CHUNK_S
            if in_dialog and said is not None and "end" in said:
                out.append(Decision(t, "el"))
                it.reset_states()
                in_dialog = False  # bin/server.py:222-223
            elif not in_dialog and said is not None and "start" in said:
                out.append(Decision(t, "sl"))
                in_dialog = True
    return out, rec.probs


def room_chunks(room: np.ndarray) -> list[np.ndarray]:
    """The room (24 kHz int16) as the bridge cuts it: 160 ms float chunks at 16 kHz."""
    rc = Rechunker(CHUNK)
    frames = [room[i:i + FRAME_SAMPLES] for i in range(0, len(room), FRAME_SAMPLES)]
    return [c for f in frames for c in rc.push(f)]


def variants(room: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    x = room.astype(np.float64)
    speech = x[np.abs(x) > 32768 * 0.01]
    rms = float(np.sqrt(np.mean(speech ** 2))) if len(speech) else 1000.0
    noise = np.random.default_rng(seed).normal(0.0, rms / 10.0, len(x))  # 20 dB below the speech
    return {"as recorded": room,
            "-12 dB": np.clip(x * 10 ** (-12 / 20), -32768, 32767).astype(np.int16),
            "noise 20 dB SNR": np.clip(x + noise, -32768, 32767).astype(np.int16)}


# the rooms -----------------------------------------------------------------------------------------

def mtr_spans(events) -> list[Span]:
    """User turns (a pause round's two parts apart), barge-ins, background speech, backchannels."""
    feature: dict[int, str] = {}
    open_: dict[str, tuple[str, float]] = {}
    out = []
    for e in events:
        t, typ, data = e.t / STREAM_RATE, e.type, e.data
        if typ == "round.start":
            feature[data["round"]] = data["feature"]
        kind, _, edge = typ.partition(".")
        n = data.get("round")
        if kind == "user" and edge == "start":
            name = "turn after a pause" if data.get("part", 1) > 1 else f"turn ({feature.get(n, '?')})"
            open_["user"] = (name, t)
        elif (kind == "user" and edge == "end") or typ == "pause.start":
            name, t0 = open_.pop("user")
            out.append(Span("turn before a pause" if typ == "pause.start" else name, t0, t))
        elif kind in ("barge_in", "background", "backchannel") and edge in ("start", "end"):
            if edge == "start":
                open_[kind] = (kind.replace("_", "-"), t)
            elif kind in open_:
                name, t0 = open_.pop(kind)
                out.append(Span(name, t0, t))
    return out


def mpe_spans(events) -> list[Span]:
    """Every clip of the room (its label: N1–N4, T; the spoken preamble)."""
    starts: dict[str, tuple[str, float]] = {}
    out = []
    for e in events:
        t = e.t / STREAM_RATE
        if e.type == "preamble.start":
            starts["p"] = ("preamble", t)
        elif e.type == "clip.start":
            starts["c"] = (f"Duplex-MPE {e.data['label']}", t)
        elif e.type in ("preamble.end", "clip.end"):
            name, t0 = starts.pop("p" if e.type == "preamble.end" else "c")
            out.append(Span(name, t0, t))
    return out


def rooms(mtr_suite: Path, mpe_suite: Path, data_dir: Path):
    """(suite, episode, room track, spans) of every MTR episode (free history) and Duplex-MPE episode."""
    sys.path.insert(0, str(ROOT / "bench"))
    from segmentation import make_bridge, play

    from server.engine.clips import load_suite
    from server.engine.registry import get_benchmark

    for path, spans, bridge_name in ((mtr_suite, mtr_spans, "mtr-oracle"), (mpe_suite, mpe_spans, "silent")):
        loaded = load_suite(path)
        bench = get_benchmark(loaded.benchmark.name)
        conditions = sorted({s.condition for s in loaded.suite.scenarios}) if bridge_name == "silent" else ["free"]
        bridge = make_bridge(bridge_name, data_dir, path)
        for spec in bench.episodes(loaded.suite, conditions, None):
            room, _, events = play(path, spec, bridge)
            yield path.name, spec.scenario_id, room, spans(events)


# the 5.1.2 weights ---------------------------------------------------------------------------------

def v5_jit(given: str | None, cache: Path) -> Path:
    """silero-vad 5.1.2's ``silero_vad.jit``: from a wheel, a directory or the file itself; with none,
    pip-downloads the wheel (no install) into ``cache``."""
    if given is None:
        wheels = sorted(cache.glob("silero_vad-5.1.2-*.whl"))
        if not wheels:
            subprocess.run([sys.executable, "-m", "pip", "download", V5, "--no-deps", "-d", str(cache)], check=True)
            wheels = sorted(cache.glob("silero_vad-5.1.2-*.whl"))
        given = str(wheels[0])
    if given.endswith(".whl"):
        target = cache / Path(given).stem
        with zipfile.ZipFile(given) as z:
            z.extract("silero_vad/data/silero_vad.jit", target)
        given = str(target)
    return vad_weights_file(given)


def v6_jit() -> Path:
    import silero_vad

    return Path(silero_vad.__file__).parent / "data" / "silero_vad.jit"


def pct(xs: Sequence[int], q: float) -> int:
    return int(np.percentile(xs, q, method="nearest")) if xs else 0


def main(argv: list[str] | None = None) -> int:
    from importlib.metadata import version

    from server.benchmarks.mpe.dataset.builtin import build_builtin as build_mpe
    from server.benchmarks.mtr.dataset.builtin import build_builtin as build_mtr

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--v5", help="silero-vad 5.1.2: its wheel, an unpacked directory or silero_vad.jit "
                                "(default: pip download into --cache)")
    p.add_argument("--suite", type=Path, help="an MTR suite directory (default: the built-in mtr-mini)")
    p.add_argument("--mpe-suite", type=Path, help="a Duplex-MPE suite directory (default: the built-in mini)")
    p.add_argument("--data-dir", type=Path, default=ROOT / ".mpe", help="built-in suites and the clip cache")
    p.add_argument("--cache", type=Path, default=ROOT / "out" / "freeze_omni_vad", help="where 5.1.2 goes")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", action="store_true", help="every decision taken by one version only")
    args = p.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    a_file, b_file = v5_jit(args.v5, args.cache), v6_jit()
    a_model, b_model = load_vad_jit(a_file), load_vad_jit(b_file)
    mtr = args.suite or Path(build_mtr("mtr-mini", args.data_dir))
    mpe = args.mpe_suite or Path(build_mpe("mini", args.data_dir))

    by_variant: dict[str, list[Row]] = defaultdict(list)
    flips = []
    windows = defaultdict(lambda: [0, 0, 0])  # variant -> [windows, speech (>= 0.8) differs, silence (< 0.65) differs]
    seconds = 0.0
    for k, (suite, episode, room, spans) in enumerate(rooms(mtr, mpe, args.data_dir)):
        seconds += len(room) / STREAM_RATE
        for name, audio in variants(room, seed=k).items():
            chunks = room_chunks(audio)
            a, pa = decisions(a_model, chunks)
            b, pb = decisions(b_model, chunks)
            rows = compare(a, b, spans)
            group = f"{'mtr' if suite == mtr.name else 'mpe'} {name}"
            by_variant[group] += rows
            n = min(len(pa), len(pb))
            xa, xb = np.asarray(pa[:n]), np.asarray(pb[:n])
            w = windows[group]
            w[0] += n
            w[1] += int(np.sum((xa >= THRESHOLD) != (xb >= THRESHOLD)))
            w[2] += int(np.sum((xa < THRESHOLD - 0.15) != (xb < THRESHOLD - 0.15)))
            flips += [{"variant": group, "episode": episode, **asdict(r)} for r in rows
                      if r.t_a is None or r.t_b is None]

    result = {"a": f"silero-vad 5.1.2 ({a_file})", "b": f"silero-vad {version('silero-vad')} ({b_file})",
              "room_seconds": round(seconds, 1), "variants": {}}
    for group, rows in by_variant.items():
        w = windows[group]
        result["variants"][group] = {
            "windows": w[0], "speech_window_differs": w[1], "silence_window_differs": w[2],
            "by_kind": [asdict(s) | {
                "median_dt_ms": pct(s.dt_ms, 50), "p90_abs_dt_ms": pct([abs(d) for d in s.dt_ms], 90),
                "max_abs_dt_ms": max((abs(d) for d in s.dt_ms), default=0)} for s in summarise(rows)]}
    result["one_version_only"] = flips
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"A = {result['a']}\nB = {result['b']}\nroom audio: {seconds / 60:.1f} min per variant; "
          f"B − A in ms; a 'flip' is a decision one version takes and the other does not (within {MATCH_S} s)")
    for group, v in result["variants"].items():
        print(f"\n{group}: 32 ms windows {v['windows']}, speech (>= 0.8) differs in {v['speech_window_differs']} "
              f"({100 * v['speech_window_differs'] / max(v['windows'], 1):.1f} %), "
              f"silence (< 0.65) in {v['silence_window_differs']}")
        print(f"  {'':3s}{'span':26s}{'both':>5s}{'A only':>7s}{'B only':>7s}{'same':>6s}"
              f"{'median':>8s}{'p90|dt|':>8s}{'max|dt|':>8s}")
        for s in v["by_kind"]:
            print(f"  {s['status']:3s}{s['kind'][:26]:26s}{s['both']:5d}{s['only_a']:7d}{s['only_b']:7d}"
                  f"{s['same_chunk']:6d}{s['median_dt_ms']:8d}{s['p90_abs_dt_ms']:8d}{s['max_abs_dt_ms']:8d}")
    if args.verbose:
        for f in flips:
            who = "A" if f["t_b"] is None else "B"
            print(f"  {f['variant']:24s} {f['episode']:28s} {f['status']} {who} only at "
                  f"{f['t_a'] if who == 'A' else f['t_b']:.2f} s ({f['kind']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
