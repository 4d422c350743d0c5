"""The pages in real headless Chromium (Debian's ``chromium``, driven by Playwright): sign
in, watch a live lockstep episode progress, play a finished one, read its timeline.

Set MPE_SCREENSHOT_DIR (e.g. docs/screenshots) to keep the screenshots taken on the way.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from pathlib import Path

import httpx
from sqlalchemy import select

from server.benchmarks.mpe.oracle import Oracle
from server.benchmarks.mpe.suite import Suite
from server.db import Attempt, Episode
from server.engine.leasing import create_run
from server.scoring.runner import ScoreOptions, score_run
from tests.support.browser import needs_browser, signed_in
from tests.support.world import Scripted, bridge, wait_run, world_on

pytestmark = needs_browser


class SlowOracle(Oracle):
    """The oracle, its first episode slowed down to about real time so that a person (or a
    test) can watch it play live; later episodes at full speed."""

    blocking = True

    def __init__(self, delay_s: float, **kw):
        super().__init__(**kw)
        self.delay_s = delay_s
        self.episodes = 0

    def reset(self, episode):
        super().reset(episode)
        self.episodes += 1

    def step(self, seq, room):
        if self.episodes == 1:
            time.sleep(self.delay_s)
        return super().step(seq, room)


async def eventually(check, timeout: float = 30, what: str = "condition"):
    t0 = time.monotonic()
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_sign_in_watch_live_and_replay(tmp_path, mini_suite, speech_frames, pytestconfig):
    shots = Path(os.environ.get("MPE_SCREENSHOT_DIR") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    tts_cache = Path(pytestconfig.cache.mkdir("oracle-tts"))  # the oracle's spoken answers, kept between runs
    async with world_on("sqlite", tmp_path, mini_suite) as w:
        shutil.copytree(tts_cache, w.settings.data_dir, dirs_exist_ok=True)
        r_scripted = create_run(w.db, team="alpha", model="scripted", suite_path=str(w.suite), clock="lockstep", limit=2)
        r_oracle = create_run(w.db, team="alpha", model="oracle", suite_path=str(w.suite), clock="lockstep", limit=1)
        async with bridge(w, Scripted("scripted", speech_frames)) as task:
            await wait_run(w.db, r_scripted, [task])
        oracle = await asyncio.to_thread(SlowOracle, 0.06, data_dir=w.settings.data_dir, suite=str(w.suite))
        shutil.copytree(w.settings.data_dir, tts_cache, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.db*"))

        async with signed_in(w.http, None) as (page, errors):
            # --- sign in (a wrong token first) ------------------------------------------
            await page.goto(f"{w.http}/ui/")
            await page.wait_for_url(re.compile(r"signin\.html"))
            await page.fill("#token", "mpe_not-a-token")
            await page.keyboard.press("Enter")
            await page.wait_for_selector("#error:not([hidden])")
            assert "not valid" in await page.inner_text("#error")
            await page.fill("#token", w.tokens["alpha"])
            await page.screenshot(path=shots / "signin.png")
            await page.keyboard.press("Enter")
            await page.wait_for_url(re.compile(r"/ui/index\.html"))
            assert await page.evaluate("sessionStorage.getItem('mpe.token')") == w.tokens["alpha"]
            assert await page.evaluate("localStorage.length") == 0  # kept in the tab's session only
            await page.wait_for_selector(f"a[href='run.html?id={r_oracle}']")
            assert await page.inner_text("#who") == "alpha"

            async with bridge(w, oracle) as task:
                # --- runs: live progress ------------------------------------------------
                row = page.locator("#runs tr", has=page.locator(f"a[href='run.html?id={r_oracle}']"))
                await row.locator(".badge.live").wait_for(timeout=30_000)
                assert "running" in await row.inner_text()
                assert (await row.locator("a.run-label").inner_text()).startswith("oracle · lockstep · mini v")
                assert await row.locator(".progress .seg.running").count() == 1
                await page.screenshot(path=shots / "runs.png")
                # keyboard: Tab to the run's link, Enter opens it
                for _ in range(30):
                    await page.keyboard.press("Tab")
                    if await page.evaluate("document.activeElement.getAttribute('href')") == f"run.html?id={r_oracle}":
                        break
                else:
                    raise AssertionError("the run link is not reachable with Tab")
                await page.keyboard.press("Enter")
                await page.wait_for_url(re.compile(r"run\.html"))

                # --- run -> the live episode -------------------------------------------
                await page.locator("#episodes .badge.live").wait_for(timeout=30_000)
                await page.locator("#episodes tr", has=page.locator(".badge.live")).locator("a").click()
                await page.wait_for_url(re.compile(r"episode\.html"))
                live_id = page.url.split("id=")[1]
                await page.locator("#mode.live").wait_for()
                await page.click("#play")  # listen live (a user gesture starts the audio)
                assert await page.inner_text("#play") == "Mute live audio"

                async def stream_time():
                    m = re.search(r"stream (\d+):(\d+\.\d)", await page.inner_text("#clock"))
                    return int(m.group(1)) * 60 + float(m.group(2)) if m else 0.0

                t1 = await eventually(stream_time, what="the stream clock")
                t2 = await eventually(lambda: _later(stream_time, t1 + 1.0), what="the stream to advance")
                assert t2 > t1
                # the team's own run is unfinished: the clips play, but no labels, texts or state
                await eventually(lambda: _count(page, "#timeline .clip[data-idx]"), what="the clips")
                await eventually(lambda: _text_match(page, "#status-line", r"withheld until the run ends"),
                                 what="the withheld state in words")
                assert await page.locator("#timeline .clip.label-T").count() == 0
                assert "withheld" in await page.inner_text("#script-withheld")
                assert "hearing" in await page.inner_text("#clock")
                await page.screenshot(path=shots / "episode-live.png", full_page=True)

                # --- the episode ends: the same page turns into its replay --------------
                await page.locator("#mode.replay").wait_for(timeout=60_000)
                await wait_run(w.db, r_oracle, [task])
            await page.reload()  # the run has ended: now the script is the team's to read
            await page.locator("#mode.replay").wait_for()
            assert await page.locator("#script-withheld").count() == 0

            with w.db.session() as s:
                ep = s.get(Episode, live_id)
            n_turns = len(ep.scenario["turns"])
            await eventually(lambda: _count(page, "#timeline .clip[data-idx]", n_turns), what="the replay's clips")
            assert await page.locator("#timeline .speech").count() >= 1  # the oracle answered
            assert await page.locator("#timeline .win-t").count() == 1
            assert await page.locator("#turns tr").count() == n_turns
            turn_texts = await page.locator("#turns tr td:nth-child(4)").all_inner_texts()
            assert turn_texts == [t["text"] for t in ep.scenario["turns"]]
            await page.click("#play")
            await eventually(lambda: page.evaluate("document.getElementById('audio').currentTime > 0.5"),
                             what="the replay to play")
            assert await page.inner_text("#play") == "Pause"
            await page.fill("#vol-room", "30")
            await page.focus("#timeline .tl-scroll")
            before = await page.evaluate("document.getElementById('audio').currentTime")
            await page.keyboard.press("ArrowRight")
            after = await page.evaluate("document.getElementById('audio').currentTime")
            assert after >= before + 4.5  # keyboard seek, 5 s
            t_clip = page.locator("#timeline .clip.label-T")
            await t_clip.click()
            t_start = next(e for e in ep.scenario["turns"] if e["label"] == "T")["idx"]
            assert await t_clip.get_attribute("data-idx") == str(t_start)
            assert not await page.evaluate("document.getElementById('audio').paused")
            await page.focus("#timeline .tl-scroll")
            await page.keyboard.press("Space")  # play/pause from the keyboard
            await eventually(lambda: page.evaluate("document.getElementById('audio').paused"), timeout=3,
                             what="pause")

            # --- scored: metrics with CIs on the run page, verdicts on the episode ------
            res = await asyncio.to_thread(score_run, w.db, r_oracle, ScoreOptions(judge="rule", workers=1))
            assert not res.failures
            await page.reload()
            await page.locator("#mode.replay").wait_for()
            t_row = page.locator("#turns tr", has=page.locator(".chip.label-T"))
            await eventually(lambda: _text_match(t_row, ":scope", r"fresh onset · correct"), what="the T verdict")
            assert await page.locator("#timeline .win-t.v-pass").count() == 1
            # the page draws the server's windows, one block each, and computes none of its own
            async with httpx.AsyncClient(base_url=w.http, headers={"Authorization": f"Bearer {w.tokens['alpha']}"}) as c:
                windows = (await c.get(f"/v1/episodes/{live_id}")).json()["timeline"]["windows"]
            assert len(windows) > 1 and await page.locator("#timeline .win").count() == len(windows)
            labels = await page.locator("#timeline .win span").all_inner_texts()
            assert labels == [f"{x['label']}: {x['verdict']['text']}" for x in windows]
            assert "Aria's answer" in await page.inner_text("#answer")
            await page.screenshot(path=shots / "episode-replay.png", full_page=True)
            # a lockstep attempt has no room timing; one recorded late (realtime) says so on the page
            assert await page.locator("#room-timing").count() == 0
            with w.db.session() as s:
                att = s.get(Attempt, s.get(Episode, live_id).completed_attempt_id)
                att.stats = {**att.stats, "server": {**att.stats.get("server", {}), "room_late": True,
                                                     "room_late_frames": 53, "max_room_lateness_ms": 4240.0}}
            await page.reload()
            await page.locator("#room-timing").wait_for()
            assert (await page.inner_text("#room-timing")).startswith("53 room frames sent late (up to 4240 ms")
            assert "bad" in (await page.get_attribute("#room-timing", "class")).split()
            assert "room late" in await page.locator("#attempt option").first.text_content()

            # --- run pages: metrics with CIs, outcomes, filters -------------------------
            await page.goto(f"{w.http}/ui/run.html?id={r_oracle}")
            await eventually(lambda: _count(page, "#episodes tr", 2), what="the oracle's episodes")
            await page.locator(".metrics-table").wait_for()
            rows = await page.locator(".metrics-table tbody tr").all_inner_texts()
            for name in ("Response presence", "Conditional answer accuracy"):
                row = next(r for r in rows if r.startswith(name))
                assert row.count("100.0%") == 2 and row.count("1/1") == 2, row
            assert "fresh onset" in await page.locator("#episodes tr").first.inner_text()

            res = await asyncio.to_thread(score_run, w.db, r_scripted, ScoreOptions(asr="none", workers=1))
            assert not res.failures
            await page.goto(f"{w.http}/ui/run.html?id={r_scripted}")
            await eventually(lambda: _count(page, "#episodes tr", 4), what="the episodes")
            await page.locator(".metrics-table").wait_for()
            assert await page.locator(".metrics-table .mbar .ci").count() >= 1  # bootstrap CI whiskers
            silence = next(r for r in await page.locator(".metrics-table tbody tr").all_inner_texts()
                           if r.startswith("Silence preservation"))
            n_windows = sum(t.label in ("N1", "N2", "N3") for sc in Suite.load(w.suite).scenarios
                            for t in sc.turns if sc.condition == "explicit")
            assert f"100.0% [100.0–100.0] · {n_windows}/{n_windows}" in silence  # explicit: silent throughout
            await page.screenshot(path=shots / "run.png", full_page=True)
            await page.select_option("select[name=outcome]", "intrusion")

            async def only_implicit():
                cells = await page.locator("#episodes tr td:nth-child(3)").all_inner_texts()
                return cells == ["implicit", "implicit"]

            await eventually(only_implicit, what="the failure filter")
            await page.select_option("select[name=outcome]", "")
            await eventually(lambda: _count(page, "#episodes tr", 4), what="no filter")
            await page.select_option("select[name=condition]", "explicit")

            async def only_explicit():
                cells = await page.locator("#episodes tr td:nth-child(3)").all_inner_texts()
                return cells == ["explicit", "explicit"]

            await eventually(only_explicit, what="the condition filter")
            assert await page.locator("#episodes .chip.fail", has_text="no response").count() == 2

            # --- create a run from the runs page, then cancel it -----------------------
            await page.goto(f"{w.http}/ui/index.html")
            await page.click("#new-run")
            await page.locator("#run-dialog[open]").wait_for()
            await page.click("#run-form button[type=submit]")
            assert "model name" in await page.inner_text("#form-error")  # checked before sending
            await page.fill("#f-model", "from-the-page")
            options = await page.locator("#f-suite option").all_inner_texts()
            assert any(o.startswith("mini v1") for o in options) and any(o.startswith("mini —") for o in options)
            await page.select_option("#f-suite", index=0)
            await page.uncheck("input[name=conditions][value=implicit]")
            await page.fill("#f-limit", "1")
            await page.click("#run-form button[type=submit]")
            await page.wait_for_url(re.compile(r"run\.html\?id="))
            new_id = page.url.split("id=")[1]
            # the run's label: model · clock · suite · short id
            await eventually(lambda: _text_match(page, "#title", rf"^from-the-page · lockstep · mini v\S+ · {new_id[:8]}$"),
                             what="the new run")
            page.once("dialog", lambda d: asyncio.ensure_future(d.accept()))
            await page.click("#cancel-run")
            await eventually(lambda: _text_match(page, "#facts", r"cancelled"), what="the cancelled run")
            with w.db.session() as s:
                eps = s.scalars(select(Episode).where(Episode.run_id == new_id)).all()
            assert [(e.condition, e.status) for e in eps] == [("explicit", "cancelled")]

            # --- sign out -------------------------------------------------------------
            await page.click("#signout")
            await page.wait_for_url(re.compile(r"signin\.html"))
            assert await page.evaluate("sessionStorage.getItem('mpe.token')") is None
            assert errors == []


async def _later(get, threshold):
    v = await get()
    return v if v >= threshold else 0


async def _count(page, selector, want=None):
    n = await page.locator(selector).count()
    return n == want if want is not None else n


async def _text_match(where, selector, pattern):
    text = await where.locator(selector).inner_text()
    return text if re.search(pattern, text) else ""
