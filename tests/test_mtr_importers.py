"""`mpe dataset import --format encoding|candor`: the published scenario-encoding JSON and Candor-style
two-party recordings with transcripts become normal MTR suites; every bad entry or line is named."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from server.benchmarks.mtr.dataset.importers import import_set
from server.benchmarks.mtr.dataset.schema import ImportProblems
from server.benchmarks.mtr.suite import Suite, check_suite
from server.cli import app

ENTRIES = [
    {"dialogue_id": 7, "round_num": 2, "scenario": "interruption",
     "timestamp": {"user_start": 20.0, "user_end": 23.5, "model_start": 24.1, "model_end": 33.0,
                   "interruption_start": 25.9, "interruption_end": 27.4},
     "user_text": "What makes a volcano erupt?",
     "model_text": "Pressure from gas-rich magma builds up below the surface. When the rock above can no longer "
                   "hold it, the magma forces its way out.",
     "interruption_text": "Wait, are any erupting right now?",
     "interruption_response_text": "Yes, a few dozen volcanoes are erupting at any given time."},
    {"dialogue_id": 7, "round_num": 1, "scenario": "smooth-turntaking",
     "timestamp": {"user_start": 1.0, "user_end": 3.2, "model_start": 3.9, "model_end": 12.0},
     "user_text": "Tell me about volcanoes.",
     "model_text": "Volcanoes are openings in the crust where molten rock reaches the surface. Most of them sit "
                   "along the edges of tectonic plates."},
    {"dialogue_id": "b", "round_num": 1, "scenario": "pause", "pause_start": 2.5, "pause_end": 4.75,
     "user_text": "I was wondering", "continuation_text": "how tides work.",
     "model_text": "Tides come from the Moon's pull on the oceans. The water bulges toward it and away from it."},
]


def test_an_encoding_file_becomes_a_text_suite_with_its_placements(tmp_path):
    path = tmp_path / "scenario_encoding_2.json"
    path.write_text(json.dumps(ENTRIES), encoding="utf-8")
    res = CliRunner().invoke(app, ["dataset", "import", str(path), "--out", str(tmp_path / "s"), "--format",
                                   "encoding"])
    assert res.exit_code == 0, res.output
    suite = Suite.load(tmp_path / "s")
    assert suite.meta.audio == "pending" and suite.meta.generator == "import:encoding"
    assert check_suite(suite, check_audio=False) == []
    d7, db = suite.dialogues
    assert (d7.dialogue_id, d7.set, [r.feature for r in d7.rounds]) == ("7", "S+I", ["smooth", "interruption"])
    r2 = d7.rounds[1]
    assert r2.barge_in.after_onset_s == 1.8 and r2.barge_in.text == "Wait, are any erupting right now?"
    assert r2.barge_in.response.text.startswith("Yes, a few dozen")
    assert (db.dialogue_id, db.set, db.rounds[0].pause.length_s) == ("b", "pause", 2.25)
    assert db.rounds[0].pause.continuation.text == "how tides work."
    # JSON Lines too: one entry per line, named by line
    lines = tmp_path / "enc.jsonl"
    lines.write_text("\n".join(json.dumps(e) for e in ENTRIES[1:2]) + "\n", encoding="utf-8")
    (d,) = import_set(lines, tmp_path / "l", "encoding").dialogues
    assert d.rounds[0].user.text == "Tell me about volcanoes."


#: rounds of the published multi-scenario sets: labels that combine features (eval_3_scenarios.py,
#: eval_4_scenarios.py), each round an overlay of its features
OVERLAY_ENTRIES = [
    {"dialogue_id": 3, "round_num": 1, "scenario": "smooth-turntaking_pause-handling",
     "timestamp": {"user_start": 1.0, "user_end": 6.0, "pause_start": 2.5, "pause_end": 4.5, "model_start": 6.6,
                   "model_end": 15.0},
     "user_text": "I was wondering", "continuation_text": "how tides work.",
     "model_text": "Tides come from the Moon's pull on the oceans. The water bulges toward it and away from it, "
                   "and the Earth turns under the bulges twice a day."},
    {"dialogue_id": 3, "round_num": 2, "scenario": "smooth-turntaking_background_pause-handling_interruption",
     "timestamp": {"user_start": 17.0, "user_end": 22.0, "pause_start": 18.5, "pause_end": 20.0,
                   "model_start": 22.6, "model_end": 40.0, "background_start": 23.0, "background_end": 25.0,
                   "interruption_start": 26.0, "interruption_end": 27.5},
     "user_text": "And what about", "continuation_text": "spring tides?",
     "model_text": "Spring tides happen when the Sun and the Moon line up, at new and full moon. Their pulls add "
                   "up, so high tides are higher and low tides are lower than usual for a few days.",
     "background_text": "Did you remember to lock the car?", "interruption_text": "Wait, is that dangerous?",
     "interruption_response_text": "Not usually, though coastal flooding is more likely then."},
]


def test_published_combination_labels_import_as_overlay_rounds(tmp_path):
    path = tmp_path / "scenario_encoding_4.json"
    path.write_text(json.dumps(OVERLAY_ENTRIES), encoding="utf-8")
    suite = import_set(path, tmp_path / "s", "encoding")
    assert check_suite(suite, check_audio=False) == []
    (d,) = suite.dialogues
    r1, r2 = d.rounds
    assert d.set == "S+I+P+B" and (r1.feature, r1.overlay, r1.pause.length_s) == ("smooth", ["pause"], 2.0)
    # the label names smooth turn-taking and an interruption: an interruption round whose turn is scored too
    assert (r2.feature, r2.overlay) == ("interruption", ["smooth", "pause", "background"])
    assert (r2.pause.length_s, r2.background.after_onset_s, r2.barge_in.after_onset_s) == (1.5, 0.4, 3.4)
    assert r2.request_text() == "And what about spring tides?"


def test_an_encoding_file_names_every_bad_entry_and_writes_nothing(tmp_path):
    bad = [dict(ENTRIES[1]), {**ENTRIES[0], "interruption_text": " "},
           {**ENTRIES[0], "round_num": 1, "timestamp": {"model_start": 30.0, "interruption_start": 25.0}},
           {**ENTRIES[1], "scenario": "background_pause-handling"}, "round",
           {"dialogue_id": 9, "round_num": 0, "scenario": "smooth", "user_text": "Hi", "model_text": "Hello."},
           {**ENTRIES[2], "pause_end": "soon"}]
    path = tmp_path / "e.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ImportProblems) as e:
        import_set(path, tmp_path / "out", "encoding")
    assert e.value.lines == [
        f"{path}: entry 2: no interruption_text",
        f"{path}: entry 3: interruption_start (25.0) is before model_start (30.0)",
        f"{path}: entry 4: scenario 'background_pause-handling' is not a feature (smooth, interruption, pause, "
        "background, backchannel, or a published spelling) nor a combination over smooth-turntaking or "
        "interruption (e.g. interruption_pause-handling)",
        f"{path}: entry 5: not a JSON object",
        f"{path}: entry 6: round_num must be an integer from 1 (0)",
        f"{path}: entry 7: pause_end is not a time in seconds ('soon')",
        f"{path}: entry 7: a pause round needs pause_end"]
    assert not (tmp_path / "out").exists()
    path.write_text(json.dumps([ENTRIES[0]]), encoding="utf-8")  # round 2 without round 1
    with pytest.raises(ImportProblems, match=r"dialogue 7: rounds \[2\] are not 1..1"):
        import_set(path, tmp_path / "out", "encoding")


RATE = 16000


def _recording(seconds: float) -> np.ndarray:
    """Two different channels of seeded noise (the importer only cuts them)."""
    n = int(seconds * RATE)
    rng = np.random.default_rng(5)
    left = (rng.standard_normal(n) * 3000).astype(np.int16)
    right = (rng.standard_normal(n) * 3000).astype(np.int16)
    return np.stack([left, right], axis=1)


TRANSCRIPT = ("speaker,start,end,text\n"
              "assistant,0.0,0.8,Hi there.\n"
              "user,1.0,2.5,So what do you do for work?\n"
              "user,2.6,3.0,If you don't mind me asking.\n"
              "assistant,3.2,6.0,I teach chemistry at a high school.\n"
              "user,6.5,7.5,Do you like it?\n"
              "assistant,7.7,9.5,\"Most days, yes, the students are great.\"\n"
              "user,9.8,10.4,Nice.\n")


def test_candor_recordings_become_a_voiced_quality_suite_with_clips_cut_from_them(tmp_path):
    src = tmp_path / "candor"
    src.mkdir()
    st = _recording(11.0)
    sf.write(src / "c1.wav", st, RATE, subtype="PCM_16")
    (src / "c1.csv").write_text(TRANSCRIPT, encoding="utf-8")
    sf.write(src / "c2.user.wav", st[:, 0], RATE, subtype="PCM_16")  # two mono files
    sf.write(src / "c2.assistant.wav", st[:, 1], RATE, subtype="PCM_16")
    (src / "c2.csv").write_text(TRANSCRIPT, encoding="utf-8")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    res = CliRunner().invoke(app, ["dataset", "import", str(src), "--out", str(tmp_path / "q"), "--format", "candor",
                                   "--rounds", "1"])
    assert res.exit_code == 0, res.output
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before
    suite = Suite.load(tmp_path / "q")
    assert suite.meta.audio is None and check_suite(suite) == []  # clips, formats and durations included
    assert [d.dialogue_id for d in suite.dialogues] == ["c1-1", "c1-2", "c2-1", "c2-2"]
    first, second = suite.dialogues[:2]
    r = first.rounds[0]
    assert (r.feature, r.task.dimension, first.set) == ("smooth", "quality", "quality")
    assert r.user.text == "So what do you do for work? If you don't mind me asking."
    assert r.assistant.text == "I teach chemistry at a high school."
    assert second.rounds[0].assistant.text == "Most days, yes, the students are great."
    from server.benchmarks.mtr.segmentation.inputs import to_stream_rate

    left, right = to_stream_rate(st[:, 0], RATE), to_stream_rate(st[:, 1], RATE)
    assert np.array_equal(suite.load_clip(r.user.clip), left[24000:72000])  # 1.0-3.0 s of the user's channel
    assert np.array_equal(suite.load_clip(r.assistant.clip), right[int(3.2 * 24000):144000])  # 3.2-6.0 s, other
    assert r.user.duration_s == 2.0
    for a, b in zip(suite.dialogues[:2], suite.dialogues[2:]):  # the two layouts read alike
        assert [suite.load_clip(c.clip).tobytes() for _, c in a.rounds[0].clips()] == \
            [suite.load_clip(c.clip).tobytes() for _, c in b.rounds[0].clips()]


def test_candor_names_every_bad_line_and_writes_nothing(tmp_path):
    src = tmp_path / "candor"
    src.mkdir()
    sf.write(src / "c1.wav", _recording(5.0), RATE, subtype="PCM_16")
    (src / "c1.csv").write_text("speaker,start,end,text\n"
                                "user,0.5,1.5,Hello.\n"
                                "moderator,1.6,2.0,Hi.\n"
                                "assistant,2.0,1.8,Backwards.\n"
                                "assistant,2.0,six,Not a time.\n"
                                "assistant,2.2,7.0,Past the end.\n"
                                "user,0.1,0.2,Out of order.\n"
                                "assistant,3.0,3.5,\n", encoding="utf-8")
    (src / "c2.csv").write_text("speaker,start,end,text\n", encoding="utf-8")  # no recording
    sf.write(src / "c3.wav", _recording(2.0)[:, 0], RATE, subtype="PCM_16")  # mono
    (src / "c3.csv").write_text("speaker,start,end,text\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["dataset", "import", str(src), "--out", str(tmp_path / "q"), "--format", "candor"])
    assert res.exit_code == 1, res.output
    c1 = src / "c1.csv"
    lines = res.stdout.splitlines()
    assert lines[:6] == [
        f"{c1}:3: speaker 'moderator' is not user or assistant",
        f"{c1}:4: start 2.0 is not before end 1.8 (or negative)",
        f"{c1}:5: start and end must be seconds ('2.0', 'six')",
        f"{c1}:6: ends at 7.0 s, after the recording (5.00 s)",
        f"{c1}:7: starts at 0.1 s, before the line above (0.5 s): lines go in order of start",
        f"{c1}:8: no text"]
    assert lines[6].startswith(f"{src / 'c2.csv'}: no recording for it (c2.wav, or c2.user.wav and c2.assistant.wav)")
    assert lines[7].startswith(f"{src / 'c3.wav'}: has 1 channel, expected stereo")
    assert not (tmp_path / "q").exists()
