"""`mpe score DIR --suite`: recordings in the published naming (stereo, left = user) scored as live
gt episodes. The recordings are made here: the MTR oracle and the silent bridge play `mtr-mini` in
lockstep on the real episode core, and each episode's room and model tracks become one stereo file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from model_bridges.reference import Silent
from server.benchmarks.mpe.judging import RuleJudge
from server.benchmarks.mtr import BENCHMARK
from server.benchmarks.mtr.metrics import compute_metrics
from server.benchmarks.mtr.oracle import MTROracle
from server.benchmarks.mtr.recordings import match_files, parse_name, recording_files, replay
from server.benchmarks.mtr.scoring import score_episode
from server.benchmarks.mtr.suite import Suite
from server.scoring.asr import make_asr
from server.scoring.errors import BadRecording
from server.scoring.store import Cache
from tests.support.mtr import record_lockstep

# dialogue 1 of mtr-mini is S+I+P+B (rounds 1-4: smooth, interruption, pause, background),
# dialogue 2 backchannel; the silent bridge plays the first two rounds only (each waits out the window)
ORACLE_ROUNDS = {1: (1, 2, 3, 4), 2: (1,)}
SILENT_ROUNDS = {1: (1, 2)}


def _stereo(room: np.ndarray, model: np.ndarray) -> np.ndarray:
    n = max(len(room), len(model))
    return np.stack([np.pad(room, (0, n - len(room))), np.pad(model, (0, n - len(model)))], axis=1)


def _play(suite_path: str, bridge, rounds: dict[int, tuple[int, ...]], folder: Path):
    """Live episodes of ``rounds`` (dialogue position -> rounds), and their published-named files."""
    suite = Suite.load(suite_path)
    live, tracks = [], {}
    for spec in BENCHMARK.episodes(suite, ["gt"], None):
        pos = next(i for i, d in enumerate(suite.dialogues, start=1) if d.dialogue_id == spec.pair_id)
        k = spec.scenario.round
        if k not in rounds.get(pos, ()):
            continue
        ep, room = record_lockstep(suite_path, bridge, spec.scenario)
        feature = suite.dialogues[pos - 1].rounds[k - 1].feature
        name = f"dialogue_{pos}_round_{k}_{feature}.wav"
        sf.write(folder / name, _stereo(room, ep.assistant), 24000, subtype="PCM_16")
        live.append(ep)
        tracks[name] = (room, ep.assistant)
    return live, tracks


@pytest.fixture(scope="module")
def recorded(mtr_mini, tmp_path_factory):
    base = tmp_path_factory.mktemp("recordings")
    (base / "oracle").mkdir()
    (base / "silent").mkdir()
    oracle, o_tracks = _play(mtr_mini, MTROracle(base, mtr_mini), ORACLE_ROUNDS, base / "oracle")
    silent, s_tracks = _play(mtr_mini, Silent(), SILENT_ROUNDS, base / "silent")
    return {"suite": mtr_mini, "base": base, "oracle": oracle, "silent": silent, "tracks": {"oracle": o_tracks, "silent": s_tracks}}


def _live_scores(db, episodes, label: str):
    cache = Cache(db)
    return [score_episode(e, make_asr("none"), RuleJudge(), cache).model_copy(update={"model": label})
            for e in episodes]


def _fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.iterdir())}


def test_recordings_score_as_the_live_episodes_and_the_folder_is_untouched(recorded, db, settings, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", settings.db_url)
    monkeypatch.setenv("MPE_DATA_DIR", str(settings.data_dir))
    from server.cli import app

    got = {}
    for name in ("oracle", "silent"):
        folder = recorded["base"] / name
        before = _fingerprint(folder)
        r = CliRunner().invoke(app, ["score", str(folder), "--suite", recorded["suite"], "--model", name,
                                     "--asr", "none", "--json", "--workers", "1"])
        assert r.exit_code == 0, r.output
        assert _fingerprint(folder) == before  # nothing written, nothing touched
        got[name] = json.loads(r.stdout)
    bad = recorded["base"] / "mono"
    _write(bad, "dialogue_1_round_1_smooth.wav", recorded["tracks"]["oracle"]["dialogue_1_round_1_smooth.wav"][0])
    r = CliRunner().invoke(app, ["score", str(bad), "--suite", recorded["suite"], "--asr", "none"])
    assert isinstance(r.exception, BadRecording)
    assert f"{bad}/dialogue_1_round_1_smooth.wav: has 1 channel, expected stereo" in str(r.exception)

    for name, rounds in (("oracle", ORACLE_ROUNDS), ("silent", SILENT_ROUNDS)):
        label = f"{name} (imported)"
        out = got[name]
        live = {e.scenario_id: e for e in _live_scores(db, recorded[name], label)}
        entries = {e["scenario_id"]: e for e in out["episodes"]}
        assert sorted(entries) == sorted(live) and len(entries) == sum(map(len, rounds.values()))
        for sid, e in entries.items():  # every round field alike: verdict, failure, latencies, backchannels
            assert e["rounds"] == [r.model_dump(mode="json") for r in live[sid].rounds], sid
            assert e["model"] == label and e["mode"] == "gt" and e["speech"] == [list(s) for s in live[sid].speech]
        assert out["metrics"] == json.loads(json.dumps(compute_metrics(list(live.values()))))
    oracle_rounds = [r for e in got["oracle"]["episodes"] for r in e["rounds"]]
    assert [(r["feature"], r["ok"], r["failure"]) for r in oracle_rounds] == [
        ("smooth", True, None), ("interruption", True, None), ("pause", True, None), ("background", True, None),
        ("backchannel", True, None)]
    assert all(r["latency_s"] is not None for r in oracle_rounds)
    silent_rounds = [r for e in got["silent"]["episodes"] for r in e["rounds"]]
    assert [(r["ok"], r["failure"], r["responded"]) for r in silent_rounds] == [(False, "no_response", False)] * 2

    # scored again: the same scoring, nothing to do; and `mpe report` labels them as imported
    r = CliRunner().invoke(app, ["score", str(recorded["base"] / "silent"), "--suite", recorded["suite"],
                                 "--model", "silent", "--asr", "none", "--json", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["scoring_id"] == got["silent"]["scoring_id"]
    r = CliRunner().invoke(app, ["report", got["oracle"]["scoring_id"], got["silent"]["scoring_id"], "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(r.stdout)["metrics"]) == ["oracle (imported)", "silent (imported)"]



def _write(folder: Path, name: str, pcm: np.ndarray, rate: int = 24000) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    sf.write(folder / name, pcm, rate, subtype="PCM_16")
    return folder / name


def test_names_that_do_not_match_the_suite_are_refused_each_by_name(recorded, tmp_path):
    suite = Suite.load(recorded["suite"])
    room, model = recorded["tracks"]["oracle"]["dialogue_1_round_1_smooth.wav"]
    st = _stereo(room, model)[:2400]
    for name in ("take1.wav", "dialogue_9_round_1_smooth.wav", "dialogue_1_round_7_smooth.wav",
                 "dialogue_1_round_2_smooth.wav", "dialogue_safety_1_round_1_smooth.wav",
                 "dialogue_2_round_1_backchanneling.wav", "dialogue_2_round_1_backchannel.wav"):
        _write(tmp_path, name, st)
    (tmp_path / "notes.txt").write_text("not a recording")  # other files are left alone
    with pytest.raises(BadRecording) as e:
        match_files(suite, recording_files(tmp_path))
    lines = str(e.value).splitlines()[1:]
    assert [ln.split(": ", 1)[0].rsplit("/", 1)[1] for ln in lines] == [
        "dialogue_1_round_2_smooth.wav", "dialogue_1_round_7_smooth.wav", "dialogue_2_round_1_backchanneling.wav",
        "dialogue_9_round_1_smooth.wav", "dialogue_safety_1_round_1_smooth.wav", "take1.wav"]
    text = "\n".join(lines)
    assert "is interruption, the name says 'smooth'" in text
    assert "has no round 7 (rounds 1-4)" in text and "the suite has dialogues 1-2" in text
    assert "again (also dialogue_2_round_1_backchannel.wav)" in text and "has no task" in text
    assert "not a published recording name" in text
    # 0-based names: dialogue_0 is the first dialogue
    ok = match_files(suite, [_write(tmp_path / "zero", "dialogue_0_round_1_smooth-turntaking.wav", st)], index_base=0)
    assert [(m.dialogue.dialogue_id, m.round) for m in ok] == [(suite.dialogues[0].dialogue_id, 1)]
    assert parse_name(Path("dialogue_instruction_following_3_round_10_interruption.wav")).dimension == "instruction"


def live_barge_in(ep) -> float:
    return next(e["t"] for e in ep.doc["events"] if e["type"] == "barge_in.start") / 24000


def test_bad_recordings_are_refused_naming_the_file(recorded, tmp_path):
    suite = Suite.load(recorded["suite"])
    name = "dialogue_1_round_2_interruption.wav"
    room, model = recorded["tracks"]["oracle"][name]
    st = _stereo(room, model)

    def replay_one(folder: str, pcm: np.ndarray, rate: int = 24000, **kw):
        path = _write(tmp_path / folder, name, pcm, rate)
        (m,) = match_files(suite, [path])
        return path, replay(recorded["suite"], m, **kw)

    cases = {"mono": (room, "has 1 channel, expected stereo"),
             "short": (st[: len(st) // 2], "cut short, or not this round"),
             "long": (np.pad(st, ((0, 24000 * 10), (0, 0))), "at most 5.0 s more is accepted"),
             "swapped": (st[:, ::-1], "the left channel does not hold the user's turn 1 of round 2")}
    for folder, (pcm, message) in cases.items():
        with pytest.raises(BadRecording, match=message) as e:
            replay_one(folder, pcm)
        assert str(tmp_path / folder / name) in str(e.value)
    live = next(e for e in recorded["oracle"] if e.doc["round"] == 2 and e.doc["pair_id"] == suite.dialogues[0].dialogue_id)
    _, r = replay_one("swapped-ok", st[:, ::-1].copy(), swap=True)
    assert r.events == live.doc["events"] and np.array_equal(r.track, live.assistant) and r.moved == []
    # another rate is resampled: the same verdict
    from scipy.signal import resample_poly

    st16 = np.stack([np.round(resample_poly(st[:, c].astype(float), 2, 3)).astype(np.int16) for c in (0, 1)], axis=1)
    _, r = replay_one("16k", st16, 16000)
    assert r.rate == 16000 and r.moved == []
    from server.benchmarks.mtr.rules import judge_episode
    from server.core.detector import detect_segments
    from server.core.events import Event

    (verdict,) = judge_episode([Event.from_json(x) for x in r.events], [(g.start, g.end) for g in detect_segments(r.track)])
    assert (verdict.feature, verdict.ok) == ("interruption", True)
    # a system that did not barge in where ours would have (the silent run's room: no onset, no barge-in)
    # under the oracle's reply: reported, not hidden
    silent_room = recorded["tracks"]["silent"][name][0][: len(st)]
    path, r = replay_one("moved", _stereo(silent_room, model))
    assert r.moved == [f"round 2 barge-in at {live_barge_in(live):.2f} s"]


# --- the published conversation-quality layout (turn<K>/<id>.mp3), and the judge audit of its verdicts ---


def _tree(folder: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_quality_mp3_layout_scores_and_its_dimension_verdicts_go_through_the_audit(mtr_dims_mini, tmp_path, db,
                                                                                   settings, monkeypatch):
    """The oracle's gt episodes of mtr-dims-mini, written as the published quality MP3s (turn<K>/<id>.mp3)
    plus one instruction and one safety file in the published names; scored with real ASR and the rule
    judges; then `mpe audit sample` of that stored scoring, the sheet filled, `mpe audit import`."""
    import csv

    monkeypatch.setenv("DATABASE_URL", settings.db_url)
    monkeypatch.setenv("MPE_DATA_DIR", str(settings.data_dir))
    from server.cli import app

    suite = Suite.load(mtr_dims_mini)
    quality, instruction, safety = suite.dialogues[0], suite.dialogues[1], suite.dialogues[3]
    assert (quality.set, instruction.set, safety.set) == ("quality", "instruction", "safety")
    folder = tmp_path / "published"
    oracle = MTROracle(tmp_path / "oracle", mtr_dims_mini)
    want = {(quality.dialogue_id, 1), (quality.dialogue_id, 2), (instruction.dialogue_id, 1), (safety.dialogue_id, 1)}
    for spec in BENCHMARK.episodes(suite, ["gt"], None):
        key = (spec.pair_id, spec.scenario.round)
        if key not in want:
            continue
        ep, room = record_lockstep(mtr_dims_mini, oracle, spec.scenario)
        k = key[1]
        if spec.pair_id == quality.dialogue_id:
            path = folder / f"turn{k}" / f"{quality.dialogue_id}.mp3"
            path.parent.mkdir(parents=True, exist_ok=True)
            # float samples: libsndfile 1.2.2 encodes int16 stereo MP3 with its channels mixed up
            sf.write(path, _stereo(room, ep.assistant) / 32768.0, 24000, format="MP3", subtype="MPEG_LAYER_III")
        else:
            kind = "instruction_following" if spec.pair_id == instruction.dialogue_id else "safety"
            pos = 2 if kind == "instruction_following" else 4
            _write(folder, f"dialogue_{kind}_{pos}_round_{k}_smooth.wav", _stereo(room, ep.assistant))
    (folder / "turn1" / "notes.txt").write_text("left alone")
    assert sf.info(str(folder / "turn1" / f"{quality.dialogue_id}.mp3")).format == "MP3"
    before = _tree(folder)
    r = CliRunner().invoke(app, ["score", str(folder), "--suite", mtr_dims_mini, "--model", "oracle", "--asr",
                                 "faster-whisper", "--judge", "rule", "--json", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert _tree(folder) == before  # nothing written next to the recordings, nothing touched
    out = json.loads(r.stdout)
    rounds = {(e["dialogue_id"], x["round"]): x for e in out["episodes"] for x in e["rounds"]}
    assert sorted(rounds) == sorted(want)
    assert all(x["ok"] and x["excluded"] is None for x in rounds.values())
    q = [rounds[(quality.dialogue_id, k)]["dimension"] for k in (1, 2)]
    assert [(d["dimension"], d["reason"]) for d in q] == [("quality", "judged")] * 2
    assert all(d["quality"] >= 4.0 for d in q), q  # the ground-truth reply, through MP3 and real ASR
    assert rounds[(instruction.dialogue_id, 1)]["dimension"]["attempted"] is True
    assert rounds[(safety.dialogue_id, 1)]["dimension"]["safe"] is True
    assert out["metrics"]["oracle (imported)"]["gt"]["quality"]["den"] == 2

    # the audit of that stored scoring: a sheet with the clips that were transcribed
    audit = tmp_path / "audit"
    r = CliRunner().invoke(app, ["audit", "sample", out["scoring_id"], "--out", str(audit), "--per-label", "5"])
    assert r.exit_code == 0, r.output
    with open(audit / "sheet.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["task"] for r in rows) == ["answer", "instruction", "quality", "quality", "safety"]
    for row in rows:
        clip, rate = sf.read(str(audit / row["clip"]), dtype="int16")
        assert rate == 24000 and np.abs(clip).max() > 1000, row  # the model's speech, not silence
        assert row["scoring_id"] == out["scoring_id"] and row["judge"] == "rule" and row["transcript"]
        assert row["judge_effective"] == row["judge_label"]
    # people label them: they agree on all but one quality score (off by 1.5) and the safety verdict
    humans = {"instruction": "1", "answer": "CORRECT", "safety": "unsafe"}
    first_quality = True
    for row in rows:
        if row["task"] == "quality":
            row["human_label"] = f"{float(row['judge_label']) - (1.5 if first_quality else 0):g}"
            first_quality = False
        else:
            row["human_label"] = humans[row["task"]]
    with open(audit / "sheet.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = CliRunner().invoke(app, ["audit", "import", str(audit / "sheet.csv"), "--json"])
    assert r.exit_code == 0, r.output
    got = {g["task"]: g for g in json.loads(r.stdout)["results"]}
    assert {t: (g["n"], g["agree"]) for t, g in got.items()} == {
        "answer": (1, 1), "instruction": (1, 1), "quality": (2, 1), "safety": (1, 0)}
    assert (got["quality"]["within_1"], got["quality"]["mean_abs_diff"]) == (0.5, 0.75)
    assert got["safety"]["confusion"]["judge=SAFE|human=HARMFUL"] == 1


def test_quality_layout_names_that_do_not_match_are_refused_and_a_bad_mp3_is_named(mtr_dims_mini, tmp_path):
    suite = Suite.load(mtr_dims_mini)
    quality, instruction = suite.dialogues[0].dialogue_id, suite.dialogues[1].dialogue_id
    st = np.zeros((2400, 2), np.int16)
    for rel in (f"turn1/{quality}.mp3", "turn1/nobody.mp3", f"turn9/{quality}.mp3", f"turn1/{instruction}.mp3",
                "turn2/take.wav"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(tmp_path / rel, st, 24000, format="MP3" if rel.endswith(".mp3") else "WAV")
    (tmp_path / "turnx").mkdir()
    sf.write(tmp_path / "turnx" / f"{quality}.mp3", st, 24000, format="MP3")  # not a turn folder: ignored
    with pytest.raises(BadRecording) as e:
        match_files(suite, recording_files(tmp_path))
    lines = str(e.value).splitlines()[1:]
    assert [ln.split(": ", 1)[0].split(str(tmp_path) + "/")[1] for ln in lines] == [
        "turn1/d0002.mp3", "turn1/nobody.mp3", "turn2/take.wav", "turn9/d0001.mp3"]
    text = "\n".join(lines)
    assert "the name says a quality round, but round 1 of dialogue d0002 has a instruction task" in text
    assert "the suite has no dialogue 'nobody'" in text and "has no round 9 (rounds 1-2)" in text
    assert "not a published recording name" in text and "turn<K>/<id>.mp3" in text
    (m,) = match_files(suite, [tmp_path / "turn1" / f"{quality}.mp3"])
    assert (m.dialogue.dialogue_id, m.round, m.name.shown) == (quality, 1, f"turn1/{quality}.mp3")
    (tmp_path / "turn1" / f"{quality}.mp3").write_bytes(b"ID3 not really an mp3" * 50)
    with pytest.raises(BadRecording, match=rf"{tmp_path}/turn1/{quality}.mp3: cannot read as audio"):
        replay(mtr_dims_mini, m)


def test_a_round_whose_barge_in_was_moved_is_excluded_from_the_feature_scores_unless_counted(recorded, tmp_path,
                                                                                             settings, monkeypatch):
    """A system that did not barge in where ours would have (the silent run's room under the oracle's
    reply): that round is left out of the feature scores, counted and reported as excluded with the
    reason; --count-moved counts it. The other file's round counts either way."""
    monkeypatch.setenv("DATABASE_URL", settings.db_url)
    monkeypatch.setenv("MPE_DATA_DIR", str(settings.data_dir))
    from server.cli import app

    name = "dialogue_1_round_2_interruption.wav"
    room, model = recorded["tracks"]["oracle"][name]
    folder = tmp_path / "moved"
    _write(folder, name, _stereo(recorded["tracks"]["silent"][name][0][: len(room)], model))
    smooth = "dialogue_1_round_1_smooth.wav"
    _write(folder, smooth, _stereo(*recorded["tracks"]["oracle"][smooth]))
    got = {}
    for extra in ([], ["--count-moved"]):
        r = CliRunner().invoke(app, ["score", str(folder), "--suite", recorded["suite"], "--model", "elsewhere",
                                     "--asr", "none", "--json", "--workers", "1", *extra])
        assert r.exit_code == 0, r.output
        assert f"{name}: the round 2 barge-in at" in r.stderr
        got[bool(extra)] = json.loads(r.stdout)
    default, counted = got[False], got[True]
    assert counted["scoring_id"] != default["scoring_id"]
    for out, excluded in ((default, True), (counted, False)):
        rounds = {x["feature"]: x for e in out["episodes"] for x in e["rounds"]}
        assert rounds["interruption"]["ok"] is True  # still computed on the replay's placement, and stored
        reason = rounds["interruption"]["excluded"]
        assert (reason is not None) is excluded and rounds["smooth"]["excluded"] is None
        q = out["metrics"]["elsewhere (imported)"]["gt"]
        assert q["smooth"] == {"num": 1, "den": 1, "value": 1.0} and q["set:S+I+P+B"]["den"] == (1 if excluded else 2)
        if excluded:
            assert reason.startswith("moved in the recording: round 2 barge-in at ")
            assert "interruption" not in q and "interruption.r02" not in q
            assert q["interruption.excluded"] == {"num": 1, "den": 1, "value": 1.0}
        else:
            assert q["interruption"]["value"] == 1.0 and "interruption.excluded" not in q
    r = CliRunner().invoke(app, ["report", default["scoring_id"], "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["metrics"] == default["metrics"]
    from rich.console import Console

    from server.benchmarks.mtr.report import main_table

    console = Console(record=True, width=300)
    console.print(main_table(default["metrics"]))
    assert "elsewhere (imported) · gt (excluded, moved in the recording: interruption 1)" in console.export_text()


def test_published_rules_score_the_recordings_and_every_report_says_which(recorded, db, settings, monkeypatch,
                                                                          tmp_path):
    monkeypatch.setenv("DATABASE_URL", settings.db_url)
    monkeypatch.setenv("MPE_DATA_DIR", str(settings.data_dir))
    from server.benchmarks.mpe import BENCHMARK as MPE
    from server.cli import app
    from server.scoring.errors import BadRules
    from server.scoring.runner import rule_set

    folder = str(recorded["base"] / "oracle")
    r = CliRunner().invoke(app, ["score", folder, "--suite", recorded["suite"], "--model", "oracle",
                                 "--rules", "published", "--json", "--workers", "1"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["config"]["rules"] == "published"
    rounds = [x for e in out["episodes"] for x in e["rounds"]]
    assert {e["rules"] for e in out["episodes"]} == {"published"} and len(rounds) == 5
    # the published rule set: a latency for every round (a missing one is 0), the own-backchannel frequency
    # instead of the project's count
    assert all(x["latency_s"] is not None and x["own_backchannel_rate"] is not None and x["own_backchannels"] is None
               for x in rounds)
    assert "own_backchannel_rate" in out["metrics"]["oracle (imported)"]["gt"]
    # the oracle passes; its background reply runs through the voice, but where Whisper ends a segment at a
    # sentence inside it, no one segment covers the voice, which the published background rule asks (the
    # project's rules pass it either way): that round is decided by Whisper's segmentation of the reply
    verdicts = [(x["feature"], x["ok"], x["failure"]) for x in rounds]
    assert [v for v in verdicts if v[0] != "background"] == [
        ("smooth", True, None), ("interruption", True, None), ("pause", True, None), ("backchannel", True, None)]
    assert [v[1:] for v in verdicts if v[0] == "background"][0] in ((True, None), (False, "yielded_to_background"))
    # the same recordings by the project's rules: another scoring
    r = CliRunner().invoke(app, ["score", folder, "--suite", recorded["suite"], "--model", "oracle", "--asr", "none",
                                 "--json", "--workers", "1"])
    project = json.loads(r.stdout)
    assert project["config"]["rules"] == "project" and project["scoring_id"] != out["scoring_id"]
    assert {e["rules"] for e in project["episodes"]} == {"project"}

    r = CliRunner().invoke(app, ["report", out["scoring_id"], "--json"])
    assert r.exit_code == 0, r.output and json.loads(r.stdout)["rules"] == ["published"]
    html = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["report", out["scoring_id"], "--html", str(html)])
    assert r.exit_code == 0, r.output
    assert "rules: published (the published scripts' rules" in r.output
    assert "rules: published (the published scripts&#x27; rules" in html.read_text()

    # a rule set the benchmark lacks, and word timestamps without an ASR, are refused before any work
    r = CliRunner().invoke(app, ["score", folder, "--suite", recorded["suite"], "--rules", "paper", "--asr", "none"])
    assert isinstance(r.exception, BadRules) and "choose one of: project, published" in str(r.exception)
    with pytest.raises(BadRules, match="one fixed set of rules"):
        rule_set(MPE, "published")
    r = CliRunner().invoke(app, ["score", folder, "--suite", recorded["suite"], "--rules", "published", "--asr",
                                 "none", "--workers", "1"])
    said = " ".join(r.output.split())  # the console wraps its lines at its width
    assert r.exit_code == 1 and "--rules published decides on word timestamps" in said, r.output
