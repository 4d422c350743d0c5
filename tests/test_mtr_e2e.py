"""MTR-DuplexBench end to end (DESIGN §12): a suite of real speech, the real server and detector,
real WebSocket bridges in both history modes, then scoring with the §12.4 rules.

The oracle must pass every feature in both modes; ``silent`` and ``always-talk`` sit at the
obvious extremes (no response / talking over the user)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from rich.console import Console

from model_bridges.reference import Silent
from server.benchmarks.mtr.metrics import compute_metrics
from server.benchmarks.mtr.oracle import MTROracle
from server.benchmarks.mtr.report import print_tables
from server.benchmarks.mtr.suite import FEATURES, Suite, check_suite
from server.cli.bridges import AlwaysTalk
from server.engine.leasing import create_run
from server.scoring.runner import ScoreOptions, score_run
from tests.support.browser import needs_browser, signed_in
from tests.support.mtr import build_mtr_suite
from tests.support.world import bridge, wait_run, world_on


async def _shot(page, name: str) -> None:
    """A screenshot kept in MPE_SCREENSHOT_DIR, when it is set."""
    import os
    from pathlib import Path

    if where := os.environ.get("MPE_SCREENSHOT_DIR"):
        await page.screenshot(path=Path(where) / name, full_page=True)


@pytest.fixture(scope="module")
def mtr_suite(tmp_path_factory, say) -> Path:
    root = build_mtr_suite(tmp_path_factory.mktemp("mtr") / "mtr-test", say)
    assert [str(p) for p in check_suite(Suite.load(root))] == []
    return root


def mark_room_late(db, run_id: str) -> str:
    """Record one completed episode of the run as a realtime attempt whose room frames went out late
    (``stats.server.room_late``, as server.engine.session.RoomTiming stores it); returns its id."""
    from sqlalchemy import select

    from server.db import Attempt, Episode

    with db.session() as s:
        ep = s.scalars(select(Episode).where(Episode.run_id == run_id).order_by(Episode.ordinal)).first()
        att = s.get(Attempt, ep.completed_attempt_id)
        att.stats = {**att.stats, "server": {**att.stats.get("server", {}), "room_late": True,
                                             "room_late_frames": 53, "max_room_lateness_ms": 4240.0}}
        return ep.id


def check_cli(settings, db, runs: dict[str, str], tmp_path: Path) -> None:
    """`mpe run create --history`, `mpe report` (terminal, JSON, HTML) on the scored MTR runs; a run
    with an episode whose room frames went out late says so in every form of the report."""
    from tests.support.cli import mpe

    out = mpe(settings, "run", "create", "--model", "nobody", "--suite", str(settings.suites_root / "mtr-test"),
              "--history", "gt", "--team", "lab", "--json")
    assert json.loads(out.stdout)["total"] == 5 and "accepts_context" in out.stderr  # no bridge can take gt yet
    both = mpe(settings, "run", "create", "--model", "m", "--suite", str(settings.suites_root / "mtr-test"),
               "--history", "gt", "--conditions", "free", check=False)
    assert both.returncode == 2 and "not both" in both.stderr
    page = tmp_path / "mtr.html"
    late = mark_room_late(db, runs["silent"])
    text = mpe(settings, "report", *runs.values(), "--html", str(page)).stdout
    timing = f"1 episode(s) of run {runs['silent']} had room frames sent late"
    assert "Room timing" in " ".join(text.split()) and late in text.replace("\n", "")
    assert "mtr-oracle · gt" in text and "always-talk · free" in text and "Success % per round" in text
    assert "gt − free per round" in text
    html_text = page.read_text()
    assert f"<b>Room timing:</b> {timing}" in html_text and late in html_text
    assert html_text.count("<svg") >= 5 + 18  # five degradation curves, one timeline per episode
    data = json.loads(mpe(settings, "report", runs["mtr-oracle"], "--json").stdout)
    assert data["room_timing"] == []  # the oracle's run was on time
    assert json.loads(mpe(settings, "report", runs["silent"], "--json").stdout)["room_timing"][0].startswith(timing)
    assert data["metrics"]["mtr-oracle"]["free"]["smooth"]["value"] == 1.0
    assert data["analyses"]["gt_vs_free"]["mtr-oracle"]["smooth"]["1"]["diff"] == 0


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_reference_bridges_hit_their_extremes_in_both_modes(kind, tmp_path, mtr_suite):
    async def main():
        async with world_on(kind, tmp_path, mtr_suite) as w:
            runs = {}
            for name in ("mtr-oracle", "silent", "always-talk"):
                runs[name] = await asyncio.to_thread(
                    create_run, w.db, team="ops" if name == "mtr-oracle" else "alpha", model=name,
                    suite_path=str(w.suite), clock="lockstep", conditions=["gt", "free"])
            oracle = MTROracle(w.settings.data_dir, str(w.suite))
            async with bridge(w, oracle) as t1, bridge(w, Silent(), w.tokens["alpha"]) as t2, \
                    bridge(w, AlwaysTalk(w.settings.data_dir), w.tokens["alpha"]) as t3:
                for name, run_id in runs.items():
                    p = await wait_run(w.db, run_id, [t1, t2, t3], timeout=600)
                    assert p.done == p.total == 6, (name, p)  # five gt rounds + one free dialogue
            results = {name: await asyncio.to_thread(score_run, w.db, run_id, ScoreOptions(asr="none", workers=1))
                       for name, run_id in runs.items()}
            await asyncio.to_thread(check_cli, w.settings, w.db, runs, tmp_path)
            return w, results

    _, results = asyncio.run(main())
    metrics = {name: compute_metrics(res.episodes) for name, res in results.items()}
    for mode in ("gt", "free"):
        oracle = metrics["mtr-oracle"]["mtr-oracle"][mode]
        assert {f: oracle[f]["value"] for f in FEATURES} == {f: 1.0 for f in FEATURES}, (mode, oracle)
        silent = metrics["silent"]["silent"][mode]
        assert {f: silent[f]["value"] for f in FEATURES} == {f: 0.0 for f in FEATURES}
        talk = metrics["always-talk"]["always-talk"][mode]
        assert {f: talk[f]["value"] for f in FEATURES} == {f: 0.0 for f in FEATURES}
    silent_fail = {r.failure for e in results["silent"].episodes for r in e.rounds}
    assert silent_fail == {"no_response"}
    assert {r.failure for e in results["always-talk"].episodes for r in e.rounds} == {"talked_over"}
    # gt episodes score only their live round; the free episode scores every round
    gt = [e for e in results["mtr-oracle"].episodes if e.mode == "gt"]
    assert sorted((e.live_round, [r.round for r in e.rounds]) for e in gt) == [(k, [k]) for k in range(1, 6)]
    free = [e for e in results["mtr-oracle"].episodes if e.mode == "free"]
    assert [r.round for r in free[0].rounds] == [1, 2, 3, 4, 5]
    interruption = next(r for r in free[0].rounds if r.feature == "interruption")
    assert interruption.interrupted and 0 < interruption.stop_latency_s <= 1.0
    # the published main-table layout: Round 1 -> mean of rounds, per feature and history mode
    console = Console(record=True, width=220)
    print_tables(metrics["mtr-oracle"], console)
    text = console.export_text()
    assert "mtr-oracle · gt" in text and "mtr-oracle · free" in text
    # each feature from its single-feature set only: this suite's one dialogue mixes every feature, so no
    # figure of either published table exists, and none is made up from the pooled rounds
    assert "Feature combinations" in text and "100.0 →" not in text and "0.0 →" not in text
    assert text.count("not in this suite") == 2 * (len(FEATURES) + 4)  # per mode: 5 features, 4 configurations


@needs_browser
async def test_pages_show_rounds_verdicts_and_the_history_modes(tmp_path, mtr_suite):
    """The episode page lists an MTR episode's rounds with their verdicts and marks user turns,
    the pause, the barge-in, the background voice and the backchannels on the timeline; the
    new-run form offers the suite's history modes."""
    from sqlalchemy import select

    from server.db import Episode

    async with world_on("sqlite", tmp_path, mtr_suite) as w:
        run_id = await asyncio.to_thread(create_run, w.db, team="ops", model="mtr-oracle", suite_path=str(w.suite),
                                         clock="lockstep", conditions=["gt", "free"])
        async with bridge(w, MTROracle(w.settings.data_dir, str(w.suite))) as task:
            await wait_run(w.db, run_id, [task], timeout=600)
        await asyncio.to_thread(score_run, w.db, run_id, ScoreOptions(asr="none", workers=1))
        with w.db.session() as s:
            eps = {e.scenario_id: e.id for e in s.scalars(select(Episode).where(Episode.run_id == run_id))}
        async with signed_in(w.http, w.tokens["admin"]) as (page, errors):
            # the free episode: every round live and scored
            await page.goto(f"{w.http}/ui/episode.html?id={eps['d1']}")
            await page.wait_for_selector("#turns tr")
            rows = await page.locator("#turns tr").all_inner_texts()
            assert len(rows) == 5 and all("live" in r and "pass" in r for r in rows), rows
            assert "R3 pause" in rows[2] and "lunch" in rows[2]  # the user's words, with the continuation
            for label, n in (("U", 6), ("PAUSE", 1), ("BARGE", 1), ("BG", 1), ("BC", 2)):
                assert await page.locator(f"#timeline .clip.label-{label}").count() == n, label
            assert await page.locator("#timeline .win-round.v-pass").count() == 5
            await _shot(page, "mtr-episode.png")
            # a gt episode: two history rounds, then the live one
            await page.goto(f"{w.http}/ui/episode.html?id={eps['d1-r03']}")
            await page.wait_for_selector("#turns tr")
            rows = await page.locator("#turns tr").all_inner_texts()
            assert [("history" in r, "pass" in r) for r in rows] == [(True, False), (True, False), (False, True)]
            assert "live round 3" in await page.inner_text("dl")
            # the run page: one row per episode, the live rounds passed
            await page.goto(f"{w.http}/ui/run.html?id={run_id}")
            await page.wait_for_selector("#episodes tr")
            await page.locator("#episodes tr", has_text="5/5 rounds").wait_for()
            listed = await page.locator("#episodes tr").all_inner_texts()
            assert sum("1/1 rounds" in r for r in listed) == 5 and sum("5/5 rounds" in r for r in listed) == 1
            await _shot(page, "mtr-run.png")
            # the new-run form offers the MTR suite's history modes
            await page.goto(f"{w.http}/ui/index.html")
            await page.click("#new-run")
            option = page.locator("#f-suite option", has_text="mtr-duplexbench")
            await page.select_option("#f-suite", await option.first.get_attribute("value"))
            boxes = page.locator("#f-conditions input[name=conditions]")
            assert [await b.get_attribute("value") for b in await boxes.all()] == ["gt", "free"]
            assert errors == []
