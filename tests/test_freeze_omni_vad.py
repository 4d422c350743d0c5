"""Freeze-Omni's VAD decisions and the comparison of two VAD versions (bench/freeze_omni_vad.py), on
literal inputs; the bridge's ``vad=`` option (model_bridges/freeze_omni.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.freeze_omni_vad import CHUNK, Decision, Row, Span, attribute, compare, decisions, summarise
from model_bridges.freeze_omni import vad_weights_file
from model_bridges.playout import BridgeConfigError
from tests.support.silero import save_certain

SPANS = [Span("turn (smooth)", 1.0, 3.0), Span("turn before a pause", 10.0, 12.0),
         Span("turn after a pause", 14.5, 16.0), Span("backchannel", 20.0, 20.4)]


def test_a_start_belongs_to_the_speech_it_falls_in_and_an_end_to_the_speech_before_it():
    assert attribute("sl", 1.32, SPANS) == "turn (smooth)"
    assert attribute("sl", 16.4, SPANS) == "turn after a pause"  # within the slack after the clip's end
    assert attribute("sl", 7.0, SPANS) == "none"
    assert attribute("el", 14.16, SPANS) == "turn before a pause"  # the pause counted as the turn's end
    assert attribute("el", 0.5, SPANS) == "none"


def test_decisions_of_both_versions_are_matched_in_time_and_the_rest_are_one_versions_only():
    a = [Decision(1.28, "sl"), Decision(5.12, "el"), Decision(10.24, "sl"), Decision(14.4, "el"),
         Decision(14.72, "sl"), Decision(18.08, "el")]
    b = [Decision(1.44, "sl"), Decision(5.12, "el"), Decision(10.24, "sl"), Decision(18.24, "el"),
         Decision(20.16, "sl")]
    rows = compare(a, b, SPANS)
    assert rows == [
        Row("sl", "turn (smooth)", 1.28, 1.44),
        Row("sl", "turn before a pause", 10.24, 10.24),
        Row("sl", "turn after a pause", 14.72, None),  # A ended in the pause, so it starts again
        Row("sl", "backchannel", None, 20.16),  # B heard the backchannel as a new turn
        Row("el", "turn (smooth)", 5.12, 5.12),
        Row("el", "turn before a pause", 14.4, None),  # the flip: the pause ends A's turn only
        Row("el", "turn after a pause", 18.08, 18.24),
    ]
    by = {(s.status, s.kind): s for s in summarise(rows)}
    assert by[("sl", "turn (smooth)")].dt_ms == (160,) and by[("sl", "turn (smooth)")].same_chunk == 0
    assert by[("sl", "turn before a pause")].same_chunk == 1
    assert (by[("el", "turn before a pause")].only_a, by[("el", "turn before a pause")].only_b) == (1, 0)
    assert (by[("sl", "backchannel")].only_a, by[("sl", "backchannel")].only_b) == (0, 1)


def test_decisions_further_apart_than_the_match_window_are_two():
    rows = compare([Decision(2.0, "sl")], [Decision(3.5, "sl")], SPANS, match_s=1.0)
    assert [(r.t_a, r.t_b) for r in rows] == [(2.0, None), (None, 3.5)]


class Scripted:
    """A silero model double: the given probability per 512-sample window, in order; counts resets."""

    def __init__(self, probs):
        self.probs, self.n, self.resets = list(probs), 0, 0

    def __call__(self, x, sr):
        assert sr == 16_000 and x.shape == (512,)
        p = self.probs[self.n]
        self.n += 1
        return torch.tensor([[p]], dtype=torch.float64)

    def reset_states(self):
        self.resets += 1


def run(probs):
    windows = CHUNK // 512
    assert len(probs) % windows == 0
    model = Scripted(probs)
    out, seen = decisions(model, [np.zeros(CHUNK, np.float32)] * (len(probs) // windows))
    assert seen == probs
    return out, model


def test_speech_starts_at_a_window_of_0_8_and_ends_after_2_s_below_0_65():
    """web/vad.py:37-41 through silero's VADIterator: start at p >= 0.8 (0.79 is not), end once 2 s
    (32000 samples: the 63rd window after the first low one) are below 0.65; 0.7 neither starts
    nor ends; the end resets the model (web/vad.py:105) and the next start opens a new dialogue."""
    probs = [0.79] * 5 + [0.2] * 4 + [0.9] + [0.7] * 5 + [0.1] * 63 + [0.1] * 2 + [0.95] * 5 + [0.0] * 5
    out, model = run(probs)
    assert out == [Decision(2 * 0.16, "sl"), Decision(16 * 0.16, "el"), Decision(17 * 0.16, "sl")]
    assert model.resets == 3  # the iterator's creation, its reset as web/vad.py:42 does, and the end


def test_a_low_stretch_shorter_than_2_s_ends_nothing():
    out, _ = run([0.9] * 5 + [0.1] * 62 + [0.9] + [0.1] * 2)
    assert out == [Decision(1 * 0.16, "sl")]


class VADWithWeights:
    """The attributes of the authors' VAD the option touches (web/vad.py:33-42): its model and the
    iterator that drives it."""

    def __init__(self):
        from silero_vad.utils_vad import VADIterator

        self.vad_model = Scripted([0.0] * 10)
        self.vad_iterator = VADIterator(self.vad_model, threshold=0.8, sampling_rate=16_000,
                                        min_silence_duration_ms=2000, speech_pad_ms=30)


def test_the_vad_option_loads_the_given_weights_into_the_authors_vad(tmp_path):
    from model_bridges.freeze_omni import load_vad_jit, use_vad_weights

    package = save_certain(tmp_path / "silero_vad" / "data" / "silero_vad.jit").parent
    assert vad_weights_file(str(tmp_path)) == package / "silero_vad.jit"
    assert vad_weights_file(str(package / "silero_vad.jit")) == package / "silero_vad.jit"
    vad = VADWithWeights()
    use_vad_weights(vad, load_vad_jit(vad_weights_file(str(tmp_path))))
    assert vad.vad_iterator.threshold == 0.8 and vad.vad_iterator.min_silence_samples == 32000  # kept
    assert vad.vad_iterator(torch.zeros(512)) == {"start": 0}  # the loaded weights decide now
    with pytest.raises(BridgeConfigError, match="silero_vad.jit"):
        vad_weights_file(str(tmp_path / "missing"))
