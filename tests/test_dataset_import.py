"""``mpe dataset import``: a manifest in a different shape (CSV, one row per turn, other column
names and labels, 16 kHz stereo clips in a subfolder) becomes a suite that validates and runs;
a broken manifest gives the rules and messages of validate, each at its manifest row."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from sqlalchemy import select
from typer.testing import CliRunner

from server.benchmarks.mpe.dataset.importer import ImportMapping, import_manifest
from server.benchmarks.mpe.suite import Suite, SuiteError, check_suite
from server.cli import app
from server.db import Episode
from server.engine.leasing import create_run
from server.engine.suitedir import CLIP_RATE

runner = CliRunner()

MAPPING = {
    "shape": "turns",
    "fields": {"scenario_id": "conv_id", "condition": "addressing", "label": "turn_type", "speaker": "spk",
               "text": "utterance", "clip": "audio_path", "gold_answer": "answer", "addressee": "to"},
    "labels": {"addressed": "T", "mention": "N1", "other": "N2", "self": "N3"},
    "conditions": {"named": "explicit", "unnamed": "implicit"},
    "preamble_clip": "audio/duty.wav",
}
COLUMNS = ["conv_id", "addressing", "turn_type", "spk", "utterance", "audio_path", "answer", "to"]

# (speaker, their label, text) per turn; T third of five.
SCRIPT = [("maya", "other", "Did you bring the tickets?"), ("leo", "mention", "Aria was on earlier, I think."),
          ("maya", "addressed", "{T}"), ("sam", "self", "Where did I put my keys."),
          ("leo", "other", "They are by the door.")]
T_TEXT = {"named": "Aria, what time does the train leave?", "unnamed": "What time does the train leave?"}


def _wav(path: Path, seconds: float, rate: int = 16_000, channels: int = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * rate)) / rate
    tone = 0.2 * np.sin(2 * np.pi * 220 * t)
    sf.write(str(path), np.stack([tone] * channels, axis=1), rate, subtype="PCM_16")


def _manifest(root: Path, rows: list[dict] | None = None) -> Path:
    """Two conversations x two addressing versions, one CSV row per turn, clips under audio/."""
    if rows is None:
        rows = []
        for conv in ("c1", "c2"):
            for addressing in ("named", "unnamed"):
                for i, (spk, label, text) in enumerate(SCRIPT):
                    clip = f"audio/{conv}_{addressing}_{i}.wav"
                    _wav(root / clip, 0.5 + 0.1 * i)
                    rows.append({"conv_id": conv, "addressing": addressing, "turn_type": label, "spk": spk,
                                 "utterance": text.format(T=T_TEXT[addressing]), "audio_path": clip,
                                 "answer": "at nine", "to": "Aria" if label == "addressed" else ""})
    _wav(root / "audio/duty.wav", 1.0, rate=22_050, channels=1)
    path = root / "conversations.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    (root / "mapping.json").write_text(json.dumps(MAPPING))
    return path


def test_imported_suite_validates_and_runs(tmp_path, db):
    manifest = _manifest(tmp_path / "release")
    out = tmp_path / "suite"
    result = runner.invoke(app, ["dataset", "import", str(manifest), "--out", str(out),
                                 "--mapping", str(manifest.parent / "mapping.json")])
    assert result.exit_code == 0, result.output
    suite = Suite.load(out)
    assert check_suite(suite, check_audio=True) == []
    assert len(suite.scenarios) == 4
    sc = suite.scenario("c1", "explicit")
    assert sc.labels == ["N2", "N1", "T", "N3", "N2"]
    assert [t.speaker for t in sc.turns] == ["A", "B", "A", "C", "B"] and sc.n_speakers == 3
    assert sc.turns[2].text == T_TEXT["named"] and sc.turns[2].addressee == "Aria"
    assert sc.t_bucket == "middle" and sc.gold_answer == "at nine"
    info = sf.info(str(suite.clip_path(sc.turns[3].clip)))
    assert (info.samplerate, info.channels, info.subtype) == (CLIP_RATE, 1, "PCM_16")
    assert sc.turns[3].duration_s == info.frames / CLIP_RATE and abs(info.frames - 0.8 * CLIP_RATE) <= 2
    assert suite.meta.preamble.duration_s == sf.info(str(suite.clip_path(suite.meta.preamble.clip))).duration

    run = create_run(db, team="lab", model="m", suite_path=str(out), clock="lockstep")
    with db.session() as s:
        episodes = s.scalars(select(Episode).where(Episode.run_id == run)).all()
    assert sorted((e.scenario_id, e.condition) for e in episodes) == [
        ("c1", "explicit"), ("c1", "implicit"), ("c2", "explicit"), ("c2", "implicit")]
    assert runner.invoke(app, ["dataset", "validate", str(out)]).exit_code == 0


def test_broken_manifest_names_rows_and_rules(tmp_path):
    root = tmp_path / "release"
    manifest = _manifest(root)
    rows = list(csv.DictReader(manifest.read_text().splitlines()))
    rows[1]["turn_type"] = "aside"  # c1/named turn 1, CSV line 3: a label the mapping does not know
    rows[7]["audio_path"] = "audio/gone.wav"  # c1/unnamed turn 2, line 9: no such clip
    # c2/named (rows 10-14, lines 12-16): T moved to the end
    rows[12]["turn_type"], rows[14]["turn_type"] = "other", "addressed"
    _manifest(root, rows)
    result = import_manifest(manifest, tmp_path / "suite", ImportMapping.model_validate(MAPPING))
    assert result.suite is None and not (tmp_path / "suite" / "suite.json").exists()
    got = {(p.rule, p.file, p.line, p.scenario, p.turn) for p in result.problems}
    assert ("label-known", "conversations.csv", 3, "c1/explicit", 1) in got
    assert ("clip-exists", "conversations.csv", 9, "c1/implicit", 2) in got
    assert ("t-not-last", "conversations.csv", 16, "c2/explicit", 4) in got
    text = [str(p) for p in result.problems]
    assert "conversations.csv:3: c1/explicit turn 1: unknown label 'aside' (allowed: N1, N2, N3, N4Q, N4R, T) " \
           "[label-known]" in text

    cli = runner.invoke(app, ["dataset", "import", str(manifest), "--out", str(tmp_path / "suite"),
                              "--mapping", str(root / "mapping.json")])
    assert cli.exit_code == 1 and "Traceback" not in cli.output
    assert "conversations.csv:16: c2/explicit turn 4: T is the last turn" in cli.output
    assert "audio/gone.wav" in cli.output and "nothing imported" in cli.output


def test_jsonl_one_object_per_version(tmp_path):
    """The other shape: one JSON object per scenario version, its turns in a list, speakers mapped."""
    root = tmp_path / "release"
    lines = []
    for cond in ("explicit", "implicit"):
        turns = []
        for i, (spk, label, text) in enumerate(SCRIPT):
            _wav(root / f"clips_src/{cond}{i}.wav", 0.3, rate=CLIP_RATE, channels=1)
            turns.append({"who": spk, "kind": label, "said": text.format(T=T_TEXT["named" if cond == "explicit"
                                                                                 else "unnamed"]),
                          "wav": f"clips_src/{cond}{i}.wav"})
        lines.append(json.dumps({"id": "x1", "condition": cond, "gold": "at nine", "utts": turns}))
    _wav(root / "duty.wav", 0.5)
    (root / "m.jsonl").write_text("\n".join(lines) + "\n")
    mapping = ImportMapping(shape="scenarios", fields={"scenario_id": "id", "gold_answer": "gold", "turns": "utts",
                                                       "speaker": "who", "label": "kind", "text": "said",
                                                       "clip": "wav"},
                            labels=MAPPING["labels"], speakers={"sam": "A", "maya": "B", "leo": "C"},
                            preamble_clip="duty.wav")
    result = import_manifest(root / "m.jsonl", tmp_path / "suite", mapping)
    assert result.problems == [] and result.suite is not None
    sc = result.suite.scenario("x1", "implicit")
    assert [t.speaker for t in sc.turns] == ["B", "C", "B", "A", "C"] and sc.labels[2] == "T"
    assert sc.turns[0].duration_s == 0.3


def test_an_utterance_type_column_is_mapped_onto_the_turns_and_checked(tmp_path):
    root = tmp_path / "release"
    manifest = _manifest(root)
    rows = list(csv.DictReader(manifest.read_text().splitlines()))
    theirs = {"other": "q", "mention": "stmt", "self": "mumble", "addressed": ""}  # T carries none
    for r in rows:
        r["kind"] = theirs[r["turn_type"]]
    rows[3]["kind"] = "grumble"  # c1/named turn 3: a type the mapping does not know
    with manifest.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS + ["kind"])
        w.writeheader()
        w.writerows(rows)
    mapping = ImportMapping.model_validate({**MAPPING, "fields": {**MAPPING["fields"], "utterance_type": "kind"},
                                            "utterance_types": {"q": "human_request", "stmt": "statement",
                                                                "mumble": "self_talk"}})
    result = import_manifest(manifest, tmp_path / "suite", mapping)
    got = {(p.rule, p.line, p.scenario, p.turn) for p in result.problems}
    assert got == {("utterance-type", 5, "c1/explicit", 3)}
    sc = Suite.load(tmp_path / "suite").scenario("c2", "implicit")
    assert [t.utterance_type for t in sc.turns] == ["human_request", "statement", None, "self_talk", "human_request"]
    with pytest.raises(SuiteError, match="utterance_types map onto chatter"):
        import_manifest(manifest, tmp_path / "other", ImportMapping.model_validate(
            {**MAPPING, "utterance_types": {"q": "chatter"}}))
