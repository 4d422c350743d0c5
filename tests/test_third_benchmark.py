"""A third benchmark, written only in ``tests/beepbench/`` and registered with one line (the
``MPE_BENCHMARKS`` environment variable), runs end to end through the real server: its suite is
built, a run queued, an SDK bridge plays it over a real WebSocket through the real detector, it is
scored, ``mpe report`` prints it, and the run and episode pages draw it in Chromium, its timeline
from the windows the server computes. No shared module knows it: if one had to, this would fail."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from clients.sdk import Bridge
from model_bridges.reference import Silent
from server.engine.leasing import create_run
from server.scoring.runner import ScoreOptions, score_run
from tests.beepbench import QUANTITY, WINDOW, build_suite
from tests.support.browser import needs_browser, signed_in
from tests.support.plugins import BEEP_REGISTRATION
from tests.support.world import bridge, wait_run, world_on


class Answerer(Bridge):
    """Says its answer as soon as a beep has ended (a loud room frame followed by a quiet one)."""

    name = "answerer"

    def __init__(self, answer: np.ndarray):
        super().__init__()
        self.answer = answer

    def reset(self, episode) -> None:
        self.loud = False
        self.left = np.zeros(0, np.int16)

    def step(self, seq: int, room: np.ndarray) -> np.ndarray:
        loud = bool(np.abs(room).max(initial=0) > 2000)
        if self.loud and not loud:
            self.left = self.answer
        self.loud = loud
        n = self.frame_samples
        out, self.left = self.left[:n], self.left[n:]
        return np.pad(out, (0, n - len(out)))


@needs_browser
async def test_a_benchmark_in_a_test_package_runs_end_to_end(tmp_path, monkeypatch, say):
    from sqlalchemy import select

    from server.db import Episode
    from tests.support.cli import mpe

    monkeypatch.setenv("MPE_BENCHMARKS", BEEP_REGISTRATION)
    answer = say("Yes, I heard the beep.")
    assert len(answer) < WINDOW
    suite = build_suite(tmp_path / "beeps")
    async with world_on("sqlite", tmp_path, suite) as w:
        runs = {model: await asyncio.to_thread(create_run, w.db, team="alpha", model=model, suite_path=str(w.suite),
                                               clock="lockstep")
                for model in ("answerer", "silent")}
        async with bridge(w, Answerer(answer), w.tokens["alpha"]) as t1, bridge(w, Silent(), w.tokens["alpha"]) as t2:
            for run_id in runs.values():
                p = await wait_run(w.db, run_id, [t1, t2], timeout=300)
                assert p.done == p.total == 2, p
        scored = {m: await asyncio.to_thread(score_run, w.db, r, ScoreOptions(asr="none", workers=1))
                  for m, r in runs.items()}
        assert [e.answered for e in scored["answerer"].episodes] == [[True, True]] * 2
        assert [e.answered for e in scored["silent"].episodes] == [[False, False]] * 2

        # mpe report, in a process of its own (it finds the benchmark through the same registration)
        report = json.loads(mpe(w.settings, "report", *runs.values(), "--json").stdout)
        assert report["metrics"]["answerer"]["plain"][QUANTITY]["value"] == 1.0
        assert report["metrics"]["silent"]["plain"][QUANTITY]["value"] == 0.0
        text = mpe(w.settings, "report", runs["answerer"]).stdout
        assert "Beeps answered" in text and "4/4" in text

        # the API: the suite counted, the episode's timeline the benchmark's windows
        with w.db.session() as s:
            episodes = {m: s.scalars(select(Episode.id).where(Episode.run_id == r)).all() for m, r in runs.items()}
        import httpx
        async with httpx.AsyncClient(base_url=w.http, headers={"Authorization": f"Bearer {w.tokens['alpha']}"}) as c:
            ep = (await c.get(f"/v1/episodes/{episodes['silent'][0]}")).json()
            assert [(x["kind"], x["verdict"]["state"]) for x in ep["timeline"]["windows"]] == [("beep", "fail")] * 2

        async with signed_in(w.http, w.tokens["alpha"]) as (page, errors):
            await page.goto(f"{w.http}/ui/episode.html?id={episodes['answerer'][0]}")
            await page.locator("#timeline .win-beep.v-pass").first.wait_for()
            assert await page.locator("#timeline .win-beep.v-pass").count() == 2
            # its room blocks and script rows: what its hooks give
            assert await page.locator("#timeline .clip.label-beep").count() == 2
            assert await page.locator("#turns tr").count() == 2
            assert "beep 2" in (await page.locator("#turns tr").all_inner_texts())[1]
            assert await page.locator("#turns-head th").all_inner_texts() == ["Start", "Beep", "Window"]
            await page.goto(f"{w.http}/ui/run.html?id={runs['answerer']}")
            await page.wait_for_selector("#episodes tr")
            assert await page.locator("#episodes tr").count() == 2
            await page.locator("text=Answer rate").first.wait_for()
            # its outcome column and cells, and its failure title in the filter
            await page.locator("#episodes tr", has_text="2/2 beeps").first.wait_for()
            assert "Beeps answered" in await page.inner_text("#episodes-head")
            assert "a beep went unanswered" in await page.inner_text("#filters [name=outcome]")
            assert errors == []
