"""bench/gpu_smoke.py's probe on the CPU: real speech (the project's TTS) through the project's
detector and the MTR interruption rule, against bridge doubles scripted on the probe's times: one
that answers and stops at the barge-in passes; one that stays silent and one that ignores the
barge-in fail. The random-weight Moshi path runs with tiny settings (the full-size one is for a
GPU host), teacher forcing included."""

from __future__ import annotations

import numpy as np
import pytest

from bench.gpu_smoke import SLOT_S, Probe, main, probe_episode, random_moshi, smoke
from clients.sdk import Bridge
from server.core.timebase import STREAM_RATE

FRAME = int(SLOT_S * STREAM_RATE)


@pytest.fixture(scope="module")
def probe(say) -> Probe:
    return probe_episode(say("Could you tell me how a bicycle stays upright?"), say("Sorry, make it shorter."))


@pytest.fixture(scope="module")
def reply(say) -> np.ndarray:
    return say("A moving bicycle stays upright because the rider steers into the fall, and the wheels help a "
               "little as well, so it keeps balancing itself as long as it rolls forward.")


class Scripted(Bridge):
    """Plays ``reply`` from 0.4 s after the request's end; ``stop_after`` seconds after the barge-in's start
    it stops (None: it never does)."""

    name = "scripted"

    def __init__(self, probe: Probe, reply: np.ndarray | None, stop_after: float | None):
        super().__init__()
        self.probe, self.reply, self.stop_after = probe, reply, stop_after

    def reset(self, episode) -> None:
        pass

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        if self.reply is None:
            return None
        t = seq * FRAME
        begin = self.probe.request[1] + int(0.4 * STREAM_RATE)
        if self.stop_after is not None and t >= self.probe.barge_in[0] + int(self.stop_after * STREAM_RATE):
            return None
        piece = self.reply[max(t - begin, 0):max(t - begin, 0) + FRAME] if t >= begin else np.zeros(0, np.int16)
        return np.concatenate([piece, np.zeros(FRAME - len(piece), np.int16)])


def test_an_answer_that_stops_at_the_barge_in_passes(probe, reply):
    report = smoke(Scripted(probe, reply, stop_after=0.3), probe, say=lambda _: None)
    assert report.failures == [] and report.result.responded and report.result.interrupted
    assert report.repeatable and report.rtf >= 0


def test_a_silent_bridge_fails(probe):
    report = smoke(Scripted(probe, None, None), probe, say=lambda _: None)
    assert report.failures == ["no_response"]


def test_a_bridge_that_ignores_the_barge_in_fails(probe, reply, tmp_path):
    report = smoke(Scripted(probe, reply, stop_after=None), probe, out_dir=tmp_path, say=lambda _: None)
    assert report.failures == ["late_stop"] and report.result.stop_latency > STREAM_RATE
    import soundfile as sf

    written, rate = sf.read(tmp_path / "probe-assistant.wav", dtype="int16")
    assert rate == STREAM_RATE and len(written) == len(probe.room) and written.any()


def test_random_weight_moshi_with_teacher_forcing(probe):
    pytest.importorskip("moshi", reason="the [moshi] extra")
    from tests.support.moshi import tiny_configs

    lm, mimi = tiny_configs()
    bridge = random_moshi("cpu", "", lm_kwargs=lm, mimi_config=mimi, threads="1", warmup_frames="1")
    lines: list[str] = []
    report = smoke(bridge, probe, say=lines.append)
    assert report.context is not None and any(line.startswith("context:") for line in lines)
    assert report.repeatable and report.rtf > 0
    assert bridge.model_stats()["parameters"]["lm"] > 0


def test_the_command_refuses_random_weights_for_other_models():
    with pytest.raises(SystemExit):
        main(["voila", "--random-weights"])
