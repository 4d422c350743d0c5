"""TEST CODE: helpers shared by the local protocol peers and the endpoint-bridge tests.

Nothing here is used by the product. :class:`EnergyVAD` plays the part of a service's
server-side voice activity detection inside the peers; :func:`drive` plays the part of the
benchmark server for bridge-level tests (one room frame per 80 ms slot, as the realtime
clock does, without the database); :func:`play_run` serves a bridge a run on a real server until
it ends, and :func:`mini_timeline` says where the mini suite's turns fall on the stream.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import numpy as np

from clients.messages import EpisodeStart
from clients.sdk import BridgeClient, BridgeOptions
from server.benchmarks.mpe.suite import Suite
from server.engine.progress import run_progress

FRAME = 1920
SEC = 24_000


class EnergyVAD:
    """Windowed RMS detector over a growing input stream (the peers' "server VAD").

    ``push(pcm)`` returns a list of ("start", ms) / ("stop", ms) events, where ms is the
    input stream time of the event (start: first voiced window; stop: end of the last
    voiced window).
    """

    def __init__(self, rate: int, *, threshold_dbfs: float = -45.0, start_ms: int = 160, silence_ms: int = 500,
                 window_ms: int = 20):
        self.rate, self.win = rate, rate * window_ms // 1000
        self.window_ms = window_ms
        self.threshold = 32768.0 * 10 ** (threshold_dbfs / 20)
        self.start_n, self.stop_n = max(1, start_ms // window_ms), max(1, silence_ms // window_ms)
        self.buf = np.zeros(0, np.int16)
        self.windows = 0
        self.speaking = False
        self.run = 0
        self.voiced_since = None
        self.last_voiced_end = 0

    def push(self, pcm: np.ndarray) -> list[tuple[str, int]]:
        self.buf = np.concatenate([self.buf, pcm.astype(np.int16)])
        events = []
        while len(self.buf) >= self.win:
            w, self.buf = self.buf[: self.win].astype(np.float64), self.buf[self.win:]
            voiced = math.sqrt(float(np.mean(w * w))) >= self.threshold
            t_end = (self.windows + 1) * self.window_ms
            self.windows += 1
            if voiced:
                self.last_voiced_end = t_end
            if voiced != self.speaking:
                if self.run == 0 and voiced:
                    self.voiced_since = t_end - self.window_ms
                self.run += 1
            else:
                self.run = 0
            if not self.speaking and self.run >= self.start_n:
                self.speaking, self.run = True, 0
                events.append(("start", self.voiced_since))
            elif self.speaking and self.run >= self.stop_n:
                self.speaking, self.run = False, 0
                events.append(("stop", self.last_voiced_end))
        return events


def no_zero(pcm: np.ndarray) -> np.ndarray:
    """Audio with no zero sample, so that every frame of it is distinguishable from silence."""
    out = pcm.astype(np.int16).copy()
    out[out == 0] = 1
    return out


@dataclass
class Drive:
    outputs: list = field(default_factory=list)  # per seq: int16 frame or None
    texts: list = field(default_factory=list)
    stats: list = field(default_factory=list)
    error: BaseException | None = None

    def stream(self) -> np.ndarray:
        return np.concatenate([o if o is not None else np.zeros(FRAME, np.int16) for o in self.outputs])


async def drive(bridge, room: np.ndarray, *, period: float = 0.08, start: bool = True,
                stop_on_error: bool = True) -> Drive:
    """Feed ``room`` (24 kHz int16) to an AsyncBridge frame by frame on absolute deadlines,
    like the server's realtime clock; collect what it plays and what it emits."""
    if start:
        await bridge.reset(EpisodeStart(episode_id="ep-test", clock="realtime", sample_rate=24000,
                                        frame_samples=FRAME))
    n = -(-len(room) // FRAME)
    room = np.pad(room, (0, n * FRAME - len(room)))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    d = Drive()
    for seq in range(n):
        delay = t0 + seq * period - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            d.outputs.append(await bridge.step(seq, room[seq * FRAME:(seq + 1) * FRAME]))
        except Exception as exc:
            d.error = exc
            if stop_on_error:
                break
        for m in bridge._outbox:
            (d.texts if m["type"] == "text" else d.stats).append(m)
        bridge._outbox = []
    return d


# --- end-to-end: server <-> bridge <-> peer -------------------------------------------------

# One scenario with a request (T) and an N4 event (the model's answer to N4Q is cut by N4R).
N4_TURNS = [("A", "N2", "Ben, all good?"), ("B", "T", "Aria, how far is the station?"),
            ("C", "N4Q", "Aria, what is the weather like?"), ("A", "N4R", "It is sunny, I checked."),
            ("B", "N3", "Okay.")]
PREAMBLE = "You are Aria. Answer only when asked."
GAP = 12_000  # §3: 0.5 s of silence after the preamble and after each clip


def build_n4_suite(root, say):
    """A one-pair suite (explicit and implicit) whose explicit version is N4_TURNS."""
    import soundfile as sf

    from server.benchmarks.mpe.suite import Preamble, Scenario, SuiteMeta, Turn, write_suite

    def clip(rel: str, text: str) -> float:
        pcm = say(text)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(root / rel), pcm, 24000, subtype="PCM_16")
        return len(pcm) / 24000

    pre_d = clip("clips/preamble.wav", PREAMBLE)
    scenarios = []
    for cond in ("explicit", "implicit"):
        turns = []
        for i, (spk, label, text) in enumerate(N4_TURNS):
            text = text if cond == "explicit" or label != "T" else text.replace("Aria, ", "")
            rel = f"clips/{cond}/{i:03d}.wav"
            turns.append(Turn(idx=i, speaker=spk, label=label, text=text, clip=rel, duration_s=clip(rel, text)))
        scenarios.append(Scenario(scenario_id="s-n4", pair_id="n4", condition=cond, n_speakers=3, t_bucket="middle",
                                  attributes={"setting": "kitchen"}, gold_answer="Two kilometres", answer_keys=None,
                                  turns=turns))
    meta = SuiteMeta(name="bridges", version="1", generator="scripted", seed=0,
                     voices={"A": "piper:joe@1.0", "B": "piper:joe@1.0", "C": "piper:joe@1.0"},
                     preamble=Preamble(text=PREAMBLE, clip="clips/preamble.wav", duration_s=pre_d))
    write_suite(root, meta, scenarios)
    return root


def clip_lengths(suite) -> tuple[int, list[int]]:
    """(preamble samples, explicit turn samples) of an N4 suite."""
    import soundfile as sf

    pre = sf.info(str(suite / "clips/preamble.wav")).frames
    return pre, [sf.info(str(suite / f"clips/explicit/{i:03d}.wav")).frames for i in range(len(N4_TURNS))]


def t_end_sample(suite) -> int:
    """Stream sample at which T (turn 1) ends: fixed by the script alone (§3)."""
    pre, turns = clip_lengths(suite)
    return pre + GAP + turns[0] + GAP + turns[1]


@dataclass
class EpisodeResult:
    progress: dict
    attempts: list  # Attempt rows, by number
    completed: object  # the completed Attempt
    events: list  # episode document events of the completed attempt
    segments: list  # live detector segments (Segment)
    track: np.ndarray  # recorded assistant track (24 kHz)
    by_seq: np.ndarray  # the bridge's frames in seq order, read back from the track via the frame log
    silent_seqs: list  # seqs the bridge answered with a SILENT frame


async def run_endpoint_episode(db, settings, suite, bridge, *, max_attempts: int = 3, timeout: float = 150.0):
    """One realtime episode of ``suite`` (explicit) served by ``bridge`` through the real server."""
    import time

    from sqlalchemy import select

    from clients.sdk import BridgeClient, BridgeOptions
    from server.app import BackgroundServer
    from server.auth import create_token
    from server.core.timebase import Segment
    from server.db import Attempt, Episode, FrameRow, SegmentRow
    from server.engine.bundles import episode_document, load_track
    from server.engine.leasing import create_run
    from server.engine.progress import run_progress

    tok = create_token(db, "local")
    run = create_run(db, team="local", model=bridge.name, suite_path=str(suite), clock="realtime",
                     conditions=["explicit"], max_attempts=max_attempts)
    async with BackgroundServer(settings) as server:
        client = BridgeClient(bridge, BridgeOptions(server=server.url, token=tok, backoff_min_s=0.05,
                                                    backoff_max_s=0.2))
        task = asyncio.create_task(client.run())
        t0 = time.monotonic()
        try:
            while True:
                p = await asyncio.to_thread(run_progress, db, run)
                if not p.active:
                    break
                if task.done():
                    task.result()
                    raise AssertionError(f"bridge stopped early: {p}")
                assert time.monotonic() - t0 < timeout, f"run did not finish: {p}"
                await asyncio.sleep(0.1)
        finally:
            client.stop()
            await asyncio.gather(task, return_exceptions=True)
    with db.session() as s:
        ep = s.scalars(select(Episode).where(Episode.run_id == run)).one()
        attempts = s.scalars(select(Attempt).where(Attempt.episode_id == ep.id).order_by(Attempt.number)).all()
        completed = next((a for a in attempts if a.status == "completed"), None)
        assert completed is not None, [(a.status, a.error_code, a.error_message) for a in attempts]
        rows = s.scalars(select(FrameRow).where(FrameRow.attempt_id == completed.id,
                                                FrameRow.direction == "assistant").order_by(FrameRow.seq)).all()
        segs = [Segment(g.start, g.end) for g in s.scalars(
            select(SegmentRow).where(SegmentRow.attempt_id == completed.id).order_by(SegmentRow.start))]
        s.expunge_all()
    track = load_track(db, completed.id, "assistant")
    doc = episode_document(db, ep.id)
    n = completed.n_frames
    by_seq = np.zeros(n * FRAME, np.int16)
    silent = []
    for r in rows:
        if r.seq < n and r.slot < n:
            by_seq[r.seq * FRAME:(r.seq + 1) * FRAME] = track[r.slot * FRAME:(r.slot + 1) * FRAME]
            if r.silent:
                silent.append(r.seq)
    return EpisodeResult(p, attempts, completed, doc["events"], segs, track, by_seq, silent)


def frames_of(pcm: np.ndarray) -> np.ndarray:
    return pcm[: len(pcm) // FRAME * FRAME].reshape(-1, FRAME)


def audible_frames(pcm: np.ndarray) -> list[int]:
    """Indices of frames that are not all zeros."""
    return [i for i, f in enumerate(frames_of(pcm)) if f.any()]


def event(events: list, type_: str, **data) -> dict:
    return next(e for e in events if e["type"] == type_ and all(e["data"].get(k) == v for k, v in data.items()))


def nonzero(x: np.ndarray) -> np.ndarray:
    """The samples of ``x`` that are not zero (what a bridge played, without the silence around it)."""
    return x[x != 0]


def mini_timeline(suite_path) -> dict[str, int]:
    """Stream sample times of the mini suite's p1/explicit episode up to T's end (§3: those do
    not depend on the model): preamble, 0.5 s, then each clip followed by 0.5 s."""
    suite = Suite.load(suite_path)
    sc = suite.scenario("s-p1", "explicit")
    t = len(suite.load_clip(suite.meta.preamble.clip))
    out = {"preamble_end": t}
    t += SEC // 2
    for turn in sc.turns:
        start, t = t, t + len(suite.load_clip(turn.clip))
        if turn.label == "T":
            out.update(t_start=start, t_end=t)
            return out
        t += SEC // 2
    raise AssertionError("no T turn")


async def play_run(db, server, bridge, token, run_id, timeout=90):
    """``bridge`` plays run ``run_id`` on ``server`` (with ``token``) until the run ends; its progress.
    Fails if the bridge stops first or the run takes longer than ``timeout``."""
    client = BridgeClient(bridge, BridgeOptions(server=server.url, token=token, backoff_min_s=0.05,
                                                backoff_max_s=0.2))
    task = asyncio.create_task(client.run())
    t0 = time.monotonic()
    try:
        while True:
            p = await asyncio.to_thread(run_progress, db, run_id)
            if not p.active:
                return p
            if task.done():
                task.result()
                raise AssertionError(f"bridge stopped early: {p}")
            assert time.monotonic() - t0 < timeout, f"run did not finish: {p}"
            await asyncio.sleep(0.05)
    finally:
        client.stop()
        await asyncio.gather(task, return_exceptions=True)
