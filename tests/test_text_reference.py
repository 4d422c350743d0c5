"""The transcript-conditioned text reference (``mpe reference``, the paper's App. A5.2): its prompt
on literal scripts, the rule baseline's decisions, a reference run stored, scored and reported next
to a speech model through the real commands, the Claude backend against the local fake of the
Messages API (unparseable replies, a 429 then success, the cache, bounded concurrency), and the
run-to-run agreement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from server.benchmarks.mpe.duty import DUTY_TEXT
from server.benchmarks.mpe.judging import HumanTurn
from server.benchmarks.mpe.suite import Preamble, Scenario, SuiteMeta, Turn, write_suite
from server.benchmarks.mpe.textref.backends import (
    ClaudeReference,
    RuleReference,
    addresses_aria,
    extract_answer,
    make_reference_backend,
)
from server.benchmarks.mpe.textref.grading import GRADE_PROMPT_VERSION, GRADE_SYSTEM, make_grader
from server.benchmarks.mpe.textref.prompt import ReferenceQuery, parse_reply, queries, system_prompt, user_prompt
from server.benchmarks.mpe.textref.runs import Decided, agreement, create_reference_run, reference_model_name
from server.core.audio import write_wav
from server.engine.leasing import BadRequest
from server.scoring.errors import BackendUnavailable, JudgeError
from server.scoring.runner import ScoreOptions, score_bundles, score_run
from server.scoring.store import Cache
from tests.support.anthropic_peer import FakeAnthropic, Reply
from tests.support.scoring import sec, simulate

KEY = "sk-test-ref"
RULE = "text-ref:rule-baseline"

# A text-only suite: two pairs; T differs between the conditions (named / not named).
SCRIPT = {
    "p1": [("A", "N2", "Ben, the train leaves at nine fifteen.", "B"),
           ("B", "N1", "Aria said it would rain later.", "group"),
           ("C", "T", ("Aria, when does the train leave?", "So when does the train leave, do you know?"), "Aria"),
           ("A", "N3", "Hmm, where are my keys.", None)],
    "p2": [("A", "N2", "Did you feed the cat?", "B"),
           ("B", "T", ("Aria, how far is the station?", "How far is the station from here?"), "Aria"),
           ("C", "N4Q", "Aria, what is the weather like?", "Aria"),
           ("A", "N4R", "It is sunny, I checked.", "group"),
           ("B", "N3", "Okay then.", None)],
}
GOLD = {"p1": ("Nine fifteen.", [["9 15", "nine fifteen"]]), "p2": ("Two kilometres.", [["2 kilometres"]])}


def text(t, cond: str) -> str:
    return t[2] if isinstance(t[2], str) else t[2][0 if cond == "explicit" else 1]


def text_suite(root: Path) -> Path:
    """A suite with its script only (audio pending): the text reference needs nothing else."""
    scenarios = []
    for pair, turns in SCRIPT.items():
        for cond in ("explicit", "implicit"):
            ts = [Turn(idx=i, speaker=t[0], label=t[1], text=text(t, cond), clip=f"clips/{pair}/{cond}/{i:03d}.wav",
                       duration_s=0.0, addressee=t[3]) for i, t in enumerate(turns)]
            scenarios.append(Scenario(scenario_id=f"s-{pair}", pair_id=pair, condition=cond, n_speakers=3,
                                      t_bucket="middle", attributes={"setting": "kitchen"}, gold_answer=GOLD[pair][0],
                                      answer_keys=GOLD[pair][1], turns=ts))
    meta = SuiteMeta.model_validate({"name": "textmini", "version": "1", "generator": "scripted", "seed": 0,
                                     "voices": {s: "piper:joe@1.0" for s in "ABC"}, "audio": "pending",
                                     "preamble": Preamble(text=DUTY_TEXT, clip="clips/preamble.wav", duration_s=0.0)})
    write_suite(root, meta, scenarios)
    return root


def mpe(settings, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, DATABASE_URL=settings.db_url, MPE_DATA_DIR=str(settings.data_dir), **(env_extra or {}))
    p = subprocess.run([sys.executable, "-m", "server.cli", *args], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return p


# --- the prompt ------------------------------------------------------------------------------------

TURNS = [{"idx": 0, "speaker": "A", "label": "N2", "text": "Ben, did you book the table?"},
         {"idx": 1, "speaker": "B", "label": "N1", "text": "Aria reminded me this morning."},
         {"idx": 2, "speaker": "C", "label": "T", "text": "Aria, what time is the booking?"},
         {"idx": 3, "speaker": "A", "label": "N4Q", "text": "Aria, is it far?"},
         {"idx": 4, "speaker": "B", "label": "N4R", "text": "No, five minutes, I walked it."},
         {"idx": 5, "speaker": "C", "label": "N3", "text": "Hmm, my coat."}]


def test_the_prompt_holds_exactly_the_history_up_to_the_utterance():
    qs = queries(list(reversed(TURNS)))  # any order in, turn order out
    assert [t["idx"] for t, _ in qs] == [0, 1, 2, 3, 5]  # every T, N1-N3 and N4Q; never N4R
    head = "Conversation so far (the last line was just said):\n"
    t, q = qs[2]
    assert user_prompt(q) == head + ("A: Ben, did you book the table?\nB: Aria reminded me this morning.\n"
                                     "C: Aria, what time is the booking?")
    assert user_prompt(qs[0][1]) == head + "A: Ben, did you book the table?"
    n3 = user_prompt(qs[4][1])
    assert n3.endswith("B: No, five minutes, I walked it.\nC: Hmm, my coat.") and n3.count("\n") == 6
    for (turn, q) in qs:  # nothing after the utterance, ever
        later = [x["text"] for x in TURNS if x["idx"] > turn["idx"]]
        assert not any(x in user_prompt(q) for x in later)
        assert q.history[-1].text == turn["text"]
    system = system_prompt()
    assert system.startswith(DUTY_TEXT + "\n\n") and "RESPOND" in system and "SILENT" in system
    assert not any(x["text"] in system for x in TURNS)
    # the repeat number keeps repeated queries apart in the cache, but the model never sees it
    again = ReferenceQuery(history=q.history, repeat=1)
    assert user_prompt(again) == user_prompt(q)
    assert RuleReference().cache_key(again) != RuleReference().cache_key(q)


@pytest.mark.parametrize("reply, expected", [
    ('{"decision": "RESPOND", "answer": "Seven thirty."}', ("RESPOND", "Seven thirty.")),
    ('Sure. {"decision": "silent", "answer": ""}', ("SILENT", None)),
    ("SILENT", ("SILENT", None)),
    ('{"decision": "MAYBE", "answer": "x"}', (None, "x")),
    ("I think Aria should probably say something.", (None, None)),
    ("RESPOND or SILENT, hard to say", (None, None)),
])
def test_replies_are_read_or_left_unparseable(reply, expected):
    assert parse_reply(reply) == expected


# --- the rule baseline -----------------------------------------------------------------------------


def decide(*lines: tuple[str, str]) -> tuple[str | None, str | None]:
    v = RuleReference().decide(ReferenceQuery(history=[HumanTurn(speaker=s, text=t) for s, t in lines]))
    assert v.task == "reference" and v.backend == "rule" and v.prompt_version == "text-ref-rule-v1"
    return v.label, parse_reply(v.raw)[1]


def test_rule_baseline_decisions_on_constructed_scenarios():
    facts = ("A", "Ben, the train leaves at nine fifteen.")
    # explicit T names Aria and asks: RESPOND, with the earlier turn that shares the most words
    assert decide(facts, ("B", "Aria said it would rain."), ("C", "Aria, when does the train leave?")) == \
        ("RESPOND", "Ben, the train leaves at nine fifteen.")
    assert decide(facts, ("C", "When does the train leave, Aria?"))[0] == "RESPOND"
    assert decide(facts, ("C", "Hey Aria, tell us the platform."))[0] == "RESPOND"
    # implicit T: the same request without the name is not heard
    assert decide(facts, ("C", "You heard all that, so when does the train leave?")) == ("SILENT", None)
    # N1: Aria mentioned, even in a question, is not addressed
    assert decide(facts, ("B", "Did Aria set the alarm for six?"))[0] == "SILENT"
    assert decide(facts, ("B", "The first week we had Aria, Tom kept talking to it."))[0] == "SILENT"
    assert decide(facts, ("B", "Aria's light was blinking, have you noticed?"))[0] == "SILENT"
    # N2: a question to another person
    assert decide(facts, ("B", "Ben, can you pass the salt?"))[0] == "SILENT"
    # addressed but asking nothing (an N4R waving Aria off)
    assert decide(facts, ("B", "It's okay, Aria, I know this one."))[0] == "SILENT"
    assert not addresses_aria("let's just ask Aria, it'll be quicker.")
    # without a shared word the answer is the latest earlier turn with a number
    assert extract_answer([HumanTurn(speaker="A", text="It costs twelve dollars."),
                           HumanTurn(speaker="B", text="Lovely weather."),
                           HumanTurn(speaker="C", text="Aria, what do we owe?")]) == "It costs twelve dollars."


def test_rule_baseline_names_say_so():
    rule = make_reference_backend("rule")
    assert reference_model_name(None, rule) == RULE
    assert reference_model_name("rule-v2", rule) == "text-ref:rule-v2"
    with pytest.raises(BadRequest, match="rule baseline"):
        reference_model_name("text-ref:gpt", rule)
    with pytest.raises(BadRequest):
        reference_model_name("text-ref:", rule)


# --- a reference run, scored and reported next to a speech model -------------------------------------


def silent_bundles(root: Path) -> list[Path]:
    """A silent speech model's episodes of the same script (the real scheduler, no speech at all)."""
    dirs = []
    for pair, turns in SCRIPT.items():
        for cond in ("explicit", "implicit"):
            ep = simulate([(t[1], text(t, cond), 1.5) for t in turns], np.zeros(sec(40), np.int16),
                          gold=GOLD[pair][0], answer_keys=GOLD[pair][1], model="silent", scenario_id=f"s-{pair}",
                          pair_id=pair, condition=cond, episode_id=f"silent-{pair}-{cond}")
            d = root / ep.doc["episode_id"]
            d.mkdir(parents=True)
            (d / "episode.json").write_text(json.dumps(ep.doc))
            write_wav(d / "assistant.wav", ep.assistant)
            write_wav(d / "room.wav", ep.assistant * 0)
            dirs.append(d)
    return dirs


def test_a_reference_run_is_a_run_scored_and_reported_with_the_speech_models(settings, db, tmp_path):
    from sqlalchemy import select

    from server.api.runs import progress_out, run_out
    from server.db import Attempt, Episode, Run
    from server.db import Suite as SuiteRow
    from server.engine.bundles import episode_document
    from server.engine.disclosure import public_document
    from server.engine.progress import run_progress
    from server.engine.registry import get_benchmark

    suite = text_suite(tmp_path / "textmini")
    made = json.loads(mpe(settings, "reference", "--suite", str(suite), "--backend", "rule", "--json").stdout)
    run_id = made["run_id"]
    assert made["model"] == RULE and made["episodes"] == 4
    assert made["by_label"]["T"] == {"n": 4, "respond": 2, "unparseable": 0}
    assert made["by_label"]["N4Q"] == {"n": 2, "respond": 2, "unparseable": 0}
    # the turns before T are the same in both conditions: asked once
    assert (made["decisions"], made["queries"], made["asked"], made["cached"]) == (16, 13, 13, 0)

    listed = json.loads(mpe(settings, "run", "list", "--json").stdout)
    (row,) = [r for r in listed if r["run_id"] == run_id]
    assert (row["model"], row["clock"], row["status"], row["completed"], row["total"]) == \
        (RULE, "text", "finished", 4, 4)
    assert row["label"].startswith(f"{RULE} · text · textmini v1 · ")
    with db.session() as s:  # the pages' run document accepts it
        run = s.get(Run, run_id)
        doc = run_out(run, s.get(SuiteRow, run.suite_id), progress_out(run_progress(db, run_id)),
                      SimpleNamespace(live=SimpleNamespace(channels={})))
        attempts = s.scalars(select(Attempt).join(Episode, Episode.id == Attempt.episode_id)
                             .where(Episode.run_id == run_id)).all()
    assert doc.clock == "text" and doc.text_prompt and doc.progress.completed == 4
    assert len(attempts) == 4 and {(a.clock, a.status, a.model_revision) for a in attempts} == \
        {("text", "completed", "rule name-detection text-ref-rule-v1")}
    # its decisions name and quote the turns: withheld with the script (a held-out suite's teams never see them)
    doc = episode_document(db, attempts[0].episode_id)
    assert doc["stats"]["text_reference"]["decisions"][0]["label"] == "N2"
    assert "text_reference" not in public_document(get_benchmark("duplex-mpe"), doc)["stats"]

    scored = json.loads(mpe(settings, "score", run_id, "--workers", "1", "--json").stdout)
    m = scored["metrics"][RULE]
    ex, im = m["explicit"], m["implicit"]
    assert ex["response_presence"] == {"num": 2, "den": 2, "value": 1.0}
    assert ex["fresh_onset_rate"] == {"num": 0, "den": 0, "value": None}  # not measured (no onset time)
    assert im["response_presence"] == {"num": 0, "den": 2, "value": 0.0}
    assert ex["answer_accuracy"] == {"num": 1, "den": 2, "value": 0.5}  # p1 extracts "nine fifteen"; p2 cannot
    assert im["answer_accuracy"]["den"] == 0
    assert ex["silence_preservation"] == im["silence_preservation"] == {"num": 5, "den": 5, "value": 1.0}
    assert ex["window_response"] == {"num": 1, "den": 1, "value": 1.0}
    assert ex["window_yield"]["den"] == 0
    by_id = {(e["scenario_id"], e["condition"]): e for e in scored["episodes"]}
    t = by_id[("s-p1", "explicit")]["t"]
    assert (t["present"], t["correct"], t["verdict"], t["transcript"]) == \
        (True, True, "CORRECT", "Ben, the train leaves at nine fifteen.")
    assert by_id[("s-p1", "implicit")]["t"]["reason"] == "no_response"
    assert by_id[("s-p1", "explicit")]["text_reference"] == {"backend": "rule", "model": "name-detection",
                                                             "prompt_version": "text-ref-rule-v1", "grader": None}

    speech = score_bundles(db, silent_bundles(tmp_path / "bundles"), ScoreOptions(asr="none", workers=1))
    assert not speech.failures
    report = json.loads(mpe(settings, "report", speech.scoring_id, run_id, "--json").stdout)
    # the reference is reported apart: never in the speech models' metrics, families or pools
    assert set(report["metrics"]) == {"silent"} and set(report["reference"]["metrics"]) == {RULE}
    ref = report["reference"]
    p = ref["paired_addressing"][RULE]
    assert (p["n_pairs"], p["explicit_only"], p["implicit_only"], p["diff_pp"], p["p_mcnemar"]) == (2, 2, 0, 100.0, 0.5)
    paired = report["analyses"]["paired_addressing"]
    assert set(paired) == {"silent"}
    assert (paired["silent"]["neither"], paired["silent"]["diff_pp"], paired["silent"]["p_mcnemar"]) == (2, 0.0, 1.0)
    assert not [x for x in report["analyses"]["pairwise"]["tests"] if RULE in (x["model_a"], x["model_b"])]
    assert report["metrics"]["silent"]["explicit"]["window_response"]["num"] == 0
    assert ref["metrics"][RULE]["explicit"]["window_response"] == {"num": 1, "den": 1, "value": 1.0}
    assert ref["metrics"][RULE]["explicit"]["fresh_onset_rate"]["value"] is None  # not measured
    decisions = ref["response_decisions"]["by_label"][RULE]["explicit"]
    assert decisions["T"]["responded"] == 2 and decisions["N4Q"]["responded"] == 1 and decisions["N1"]["spoke"] == 0
    assert RULE not in report["analyses"]["silence_sweep"]["values"] and "silent" in \
        report["analyses"]["silence_sweep"]["values"]
    (src,) = [s for s in report["sources"] if s["run_id"] == run_id]
    assert "RULE BASELINE" in src["text_reference"][RULE]
    printed = mpe(settings, "report", speech.scoring_id, run_id).stdout
    assert "RULE BASELINE" in printed and "Text references" in printed and "Table 17:" in printed


# --- the Claude backend against the local fake of the Messages API --------------------------------


def responder(log: list[int], lock: threading.Lock):
    """Answers like a careful model: RESPOND to a line that speaks to Aria, SILENT otherwise, an
    unparseable reply to the N1 line; records how many requests are in flight."""
    inflight = [0]

    def reply(body):
        with lock:
            inflight[0] += 1
            log.append(inflight[0])
        time.sleep(0.05)
        with lock:
            inflight[0] -= 1
        last = body["messages"][0]["content"].rsplit("\n", 1)[-1]
        if "rain later" in last:
            return "Hmm, hard to tell what Aria should do here."
        if last.split(": ", 1)[1].startswith("Aria,") or "station from here" in last:
            return json.dumps({"decision": "RESPOND", "answer": "Nine fifteen." if "train" in last else "Two kilometres."})
        return json.dumps({"decision": "SILENT", "answer": ""})
    return reply


def claude(fake: FakeAnthropic, **kw) -> ClaudeReference:
    return ClaudeReference("claude-test-1", api_key=KEY, base_url=fake.url, **kw)


def test_claude_backend_request_and_replies():
    with FakeAnthropic(api_key=KEY) as fake:
        fake.push('{"decision": "RESPOND", "answer": "At seven thirty."}', "no idea")
        q = queries(TURNS)[2][1]
        v = claude(fake).decide(q)
        assert (v.label, v.backend, v.model, v.prompt_version) == ("RESPOND", "claude", "claude-test-1", "text-ref-v1")
        assert parse_reply(v.raw) == ("RESPOND", "At seven thirty.")
        (req,) = fake.message_requests
        assert req.body["model"] == "claude-test-1" and req.body["system"] == system_prompt()
        assert req.body["messages"] == [{"role": "user", "content": user_prompt(q)}]
        v = claude(fake).decide(q)
        assert v.label is None and v.raw == "no idea"  # unparseable: kept as it came, no label


def test_gemini_backend_request_and_replies(monkeypatch):
    """``--backend google:gemini-2.5-pro`` (the paper's reference is Gemini) over the Gemini peer."""
    from tests.support.llm_peers import FakeGemini

    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    with FakeGemini(api_key=KEY) as peer:
        peer.push('{"decision": "RESPOND", "answer": "At seven thirty."}', "no idea")
        q = queries(TURNS)[2][1]
        ref = make_reference_backend("google:gemini-2.5-pro", base_url=peer.url)
        v = ref.decide(q)
        assert (v.label, v.backend, v.model, v.prompt_version) == ("RESPOND", "google", "gemini-2.5-pro", "text-ref-v1")
        body = peer.requests[0].body
        assert body["systemInstruction"]["parts"][0]["text"] == system_prompt()
        assert body["contents"] == [{"role": "user", "parts": [{"text": user_prompt(q)}]}]
        v = ref.decide(q)
        assert v.label is None and v.raw == "no idea"


def test_claude_rate_limit_then_success_and_errors(db):
    with FakeAnthropic(api_key=KEY) as fake:
        q = queries(TURNS)[0][1]
        fake.push(Reply(status=429, headers={"retry-after-ms": "20"}), '{"decision": "SILENT"}')
        reply_id, v = Cache(db).cached(claude(fake).cache_key(q), lambda: claude(fake).decide(q), q)
        assert v.label == "SILENT" and len(fake.message_requests) == 2 and reply_id
        fake.push(Reply(status=401))
        with pytest.raises(JudgeError, match="401"):
            claude(fake, max_retries=0).decide(queries(TURNS)[1][1])
        fake.push(Reply(status=429), Reply(status=429))
        with pytest.raises(JudgeError, match="429"):
            claude(fake, max_retries=1).decide(queries(TURNS)[1][1])


def test_a_claude_reference_run_with_unparseable_replies_a_429_and_its_cache(db, tmp_path):
    suite = text_suite(tmp_path / "textmini")
    log: list[int] = []
    with FakeAnthropic(api_key=KEY, responder=responder(log, threading.Lock())) as fake:
        fake.push(Reply(status=429, headers={"retry-after-ms": "10"}))  # the first request is rate limited
        made = create_reference_run(db, suite_path=str(suite), backend=claude(fake), concurrency=3)
        assert made.model == "text-ref:claude-test-1" and (made.decisions, made.asked, made.cached) == (16, 13, 0)
        assert len(fake.message_requests) == 14  # 13 distinct histories, one of them asked twice (429)
        assert 2 <= max(log) <= 3  # requests in parallel, never more than the concurrency
        assert made.by_label["N1"] == {"n": 2, "respond": 0, "unparseable": 2}
        assert made.by_label["T"]["respond"] == 3  # both explicit T and the implicit "from here" one

        res = score_run(db, made.run_id, ScoreOptions(workers=1))
        m = res.metrics[made.model]
        assert m["explicit"]["silence_preservation"] == {"num": 4, "den": 5, "value": 0.8}  # N1 unparseable: fails
        assert m["explicit"]["answer_accuracy"] == {"num": 2, "den": 2, "value": 1.0}
        assert m["implicit"]["response_presence"] == {"num": 1, "den": 2, "value": 0.5}
        n1 = [w for e in res.episodes for w in e.silence_windows if w.label == "N1"]
        assert {(w.passed, w.reason) for w in n1} == {(False, "unparseable")}
        assert res.analyses["silence_stages"][made.model]["explicit"]["stages"]["unparseable"] == 1

        # the same command again asks nothing; a repetition asks everything anew
        again = create_reference_run(db, suite_path=str(suite), backend=claude(fake), concurrency=3)
        assert again.asked == 0 and again.cached == 13 and len(fake.message_requests) == 14
        rep = create_reference_run(db, suite_path=str(suite), backend=claude(fake), concurrency=3, repeat=1,
                                   conditions=["explicit"], limit=1)
        assert rep.asked == 4 and rep.episodes == 1 and len(fake.message_requests) == 18


def test_an_error_after_the_retries_stores_no_run_and_the_rerun_resumes(db, tmp_path):
    from sqlalchemy import func, select

    from server.db import Run

    suite = text_suite(tmp_path / "textmini")
    with FakeAnthropic(api_key=KEY, responder=responder([], threading.Lock())) as fake:
        fake.push('{"decision": "SILENT"}', Reply(status=500), Reply(status=500))
        with pytest.raises(JudgeError, match="500"):
            create_reference_run(db, suite_path=str(suite), backend=claude(fake, max_retries=1), limit=1)
        with db.session() as s:
            assert s.scalar(select(func.count()).select_from(Run)) == 0
        made = create_reference_run(db, suite_path=str(suite), backend=claude(fake, max_retries=1), limit=1)
        assert made.cached >= 1 and made.episodes == 2


# --- the paper's setting: a Gemini reference with its answer-grading call ---------------------------

GEMINI = "gemini-3.1-pro"


def gemini_responder(grading: str | None = None):
    """The Gemini peer as a reference (the decisions of :func:`responder`) and as its grader: CORRECT
    for the train's time, INCORRECT for the station's distance (a reply the rule judge would pass), or
    ``grading`` for every grading call."""
    decide = responder([], threading.Lock())

    def reply(body):
        system = body["systemInstruction"]["parts"][0]["text"]
        user = body["contents"][0]["parts"][0]["text"]
        if system == GRADE_SYSTEM:
            if grading is not None:
                return grading
            return json.dumps({"verdict": "CORRECT" if "train" in user else "INCORRECT", "reason": "compared"})
        return decide({"messages": [{"content": user}]})
    return reply


def grading_requests(peer) -> list:
    return [r for r in peer.requests if r.body["systemInstruction"]["parts"][0]["text"] == GRADE_SYSTEM]


def test_a_gemini_reference_run_graded_by_its_own_model_gives_table_17(settings, db, tmp_path):
    """``mpe reference --backend google:gemini-3.1-pro`` against the Gemini peer (the base URL from
    ``GOOGLE_GEMINI_BASE_URL``): decisions, then the grading call on every answered T with the same
    model, then ``mpe score`` and ``mpe report`` print Table 17 with the N4 Q addressee diagnostic;
    the same command again asks nothing."""
    from server.benchmarks.mpe.tables import reference_tables
    from tests.support.llm_peers import FakeGemini

    suite = text_suite(tmp_path / "textmini")
    with FakeGemini(api_key=KEY, responder=gemini_responder()) as peer:
        env = {"GOOGLE_GEMINI_BASE_URL": peer.url, "GEMINI_API_KEY": KEY}
        args = ("reference", "--suite", str(suite), "--backend", f"google:{GEMINI}", "--json")
        made = json.loads(mpe(settings, *args, env_extra=env).stdout)
        model = f"text-ref:{GEMINI}"
        assert made["model"] == model and (made["queries"], made["asked"], made["cached"]) == (13, 13, 0)
        # three answered T (both explicit, and the implicit "from here"), each graded by one call
        assert made["grading"] == {"grader": f"google:{GEMINI}", "prompt_version": GRADE_PROMPT_VERSION,
                                   "answers": 3, "asked": 3, "cached": 0, "correct": 1, "incorrect": 2,
                                   "unparseable": 0}
        assert peer.calls == 16 and len(grading_requests(peer)) == 3
        assert all(r.path.endswith(f"/models/{GEMINI}:generateContent") for r in peer.requests)
        first = grading_requests(peer)[0].body["contents"][0]["parts"][0]["text"]
        assert first.startswith("Request put to Aria: ") and "\nGold answer: " in first and "\nAria's answer: " in first

        scored = json.loads(mpe(settings, "score", made["run_id"], "--workers", "1", "--json").stdout)
        m = scored["metrics"][model]
        # the grader's verdicts, not the scoring's rule judge (which passes "Two kilometres.")
        assert m["explicit"]["answer_accuracy"] == {"num": 1, "den": 2, "value": 0.5}
        assert m["implicit"]["answer_accuracy"] == {"num": 0, "den": 1, "value": 0.0}
        t = {(e["scenario_id"], e["condition"]): e for e in scored["episodes"]}[("s-p1", "explicit")]
        assert (t["t"]["verdict"], t["t"]["reason"], t["t"]["correct"]) == ("CORRECT", "judged", True)
        assert t["text_reference"]["grader"] == {"backend": "google", "model": GEMINI,
                                                 "prompt_version": GRADE_PROMPT_VERSION}

        report = json.loads(mpe(settings, "report", made["run_id"], "--json").stdout)
        assert report["reference"]["n4q_addressee"][model]["explicit"] == {"num": 1, "den": 1, "value": 1.0}
        t17 = reference_tables(report["reference"])[0]
        assert t17.title.startswith("Table 17") and t17.head[-1] == "N4 Q addressed to Aria: responded"
        assert len(t17.rows) == 2 and all(len(r) == len(t17.head) for r in t17.rows)
        printed = mpe(settings, "report", made["run_id"]).stdout
        assert "Table 17:" in printed and "graded by google gemini-3.1-pro" in " ".join(printed.split())

        # the same command again: every decision and every grade from the cache, no request
        again = json.loads(mpe(settings, *args, env_extra=env).stdout)
        assert (again["asked"], again["grading"]["asked"], again["grading"]["cached"]) == (0, 0, 3)
        assert peer.calls == 16


def test_a_malformed_grading_reply_is_stored_unparseable_with_its_text(db, tmp_path):
    from server.db import VerdictRow
    from tests.support.llm_peers import FakeGemini

    suite = text_suite(tmp_path / "textmini")
    said = "Looks about right to me, more or less."
    with FakeGemini(api_key=KEY, responder=gemini_responder(grading=said)) as peer:
        ref = make_reference_backend(f"google:{GEMINI}", api_key=KEY, base_url=peer.url)
        grader = make_grader(None, ref, api_key=KEY, base_url=peer.url)  # default: the reference's own model
        assert grader is not None and (grader.name, grader.model) == ("google", GEMINI)
        made = create_reference_run(db, suite_path=str(suite), backend=ref, grader=grader)
        assert made.grading is not None and (made.grading.answers, made.grading.unparseable) == (3, 3)
        assert len(grading_requests(peer)) == 3
    res = score_run(db, made.run_id, ScoreOptions(workers=1))
    m = res.metrics[made.model]
    assert m["explicit"]["answer_accuracy"] == {"num": 0, "den": 2, "value": 0.0}  # unparseable counts incorrect
    ts = [e.t for e in res.episodes if e.t.present]
    assert len(ts) == 3 and {(t.verdict, t.reason, t.correct) for t in ts} == {(None, "unparseable", False)}
    with db.session() as s:
        rows = [s.get(VerdictRow, t.verdict_id) for t in ts]
    assert {(r.task, r.label, r.raw_reply, r.backend, r.model, r.prompt_version) for r in rows} == \
        {("answer", None, said, "google", GEMINI, GRADE_PROMPT_VERSION)}


def test_grader_choices():
    rule = RuleReference()
    assert make_grader(None, rule) is None and make_grader("judge", rule) is None
    with pytest.raises(BackendUnavailable, match="not an LLM"):
        make_grader("same", rule)
    with pytest.raises(BackendUnavailable, match="unknown text reference grader"):
        make_grader("oracle", rule)
    ref = make_reference_backend("openai:m@http://127.0.0.1:9/v1")
    assert make_grader("judge", ref) is None
    same = make_grader(None, ref)
    assert same is not None and (same.name, same.model) == ("openai", "m")
    other = make_grader("openai:grader-m@http://127.0.0.1:9/v1", ref)
    assert other is not None and other.model == "grader-m"


# --- run-to-run agreement -------------------------------------------------------------------------


def test_agreement_on_literal_decisions():
    def d(label, decision, addressee=None):
        return Decided(label, addressee, decision)

    a = {("s1", "explicit", 0): d("N2", "SILENT", "B"), ("s1", "explicit", 1): d("T", "RESPOND", "Aria"),
         ("s1", "implicit", 1): d("T", "SILENT", "Aria"), ("s1", "implicit", 2): d("N3", None),
         ("s2", "explicit", 0): d("N2", "SILENT", "group")}
    b = {("s1", "explicit", 0): d("N2", "SILENT", "B"), ("s1", "explicit", 1): d("T", "RESPOND", "Aria"),
         ("s1", "implicit", 1): d("T", "RESPOND", "Aria"), ("s1", "implicit", 2): d("N3", None),
         ("s3", "explicit", 0): d("N2", "SILENT")}
    r = agreement(a, b)
    assert (r["n"], r["agree"], r["agreement"], r["only_a"], r["only_b"]) == (4, 3, 0.75, 1, 1)
    assert r["unparseable"] == {"a": 1, "b": 1} and r["changes"] == {"SILENT->RESPOND": 1}
    # kappa: po = 0.75; a: R 1, S 2, U 1; b: R 2, S 1, U 1 -> pe = (2 + 2 + 1) / 16
    assert r["kappa"] == pytest.approx((0.75 - 5 / 16) / (1 - 5 / 16), abs=1e-6)
    assert r["by_label"]["T"] == {"n": 2, "agree": 1, "agreement": 0.5} and r["by_label"]["N1"]["n"] == 0
    assert r["by_addressee"]["N2"] == {"person": {"n": 1, "agree": 1, "agreement": 1.0}}
    assert r["by_condition"]["implicit"] == {"n": 2, "agree": 1, "agreement": 0.5}
    assert r["published"] == {"agreement": 0.972, "decisions": 48542}


def test_agreement_of_two_reference_runs(settings, db, tmp_path):
    suite = text_suite(tmp_path / "textmini")
    a = json.loads(mpe(settings, "reference", "--suite", str(suite), "--backend", "rule", "--json").stdout)["run_id"]
    with FakeAnthropic(api_key=KEY, responder=responder([], threading.Lock())) as fake:
        b = create_reference_run(db, suite_path=str(suite), backend=claude(fake)).run_id
    r = json.loads(mpe(settings, "reference", "agreement", a, b, "--json").stdout)
    # the Claude stand-in differs from the rule on the implicit "from here" T and the unparseable N1s
    assert (r["n"], r["agree"]) == (16, 13)
    assert r["changes"] == {"SILENT->RESPOND": 1, "SILENT->UNPARSEABLE": 2}
    assert r["by_label"]["N1"] == {"n": 2, "agree": 0, "agreement": 0.0}
    same = json.loads(mpe(settings, "reference", "agreement", a, a, "--json").stdout)
    assert same["agreement"] == 1.0 and same["kappa"] == 1.0
    printed = mpe(settings, "reference", "agreement", a, b).stdout
    assert "13/16 decisions alike (81.2%)" in printed and "97.2% of 48,542" in printed


def test_entries_stored_before_text_references_are_speech_entries():
    from server.benchmarks.mpe.entry import EpisodeScore
    from tests.support.scoring import entry

    data = entry().model_dump(mode="json")
    assert data.pop("text_reference") is None
    assert EpisodeScore.model_validate(data).text_reference is None
    data["text_reference"] = {"backend": "rule", "model": "name-detection"}  # a part missing: an error
    with pytest.raises(ValueError, match="prompt_version"):
        EpisodeScore.model_validate(data)
