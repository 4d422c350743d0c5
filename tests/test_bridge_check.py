"""`mpe bridge check` against a correct bridge and broken ones, on both databases: the server
plays the probe suite, the bridge connects as usual, the table says what is wrong and why.

The pure judgement is also tested on literal frame logs (no server)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import websockets
from rich.console import Console

from clients.messages import EpisodeStart
from clients.sdk import Bridge, BridgeClient, BridgeOptions
from model_bridges.reference import Silent
from server.app import BackgroundServer
from server.auth import create_token
from server.benchmarks.mpe.suite import Suite, check_suite
from server.bridgecheck.evaluate import (
    ADVICE,
    OWN_CODE_ADVICE,
    BridgeSeen,
    CheckRun,
    Verdict,
    evaluate,
)
from server.bridgecheck.suite import CHECK_SUITE_NAME, build_check_suite
from server.cli.check import CheckOptions, http_base, render, run_check
from server.core.status import AttemptStatus, RunStatus
from server.engine.leasing import create_run
from tests.support.checks import ANSWERED, attempt, judge

FRAME = 1920
QUIET_FRAMES = 12  # the room quiet this long (0.96 s) after it spoke: the test bridges answer
ANSWER = "Yes, I can hear you clearly. The weather is fine today and I am happy to help with anything you need."


# --- bridges --------------------------------------------------------------------------------


class Talker(Bridge):
    """Answers speech with speech: once the room has been quiet for QUIET_FRAMES after it spoke,
    plays its sentence (about 5.5 s) over and over: it is still talking when an episode ends. When the room speaks
    while it plays, it stops at once and goes on with the sentence after the next quiet. Broken cases:
    ``fresh=False``, its reset keeps the sentence it was playing; ``stops=False``, it talks on."""

    blocking = False

    def __init__(self, sound: np.ndarray, *, name: str = "talker", fresh: bool = True, stops: bool = True):
        super().__init__()
        self.sound, self.name, self.fresh, self.stops = sound, name, fresh, stops
        self._clear()

    def _clear(self) -> None:
        self.heard, self.quiet, self.pos, self.held = False, 0, None, False

    def reset(self, episode: EpisodeStart) -> None:
        if self.fresh:
            self._clear()

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        if np.abs(room).max() > 300:
            self.heard, self.quiet = True, 0
            self.held = self.held or (self.stops and self.pos is not None)  # talked over: stop now
        else:
            self.quiet += 1
        if self.quiet >= QUIET_FRAMES and self.heard:
            if self.pos is None:
                self.pos = 0
            self.heard = self.held = False  # the room is quiet again: go on with the sentence
        if self.pos is None or self.held:
            return None
        n = self.frame_samples
        out = self.sound[self.pos:self.pos + n]
        self.pos = (self.pos + n) % len(self.sound)  # it talks on until talked over
        return np.pad(out, (0, n - len(out))).astype(np.int16)


class Slow(Bridge):
    """Takes 90 ms for every 80 ms frame (in a worker thread, as the SDK recommends): it cannot
    keep up with real time."""

    name = "slow"
    clocks = ("realtime",)

    def reset(self, episode: EpisodeStart) -> None:
        pass

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        time.sleep(0.09)
        return None


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 24000)) / 24000
    return (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


async def raw_bridge(url: str, token: str, model: str, answer, stop: asyncio.Event) -> None:
    """A bridge written from docs/protocol.md alone (websockets, struct, json): ``answer(seq)`` gives
    the bytes of the assistant frame for room frame ``seq``. Reconnects after the server closes,
    until ``stop`` is set."""

    async def serve() -> None:
        while True:
            try:
                async with websockets.connect(url + "/v1/bridge", compression=None,
                                              additional_headers={"Authorization": f"Bearer {token}"}) as ws:
                    await ws.send(json.dumps({"type": "hello", "protocol": 1, "model": {"name": model},
                                              "sample_rate": 24000, "clocks": ["lockstep"], "check": True}))
                    async for msg in ws:
                        if isinstance(msg, bytes):
                            _, _, _, seq = struct.unpack_from("<BBHI", msg)
                            await ws.send(answer(seq))
            except (websockets.ConnectionClosed, OSError):
                pass
            await asyncio.sleep(0.05)

    task = asyncio.create_task(serve())
    await stop.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def wrong_size(seq: int) -> bytes:
    return struct.pack("<BBHI", 1, 2, 0, seq) + np.full(1900, 500, "<i2").tobytes()


def seq_ahead(seq: int) -> bytes:
    return struct.pack("<BBHI", 1, 2, 1, seq + 1)


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def probe_suite(pytestconfig) -> Path:
    """The probe suite, voiced once (kept in pytest's cache between sessions)."""
    return build_check_suite(Path(pytestconfig.cache.mkdir("bridge-check")))


@pytest.fixture
def check_settings(settings, probe_suite):
    """Settings whose data directory already holds the probe suite (the server reuses it)."""
    shutil.copytree(probe_suite, settings.data_dir / "suites" / CHECK_SUITE_NAME)
    return settings


@pytest.fixture(scope="session")
def answer_speech(say) -> np.ndarray:
    return say(ANSWER)


async def run_bridge_check(settings, db, model: str, start, clocks=("lockstep",)):
    """Start the server, the bridge (``start(url, token, stop)`` returns its task) and the check; the report."""
    token = create_token(db, "lab")
    stop = asyncio.Event()
    async with BackgroundServer(settings) as server:
        task = start(server.url, token, stop)
        try:
            report = await asyncio.wait_for(run_check(CheckOptions(
                server=server.url, token=token, model=model, clocks=list(clocks), wait_s=30, poll_s=0.2)), 280)
        finally:
            stop.set()
            await asyncio.gather(task, return_exceptions=True)
    return report


def sdk(bridge: Bridge):
    def start(url, token, stop):
        client = BridgeClient(bridge, BridgeOptions(server=url, token=token, backoff_min_s=0.05, check=True))

        async def go():
            task = asyncio.create_task(client.run())
            await stop.wait()
            client.stop()
            await task

        return asyncio.create_task(go())

    return start


def raw(model: str, answer):
    return lambda url, token, stop: asyncio.create_task(raw_bridge(url, token, model, answer, stop))


def verdicts(report) -> dict[tuple[str, str | None], str]:
    return {(x.check, x.clock): x.verdict.value for x in report.lines}


PROTOCOL = ("episodes", "frames", "seq")


# --- against a server -----------------------------------------------------------------------


async def test_correct_bridge_passes_in_both_clocks(check_settings, db, answer_speech):
    report = await run_bridge_check(check_settings, db, "talker", sdk(Talker(answer_speech)),
                                    clocks=("lockstep", "realtime"))
    got = verdicts(report)
    assert report.done and report.ok, got
    assert got.pop(("bridge", None)) == "pass"
    for clock in ("lockstep", "realtime"):
        for check in (*PROTOCOL, "speech", "reaction", "reset", "barge_in", "rate"):
            assert got.pop((check, clock)) == "pass", (check, clock, report.line(check, clock))
        # timing depends on how loaded this machine is; a correct bridge never fails it
        assert got.pop(("timing", clock)) in ("pass", "warn")
    assert got == {}
    # it stops when talked over, in every episode (the barge-in line judged something)
    assert report.line("reset", "realtime").detail.count("opened silent") == 2
    assert "started while it spoke" in report.line("barge_in", "lockstep").detail
    assert "speech onset" in report.line("reaction", "lockstep").detail
    assert [r.clock for r in report.runs] == ["lockstep", "realtime"]
    assert all(r.status == "finished" and r.announced for r in report.runs)


async def test_silent_bridge_is_never_heard(check_settings, db):
    report = await run_bridge_check(check_settings, db, "silent", sdk(Silent()))
    got = verdicts(report)
    assert not report.ok
    assert [got[(c, "lockstep")] for c in PROTOCOL] == ["pass"] * 3
    assert got[("speech", "lockstep")] == got[("reaction", "lockstep")] == "fail"
    speech = report.line("speech", "lockstep")
    assert "only silence" in speech.detail and "step()" in speech.advice
    assert "no speech within 5.00 s" in report.line("reaction", "lockstep").detail


async def test_a_tone_is_not_speech(check_settings, db):
    report = await run_bridge_check(check_settings, db, "tone", sdk(Talker(tone(3.0), name="tone")))
    got = verdicts(report)
    assert [got[(c, "lockstep")] for c in PROTOCOL] == ["pass"] * 3
    assert got[("speech", "lockstep")] == got[("reaction", "lockstep")] == "fail"
    speech = report.line("speech", "lockstep")
    assert "none detected as speech" in speech.detail and "a tone" in speech.advice


async def test_wrong_frame_size(check_settings, db):
    report = await run_bridge_check(check_settings, db, "raw", raw("raw", wrong_size))
    got = verdicts(report)
    assert got[("frames", "lockstep")] == got[("episodes", "lockstep")] == "fail"
    assert got[("seq", "lockstep")] == got[("speech", "lockstep")] == "skip"  # nothing completed
    frames = report.line("frames", "lockstep")
    assert frames.detail.startswith("bad_frame: frame payload is 3800 bytes") and frames.advice == ADVICE["bad_frame"]
    assert "0 of 2 completed" in report.line("episodes", "lockstep").detail
    assert "bad_frame" in report.line("episodes", "lockstep").detail


async def test_out_of_order_seq(check_settings, db):
    report = await run_bridge_check(check_settings, db, "raw", raw("raw", seq_ahead))
    got = verdicts(report)
    assert got[("seq", "lockstep")] == got[("episodes", "lockstep")] == "fail"
    assert got[("frames", "lockstep")] == "skip"
    seq = report.line("seq", "lockstep")
    assert "bad_seq: expected assistant frame seq 0, got 1" == seq.detail and seq.advice == ADVICE["bad_seq"]


async def test_slow_bridge_in_realtime(check_settings, db):
    """It announces realtime only: lockstep is skipped (its run cancelled), realtime timing fails."""
    report = await run_bridge_check(check_settings, db, "slow", sdk(Slow()), clocks=("lockstep", "realtime"))
    got = verdicts(report)
    assert got[("timing", "realtime")] == "fail"
    assert got[("episodes", "realtime")] == got[("seq", "realtime")] == "pass"
    assert got[("episodes", "lockstep")] == "skip" and ("timing", "lockstep") not in got
    assert "announces only realtime" in report.line("episodes", "lockstep").detail
    assert {r.clock: r.status for r in report.runs} == {"lockstep": "cancelled", "realtime": "finished"}
    assert "keep up with real time" in report.line("timing", "realtime").advice


async def test_bridge_that_talks_on_when_talked_over(check_settings, db, answer_speech):
    report = await run_bridge_check(check_settings, db, "talks-on",
                                    sdk(Talker(answer_speech, name="talks-on", stops=False)))
    got = verdicts(report)
    assert [got[(c, "lockstep")] for c in (*PROTOCOL, "speech", "reaction")] == ["pass"] * 5
    assert got[("barge_in", "lockstep")] == "fail"
    line = report.line("barge_in", "lockstep")
    assert "N4Q started while it spoke" in line.detail and "limit 1.00 s" in line.detail
    assert "MTR-DuplexBench" in line.advice


class MisRated(Talker):
    """A talker that announces 16 kHz but plays its 24 kHz sentence in consecutive 1280-sample
    pieces: the server plays it 1.5 times slow."""

    sample_rate = 16_000


async def test_bridge_that_sends_another_rate_than_it_announces(check_settings, db, answer_speech):
    report = await run_bridge_check(check_settings, db, "misrated", sdk(MisRated(answer_speech, name="misrated")))
    got = verdicts(report)
    assert [got[(c, "lockstep")] for c in (*PROTOCOL, "speech")] == ["pass"] * 4
    line = report.line("rate", "lockstep")
    assert line.verdict == Verdict.failed, line.detail
    assert "sent as 16 kHz" in line.detail and "above 21.6 cm, longer than any adult" in line.detail
    assert "hello.sample_rate" in line.advice and "higher rate than the one it announces" in line.advice


def test_barge_in_judged_against_the_interruption_bound():
    stops = judge(attempt(speech=[(210_000, 212_000 + 23_000)]), attempt(episode=1, speech=ANSWERED))
    assert stops.line("barge_in", "lockstep").verdict == Verdict.passed
    late = judge(attempt(speech=[(210_000, 212_000 + 25_000)]), attempt(episode=1, speech=ANSWERED))
    assert late.line("barge_in", "lockstep").verdict == Verdict.failed  # 1.04 s after N4Q began
    quiet = judge(attempt(speech=[(205_000, 211_000)]), attempt(episode=1, speech=[(205_000, 211_000)]))
    assert quiet.line("barge_in", "lockstep").verdict == Verdict.skipped


class RaisesOnSecond(Talker):
    """A correct talker whose step() raises on the 10th frame of its second episode."""

    def reset(self, episode: EpisodeStart) -> None:
        super().reset(episode)
        self.episodes, self.frames = getattr(self, "episodes", 0) + 1, 0

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self.frames += 1
        if self.episodes == 2 and self.frames == 10:
            raise ValueError("boom in step")
        return super().step(seq, room)


async def test_exception_in_step_is_reported_on_the_episodes_line(check_settings, db, answer_speech):
    report = await run_bridge_check(check_settings, db, "raises", sdk(RaisesOnSecond(answer_speech, name="raises")))
    got = verdicts(report)
    line = report.line("episodes", "lockstep")
    assert line.verdict == Verdict.failed and "1 of 2 completed" in line.detail
    assert "bridge_error" in line.detail and "ValueError: boom in step" in line.detail
    assert line.advice == f"[bridge_error] {ADVICE['bridge_error']}"
    # the bridge went on: the other episode was judged
    assert got[("frames", "lockstep")] == got[("seq", "lockstep")] == got[("speech", "lockstep")] == "pass"


async def test_state_not_reset_between_episodes(check_settings, db, answer_speech):
    report = await run_bridge_check(check_settings, db, "stale", sdk(Talker(answer_speech, name="stale", fresh=False, stops=False)))
    got = verdicts(report)
    assert got[("reset", "lockstep")] == "fail"
    assert [got[(c, "lockstep")] for c in (*PROTOCOL, "speech")] == ["pass"] * 4  # reaction: still talking
    reset = report.line("reset", "lockstep")
    assert "lockstep episode 2 speaks at 0.00 s" in reset.detail and "ended mid-speech" in reset.detail
    assert "reset()" in reset.advice


async def test_no_bridge_and_wrong_requests(check_settings, db, mini_suite):
    """Nobody connects: the check gives up after --wait and says how to connect. The API refuses runs
    that are not a check's, and another team's runs look like no runs at all."""
    token, other = create_token(db, "lab"), create_token(db, "other")
    plain = create_run(db, team="lab", model="m", suite_path=str(mini_suite), clock="lockstep", limit=1)
    async with BackgroundServer(check_settings) as server:
        report = await run_check(CheckOptions(server=server.url + "/v1/bridge", token=token, model="nobody",
                                              wait_s=0.5, poll_s=0.1))
        async with httpx.AsyncClient(base_url=http_base(server.url)) as c:
            r = await c.get("/v1/checks", params={"run": plain}, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 400 and "not the runs of one bridge check" in r.json()["error"]["message"]
            check_run = report.runs[0].run_id
            r = await c.get("/v1/checks", params={"run": check_run}, headers={"Authorization": f"Bearer {other}"})
            assert r.status_code == 404
            r = await c.post("/v1/checks", json={"model": "bad name"}, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 422
    assert report.done and not report.ok
    line = report.line("bridge")
    assert line.verdict == Verdict.failed and "no bridge announcing model 'nobody'" in line.detail
    assert "hello.model.name = 'nobody'" in line.advice
    assert report.line("episodes", "realtime").verdict == Verdict.skipped  # not the bridge's fault: none came
    assert {r.status for r in report.runs} == {RunStatus.cancelled}


async def test_command_line(check_settings, db, answer_speech):
    """`mpe bridge check` as a team runs it: the table (exit 1 on a failure), --json, and a wrong token."""
    token = create_token(db, "lab")
    async with BackgroundServer(check_settings) as server:
        env = dict(os.environ, MPE_TOKEN=token, DATABASE_URL="sqlite:////nonexistent/never-used.db")

        async def mpe(*args):
            p = await asyncio.create_subprocess_exec(sys.executable, "-m", "server.cli", "bridge", "check", *args,
                                                     env=env, stdout=asyncio.subprocess.PIPE,
                                                     stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(p.communicate(), 200)
            return p.returncode, out.decode(), err.decode()

        stop = asyncio.Event()
        task = sdk(Talker(tone(3.0), name="tone"))(server.url, token, stop)
        try:
            code, out, err = await mpe("--server", server.url, "--model", "tone", "--clocks", "lockstep")
        finally:
            stop.set()
            await task
        assert code == 1, err
        assert "Start your bridge now" in err and "Traceback" not in err
        assert "output detected as speech" in out and "FAIL" in out and "a tone" in out

        stop = asyncio.Event()
        task = sdk(Talker(answer_speech))(server.url, token, stop)
        try:
            code, out, err = await mpe("--server", server.url, "--model", "talker", "--clocks", "lockstep", "--json")
        finally:
            stop.set()
            await task
        assert code == 0, err
        report = json.loads(out)
        assert report["done"] and {x["verdict"] for x in report["lines"]} <= {"pass", "warn"}

        code, out, err = await mpe("--server", server.url, "--model", "talker", "--token", "mpe_wrong")
        assert code == 2 and "unauthorized" in err and "Traceback" not in err


# --- the probe suite and the pure judgement ---------------------------------------------------


def test_probe_suite_is_a_valid_suite(probe_suite, tmp_path):
    suite = Suite.load(probe_suite)
    assert check_suite(suite, strict=True) == []
    assert [t.label for t in suite.scenarios[0].turns] == ["N2", "T", "N4Q", "N4R"]
    assert {sc.condition for sc in suite.scenarios} == {"explicit", "implicit"}
    # reused as it is: a second build changes nothing
    stamp = (probe_suite / "suite.json").stat().st_mtime_ns
    assert build_check_suite(probe_suite.parent.parent) == probe_suite
    assert (probe_suite / "suite.json").stat().st_mtime_ns == stamp


def test_http_base():
    assert http_base("ws://h:8600") == "http://h:8600"
    assert http_base("wss://h/v1/bridge/") == "https://h"
    assert http_base("http://h:1/") == "http://h:1"




@pytest.mark.parametrize("lateness,missing,turnaround_us,expected", [
    (0, 0, 2_000, "pass"),
    (1, 0, 30_000, "pass"),  # answering takes time: one slot late is fine
    (5, 0, 30_000, "warn"),  # one stall of 400 ms
    (0, 0, 120_000, "warn"),  # answers after 120 ms
    (0, 9, 2_000, "warn"),  # 3% of the slots silent
    (20, 0, 30_000, "fail"),  # 1.6 s behind
    (0, 30, 2_000, "fail"),  # 10% of the slots silent
    (0, 0, 400_000, "fail"),  # answers after 400 ms
])
def test_realtime_timing_limits(lateness, missing, turnaround_us, expected):
    a = [attempt("realtime", episode=e, lateness=lateness, missing=missing, turnaround_us=turnaround_us,
                 speech=ANSWERED) for e in (0, 1)]
    report = judge(*a, clocks=("realtime",))
    line = report.line("timing", "realtime")
    assert line.verdict.value == expected, line.detail
    assert bool(line.advice) == (expected != "pass")


def test_lockstep_timing_warns_when_slower_than_real_time():
    slow = judge(attempt(turnaround_us=150_000, speech=ANSWERED), attempt(episode=1, speech=ANSWERED,
                                                                          turnaround_us=150_000))
    assert slow.line("timing", "lockstep").verdict == Verdict.warn
    assert "150 ms (median)" in slow.line("timing", "lockstep").detail
    timeout = judge(attempt(status=AttemptStatus.failed, code="timeout", message="no assistant frame within 30 s"),
                    attempt(episode=1, speech=ANSWERED))
    assert timeout.line("timing", "lockstep").verdict == Verdict.failed
    assert timeout.line("timing", "lockstep").advice == ADVICE["timeout"]


def test_error_codes_get_advice():
    report = judge(attempt(status=AttemptStatus.failed, code="endpoint_rate_limited", message="bridge reported it"),
                   attempt(episode=1, status=AttemptStatus.failed, code="disconnected", message="ConnectionClosed"))
    line = report.line("episodes", "lockstep")
    assert line.verdict == Verdict.failed and "0 of 2 completed" in line.detail
    assert "endpoint_rate_limited: bridge reported it" in line.detail and "disconnected" in line.detail
    assert OWN_CODE_ADVICE in line.advice and ADVICE["disconnected"] in line.advice
    # a bridge that left before answering anything (unstarted) is worth a look, not a failure
    left = judge(attempt(status=AttemptStatus.unstarted, code="disconnected"), attempt(speech=ANSWERED),
                 attempt(episode=1, speech=ANSWERED))
    assert left.line("episodes", "lockstep").verdict == Verdict.warn


def test_reset_judged_from_the_opening_of_each_episode():
    ends_talking = [(210_000, 300 * FRAME)]
    leftover = [(0, 30_000), (210_000, 300_000)]
    fresh = judge(attempt(speech=ends_talking), attempt(episode=1, speech=ends_talking))
    assert fresh.line("reset", "lockstep").verdict == Verdict.passed
    stale = judge(attempt(speech=ends_talking), attempt(episode=1, speech=leftover))
    assert stale.line("reset", "lockstep").verdict == Verdict.failed
    assert "ended mid-speech" in stale.line("reset", "lockstep").detail
    # a bridge that talks from the first frame of every episode: reset cannot be judged
    always = judge(attempt(speech=leftover), attempt(episode=1, speech=leftover))
    assert always.line("reset", "lockstep").verdict == Verdict.warn
    # episodes of different bridges are not compared
    two = judge(attempt(speech=ends_talking), attempt(episode=1, speech=leftover, bridge="b2"))
    assert two.line("reset", "lockstep").verdict == Verdict.skipped


def test_report_waits_for_the_runs_and_skips_unannounced_clocks():
    running = evaluate("m", [CheckRun("lockstep", "r1", RunStatus.running, 2)], [attempt(speech=ANSWERED)],
                       [BridgeSeen("b1", "", 24000, ("lockstep",), True)])
    assert not running.done and [x.check for x in running.lines] == ["bridge"]
    report = judge(attempt(speech=ANSWERED), attempt(episode=1, speech=ANSWERED), clocks=("lockstep", "realtime"),
                   bridges=("lockstep",))
    assert report.ok and report.runs[1].announced is False
    skipped = report.line("episodes", "realtime")
    assert skipped.verdict == Verdict.skipped and "announces only lockstep" in skipped.detail
    assert report.line("timing", "realtime") is None


def test_table_shows_verdicts_and_advice():
    report = judge(attempt(), attempt(episode=1))  # silent: speech and reaction fail
    con = Console(record=True, width=200)
    render(report, con)
    text = con.export_text()
    assert "output detected as speech" in text and "only silence" in text
    assert "fail output detected as speech (lockstep): The check asks" in text
    assert "FAIL: 2 of 10 checks failed" in text
