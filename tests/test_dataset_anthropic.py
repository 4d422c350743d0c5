"""The Claude generator against a local fake of the Messages API over real HTTP.

The fake (tests/support/anthropic_peer.py) speaks ``POST /v1/messages`` to the real ``anthropic``
SDK; its "model" answers with scripts built by the procedural generator for the plan that
the prompt carries, or with scripted malformed and rule-breaking replies.
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from server.benchmarks.mpe.dataset.anthropic_gen import SCRIPT_SCHEMA, SYSTEM_PROMPT, TOOL_NAME, AnthropicGenerator
from server.benchmarks.mpe.dataset.build import build_text_suite
from server.benchmarks.mpe.dataset.compose import Composition, plan_pairs
from server.benchmarks.mpe.dataset.procedural import ProceduralGenerator
from server.benchmarks.mpe.dataset.schema import PairPlan
from server.benchmarks.mpe.suite import Suite, check_suite
from server.cli import app
from server.datasets.errors import DatasetError
from tests.support.anthropic_peer import FakeAnthropic, Reply

KEY = "sk-test"
runner = CliRunner()


def plan_of(body: dict) -> PairPlan:
    prompt = body["messages"][0]["content"]
    m = re.search(r"Plan \(machine-readable\): (\{.*\})", prompt)
    assert m, prompt
    return PairPlan.model_validate(json.loads(m.group(1))["plan"])


def good_payload(plan: PairPlan) -> dict:
    script = ProceduralGenerator(99).generate(plan)
    return {"turns": [t.model_dump() for t in script.turns], "gold_answer": script.gold_answer,
            "answer_keys": script.answer_keys}


def tool_reply(payload: dict, tool_id: str = "toolu_01") -> dict:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "tool_use", "id": tool_id, "name": TOOL_NAME, "input": payload}],
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10}}


def model_responder(body: dict) -> dict:
    """A well-behaved model: a valid script for the plan in the prompt."""
    return tool_reply(good_payload(plan_of(body)))


@pytest.fixture
def fake():
    with FakeAnthropic(api_key=KEY, responder=model_responder) as f:
        yield f


def gen(fake, tmp_path, **kw) -> AnthropicGenerator:
    return AnthropicGenerator(seed=5, data_dir=tmp_path / "data", api_key=KEY, base_url=fake.url,
                              model="claude-test", max_retries=0, **kw)


def plans(n: int = 3, **shares) -> list[PairPlan]:
    return plan_pairs(Composition.from_shares(n, **shares), seed=5)


def test_valid_replies_make_a_valid_suite(fake, tmp_path):
    g = gen(fake, tmp_path)
    suite, _ = build_text_suite(tmp_path / "s", name="s", pairs=3, seed=5, generator=g)
    assert check_suite(suite, check_audio=False, strict=True) == []
    assert suite.meta.generator == "anthropic" and "claude-test" in suite.meta.model_extra["generator_version"]
    reqs = fake.message_requests
    assert len(reqs) == 3 and g.api_calls == 3 and g.cache_hits == 0
    body = reqs[0].body
    assert body["model"] == "claude-test" and body["system"] == SYSTEM_PROMPT
    assert body["tools"][0]["input_schema"] == SCRIPT_SCHEMA
    assert "utterance_type" in SCRIPT_SCHEMA["properties"]["turns"]["items"]["required"]
    assert all(t.utterance_type for sc in suite.scenarios for t in sc.turns if t.label != "T")
    assert body["tool_choice"] == {"type": "tool", "name": TOOL_NAME}
    auth = reqs[0].headers.get("x-api-key") or reqs[0].headers.get("authorization", "").removeprefix("Bearer ")
    assert auth == KEY
    # the prompt carries the plan: speakers, bucket, N4, attributes
    prompts = {plan_of(r.body).pair_id: r.body["messages"][0]["content"] for r in reqs}
    for p in plans():
        assert p.t_bucket in prompts[p.pair_id] and p.attributes.activity in prompts[p.pair_id]
        n4_line = {0: "Do not include any N4Q", 1: "exactly one N4 event", 2: "exactly 2 N4 events"}[p.n4_events]
        assert n4_line in prompts[p.pair_id]


def test_malformed_and_rule_breaking_replies_are_retried_with_feedback(fake, tmp_path):
    plan = plans(1, n4_share=1.0)[0]
    good = good_payload(plan)
    t = next(i for i, x in enumerate(good["turns"]) if x["label"] == "T")
    t_first = json.loads(json.dumps(good))
    t_first["turns"][0]["label"], t_first["turns"][t]["label"] = "T", "N2"
    fake.push("Sure! Here is a lovely scenario about dinner plans.",  # no tool call, no JSON
              tool_reply({"turns": [{"speaker": "Q", "label": "X", "text": "hi"}]}, "toolu_a"),  # schema
              tool_reply(t_first, "toolu_b"),  # breaks §2
              tool_reply(good, "toolu_c"))
    g = gen(fake, tmp_path)
    script = g.generate(plan)
    assert [t.model_dump() for t in script.turns] == good["turns"]
    reqs = fake.message_requests
    assert len(reqs) == 4
    # 2nd request: the text reply echoed, then plain feedback
    m2 = reqs[1].body["messages"]
    assert [m["role"] for m in m2] == ["user", "assistant", "user"]
    assert m2[1]["content"] == "Sure! Here is a lovely scenario about dinner plans."
    assert TOOL_NAME in m2[2]["content"]
    # 3rd: the tool input it sent, as JSON, then the schema errors (provider-neutral turns)
    m3 = reqs[2].body["messages"]
    assert json.loads(m3[-2]["content"]) == {"turns": [{"speaker": "Q", "label": "X", "text": "hi"}]}
    assert "speaker" in m3[-1]["content"] and "label" in m3[-1]["content"]
    # 4th: the rule violations, by rule id and turn
    fb = reqs[3].body["messages"][-1]["content"]
    assert "[t-not-first]" in fb and "turn 0" in fb and "[plan-bucket]" not in fb
    assert len(reqs[3].body["messages"]) == 7


def test_a_reply_with_a_missing_or_wrong_utterance_type_is_refused():
    p = plans(2, n4_share=1.0)[0]
    payload = good_payload(p)
    payload["turns"][next(i for i, t in enumerate(payload["turns"]) if t["label"] == "N3")]["utterance_type"] = \
        "statement"
    payload["turns"][next(i for i, t in enumerate(payload["turns"]) if t["label"] == "N2")]["utterance_type"] = None
    _, problems = AnthropicGenerator._parse(p, payload)
    assert sum("[utterance-types]" in x for x in problems) == 2, problems
    assert AnthropicGenerator._parse(p, good_payload(p))[1] == []


def test_json_in_a_text_reply_is_accepted(fake, tmp_path):
    plan = plans(1)[0]
    fake.push("Here you go:\n```json\n" + json.dumps(good_payload(plan)) + "\n```")
    script = gen(fake, tmp_path).generate(plan)
    assert script.pair_id == plan.pair_id and len(fake.message_requests) == 1


def test_plan_violations_are_caught(fake, tmp_path):
    plan = plans(1, n4_share=0.0)[0]
    other = plan.model_copy(update={"n4_events": 1, "n_speakers": 4})
    fake.push(tool_reply(good_payload(other)))  # a fine script, but for another plan
    g = gen(fake, tmp_path)
    g.generate(plan)
    fb = fake.message_requests[1].body["messages"][-1]["content"]
    assert "[plan-n4]" in fb and "[plan-speakers]" in fb


def test_gives_up_after_max_attempts(fake, tmp_path):
    plan = plans(1)[0]
    fake.push(*["no script today"] * 3)
    with pytest.raises(DatasetError, match=f"{plan.pair_id}: no valid script after 3 attempts"):
        gen(fake, tmp_path, max_attempts=3).generate(plan)
    assert len(fake.message_requests) == 3


def test_reruns_come_from_the_cache(fake, tmp_path):
    plan = plans(1)[0]
    fake.push("not a script", tool_reply(good_payload(plan)))
    first = gen(fake, tmp_path).generate(plan)
    n = len(fake.message_requests)
    assert n == 2
    again = gen(fake, tmp_path)
    assert again.generate(plan) == first  # the whole conversation replays from disk
    assert len(fake.message_requests) == n and again.api_calls == 0 and again.cache_hits == 2
    # another model or seed is another request
    gen(fake, tmp_path, temperature=0.5).generate(plan)
    assert len(fake.message_requests) == n + 1


def test_api_errors_are_reported_plainly(tmp_path):
    with FakeAnthropic(api_key=KEY) as f:
        f.push(Reply(status=500, text="boom"))
        with pytest.raises(DatasetError, match="HTTP 500"):
            gen(f, tmp_path).generate(plans(1)[0])
        with pytest.raises(DatasetError, match="401"):
            AnthropicGenerator(seed=1, data_dir=tmp_path, api_key="wrong", base_url=f.url,
                               max_retries=0).generate(plans(1)[0])


def test_transient_errors_are_retried_by_the_client(fake, tmp_path):
    fake.push(Reply(status=529, text="overloaded", headers={"retry-after-ms": "10"}))
    g = AnthropicGenerator(seed=5, data_dir=tmp_path / "data", api_key=KEY, base_url=fake.url, max_retries=2)
    g.generate(plans(1)[0])
    assert len(fake.message_requests) == 2


def test_missing_key_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(DatasetError, match="ANTHROPIC_API_KEY"):
        AnthropicGenerator(seed=1, data_dir=tmp_path).generate(plans(1)[0])


def test_cli_generate_with_anthropic(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "s"
    r = runner.invoke(app, ["dataset", "generate", "--out", str(out), "--pairs", "2", "--generator", "anthropic",
                            "--model", "claude-cli", "--no-audio"])
    assert r.exit_code == 0, r.output
    assert Suite.load(out).meta.generator == "anthropic"
    assert {q.body["model"] for q in fake.message_requests} == {"claude-cli"}

    monkeypatch.setenv("ANTHROPIC_API_KEY", "wrong")
    r = runner.invoke(app, ["dataset", "generate", "--out", str(tmp_path / "t"), "--pairs", "1", "--seed", "9",
                            "--generator", "anthropic", "--no-audio"])
    assert r.exit_code == 2 and "error (dataset_error)" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("provider", ["openai", "google"])
def test_the_generator_asks_other_providers_through_the_same_tool(tmp_path, provider):
    """``--model openai:gpt-4o`` / ``google:gemini-2.5-pro``: the same forced tool as a function call over
    each provider's peer; the rule-breaking first reply goes back as feedback; a rerun asks nothing."""
    from tests.support.llm_peers import FakeGemini, FakeOpenAI
    from tests.support.llm_peers import Reply as PReply

    def prompt(body: dict) -> dict:
        if provider == "openai":
            return {"messages": [{"content": body["messages"][1]["content"]}]}
        return {"messages": [{"content": body["contents"][0]["parts"][0]["text"]}]}

    peer_cls, model = (FakeOpenAI, "openai:gpt-4o") if provider == "openai" else (FakeGemini, "google:gemini-2.5-pro")
    plan = plans(1)[0]
    with peer_cls(api_key=KEY, responder=lambda b: PReply(tool_input=good_payload(plan_of(prompt(b))))) as peer:
        peer.push(PReply(tool_input={"turns": []}))
        g = AnthropicGenerator(seed=5, data_dir=tmp_path / "data", api_key=KEY, base_url=peer.url, model=model)
        script = g.generate(plan)
        assert script.pair_id == plan.pair_id and peer.calls == 2 and g.api_calls == 2
        second = peer.requests[1].body
        if provider == "openai":
            assert second["tool_choice"] == {"type": "function", "function": {"name": TOOL_NAME}}
            assert "cannot be used" in second["messages"][-1]["content"]
        else:
            assert second["toolConfig"]["functionCallingConfig"]["allowedFunctionNames"] == [TOOL_NAME]
            assert "cannot be used" in second["contents"][-1]["parts"][0]["text"]
        again = AnthropicGenerator(seed=5, data_dir=tmp_path / "data", api_key=KEY, base_url=peer.url, model=model)
        assert again.generate(plan) == script and peer.calls == 2 and again.cache_hits == 2
