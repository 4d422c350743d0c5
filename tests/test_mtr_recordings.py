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
from server.benchmarks.mtr import BENCHMARK
from server.benchmarks.mtr.metrics import compute_metrics
from server.benchmarks.mtr.oracle import MTROracle
from server.benchmarks.mtr.recordings import match_files, parse_name, recording_files, replay
from server.benchmarks.mtr.scoring import score_episode
from server.benchmarks.mtr.suite import Suite
from server.scoring.asr import make_asr
from server.scoring.errors import BadRecording
from server.scoring.judges import RuleJudge
from server.scoring.store import Cache
from tests.mtr_support import record_lockstep

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
        k = spec.scenario["round"]
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
    return {"suite": mtr_mini, "base": base, "oracle": oracle, "silent": silent, "tracks": {**o_tracks, **s_tracks}}


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
    r = CliRunner().invoke(app, ["score", str(recorded["base"] / "oracle"), "--suite", recorded["suite"],
                                 "--model", "oracle", "--asr", "none", "--json", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["scoring_id"] == got["oracle"]["scoring_id"]
    r = CliRunner().invoke(app, ["report", got["oracle"]["scoring_id"], got["silent"]["scoring_id"], "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(r.stdout)["metrics"]) == ["oracle (imported)", "silent (imported)"]

