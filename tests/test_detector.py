"""Speech detector (§5): real speech (piper) through the real Silero model, no mocks.

Times are stream samples at 24 kHz; one model chunk is 768 of them (32 ms).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading

import numpy as np
import pytest
import soxr

from server.core.detector import (
    CHUNK_STREAM_SAMPLES,
    DETECTOR_VERSION,
    DetectorConfig,
    Segmenter,
    SpeechDetector,
    _get_session,
    detect_events,
    detect_segments,
    model_path,
    run_model_calls,
    speech_probabilities,
)
from server.core.timebase import Segment, SpeechEvent
from tests.support.audio import energy_extent, noise, place, speech_cache_dir, synthesize, trim

RATE = 24_000
C = CHUNK_STREAM_SAMPLES  # 768
MS = RATE // 1000  # samples per millisecond
TOL = 100 * MS  # placement tolerance: 100 ms

SENTENCE_1 = "Aria, what is the capital of France?"
SENTENCE_2 = "I think it might rain later this afternoon."
SENTENCE_3 = "Could you remind me to call the dentist tomorrow morning?"


@pytest.fixture(scope="session")
def say(pytestconfig, tmp_path_factory):
    cache = speech_cache_dir(pytestconfig, tmp_path_factory)
    return lambda text, **kw: trim(synthesize(text, cache, **kw))


@pytest.fixture(scope="session")
def s1(say):
    return say(SENTENCE_1)


@pytest.fixture(scope="session")
def s2(say):
    return say(SENTENCE_2)


@pytest.fixture(scope="session")
def s3(say):
    return say(SENTENCE_3)


def push_live(det: SpeechDetector, track: np.ndarray, frame: int = 1920) -> list[SpeechEvent]:
    """Feed like the scheduler does, checking causality after every frame."""
    out: list[SpeechEvent] = []
    fed = 0  # input samples so far
    for i in range(0, len(track), frame):
        piece = track[i : i + frame]
        fed += len(piece)
        new = det.push(piece)
        fed_stream = fed * RATE // det.config.input_rate  # in 24 kHz stream samples
        assert det.known_until <= fed_stream
        for ev in new:
            assert ev.at <= ev.seen_at <= det.known_until
            assert ev.seen_at % C == 0  # decided at the end of a chunk
        out += new
    return out + det.finish()


# ------------------------------------------------------------- segmentation logic


def run_probs(probs: list[float], config: DetectorConfig = DetectorConfig()):
    seg = Segmenter(config)
    events = []
    for i, p in enumerate(probs):
        events += seg.step(p, i * C, (i + 1) * C)
    return seg, events


def test_segmenter_needs_120ms_of_speech_for_an_onset():
    # 3 chunks = 96 ms < 120 ms: dropped, no event at all.
    seg, events = run_probs([0.9] * 3 + [0.0] * 40)
    assert events == [] and seg.segments == [] and not seg.active
    # 4 chunks = 128 ms: onset back-dated to 0, seen at the end of chunk 4.
    seg, events = run_probs([0.9] * 4 + [0.0] * 40)
    assert events == [
        SpeechEvent("onset", 0, 4 * C),
        SpeechEvent("offset", 4 * C, 4 * C + 800 * MS),
    ]
    assert seg.segments == [Segment(0, 4 * C)]


def test_segmenter_hysteresis():
    # Below threshold never starts a segment, even at 0.49 for a long time.
    _, events = run_probs([0.49] * 50)
    assert events == []
    # One chunk >= 0.5 starts it; chunks >= 0.35 (neg_threshold) extend it.
    seg, events = run_probs([0.2, 0.5, 0.36, 0.4, 0.35, 0.34] + [0.0] * 30)
    assert [e.kind for e in events] == ["onset", "offset"]
    assert seg.segments == [Segment(1 * C, 5 * C)]
    assert events[0].seen_at == 5 * C  # extent reached 128 ms at the end of chunk 4
    # Speech may resume at neg_threshold during a pause (< 800 ms): merged.
    seg, _ = run_probs([0.9] * 5 + [0.1] * 10 + [0.4] * 2 + [0.0] * 30)
    assert seg.segments == [Segment(0, 17 * C)]


def test_segmenter_merges_pauses_shorter_than_800ms():
    # 24 pause chunks = 768 ms < 800 ms: one segment.
    seg, events = run_probs([0.9] * 5 + [0.0] * 24 + [0.9] * 5 + [0.0] * 30)
    assert seg.segments == [Segment(0, 34 * C)]
    assert [e.kind for e in events] == ["onset", "offset"]
    # 25 pause chunks = 800 ms: the segment is closed right at the 25th chunk.
    seg, events = run_probs([0.9] * 5 + [0.0] * 25 + [0.9] * 5 + [0.0] * 30)
    assert seg.segments == [Segment(0, 5 * C), Segment(30 * C, 35 * C)]
    assert events[1] == SpeechEvent("offset", 5 * C, 30 * C)
    assert events[2] == SpeechEvent("onset", 30 * C, 34 * C)


def test_segmenter_short_burst_inside_pause_does_not_split_or_drop():
    # A short burst while the segment is open extends it (merged, not its own segment).
    seg, _ = run_probs([0.9] * 6 + [0.0] * 10 + [0.9] + [0.0] * 30)
    assert seg.segments == [Segment(0, 17 * C)]
    # A short burst on its own after the close is dropped.
    seg, events = run_probs([0.9] * 6 + [0.0] * 30 + [0.9] * 2 + [0.0] * 30)
    assert seg.segments == [Segment(0, 6 * C)]
    assert len(events) == 2


def test_segmenter_close_at_end_of_stream():
    seg, events = run_probs([0.9] * 6 + [0.0] * 3)
    assert seg.active and [e.kind for e in events] == ["onset"]
    assert seg.close(seen_at=9 * C + 100) == [SpeechEvent("offset", 6 * C, 9 * C + 100)]
    assert seg.segments == [Segment(0, 6 * C)] and not seg.active
    # Too short when the stream ends: nothing.
    seg, _ = run_probs([0.9] * 2)
    assert seg.close(seen_at=2 * C) == [] and seg.segments == []


def test_segmenter_respects_config():
    cfg = DetectorConfig(threshold=0.8, min_speech_ms=250, merge_pause_ms=320)
    seg, _ = run_probs([0.7] * 20, cfg)  # below 0.8
    assert seg.segments == [] and seg.close(20 * C) == []
    # 250 ms needs 8 chunks (7 = 224 ms); 0.66 >= neg_threshold (0.65) extends.
    seg, events = run_probs([0.8] + [0.66] * 6 + [0.0] * 20, cfg)
    assert events == []
    seg, events = run_probs([0.8] + [0.66] * 7 + [0.0] * 9 + [0.9] * 8 + [0.0] * 20, cfg)
    # 320 ms = 10 chunks of pause; 9 are merged.
    assert seg.segments == [Segment(0, 25 * C)]
    assert events[-1].seen_at - events[-1].at == 320 * MS


@pytest.mark.parametrize("cfg, never", [(DetectorConfig(), True), (DetectorConfig(min_speech_ms=0, merge_pause_ms=0), False),
                                        (DetectorConfig(threshold=0.8, min_speech_ms=64, merge_pause_ms=96), True)],
                         ids=["default", "zero", "short"])
def test_may_emit_is_exact(cfg, never):
    """may_emit(span) is False exactly when no probabilities for the span's chunks report an event:
    from every state reached by a random history, every continuation of 1-4 chunks drawn from a
    below-neg_threshold, a between and a speech probability is tried."""
    import itertools
    import random

    rng = random.Random(7)
    levels = (0.0, cfg.threshold - 0.1, 1.0)  # pause, "between" (extends, does not start), speech
    tried = {True: 0, False: 0}
    for _ in range(60):
        history = [rng.choice(levels) for _ in range(rng.randrange(60))]
        n = len(history)
        for k in range(1, 5):
            possible = False
            for cont in itertools.product(levels, repeat=k):
                seg, _ = run_probs(history, cfg)
                possible |= any(seg.step(p, (n + i) * C, (n + i + 1) * C) for i, p in enumerate(cont))
            seg, _ = run_probs(history, cfg)
            assert seg.may_emit(n * C, (n + k) * C) == possible, (history, k)
            tried[possible] += 1
    assert tried[True] and bool(tried[False]) == never  # with no minimum and no pause, an event is always possible


# ------------------------------------------------------------------------- model


def test_model_session_is_shared_and_single_threaded():
    s = _get_session()
    assert s is _get_session()
    assert [(i.name, i.shape) for i in s.get_inputs()] == [
        ("input", [None, None]),
        ("state", [2, None, 128]),
        ("sr", []),
    ]
    assert [o.name for o in s.get_outputs()] == ["output", "stateN"]
    opts = s.get_session_options()
    assert (opts.intra_op_num_threads, opts.inter_op_num_threads) == (1, 1)
    assert model_path().name == "silero_vad.onnx" and "site-packages" in str(model_path())
    assert DETECTOR_VERSION.startswith("silero-vad-6.2.3-onnx/")


def test_detector_module_does_not_import_torch():
    code = (
        "import sys, numpy as np; from server.core.detector import detect_segments;"
        "detect_segments(np.ones(4800, np.int16));"
        "print('torch' in sys.modules, 'silero_vad' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_probabilities_match_silero_reference_wrapper(s1, tmp_path):
    """Our onnxruntime loop gives Silero's own (torch) wrapper's probabilities."""
    track = place(3 * RATE, (RATE // 2, s1)).astype(np.float32) / 32768
    track += noise(len(track), -60.0, seed=3).astype(np.float32) / 32768  # no zero chunks
    x16 = soxr.resample(track, RATE, 16000, quality="HQ").astype(np.float32)
    x16 = x16[: len(x16) // 512 * 512]
    np.save(tmp_path / "x16.npy", x16)
    ours = speech_probabilities(x16, config=DetectorConfig(input_rate=16000))
    code = (
        "import sys, json, numpy as np, torch; from silero_vad import load_silero_vad;"
        f"x = torch.from_numpy(np.load({str(tmp_path / 'x16.npy')!r}));"
        "m = load_silero_vad(onnx=True);"
        "print(json.dumps([float(m(x[i:i+512], 16000)) for i in range(0, len(x), 512)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    ref = np.array(json.loads(out.stdout.strip().splitlines()[-1]), dtype=np.float32)
    assert len(ref) == len(ours) == len(x16) // 512
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    assert ours.max() > 0.9  # the comparison covers speech, not only silence


# --------------------------------------------------------------------- real audio


def test_digital_silence_gives_nothing_and_skips_the_model():
    track = np.zeros(5 * RATE, dtype=np.int16)
    det = SpeechDetector()
    assert push_live(det, track) == []
    assert det.segments == [] and det.events == [] and not det.active
    assert det.known_until == len(track)
    probs = speech_probabilities(track)
    assert len(probs) == 5 * RATE // C + 1  # 156 full chunks + the padded partial one
    assert not probs.any()


def test_low_noise_is_not_speech():
    track = noise(5 * RATE, -55.0, seed=1)
    assert detect_segments(track) == []
    assert speech_probabilities(track).max() < 0.5


@pytest.mark.parametrize("background_dbfs", [None, -50.0])
def test_sentence_placed_at_known_time(s1, background_dbfs):
    at = RATE + 333  # not aligned with a chunk
    track = place(5 * RATE, (at, s1))
    # Where the speech energy actually is (the clip was trimmed to it, so ~ placement).
    speech_start, speech_end = energy_extent(track)
    assert abs(speech_start - at) < 20 * MS and abs(speech_end - (at + len(s1))) < 20 * MS
    if background_dbfs is not None:  # no digital zeros anywhere: model runs throughout
        track = np.clip(track.astype(np.int32) + noise(len(track), background_dbfs), -32768, 32767)
        track = track.astype(np.int16)

    det = SpeechDetector()
    events = push_live(det, track)
    (seg,) = det.segments
    assert abs(seg.start - speech_start) <= TOL, (seg, speech_start)
    assert abs(seg.end - speech_end) <= TOL, (seg, speech_end)
    assert events == det.events
    onset, offset = events
    assert onset == SpeechEvent("onset", seg.start, onset.seen_at)
    assert offset == SpeechEvent("offset", seg.end, seg.end + 800 * MS)
    # Onset needs >= 120 ms of speech; with clean speech it comes right after that.
    assert 120 * MS <= onset.seen_at - onset.at <= 120 * MS + 3 * C
    assert seg.start % C == 0 and seg.end % C == 0


def test_pause_of_400ms_merges_and_of_1500ms_splits(s1, s2):
    def two(gap_ms: int):
        a = RATE
        b = a + len(s1) + gap_ms * MS
        return a, b, place(b + len(s2) + 2 * RATE, (a, s1), (b, s2))

    a, b, track = two(400)
    (seg,) = detect_segments(track)
    assert abs(seg.start - a) <= TOL and abs(seg.end - (b + len(s2))) <= TOL

    a, b, track = two(1500)
    first, second = detect_segments(track)
    assert abs(first.start - a) <= TOL and abs(first.end - (a + len(s1))) <= TOL
    assert abs(second.start - b) <= TOL and abs(second.end - (b + len(s2))) <= TOL
    events = detect_events(track)
    assert [e.kind for e in events] == ["onset", "offset", "onset", "offset"]
    # The split is decided 800 ms after the first segment's end, before the second.
    assert events[1].seen_at == first.end + 800 * MS < events[2].at


def _fragment(s: np.ndarray, start: int, ms: int) -> np.ndarray:
    """A real piece of speech with 5 ms fades (no click at the cut)."""
    n = ms * MS
    ramp = np.ones(n)
    ramp[: 5 * MS] = np.linspace(0, 1, 5 * MS)
    ramp[-5 * MS :] = np.linspace(1, 0, 5 * MS)
    return (s[start : start + n] * ramp).astype(np.int16)


@pytest.mark.parametrize("at", [RATE, 32 * C, 32 * C + 300])
def test_short_speech_fragment_is_dropped(s1, at):
    # A 50 ms piece of a vowel: the model calls it speech (p >= 0.5 on 2-3 chunks; the
    # model lags, so 70-80 ms pieces already reach 4 chunks = 128 ms at some
    # alignments), but its extent stays below 120 ms: no segment and no event.
    frag = _fragment(s1, 28_800, 50)
    track = place(3 * RATE, (at, frag))
    probs = speech_probabilities(track)
    assert (probs >= 0.5).sum() >= 2 and probs.max() > 0.9
    assert (probs >= 0.35).sum() <= 3  # extent at most 96 ms
    assert detect_events(track) == []

    # Control: 240 ms of the same speech is kept.
    track = place(3 * RATE, (at, _fragment(s1, 28_800 - 80 * MS, 240)))
    (seg,) = detect_segments(track)
    assert abs(seg.start - at) <= TOL and seg.length >= 120 * MS


def test_click_is_dropped():
    track = np.zeros(3 * RATE, dtype=np.int16)
    track[RATE : RATE + 24] = 30000  # 1 ms click
    track[2 * RATE : 2 * RATE + 48 * 20] = noise(48 * 20, -10.0, seed=2)  # 40 ms burst
    assert detect_events(track) == []


def _episode_track(s1, s2, s3):
    """A busy assistant track: merge, split, short fragment, noise, and speech still
    running when the track ends (closed by finish())."""
    parts = []
    t = 7_001
    parts.append((t, s1))
    t += len(s1) + 400 * MS
    parts.append((t, s2))
    t += len(s2) + 1500 * MS
    parts.append((t, _fragment(s1, 28_800, 50)))  # dropped
    t += 1000 * MS
    parts.append((t, noise(RATE // 2, -45.0, seed=5)))
    t += 1700 * MS
    parts.append((t, s3))
    total = t + len(s3) - 300 * MS  # cut the last sentence short
    return place(total, *parts)


def test_live_frames_equal_replay(s1, s2, s3):
    track = _episode_track(s1, s2, s3)
    det = SpeechDetector()
    live = push_live(det, track, 1920)  # 80 ms frames, as the server feeds them
    assert det.events == live
    assert [e.kind for e in live] == ["onset", "offset", "onset", "offset"]
    assert detect_segments(track) == det.segments
    assert detect_events(track) == live
    # The open segment was closed by finish() at the end of the track.
    assert live[-1].seen_at == len(track) == det.known_until
    assert det.segments[-1].end <= len(track)

    # Other framings (even odd sizes and the whole track at once) give the same
    # result: soxr's stream output does not depend on the framing and every decision
    # is timed by its chunk, not by the frame that delivered it.
    for frame in (37, 1280, 4801, len(track)):
        other = SpeechDetector()
        assert push_live(other, track, frame) == live, frame
        assert other.segments == det.segments


def test_active_follows_onset_and_offset(s1):
    track = place(4 * RATE, (RATE, s1))
    det = SpeechDetector()
    seen = []
    for i in range(0, len(track), 1920):
        for ev in det.push(track[i : i + 1920]):
            seen.append((ev.kind, det.active))
        if not seen:
            assert not det.active
    assert seen == [("onset", True), ("offset", False)]
    assert not det.active and det.finish() == []


def test_finish_closes_open_speech_and_is_final(s1):
    track = place(RATE + len(s1) // 2, (RATE, s1))  # ends mid-sentence
    det = SpeechDetector()
    for i in range(0, len(track), 1920):
        det.push(track[i : i + 1920])
    assert det.active and det.segments == []
    assert det.known_until <= len(track)
    (offset,) = det.finish()
    assert offset.kind == "offset" and offset.seen_at == len(track)
    assert len(track) - 3 * C <= offset.at <= len(track)
    assert det.segments == [Segment(det.events[0].at, offset.at)]
    assert det.finish() == [] and det.finished
    with pytest.raises(RuntimeError):
        det.push(np.zeros(1920, np.int16))


def test_16khz_input_gives_the_same_result(s1, s2):
    track = place(7 * RATE, (RATE, s1), (RATE + len(s1) + 1500 * MS, s2))
    x16 = soxr.resample(track.astype(np.float32) / 32768, RATE, 16000, quality="HQ")
    cfg16 = DetectorConfig(input_rate=16000)
    det = SpeechDetector(cfg16)
    events16 = push_live(det, x16.astype(np.float32), 1280)
    # Times stay in 24 kHz stream samples; the 24 kHz path resamples with the same
    # soxr settings, so both see the very same 16 kHz chunks.
    assert det.known_until == len(track)
    assert events16 == detect_events(track)
    assert len(det.segments) == 2
    # int16 at 16 kHz works too.
    x16i = np.clip(np.round(x16 * 32768), -32768, 32767).astype(np.int16)
    segs = detect_segments(x16i, frame_samples=1280, config=cfg16)
    assert len(segs) == 2
    for a, b in zip(segs, det.segments):
        assert abs(a.start - b.start) <= C and abs(a.end - b.end) <= C


def test_float32_input_equals_int16(s1):
    track = place(4 * RATE, (RATE, s1))
    assert detect_events(track.astype(np.float32) / 32768) == detect_events(track)
    with pytest.raises(TypeError):
        SpeechDetector().push(track.astype(np.int32))
    with pytest.raises(ValueError):
        SpeechDetector().push(np.zeros((10, 2), np.int16))


def test_reset_gives_a_fresh_detector(s1, s2):
    track = place(6 * RATE, (RATE, s1), (RATE + len(s1) + 1500 * MS, s2))
    det = SpeechDetector()
    first = push_live(det, track)
    segs = det.segments
    assert len(segs) == 2
    det.reset()
    assert (det.known_until, det.active, det.segments, det.events) == (0, False, [], [])
    assert push_live(det, track) == first and det.segments == segs
    # Reset in the middle of speech, too.
    det.reset()
    det.push(track[: RATE + len(s1) // 2])
    det.reset()
    assert push_live(det, track) == first


def test_digital_silence_resets_the_model_state(s1, s2):
    """After an all-zero chunk the model restarts fresh: the probabilities of what
    follows equal those of a fresh detector (16 kHz input keeps chunks aligned)."""
    cfg = DetectorConfig(input_rate=16000)
    x = soxr.resample(s1.astype(np.float32) / 32768, RATE, 16000).astype(np.float32)
    y = soxr.resample(s2.astype(np.float32) / 32768, RATE, 16000).astype(np.float32)
    x = np.concatenate([x, np.full(-len(x) % 512, 1e-3, np.float32)])  # end at a chunk edge
    y = y[: len(y) // 512 * 512]
    both = speech_probabilities(np.concatenate([x, np.zeros(512, np.float32), y]), config=cfg)
    alone = speech_probabilities(y, config=cfg)
    n_x = len(x) // 512
    assert both[n_x] == 0.0
    np.testing.assert_array_equal(both[n_x + 1 :], alone)
    # Without the zero chunk the state carries over and the numbers differ.
    carried = speech_probabilities(np.concatenate([x, y]), config=cfg)
    assert not np.array_equal(carried[n_x:], alone)


def test_detectors_in_threads_do_not_interfere(s1, s2):
    tracks = [
        place(5 * RATE, (RATE, s1)),
        place(6 * RATE, (RATE // 2, s2), (3 * RATE, s1)),
    ]
    expected = [detect_events(t) for t in tracks]
    results: dict[int, list[SpeechEvent]] = {}

    def work(k: int) -> None:
        results[k] = detect_events(tracks[k % 2])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [results[k] for k in range(4)] == expected * 2


def test_batched_model_calls_decide_exactly_what_calls_alone_do(s1, s2, s3):
    """Streams whose model calls run together, as one batch per round (server.engine.detection),
    get the probabilities and events each gets alone, bit for bit: batching never changes a
    decision, so live segments still equal a replay of the recorded track."""
    tracks = [_episode_track(s1, s2, s3), place(8 * RATE, (RATE // 2, s2), (4 * RATE, s1)),
              place(8 * RATE, (0, noise(8 * RATE, -50.0, seed=3)), (2 * RATE, s3)), place(8 * RATE, (RATE, s1))]
    alone = [speech_probabilities(t) for t in tracks]
    dets = [SpeechDetector() for _ in tracks]
    for d in dets:
        d._probabilities = []
    events: list[list[SpeechEvent]] = [[] for _ in tracks]
    sizes = set()
    for i in range(0, max(len(t) for t in tracks), 1920):
        steps = {k: d.push_calls(t[i : i + 1920]) for k, (d, t) in enumerate(zip(dets, tracks)) if i < len(t)}
        calls = {}
        for k, st in steps.items():  # each stream to its first call (or its end)
            try:
                calls[k] = next(st)
            except StopIteration as stop:
                events[k] += stop.value
        while calls:
            sizes.add(len(calls))
            answers = run_model_calls(list(calls.values()))
            for (k, _), answer in zip(list(calls.items()), answers):
                try:
                    calls[k] = steps[k].send(answer)
                except StopIteration as stop:
                    events[k] += stop.value
                    del calls[k]
    for d, ev in zip(dets, events):
        ev += d.finish()
    assert max(sizes) == len(tracks) and min(sizes) == 1  # batches of every stream and of one
    for d, t, p, ev in zip(dets, tracks, alone, events):
        assert np.array_equal(np.asarray(d._probabilities, dtype=np.float32), p)
        assert ev == detect_events(t) and d.segments == detect_segments(t)
