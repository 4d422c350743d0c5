"""Scoring work leased through the database (both databases): claims with an owner and a lease
expiry, guarded writes, and real `mpe score` processes splitting one run, one of them killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from server.benchmarks.mpe.duty import DUTY_TEXT
from server.benchmarks.mpe.suite import Preamble, Scenario, SuiteMeta, Turn, write_suite
from server.benchmarks.mpe.textref.backends import make_reference_backend
from server.benchmarks.mpe.textref.runs import create_reference_run
from server.core.states import IllegalTransition, advance
from server.core.status import CLAIM_TRANSITIONS, ClaimStatus, ScoringStatus
from server.db import EpisodeScoreRow, ScoringClaim, ScoringRow
from server.scoring.asr import make_asr, parse_device
from server.scoring.claims import (
    WorkItem,
    claim_counts,
    claim_failures,
    claim_next,
    complete,
    fail,
    release,
    renew,
    seed_claims,
)
from server.scoring.errors import BackendUnavailable
from server.scoring.runner import ScoreOptions, score_run
from server.scoring.store import finish_scoring, open_scoring
from tests.support.anthropic_peer import FakeAnthropic
from tests.support.scoring import entry

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-test-claims"
C = ClaimStatus


# --- the claims, on literal times -----------------------------------------------------------------


def _scoring(db) -> str:
    return open_scoring(db, source_key="test", run_id=None, config={}, config_hash="h", n_episodes=3, fresh=True)[0]


def _entry(episode_id: str):
    return entry(scenario=episode_id).model_copy(update={"episode_id": episode_id})


def _claims(db, sid) -> dict[str, tuple[ClaimStatus, str | None, int]]:
    with db.session() as s:
        return {c.episode_id: (c.status, c.owner, c.claims)
                for c in s.scalars(select(ScoringClaim).where(ScoringClaim.scoring_id == sid))}


def _stored(db, sid) -> list[str]:
    with db.session() as s:
        return sorted(s.scalars(select(EpisodeScoreRow.episode_id).where(EpisodeScoreRow.scoring_id == sid)))


def test_claims_are_leased_taken_over_after_expiry_and_stored_once(db):
    sid = _scoring(db)
    items = [WorkItem(f"e{i}", f"a{i}") for i in range(3)]
    assert seed_claims(db, sid, items) == 0
    assert seed_claims(db, sid, items) == 0  # seeding twice adds nothing
    a = claim_next(db, sid, "A", 10.0, t=100.0)
    b1 = claim_next(db, sid, "B", 10.0, t=100.0)
    b2 = claim_next(db, sid, "B", 10.0, t=105.0)
    assert [c.episode_id for c in (a, b1, b2)] == ["e0", "e1", "e2"] and a.attempt_id == "a0"
    assert complete(db, b1, _entry("e1"))
    assert not complete(db, b1, _entry("e1"))  # stored once: the claim is no longer held
    assert fail(db, b2, "BadBundle: no audio")
    assert claim_next(db, sid, "B", 10.0, t=109.0) is None  # A's lease runs until 110
    assert renew(db, a, 10.0, t=109.0)  # ... and now until 119
    assert claim_next(db, sid, "B", 10.0, t=118.0) is None
    assert claim_counts(db, sid).to_json() == {"pending": 0, "claimed": 1, "done": 1, "failed": 1, "reclaimed": 0,
                                               "total": 3}

    # A stalls past its lease: B takes e0 over, and A can neither renew nor store it.
    taken = claim_next(db, sid, "B", 10.0, t=119.5)
    assert (taken.episode_id, taken.owner, taken.number) == ("e0", "B", 2)
    assert not renew(db, a, 10.0, t=120.0)
    assert not complete(db, a, _entry("e0")) and _stored(db, sid) == ["e1"]
    assert not release(db, a)
    assert complete(db, taken, _entry("e0")) and _stored(db, sid) == ["e0", "e1"]
    assert _claims(db, sid) == {"e0": (C.done, "B", 2), "e1": (C.done, "B", 1), "e2": (C.failed, "B", 1)}
    assert claim_failures(db, sid) == [{"episode_id": "e2", "error": "BadBundle: no audio"}]

    # A new `mpe score` tries the failed one again; one given back is claimable at once.
    assert seed_claims(db, sid, items) == 2
    again = claim_next(db, sid, "C", 10.0, t=200.0)
    assert (again.episode_id, again.number) == ("e2", 2)
    assert release(db, again)
    d = claim_next(db, sid, "D", 10.0, t=200.0)
    assert d.episode_id == "e2" and complete(db, d, _entry("e2"))
    assert claim_counts(db, sid).reclaimed == 2

    # An episode whose attempt changed is scored anew; a new one joins at the end.
    assert seed_claims(db, sid, [WorkItem("e0", "a0-new"), items[1], items[2], WorkItem("e3", "a3")]) == 2
    assert _claims(db, sid)["e0"][0] == C.pending and claim_next(db, sid, "E", 10.0, t=300.0).attempt_id == "a0-new"
    assert claim_next(db, sid, "E", 10.0, t=300.0).episode_id == "e3"


def test_claim_transitions_are_guarded():
    assert advance(CLAIM_TRANSITIONS, C.claimed, C.claimed) == C.claimed  # taken over
    for current, new in ((C.pending, C.done), (C.done, C.failed), (C.failed, C.done), (C.pending, C.failed)):
        with pytest.raises(IllegalTransition):
            advance(CLAIM_TRANSITIONS, current, new)


def test_scoring_status_is_a_guarded_enum(db):
    sid = _scoring(db)
    finish_scoring(db, sid, {"metrics": {}, "analyses": {}}, ScoringStatus.complete)
    with db.session() as s:
        assert s.get(ScoringRow, sid).status is ScoringStatus.complete  # read back as the enum
    finish_scoring(db, sid, {"metrics": {}, "analyses": {}}, ScoringStatus.complete)  # a second scorer finishing
    with pytest.raises(IllegalTransition):  # published metrics are withdrawn only by resuming
        finish_scoring(db, sid, None, ScoringStatus.incomplete)
    with db.session() as s:
        assert s.get(ScoringRow, sid).status is ScoringStatus.complete
    # resuming (the same source and settings) runs it again; then a finish may say incomplete
    assert open_scoring(db, source_key="test", run_id=None, config={}, config_hash="h", n_episodes=3,
                        fresh=False) == (sid, True)
    finish_scoring(db, sid, None, ScoringStatus.incomplete)
    with db.session() as s:
        assert s.get(ScoringRow, sid).status is ScoringStatus.incomplete


def test_scorings_made_before_claims_resume_from_their_entries(db):
    sid = _scoring(db)
    with db.session() as s:
        s.add(EpisodeScoreRow(scoring_id=sid, episode_id="e0", attempt_id="a0", data={}))
    assert seed_claims(db, sid, [WorkItem("e0", "a0"), WorkItem("e1", "a1")]) == 1
    assert claim_next(db, sid, "A", 10.0, t=1.0).episode_id == "e1" and claim_next(db, sid, "A", 10.0, t=1.0) is None


def test_asr_devices():
    assert [parse_device(d) for d in (None, "cpu", "cuda", "CUDA:1", "auto")] == [
        ("cpu", 0), ("cpu", 0), ("cuda", 0), ("cuda", 1), ("auto", 0)]
    for bad in ("gpu", "cpu:1", "cuda:x", "auto:0"):
        with pytest.raises(BackendUnavailable, match="unknown ASR device"):
            parse_device(bad)
    import ctranslate2

    if ctranslate2.get_cuda_device_count() == 0:  # refused before any work, not at the first transcript
        with pytest.raises(BackendUnavailable, match="sees 0 CUDA device"):
            make_asr("faster-whisper", device="cuda")
        auto = make_asr("faster-whisper", device="auto")
        assert auto.device == "cpu" and auto.describe() == make_asr("faster-whisper").describe()
    else:
        assert make_asr("faster-whisper", device="cuda").device == "cuda"


# --- real scorer processes --------------------------------------------------------------------------

N_PAIRS = 8


def text_suite(root: Path, n_pairs: int = N_PAIRS) -> Path:
    """A text-only suite of ``n_pairs`` pairs, each with its own gold answer (script only: the text
    reference needs nothing else, and scoring its run is quick)."""
    scenarios = []
    for p in range(n_pairs):
        place = f"platform {p + 1}"
        for cond in ("explicit", "implicit"):
            ask = f"Aria, which platform is train {p}?" if cond == "explicit" else f"Which platform is train {p}?"
            turns = [("A", "N2", f"Ben, did you see train {p}?", "B"), ("B", "N1", "Aria knows the timetable.", "group"),
                     ("C", "T", ask, "Aria"), ("A", "N3", "Hmm, my ticket.", None)]
            scenarios.append(Scenario(
                scenario_id=f"s{p}", pair_id=f"p{p}", condition=cond, n_speakers=3, t_bucket="middle",
                attributes={"setting": "station"}, gold_answer=place.capitalize() + ".",
                answer_keys=[[place]], turns=[Turn(idx=i, speaker=t[0], label=t[1], text=t[2], duration_s=0.0,
                                                   clip=f"clips/p{p}/{cond}/{i:03d}.wav", addressee=t[3])
                                              for i, t in enumerate(turns)]))
    meta = SuiteMeta.model_validate({"name": "trains", "version": "1", "generator": "scripted", "seed": 0,
                                     "voices": {s: "piper:joe@1.0" for s in "ABC"}, "audio": "pending",
                                     "preamble": Preamble(text=DUTY_TEXT, clip="clips/preamble.wav", duration_s=0.0)})
    write_suite(root, meta, scenarios)
    return root


def reference_run(db, tmp_path) -> str:
    return create_reference_run(db, suite_path=str(text_suite(tmp_path / "trains")),
                                backend=make_reference_backend("rule")).run_id


def scorer(settings, run_id: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`mpe score RUN --json` in its own process."""
    full = dict(os.environ, DATABASE_URL=settings.db_url, MPE_DATA_DIR=str(settings.data_dir),
                PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "server.cli", "score", run_id, "--asr", "none", "--workers", "1",
                             "--json", *args], env=full, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finished(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return json.loads(out)


def wait_for(what, timeout: float = 60.0):
    t0 = time.monotonic()
    while not (got := what()):
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.05)
    return got


def claim_rows(db) -> list[ScoringClaim]:
    with db.session() as s:
        return list(s.scalars(select(ScoringClaim).order_by(ScoringClaim.ordinal)))


def stored_once(db, scoring_id: str, n: int) -> None:
    with db.session() as s:
        ids = s.scalars(select(EpisodeScoreRow.episode_id).where(EpisodeScoreRow.scoring_id == scoring_id)).all()
        assert s.scalar(select(func.count()).select_from(ScoringClaim)) == n
    assert len(ids) == len(set(ids)) == n


def test_two_scorer_processes_split_one_run(db, settings, tmp_path, monkeypatch):
    run_id = reference_run(db, tmp_path)
    n = 2 * N_PAIRS
    a = scorer(settings, run_id)
    wait_for(lambda: any(c.status == C.done for c in claim_rows(db)))  # A is at work, then B joins
    b = scorer(settings, run_id)
    ra, rb = finished(a), finished(b)
    assert ra["scoring_id"] == rb["scoring_id"] and ra["metrics"] == rb["metrics"] and ra["metrics"]
    rows = claim_rows(db)
    assert [(c.status, c.claims) for c in rows] == [(C.done, 1)] * n  # each episode claimed once, stored once
    assert ra["scored_here"] + rb["scored_here"] == n and ra["scored_here"] >= 1
    assert sum(c.owner == rows[0].owner for c in rows) == ra["scored_here"]  # A's name is on what A stored
    stored_once(db, ra["scoring_id"], n)
    assert ra["claims"]["done"] == n

    # `mpe score RUN --status`: where that scoring's work stands, without scoring.
    monkeypatch.setenv("DATABASE_URL", settings.db_url)
    monkeypatch.setenv("MPE_DATA_DIR", str(settings.data_dir))
    from server.cli import app

    r = CliRunner().invoke(app, ["score", run_id, "--asr", "none", "--status", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"scoring_id": ra["scoring_id"], "claims": ra["claims"]}
    r = CliRunner().invoke(app, ["score", run_id, "--asr", "none", "--judge", "rule:fast", "--status"])
    assert r.exit_code != 0 and "no scoring with these settings" in r.output

    # The same results as one scorer alone (a fresh scoring, in this process).
    alone = score_run(db, run_id, ScoreOptions(asr="none", workers=1, fresh=True))
    assert alone.scoring_id != ra["scoring_id"] and alone.metrics == ra["metrics"]
    assert [e.model_dump(mode="json") for e in alone.episodes] == ra["episodes"] == rb["episodes"]


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # the scale-out database
def test_a_killed_scorer_loses_nothing(db, settings, tmp_path):
    """A scorer killed (SIGKILL) while it holds an episode: a second one takes the episode over once
    the lease expires, and finishes the run; nothing is lost or stored twice."""
    run_id = reference_run(db, tmp_path)
    n = 2 * N_PAIRS
    gate = threading.Event()

    def hang(body):  # the killed scorer's judge never answers
        gate.wait(60)
        return '{"verdict": "CORRECT"}'

    def grade(body):
        return json.dumps({"verdict": "CORRECT" if "Gold answer" in body["messages"][0]["content"] else "INCORRECT"})

    env = {"ANTHROPIC_API_KEY": KEY}
    with FakeAnthropic(api_key=KEY, responder=hang) as stuck, FakeAnthropic(api_key=KEY, responder=grade) as fine:
        try:
            a = scorer(settings, run_id, "--judge", "claude", "--lease-s", "1.5",
                       env=env | {"ANTHROPIC_BASE_URL": stuck.url})
            wait_for(lambda: stuck.message_requests)  # A is inside a judge call, holding its episode
            (held,) = [c for c in claim_rows(db) if c.status == C.claimed]
            a_done = sum(c.status == C.done for c in claim_rows(db))
            a.send_signal(signal.SIGKILL)
            a.wait(30)
            b = scorer(settings, run_id, "--judge", "claude", "--lease-s", "1.5",
                       env=env | {"ANTHROPIC_BASE_URL": fine.url})
            rb = finished(b)
        finally:
            gate.set()
    assert a.returncode == -signal.SIGKILL
    rows = {c.episode_id: c for c in claim_rows(db)}
    assert all(c.status == C.done for c in rows.values())
    taken = rows[held.episode_id]
    assert taken.claims == 2 and taken.owner != held.owner  # taken over once A's lease expired
    assert sorted(c.claims for c in rows.values()) == [1] * (n - 1) + [2]
    assert rb["scored_here"] == n - a_done and rb["claims"]["reclaimed"] == 1
    stored_once(db, rb["scoring_id"], n)
    assert len(rb["episodes"]) == n and rb["metrics"]
    # the second scorer's judge graded every T answer (the killed one's never answered)
    answered = [e for e in rb["episodes"] if e["t"]["present"]]
    assert answered and all(e["t"]["correct"] is True for e in answered)


def test_mpe_score_prints_llm_tokens_and_cost_per_provider(db, settings, tmp_path):
    """`mpe score --judge openai:gpt-4o@URL` against the Chat Completions peer: the report's last lines
    give the tokens and the estimated cost of the provider; a rescoring asks nothing."""
    from tests.support.llm_peers import FakeOpenAI

    run_id = reference_run(db, tmp_path)

    def grade(body):
        return json.dumps({"verdict": "CORRECT" if "Gold answer" in body["messages"][-1]["content"] else "INCORRECT"})

    with FakeOpenAI(api_key=KEY, responder=grade) as peer:
        full = dict(os.environ, DATABASE_URL=settings.db_url, MPE_DATA_DIR=str(settings.data_dir),
                    PYTHONPATH=str(ROOT), OPENAI_API_KEY=KEY)
        cmd = [sys.executable, "-m", "server.cli", "score", run_id, "--asr", "none", "--workers", "1",
               "--judge", f"openai:gpt-4o@{peer.url}"]
        p = subprocess.run(cmd, env=full, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        asked = peer.calls
        assert asked > 0
        out = " ".join(p.stderr.split())  # the console (stderr) wraps long lines
        assert out.count("LLM usage:") == 1
        line = out[out.index("LLM usage:"):]
        assert f"openai:gpt-4o: {asked} requests, 0 cached" in line and "output tokens, ≈ $" in line
        again = subprocess.run(cmd + ["--fresh"], env=full, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and peer.calls == asked  # verdicts cached: no request, nothing spent
        assert "LLM usage:" not in again.stderr
