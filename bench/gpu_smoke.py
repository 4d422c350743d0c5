#!/usr/bin/env python
"""A prepared check of an in-process model bridge on its host (a GPU host, or the CPU here).

``python bench/gpu_smoke.py MODEL --checkpoint DIR [--device cuda] [--dtype bfloat16] [--out DIR]``
``python bench/gpu_smoke.py moshi --random-weights --device cuda``

It builds the bridge the way ``mpe bridge MODEL`` does (loading, warm-up), then:

``probe``
    One **probe episode** in lockstep: a spoken request, a pause for the answer, then a spoken
    barge-in while the model should be talking, then a tail. The model's audio is written
    (``--out``: ``probe-room.wav``, ``probe-assistant.wav``), run through the project's speech
    detector and judged by the MTR interruption rule (``server.benchmarks.mtr.rules``: a response
    after the request, the audible stop within ``STOP_WITHIN`` of the barge-in's start, no talking
    over the barge-in). The check **fails** (exit status 1) when the model says nothing after the
    request or does not stop: a silent model or one that ignores a barge-in never passes. The
    episode runs twice from a reset; the second must equal the first (same input, same seed).
``context``
    Where the bridge accepts assistant-context frames (teacher forcing): the probe again, its first
    frames up to the barge-in given as context — the model's own reply from the first probe as the
    ground truth of what it said, its audio and the words of its ``text`` messages (for a model
    whose own past output is text) — so the forced path runs on the host (its cost is reported).
``codec``
    Where the bridge tokenises the room with a codec of its own (voila), the share of codec frames
    on which the bridge's windowed, causal encoding of the probe equals the authors' encoding of
    the whole recording at once, per codebook: what the windowing changes, with the real tokenizer.
``realtime``
    One episode paced on the wall clock like the server's realtime clock (room frame *n* arrives at
    ``t0 + n·80 ms``; DESIGN §4): lateness = the answer's completion minus its slot's end; a frame
    whose lateness is above zero is an underrun.

Reported: per-frame compute p50/p99, the real-time factor (compute time / audio time), the reset
cost, peak GPU memory (CUDA). ``--random-weights`` (moshi only) builds the full-size Moshi
architecture (the ``moshi`` package's default 7B settings and Mimi) with random weights and no
checkpoint, so a GPU host measures the real-time factor and memory at full size with no download;
its output is not speech, so the probe's verdict is printed but does not fail the check.

The bridge is called exactly as the SDK calls it (``reset``, ``force``, ``step``), in this process,
without a server or network: these figures are the model's own; docs/benchmarks.md has the engine's.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clients.messages import ContextTurn, EpisodeStart  # noqa: E402
from model_bridges import create_bridge  # noqa: E402
from server.benchmarks.mtr.rules import LiveRound, RoundResult, judge_round  # noqa: E402
from server.core.detector import detect_segments  # noqa: E402
from server.core.timebase import STREAM_RATE  # noqa: E402

SLOT_S = 0.08
LEAD_S, ANSWER_S, TAIL_S = 0.5, 3.0, 3.0  # silence before the request; time to answer before the barge-in; after it
REQUEST_TEXT = "Could you tell me how a bicycle stays upright when it is moving?"
BARGE_TEXT = "Sorry to cut in, but can you make it much shorter?"
# the verdicts that fail the check: nothing said after the request, no stop, or talking over the barge-in
FAILING = ("no_response", "late_stop", "talked_over_barge_in")


@dataclass(frozen=True)
class Probe:
    """The probe episode's room audio (24 kHz) and where its parts are (stream samples)."""

    room: np.ndarray
    request: tuple[int, int]
    barge_in: tuple[int, int]

    def round(self) -> LiveRound:
        return LiveRound(round=1, feature="interruption", start=0, end=len(self.room), user=[self.request],
                         barge_in=self.barge_in)


def probe_episode(request: np.ndarray, barge: np.ndarray, answer_s: float = ANSWER_S) -> Probe:
    """Lead-in, ``request``, ``answer_s`` for the answer, ``barge``, tail; a whole number of frames."""
    frame = int(SLOT_S * STREAM_RATE)
    lead, gap, tail = (np.zeros(int(s * STREAM_RATE), np.int16) for s in (LEAD_S, answer_s, TAIL_S))
    parts = [lead, request.astype(np.int16), gap, barge.astype(np.int16), tail]
    room = np.concatenate(parts)
    room = np.concatenate([room, np.zeros(-len(room) % frame, np.int16)])
    r0 = len(lead)
    b0 = r0 + len(request) + len(gap)
    return Probe(room, (r0, r0 + len(request)), (b0, b0 + len(barge)))


def judge(probe: Probe, assistant: np.ndarray) -> RoundResult:
    """The MTR interruption verdict of the model's audio (24 kHz) through the project's detector."""
    segments = [(s.start, s.end) for s in detect_segments(assistant)]
    return judge_round(probe.round(), segments)


def failures(result: RoundResult) -> list[str]:
    return [result.failure] if result.failure in FAILING else []


def start(clock: str, bridge, n_ctx: int = 0, turns: list[ContextTurn] | None = None) -> EpisodeStart:
    return EpisodeStart(episode_id=f"smoke-{clock}", clock=clock, sample_rate=bridge.sample_rate,
                        frame_samples=bridge.frame_samples, context_frames=n_ctx, context_turns=turns or [])


def own_turn(texts: list[dict], audio: np.ndarray, n_ctx: int, frame: int) -> list[ContextTurn]:
    """The words of the model's own reply in the first ``n_ctx`` slots (its ``text`` messages there), as
    the assistant turn of the context episode (docs/protocol.md §5.2): from the slot its audio
    starts in; none when it sent no text there."""
    words = " ".join(m["text"] for m in texts if m["type"] == "text" and m["seq"] < n_ctx).strip()
    loud = np.flatnonzero(np.abs(audio[:n_ctx * frame].reshape(-1, frame)).max(axis=1)) if n_ctx else []
    if not words or not len(loud):
        return []
    return [ContextTurn(role="assistant", text=words, start_seq=int(loud[0]), end_seq=n_ctx)]


def to_bridge(x: np.ndarray, rate: int) -> np.ndarray:
    """24 kHz int16 → the bridge's rate (resampled as the server does for a 16 kHz bridge)."""
    if rate == STREAM_RATE:
        return x
    import soxr

    return np.round(soxr.resample(x.astype(np.float32), STREAM_RATE, rate)).astype(np.int16)


def to_stream(x: np.ndarray, rate: int) -> np.ndarray:
    if rate == STREAM_RATE:
        return x
    import soxr

    return np.clip(np.round(soxr.resample(x.astype(np.float32), rate, STREAM_RATE)), -32768, 32767).astype(np.int16)


def lockstep(bridge, room: np.ndarray, context: np.ndarray | None = None,
             turns: list[ContextTurn] | None = None) -> tuple[np.ndarray, list[float], float]:
    """One episode as fast as the model goes (room and context at 24 kHz; ``turns``: the context's
    words): its audio (24 kHz), the per-frame compute times and the reset cost."""
    fs, rate = bridge.frame_samples, bridge.sample_rate
    x = to_bridge(room, rate)
    ctx = None if context is None else to_bridge(context, rate)
    n_ctx = 0 if ctx is None else len(ctx) // fs
    t0 = time.perf_counter()
    bridge.reset(start("lockstep", bridge, n_ctx, turns))
    reset_s = time.perf_counter() - t0
    out, times = [], []
    for seq in range(len(x) // fs):
        t = time.perf_counter()
        if seq < n_ctx:
            bridge.force(seq, ctx[seq * fs:(seq + 1) * fs])
        pcm = bridge.step(seq, x[seq * fs:(seq + 1) * fs])
        times.append(time.perf_counter() - t)
        out.append(np.zeros(fs, np.int16) if pcm is None else pcm)
    return to_stream(np.concatenate(out), rate), times, reset_s


def realtime(bridge, room: np.ndarray) -> list[float]:
    fs = bridge.frame_samples
    x = to_bridge(room, bridge.sample_rate)
    bridge.reset(start("realtime", bridge))
    late = []
    t0 = time.perf_counter()
    for seq in range(len(x) // fs):
        arrive = t0 + seq * SLOT_S
        now = time.perf_counter()
        if now < arrive:
            time.sleep(arrive - now)
        bridge.step(seq, x[seq * fs:(seq + 1) * fs])
        late.append(time.perf_counter() - (arrive + SLOT_S))
    return late


def ms(values, q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


@dataclass
class SmokeReport:
    result: RoundResult
    failures: list[str]
    rtf: float
    reset_ms: tuple[float, float]
    repeatable: bool
    context: RoundResult | None = None
    codec_agreement: list[float] | None = None  # voila: per codebook (VoilaAutonomous.codec_agreement)


def smoke(bridge, probe: Probe, out_dir: Path | None = None, say=print) -> SmokeReport:
    """The probe episode twice, the context episode where the bridge accepts context; the verdicts."""
    mark = len(bridge._outbox)
    first, times1, reset1 = lockstep(bridge, probe.room)
    said = bridge._outbox[mark:]  # the model's text messages of the first run
    second, times2, reset2 = lockstep(bridge, probe.room)
    times = times1 + times2
    rtf = sum(times) / (len(times) * SLOT_S)
    result = judge(probe, first)
    if out_dir is not None:
        import soundfile as sf

        out_dir.mkdir(parents=True, exist_ok=True)
        sf.write(out_dir / "probe-room.wav", probe.room, STREAM_RATE, subtype="PCM_16")
        sf.write(out_dir / "probe-assistant.wav", first, STREAM_RATE, subtype="PCM_16")
    report = SmokeReport(result, failures(result), rtf, (reset1 * 1000, reset2 * 1000), np.array_equal(first, second))
    say(f"probe: {len(times1)} frames x 2; compute per frame p50 {ms(times, 50):.1f} ms, p99 {ms(times, 99):.1f} ms; "
        f"real-time factor {rtf:.3f}; reset {reset1 * 1000:.1f} / {reset2 * 1000:.1f} ms; "
        f"second run identical: {report.repeatable}")
    lat = "-" if result.latency is None else f"{result.latency / STREAM_RATE:.2f} s"
    stop = "-" if result.stop_latency is None else f"{result.stop_latency / STREAM_RATE:.2f} s"
    say(f"probe verdict: {'ok' if result.ok else result.failure}; answered after the request: {result.responded} "
        f"(latency {lat}); speaking at the barge-in: {result.interrupted} (stop after {stop})")
    if hasattr(bridge, "codec_agreement"):  # voila: the windowed encoding against the authors' whole-file one
        room = to_bridge(probe.room, bridge.sample_rate)
        share = bridge.codec_agreement(room)
        report.codec_agreement = share
        say(f"codec: the bridge's windowed encoding of the probe equals the whole-recording encoding on "
            f"{', '.join(f'{x:.1%}' for x in share)} of the frames (codebook 1..{len(share)})")
    if getattr(bridge, "accepts_context", False):
        n_ctx = probe.barge_in[0] // bridge_frame_24k(bridge)
        ctx = first[:n_ctx * bridge_frame_24k(bridge)]
        # a model whose own past output is text (freeze-omni) takes the reply's words (§5.2)
        turns = own_turn(said, first, n_ctx, bridge_frame_24k(bridge))
        forced, ftimes, _ = lockstep(bridge, probe.room, ctx, turns)
        report.context = judge(probe, forced)
        say(f"context: {n_ctx} frames forced (the model's own reply as ground truth), then live; compute per "
            f"frame p50 {ms(ftimes, 50):.1f} ms; verdict after the context: "
            f"{'ok' if report.context.ok else report.context.failure}")
    return report


def bridge_frame_24k(bridge) -> int:
    return bridge.frame_samples * STREAM_RATE // bridge.sample_rate


def random_moshi(device: str, dtype: str, lm_kwargs: dict | None = None, mimi_config: dict | None = None,
                 **options):
    """The ``moshi`` bridge around the full-size architecture (``lm_kwargs`` / ``mimi_config``: the
    moshi package's default settings unless given) with random weights: nothing is read from disk."""
    import torch
    from moshi.models import loaders

    from model_bridges.inprocess import torch_dtype
    from model_bridges.moshi_lm import MoshiLM

    class NoText:
        """A text tokenizer for random weights: every id is padding (no words are claimed)."""

        def get_piece_size(self) -> int:
            return 0

    class RandomMoshi(MoshiLM):
        def load(self) -> None:
            torch.manual_seed(self.seed)
            mimi = loaders.get_mimi(None, mimi_config, device=self.device, num_codebooks=8)
            for module in mimi.modules():  # a fresh quantizer's codebooks are empty: fill and mark them
                if hasattr(module, "embedding_sum") and hasattr(module, "_initialized"):
                    module.embedding_sum.data.normal_(0.0, 0.05)
                    module.cluster_usage.data.fill_(1.0)
                    module._initialized.data.fill_(1.0)
            lm = loaders.get_moshi_lm(None, lm_kwargs=lm_kwargs, device=self.device,
                                      dtype=torch_dtype(self.dtype_name))
            self.build(mimi, lm, NoText(), {})

    return RandomMoshi(checkpoint="random-weights", device=device, dtype=dtype, **options)


def voices(request_wav: str | None, barge_wav: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The request and the barge-in (24 kHz int16): WAVs, or spoken by the project's offline TTS."""
    out = []
    for path, text in ((request_wav, REQUEST_TEXT), (barge_wav, BARGE_TEXT)):
        if path:
            import soundfile as sf

            x, rate = sf.read(path, dtype="int16", always_2d=True)
            if rate != STREAM_RATE:
                raise SystemExit(f"{path}: {rate} Hz, expected {STREAM_RATE}")
            out.append(x[:, 0])
            continue
        try:
            from server.tts import get_engine

            out.append(get_engine("piper").synthesize(text, "piper:joe@1.0"))
        except Exception as exc:  # the tts extra missing, or its voice
            raise SystemExit(f"no voice for the probe ({exc}): give --request WAV and --barge WAV (24 kHz)") from None
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="an in-process bridge: moshi, minicpm-o, voila, freeze-omni")
    p.add_argument("--checkpoint", default="")
    p.add_argument("--random-weights", action="store_true", help="moshi only: full size, random weights")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="")
    p.add_argument("--request", help="the spoken request, a 24 kHz mono WAV (default: the project's TTS)")
    p.add_argument("--barge", help="the barge-in, a 24 kHz mono WAV (default: the project's TTS)")
    p.add_argument("--answer-s", type=float, default=ANSWER_S, help="seconds from the request's end to the barge-in")
    p.add_argument("--realtime", action="store_true", help="also one episode paced on the wall clock")
    p.add_argument("--out", help="directory for the probe's audio (room and model)")
    p.add_argument("--opt", action="append", default=[], help="bridge option key=value (repeatable)")
    a = p.parse_args(argv)
    options = dict(o.split("=", 1) for o in a.opt)
    if a.random_weights and a.model != "moshi":
        p.error("--random-weights builds moshi only")
    if not a.random_weights and not a.checkpoint:
        p.error("give --checkpoint (or --random-weights for moshi)")
    t = time.perf_counter()
    if a.random_weights:
        bridge = random_moshi(a.device, a.dtype, **options)
    else:
        bridge = create_bridge(a.model, checkpoint=a.checkpoint, device=a.device, dtype=a.dtype, **options)
    print(f"{a.model}: loaded and warmed up in {time.perf_counter() - t:.1f} s on {a.device}; "
          f"{bridge.model_stats().get('parameters', '')}")
    request, barge = voices(a.request, a.barge)
    probe = probe_episode(request, barge, a.answer_s)
    report = smoke(bridge, probe, Path(a.out) if a.out else None)
    if a.realtime:
        late = realtime(bridge, probe.room)
        under = sum(x > 0 for x in late)
        print(f"realtime: {len(late)} frames; lateness p50 {ms(late, 50):+.1f} ms, p99 {ms(late, 99):+.1f} ms, "
              f"max {max(late) * 1000:+.1f} ms (negative: early); underruns {under} ({under / len(late):.1%})")
    if a.device.startswith("cuda"):
        import torch

        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    if a.random_weights:
        print("random weights: the verdict above is not a check (the output is not speech)")
        return 0
    if report.failures or not report.repeatable:
        print(f"FAILED: {', '.join(report.failures + ([] if report.repeatable else ['not repeatable']))}")
        return 1
    print("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
