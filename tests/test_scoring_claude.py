"""The Claude judge through the real ``anthropic`` SDK against a local fake of the Messages API
(real HTTP): verdicts, unparseable replies, errors, retries, and a whole scoring of bundles."""

from __future__ import annotations

import json

import anthropic
import pytest

from server.benchmarks.mpe.judging import AnswerInput, ClaudeJudge, HumanTurn, SilenceInput, passed
from server.core.audio import write_wav
from server.scoring.errors import JudgeError
from server.scoring.judges import parse_label
from server.scoring.runner import ScoreOptions, score_bundles
from tests.support.anthropic_peer import FakeAnthropic, Reply
from tests.support.audio import place
from tests.support.scoring import sec, simulate

KEY = "sk-test-123"


@pytest.fixture
def fake():
    with FakeAnthropic(api_key=KEY) as f:
        yield f


def judge(fake, **kw) -> ClaudeJudge:
    return ClaudeJudge("claude-test-1", api_key=KEY, base_url=fake.url, **kw)


ANSWER = AnswerInput(question="Aria, which place is cheaper?", gold_answer="The noodle bar, eleven dollars.",
                     answer_keys=[["noodle"]], transcript="uh the noodle bar, $11")


def test_answer_verdict_and_request(fake):
    fake.push('{"verdict": "CORRECT", "reason": "names the noodle bar and the price"}')
    v = judge(fake).judge_answer(ANSWER)
    assert v.label == "CORRECT" and passed(v) and v.backend == "claude" and v.model == "claude-test-1"
    assert v.prompt_version == "claude-answer-v1" and "noodle bar and the price" in v.raw
    (req,) = fake.message_requests
    assert KEY in (req.headers.get("x-api-key"), req.headers.get("authorization", "")[7:])
    assert req.headers.get("anthropic-version")
    body = req.body
    assert body["model"] == "claude-test-1" and body["max_tokens"] > 0
    assert "CORRECT" in body["system"] and "INCORRECT" in body["system"]
    user = body["messages"][0]["content"]
    assert "The noodle bar, eleven dollars." in user and "uh the noodle bar, $11" in user and "cheaper" in user


def test_silence_verdict_sees_context_duration_and_overlap(fake):
    fake.push("SUBSTANTIVE_INTRUSION")  # a bare label is accepted too
    inp = SilenceInput(transcript="nine dollars", speech_ms=1234, overlap_ms=500,
                       context=[HumanTurn(speaker="A", text="How much was it?"),
                                HumanTurn(speaker="B", text="Let me think.")])
    v = judge(fake).judge_silence(inp)
    assert v.label == "SUBSTANTIVE_INTRUSION" and not passed(v)
    user = fake.message_requests[0].body["messages"][0]["content"]
    assert "A: How much was it?\nB: Let me think." in user
    assert "1.23 s" in user and "0.50 s" in user and "nine dollars" in user
    assert "BACKCHANNEL" in fake.message_requests[0].body["system"]


@pytest.mark.parametrize("reply", ["I think this is probably fine.", '{"verdict": "MAYBE"}',
                                   "CORRECT or INCORRECT, hard to say", ""])
def test_unparseable_replies_have_no_label(fake, reply):
    fake.push(reply)
    v = judge(fake).judge_answer(ANSWER)
    assert v.label is None and not passed(v) and v.raw == reply


def test_parse_label():
    labels = ("CORRECT", "INCORRECT")
    assert parse_label('Sure: {"verdict": "incorrect", "reason": "x"}', labels) == "INCORRECT"
    assert parse_label("INCORRECT.", labels) == "INCORRECT"  # CORRECT inside INCORRECT is not a match
    assert parse_label("{broken json", labels) is None


def test_http_errors_raise_and_retries_follow_retry_after(fake):
    fake.push(Reply(status=401))
    with pytest.raises(JudgeError, match="401"):
        judge(fake, max_retries=0).judge_answer(ANSWER)
    fake.push(Reply(status=529, headers={"retry-after-ms": "10"}), '{"verdict": "INCORRECT"}')
    v = judge(fake, max_retries=2).judge_answer(ANSWER)
    assert v.label == "INCORRECT" and len(fake.message_requests) == 3


def test_wrong_key_is_rejected_by_the_fake(fake):
    with pytest.raises(JudgeError, match="401"):
        ClaudeJudge("m", api_key="wrong", base_url=fake.url, max_retries=0).judge_answer(ANSWER)


def test_fake_streams_for_the_sdk(fake):
    fake.push("hello from the fake stream, in pieces")
    client = anthropic.Anthropic(api_key=KEY, base_url=fake.url)
    with client.messages.stream(model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
    assert text == "hello from the fake stream, in pieces"
    assert fake.message_requests[-1].body["stream"] is True


def responder(body):
    """A faithful stand-in for the model: grades by the rubric's obvious cases."""
    user = body["messages"][0]["content"]
    said = user.split("Transcript of Aria's", 1)[1] if "Gold answer" in user else user.split("during this turn:", 1)[1]
    if "Gold answer" in user:
        return json.dumps({"verdict": "CORRECT" if "noodle" in said.lower() else "INCORRECT", "reason": "r"})
    words = said.split("\n")[0].lower().replace(".", " ").replace("-", " ").split()
    short = bool(words) and all(w in {"ok", "okay", "mm", "mmm", "hmm", "mhm"} for w in words)
    return json.dumps({"verdict": "BACKCHANNEL" if short else "SUBSTANTIVE_INTRUSION"})


TURNS = [("N2", "Did you book it?", 2.5), ("N1", "Aria picked it.", 2.5), ("T", "Aria, which is cheaper?", 2.0),
         ("N2", "Fine.", 2.0)]


def bundle(tmp, say, name, ack, price, answer):
    parts = [(sec(2.0), say(ack)), (sec(5.0), say(price)), (sec(9.8), say(answer))]
    ep = simulate(TURNS, place(sec(30), *parts), gold="The noodle bar, eleven dollars each.", model="claude-test",
                  episode_id=name, scenario_id=name)
    d = tmp / name
    d.mkdir()
    (d / "episode.json").write_text(json.dumps(ep.doc))
    write_wav(d / "assistant.wav", ep.assistant)
    write_wav(d / "room.wav", ep.assistant * 0)
    return d


def test_scoring_bundles_with_the_claude_judge_and_its_cache(db, tmp_path, say, monkeypatch):
    with FakeAnthropic(api_key=KEY, responder=responder) as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        fake.push("no idea, sorry")  # the very first verdict is unparseable
        dirs = [bundle(tmp_path, say, "ep1", "Okay.", "Nine dollars.", "The noodle bar, eleven dollars each."),
                bundle(tmp_path, say, "ep2", "Mm-hmm.", "Eleven dollars.", "The burger place, fourteen dollars.")]
        res = score_bundles(db, [tmp_path], ScoreOptions(judge="claude:claude-test-1", workers=1))
        assert not res.failures and {e.episode_id for e in res.episodes} == {"ep1", "ep2"}
        n_requests = len(fake.message_requests)
        assert n_requests == 6  # per episode: two silence windows with speech, one answer
        first = fake.message_requests[0].body["messages"][0]["content"]
        by_id = {e.episode_id: e for e in res.episodes}
        # ep1 is scored first, T before its windows: its answer got the unparseable reply -> incorrect.
        assert "Gold answer" in first and "noodle" in first.lower()
        t1 = by_id["ep1"].t
        assert t1.reason == "unparseable" and t1.correct is False and t1.verdict is None
        assert by_id["ep2"].t.verdict == "INCORRECT" and by_id["ep2"].t.correct is False
        assert [w.verdict for e in res.episodes for w in e.silence_windows if w.turn_idx == 0] == ["BACKCHANNEL"] * 2
        assert [w.verdict for e in res.episodes for w in e.silence_windows if w.turn_idx == 1] == \
            ["SUBSTANTIVE_INTRUSION"] * 2
        m = res.metrics["claude-test"]["explicit"]
        assert m["answer_accuracy"] == {"num": 0, "den": 2, "value": 0.0}
        assert m["silence_preservation"] == {"num": 4, "den": 6, "value": pytest.approx(4 / 6)}
        assert res.config["judge"]["backend"] == "claude" and res.config["judge"]["model"] == "claude-test-1"
        # Rescoring with the same settings, even as a new scoring, asks the API nothing.
        again = score_bundles(db, dirs, ScoreOptions(judge="claude:claude-test-1", workers=1, fresh=True))
        assert again.scoring_id != res.scoring_id
        assert len(fake.message_requests) == n_requests and again.calls["judge"] == 0
        assert again.metrics == res.metrics
