"""The scenario snapshot an episode stores: each benchmark's typed ``scenario_model``, stored as its
JSON (the form runs have always stored) and read back; a snapshot that does not parse fails its run
with a stored reason naming the episode, and the bridge goes on to other work."""

from __future__ import annotations

import json
import shutil

import pytest
from sqlalchemy import select, update

from server.benchmarks.mtr.dataset.build import build_text_suite
from server.benchmarks.mtr.dataset.plan import plan_suite
from server.benchmarks.mtr.dataset.procedural import ProceduralGenerator
from server.benchmarks.mtr.dataset.sets import MIXED
from server.core.benchmark import BadSnapshot
from server.db import Attempt, Episode, Run
from server.engine.leasing import create_run, lease_episode
from server.engine.registry import get_benchmark
from tests import beepbench

MPE, MTR = get_benchmark("duplex-mpe"), get_benchmark("mtr-duplexbench")


def _round_trips(bench, suite, conditions) -> list[dict]:
    stored = []
    for spec in bench.episodes(suite, conditions, None):
        data = json.loads(json.dumps(spec.scenario.model_dump(mode="json")))  # as the JSON column keeps it
        again = bench.snapshot(data, "e1")
        assert type(again) is bench.scenario_model and again == spec.scenario
        assert json.dumps(again.model_dump(mode="json")) == json.dumps(data)  # the same JSON, key order too
        stored.append(data)
    return stored


def test_duplex_mpe_snapshot_is_the_manifest_line(mini_suite):
    suite = MPE.load_suite(mini_suite)
    stored = _round_trips(MPE, suite, MPE.conditions)
    lines = [json.loads(x) for x in (mini_suite / "scenarios.jsonl").read_text("utf-8").splitlines() if x.strip()]
    assert stored == lines and len(stored) == 4


def test_mtr_snapshot_is_dialogue_mode_and_live_round(tmp_path):
    suite, _ = build_text_suite(tmp_path / "mtr", name="mtr", plans=plan_suite(2, 3, MIXED, 5), seed=5,
                                generator=ProceduralGenerator(5))
    stored = _round_trips(MTR, suite, MTR.conditions)
    d = suite.dialogues[0]
    first = stored[0]
    assert list(first) == ["scenario_id", "pair_id", "condition", "round", "dialogue"]
    assert first == {"scenario_id": f"{d.dialogue_id}-r01", "pair_id": d.dialogue_id, "condition": "gt", "round": 1,
                     "dialogue": d.model_dump(mode="json")}
    free = next(x for x in stored if x["condition"] == "free")
    assert free["round"] is None and free["scenario_id"] == free["pair_id"]


def test_beep_snapshot_is_its_scenario_and_condition(tmp_path):
    bench = beepbench.BENCHMARK
    suite = bench.load_suite(beepbench.build_suite(tmp_path / "beep"))
    stored = _round_trips(bench, suite, bench.conditions)
    assert [list(x) for x in stored] == [["scenario_id", "beeps", "condition"]] * 2


def test_a_snapshot_that_does_not_parse_names_the_episode_and_fields():
    with pytest.raises(BadSnapshot) as err:
        MTR.snapshot({"scenario_id": "d1-r01", "pair_id": "d1", "condition": "gt", "round": "two"}, "ep-42")
    msg = str(err.value)
    assert err.value.code == "bad_snapshot"
    assert "episode ep-42" in msg and "mtr-duplexbench" in msg and "round:" in msg and "dialogue:" in msg


def _lease(db):
    return lease_episode(db, team="local", admin=False, model="silent", clocks=["lockstep"], owner="srv",
                         bridge_id="b1", bridge_rate=24000, model_revision="", lease_s=30.0)


def test_a_bad_stored_snapshot_fails_its_run_and_the_next_is_leased(db, mini_suite, tmp_path):
    suite = tmp_path / "suite"
    shutil.copytree(mini_suite, suite)
    bad = create_run(db, team="local", model="silent", suite_path=str(suite), clock="lockstep", limit=1)
    good = create_run(db, team="local", model="silent", suite_path=str(suite), clock="lockstep", limit=1)
    with db.session() as s:
        first = s.scalars(select(Episode).where(Episode.run_id == bad).order_by(Episode.lease_rank)).first()  # leased first
        damaged = {k: v for k, v in first.scenario.items() if k != "turns"}  # e.g. stored by another version
        s.execute(update(Episode).where(Episode.id == first.id).values(scenario=damaged))
        bad_episode = first.id

    lease = _lease(db)  # the bad run's episode is tried first (the older run), then the good run's
    assert lease is not None and lease.run_id == good
    with db.session() as s:
        ordinal = s.get(Episode, lease.episode_id).ordinal
    assert lease.scenario == MPE.snapshot(MPE.load_suite(suite).scenarios[ordinal].model_dump(mode="json"), "x")
    with db.session() as s:
        run = s.get(Run, bad)
        atts = s.scalars(select(Attempt).join(Episode).where(Episode.run_id == bad)).all()
        statuses = {e.status for e in s.scalars(select(Episode).where(Episode.run_id == bad))}
    assert run.status == "failed" and run.finished_at is not None
    assert f"episode {bad_episode}" in run.error and "turns" in run.error
    assert len(atts) == 1 and atts[0].status == "failed" and atts[0].error_code == "bad_snapshot"
    assert atts[0].error_message == run.error
    assert statuses == {"cancelled"}


def test_the_typed_views_read_documents_as_scoring_always_has():
    """A sparse document (a recording made elsewhere: a bare model name, no stats, no script) reads
    with the defaults scoring always gave; a field of the wrong type is refused naming the source."""
    import numpy as np

    from server.benchmarks.mpe.scoring import MPEEpisodeView
    from server.benchmarks.mtr.scoring import MTREpisodeView, moved_rounds
    from server.core.benchmark import EpisodeView
    from server.scoring.errors import BadBundle
    from server.scoring.loading import LoadedEpisode

    def loaded(doc):
        return LoadedEpisode(doc, np.zeros(0, np.int16), None, "/bundles/x")

    sparse = loaded({"episode_id": 7, "model": "elsewhere", "stats": None, "events": []})
    v = sparse.view(EpisodeView)
    assert (v.episode_id, v.model.name, v.model.revision, v.stats, v.scenario_id, v.attempt_id) == \
        ("7", "elsewhere", "", {}, "", None)
    mpe = sparse.view(MPEEpisodeView)
    assert mpe.turns == [] and mpe.gold_answer is None and mpe.answer_keys is None
    mtr = loaded({"episode_id": "e", "round": 2, "recording": {"moved": ["barge-in"], "file": "a.wav"}}).view(
        MTREpisodeView)
    assert mtr.dialogue is None and moved_rounds(mtr) == {2: "moved in the recording: barge-in (not where the live "
                                                             "scheduler places it after the model's onset)"}
    with pytest.raises(BadBundle, match=r"^/bundles/x: not a MPEEpisodeView episode document: turns\.0\.idx"):
        loaded({"episode_id": "e", "turns": [{"idx": "first"}]}).view(MPEEpisodeView)
