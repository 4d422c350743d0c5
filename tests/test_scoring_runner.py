"""Scoring runs straight from the database (both databases), end to end: real episodes over
real WebSockets, offline backends, the JSON schema, bundles, resume, parallel workers,
the read API, the HTML report and the judge audit."""

from __future__ import annotations

import asyncio
import csv
import json
import time
from typing import Literal

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, select
from sqlalchemy import inspect as sa_inspect
from typer.testing import CliRunner

from clients.sdk import Bridge, BridgeClient, BridgeOptions
from server.app import BackgroundServer
from server.auth import create_token
from server.benchmarks.mpe.entry import EpisodeScore
from server.benchmarks.mpe.report import collect_report, render_html
from server.cli.bridges import create_bridge
from server.db import EpisodeScoreRow, MetricValueRow, ScoringRow
from server.engine.bundles import export_run
from server.engine.leasing import create_run
from server.engine.progress import run_progress
from server.scoring.audit import import_sheet, sample
from server.scoring.results import load_episode_scores, load_run_metrics
from server.scoring.runner import ScoreOptions, score_bundles, score_run
from server.scoring.store import ScoringStatus

FRAME = 1920


class Talker(Bridge):
    """Admin bridge: says "Nine dollars." in the first silence window and "Okay." in the second one
    (when it comes before T); never answers T."""

    name = "talker"
    clocks = ("lockstep",)
    blocking = False
    wants_reference = True

    def __init__(self, suite: str, say):
        super().__init__()
        self.suite, self.lines = suite, {"price": say("Nine dollars."), "ack": say("Okay.")}

    def reset(self, episode):
        from server.engine.clips import episode_audio, load_suite

        suite = load_suite(self.suite)
        sc = suite.suite.scenario(episode.reference.scenario_id, episode.reference.condition)
        clips, _ = episode_audio(suite, sc)
        # §3: before T every clip is followed by 0.5 s of silence, so the clip starts are fixed.
        t = len(clips["preamble"]) + 12_000
        self.speech = []
        for turn, line in zip(sc.turns, ("price", "ack")):
            if turn.label == "T":
                break
            self.speech.append((t + 7_200, self.lines[line]))
            t += len(clips[turn.idx]) + 12_000

    def step(self, seq, room):
        out = np.zeros(self.frame_samples, dtype=np.int16)
        a = seq * self.frame_samples
        for start, audio in self.speech:
            lo, hi = max(a, start), min(a + self.frame_samples, start + len(audio))
            if lo < hi:
                out[lo - a:hi - a] = audio[lo - start:hi - start]
        return out


async def run_models(db, settings, suite, say) -> dict[str, str]:
    tok, adm = create_token(db, "local"), create_token(db, "local", admin=True)
    # (the oracle's run also sends the duty as a text prompt, which it ignores: reports show it)
    runs = {m: create_run(db, team="local", model=m, suite_path=str(suite), clock="lockstep",
                          text_prompt=m == "oracle")
            for m in ("silent", "talker", "oracle")}
    bridges = [(create_bridge("silent"), tok), (Talker(str(suite), say), adm),
               (create_bridge("oracle", suite=str(suite), data_dir=str(settings.data_dir)), adm)]
    async with BackgroundServer(settings) as server:
        clients = [BridgeClient(b, BridgeOptions(server=server.url, token=t, backoff_min_s=0.05)) for b, t in bridges]
        tasks = [asyncio.create_task(c.run()) for c in clients]
        t0 = time.monotonic()
        try:
            while True:
                ps = [await asyncio.to_thread(run_progress, db, r) for r in runs.values()]
                if all(p.status == "finished" for p in ps):
                    break
                for t in tasks:
                    if t.done() and t.exception():
                        raise t.exception()
                assert time.monotonic() - t0 < 120, ps
                await asyncio.sleep(0.05)
        finally:
            for c in clients:
                c.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
    assert all(p.completed == 4 for p in ps)
    return runs


# --- the JSON schema of `mpe score --json` ----------------------------------------------------------


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class QV(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    num: int
    den: int
    value: float | None


class Quantities(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    fresh_onset_rate: QV
    response_presence: QV
    answer_accuracy: QV
    silence_preservation: QV
    window_response: QV
    window_yield: QV


class TOut(Strict):
    fresh: bool
    present: bool
    correct: bool | None
    transcript: str | None


class SilenceWindow(Strict):
    turn_idx: int
    label: Literal["N1", "N2", "N3"]
    passed: bool
    speech_ms: int
    verdict: Literal["BACKCHANNEL", "SUBSTANTIVE_INTRUSION"] | None


class N4(Strict):
    q_idx: int
    window_response: bool
    category: Literal["already_speaking", "started_during_q", "fresh_onset", "no_speech"]
    eligible: bool
    outcome: Literal["pass", "still_voicing", "resumed"] | None


class EpisodeOut(Strict):
    episode_id: str
    scenario_id: str
    pair_id: str
    condition: Literal["explicit", "implicit"]
    model: str
    t: TOut
    silence_windows: list[SilenceWindow]
    n4: list[N4]


class ScoreJson(Strict):
    metrics: dict[str, dict[Literal["explicit", "implicit"], Quantities]]
    episodes: list[EpisodeOut]


def strip(e: EpisodeScore) -> dict:
    """An entry without what legitimately differs between a DB and a bundle scoring."""
    return e.model_dump(exclude={"source"})


async def test_score_runs_end_to_end(db, settings, mini_suite, say, tmp_path, monkeypatch):
    runs = await run_models(db, settings, mini_suite, say)
    opts = ScoreOptions(workers=1)

    oracle = await asyncio.to_thread(score_run, db, runs["oracle"], opts)
    assert not oracle.failures and len(oracle.episodes) == 4
    for cond in ("explicit", "implicit"):
        m = oracle.metrics["oracle"][cond]
        # The oracle is near-perfect: it answers every T at once and correctly, stays silent, yields.
        assert m["fresh_onset_rate"] == {"num": 2, "den": 2, "value": 1.0}
        assert m["answer_accuracy"] == {"num": 2, "den": 2, "value": 1.0}
        assert m["silence_preservation"] == {"num": 5, "den": 5, "value": 1.0}
        assert m["window_response"] == {"num": 1, "den": 1, "value": 1.0}
        # Every eligible event passes (< 30 eligible: no value). Whether the oracle is still voicing
        # at t_R depends on where its randomly synthesised hold-on pauses, so eligibility may vary.
        assert m["window_yield"]["num"] == m["window_yield"]["den"] <= 1 and m["window_yield"]["value"] is None
    assert all(n.category == "fresh_onset" and n.outcome in ("pass", None) for e in oracle.episodes for n in e.n4)

    silent = await asyncio.to_thread(score_run, db, runs["silent"], opts)
    ms = silent.metrics["silent"]["explicit"]
    assert ms["response_presence"]["value"] == 0.0 and ms["silence_preservation"]["value"] == 1.0
    assert ms["answer_accuracy"] == {"num": 0, "den": 0, "value": None}

    talker = await asyncio.to_thread(score_run, db, runs["talker"], opts)
    for cond in ("explicit", "implicit"):
        # p1: N2 "Nine dollars." fails, N1 "Okay." passes, N3 passes; p2: N2 fails, N3 passes.
        assert talker.metrics["talker"][cond]["silence_preservation"] == {"num": 3, "den": 5, "value": 0.6}
    verdicts = sorted((e.scenario_id, w.turn_idx, w.verdict) for e in talker.episodes
                      for w in e.silence_windows if e.condition == "explicit")
    assert verdicts == [("s-p1", 0, "SUBSTANTIVE_INTRUSION"), ("s-p1", 1, "BACKCHANNEL"), ("s-p1", 3, None),
                        ("s-p2", 0, "SUBSTANTIVE_INTRUSION"), ("s-p2", 4, None)]

    # The read API for the REST layer.
    rm = load_run_metrics(db, runs["oracle"])
    assert rm["metrics"] == oracle.metrics and rm["scoring"]["scoring_id"] == oracle.scoring_id
    assert rm["analyses"]["paired_addressing"]["oracle"]["n_pairs"] == 2
    e0 = oracle.episodes[0]
    found = load_episode_scores(db, e0.episode_id, EpisodeScore)
    assert found.entry == e0 and found.scoring_id == oracle.scoring_id
    assert load_run_metrics(db, "nope") is None and load_episode_scores(db, "nope", EpisodeScore) is None
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(MetricValueRow)
                        .where(MetricValueRow.scoring_id == oracle.scoring_id)) == 2 * 6

    # `mpe score RUN --json` (resumes the same scoring: nothing to do) and its schema.
    monkeypatch.setenv("DATABASE_URL", settings.db_url)
    monkeypatch.setenv("MPE_DATA_DIR", str(settings.data_dir))
    from server.cli import app

    r = await asyncio.to_thread(CliRunner().invoke, app, ["score", runs["talker"], "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    ScoreJson.model_validate(out)
    assert out["metrics"] == talker.metrics and out["scoring_id"] == talker.scoring_id
    assert [EpisodeScore.model_validate(e) for e in out["episodes"]] == talker.episodes

    # Bundles of the same run give the same scores as the database.
    export_run(db, runs["oracle"], tmp_path / "export")
    bundles = await asyncio.to_thread(score_bundles, db, [tmp_path / "export"], opts)
    assert bundles.metrics == oracle.metrics and bundles.run_id is None
    assert [strip(e) for e in bundles.episodes] == [strip(e) for e in oracle.episodes]
    assert bundles.calls["asr"] == 0 and bundles.calls["asr_hits"] == 4  # same audio, cached transcripts

    # The report over all three runs: tables, pairwise tests, timelines.
    data = collect_report(db, runs.values())
    assert data.models == ["silent", "talker", "oracle"]
    assert {s["run_id"]: s["text_prompt"] for s in data.sources} == {runs["silent"]: False, runs["talker"]: False,
                                                                      runs["oracle"]: True}
    html = render_html(data)
    assert html.count("none (audio only)") == 2 and html.count("duty text") == 1
    assert html.startswith("<!doctype html>") and "http" not in html.split("<body>", 1)[1]  # self-contained
    assert html.count("<details") == 12 and html.count("<svg") >= 12 + 6
    # Table 21: three models, so each condition's Bonferroni family is 3 pairs x 2 metrics.
    pw = data.analyses["pairwise"]
    assert {c: f["m"] for c, f in pw["families"].items()} == {"explicit": 6, "implicit": 6}
    assert len(pw["tests"]) == 12
    assert [t["p_bonferroni"] for t in pw["tests"]] == [pytest.approx(min(1.0, 6 * t["p"])) for t in pw["tests"]]
    r = await asyncio.to_thread(CliRunner().invoke, app, ["report", *runs.values(), "--html", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    # The terminal gets the paper's tables too, Table 21 included (numbered as the paper; the
    # response decisions are an extra).
    for n in (3, 9, 10, 12, 13, 14, 15, 16, 18, 21):
        assert f"Table {n}:" in r.stdout
    assert "Extra (beyond the paper): response decision by label" in r.stdout
    # the header says which judge and ASR made the numbers, and that the offline defaults are not the paper's
    head = r.stdout[:r.stdout.index("Table 3:")]
    flat = " ".join(head.split())
    assert "Scored with" in head and "judge rule" in flat and "ASR faster-whisper" in flat and "tiny.en" in flat
    assert flat.count("the offline defaults: not the paper's judge (Claude Opus) and ASR (Qwen3-ASR-1.7B)") == 3
    assert "mpe score RUN --judge claude:claude-opus-4-1 --asr qwen3-asr:DIR" in flat
    assert "the offline defaults" in (tmp_path / "r.html").read_text()
    assert "Table 21" in (tmp_path / "r.html").read_text()
    assert (tmp_path / "r.html").read_text().count("<details") == 12
    r = await asyncio.to_thread(CliRunner().invoke, app, ["report", "never-scored"])
    assert r.exit_code != 0 and "mpe score" in str(r.exception)

    # Run labels: model · clock · suite · short id. The oracle run and its bundles share a model
    # name, so the tables name both by their labels; the terminal and the HTML list every label.
    label = f"oracle · lockstep · {suite_label(db, runs['oracle'])} · {runs['oracle'][:8]}"
    assert data.sources[2]["labels"] == {"oracle": label}
    both = collect_report(db, [runs["oracle"], bundles.scoring_id])
    assert both.models == [label, f"oracle · lockstep · bundles · {bundles.scoring_id[:8]}"]
    assert both.metrics[label] == bundles.metrics["oracle"]
    assert all(m in render_html(both) for m in both.models)
    r = await asyncio.to_thread(CliRunner().invoke, app, ["report", runs["oracle"], runs["talker"]])
    assert r.exit_code == 0 and label in r.stdout and "talker · lockstep · mini v" in r.stdout


def suite_label(db, run_id: str) -> str:
    from server.db import Run, Suite

    with db.session() as s:
        suite = s.get(Suite, s.get(Run, run_id).suite_id)
    return f"{suite.name} v{suite.version}"


async def test_resume_after_interruption_and_parallel_workers(db, settings, mini_suite, say):
    runs = await run_models(db, settings, mini_suite, say)
    run = runs["talker"]
    seen = []

    def interrupt(i, n):
        seen.append(i)
        if i == 2:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C after two episodes

    with pytest.raises(KeyboardInterrupt):
        await asyncio.to_thread(score_run, db, run, ScoreOptions(workers=1), interrupt)
    with db.session() as s:
        (sc,) = s.scalars(select(ScoringRow).where(ScoringRow.run_id == run)).all()
        assert sc.status == ScoringStatus.running
        assert s.scalar(select(func.count()).select_from(EpisodeScoreRow)
                        .where(EpisodeScoreRow.scoring_id == sc.id)) == 2
    assert load_run_metrics(db, run) is None  # nothing published yet

    resumed = await asyncio.to_thread(score_run, db, run, ScoreOptions(workers=1))
    assert resumed.scoring_id == sc.id and resumed.skipped == 2 and len(resumed.episodes) == 4
    assert load_run_metrics(db, run)["metrics"] == resumed.metrics

    # A fresh scoring in two worker processes gives the same results (from the caches).
    par = await asyncio.to_thread(score_run, db, run, ScoreOptions(workers=2, fresh=True))
    assert par.scoring_id != resumed.scoring_id and par.skipped == 0 and not par.failures
    assert par.metrics == resumed.metrics and par.episodes == resumed.episodes
    assert par.calls["asr"] == 0 and par.calls["judge"] == 0


async def test_judge_audit(db, settings, mini_suite, say, tmp_path):
    runs = await run_models(db, settings, mini_suite, say)
    await asyncio.to_thread(score_run, db, runs["talker"], ScoreOptions(workers=1))
    out = tmp_path / "audit"
    r = sample(db, runs["talker"], out, per_label=1)
    with open(out / "sheet.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # Strata: 2 conditions x silence x {BACKCHANNEL, SUBSTANTIVE_INTRUSION}, one item each.
    assert r["items"] == len(rows) == 4
    assert sorted((x["condition"], x["judge_label"]) for x in rows) == [
        ("explicit", "BACKCHANNEL"), ("explicit", "SUBSTANTIVE_INTRUSION"),
        ("implicit", "BACKCHANNEL"), ("implicit", "SUBSTANTIVE_INTRUSION")]
    import soundfile as sf

    for x in rows:
        pcm, rate = sf.read(str(out / x["clip"]), dtype="int16")
        assert rate == 24000 and len(pcm) > 0 and np.abs(pcm).max() > 1000  # the judged speech itself
        assert x["judge"] == "rule" and x["prompt_version"] == "rule-silence-v1"
    assert (out / "index.html").read_text().count("<audio") == 4
    # People agree with three verdicts and call one "Okay." an intrusion; one row stays unlabeled.
    for i, x in enumerate(rows):
        x["human_label"] = x["judge_label"] if x["judge_label"] != "BACKCHANNEL" or i < 2 else "intrusion"
    rows[0]["human_label"] = ""
    with open(out / "filled.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rep = import_sheet(out / "filled.csv")
    (g,) = rep["results"]
    labeled = [x for x in rows if x["human_label"]]
    agree = sum(x["judge_effective"] == {"intrusion": "SUBSTANTIVE_INTRUSION"}.get(x["human_label"], x["human_label"])
                for x in labeled)
    assert rep["unlabeled"] == 1 and g["n"] == 3 and g["agree"] == agree == 2 and g["task"] == "silence"
    assert g["agreement"] == pytest.approx(agree / 3, abs=1e-4)
    rows[1]["human_label"] = "maybe"
    with open(out / "bad.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    from server.scoring.errors import ScoringError

    with pytest.raises(ScoringError, match="line 3"):
        import_sheet(out / "bad.csv")


SCORING_TABLES = {"transcripts", "verdicts", "scorings", "episode_scores", "metric_values"}


def test_migration_matches_the_models(db):
    """`alembic upgrade head` creates the scoring tables exactly as server.db declares them."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from server.db import Base

    with db.engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)

    def table_of(d):
        d = d[0] if isinstance(d, list) else d
        for x in d[1:]:
            name = getattr(x, "name", None) if not isinstance(x, str) else None
            table = getattr(x, "table", None)
            if table is not None:
                return table.name
            if name in SCORING_TABLES:
                return name
        return d[2] if len(d) > 2 and isinstance(d[2], str) else None

    ours = [d for d in diffs if table_of(d) in SCORING_TABLES]
    assert ours == []
    with db.engine.connect() as conn:
        names = set(sa_inspect(conn).get_table_names())
    assert SCORING_TABLES <= names
