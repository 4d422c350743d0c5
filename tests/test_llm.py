"""The LLM provider layer (server/llm) end to end through the real SDKs against local peers that speak
each provider's wire format (tests/support/llm_peers.py, tests/support/anthropic_peer.py)."""

from __future__ import annotations

import pytest

from server.llm import Ledger, LLMError, LLMRequest, LLMUnavailable, Tool, make_client, parse_spec
from server.llm.providers.common import retry_after_s
from tests.support.anthropic_peer import FakeAnthropic
from tests.support.anthropic_peer import Reply as AReply
from tests.support.llm_peers import FakeGemini, FakeOpenAI, Reply

KEY = "test-key"
SCHEMA = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}


def _client(peer, provider: str, model: str, tmp_path, **kw):
    sleeps: list[float] = []
    ledger = Ledger()
    c = make_client(f"{provider}:{model}@{peer.url}", api_key=KEY, cache_dir=tmp_path / "cache", ledger=ledger,
                    sleep=sleeps.append, **kw)
    return c, sleeps, ledger


def test_spec_parsing_and_errors(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert str(parse_spec("openai:gpt-4o")) == "openai:gpt-4o"
    s = parse_spec("openai:qwen2.5@http://127.0.0.1:8000/v1/")
    assert (s.provider, s.model, s.base_url) == ("openai", "qwen2.5", "http://127.0.0.1:8000/v1")
    assert parse_spec("claude").provider == "anthropic"
    assert parse_spec("anthropic:claude-opus-4-1").model == "claude-opus-4-1"
    assert parse_spec("google:gemini-2.5-pro").provider == "google"
    with pytest.raises(LLMUnavailable, match="unknown provider 'mistral'"):
        parse_spec("mistral:large")
    with pytest.raises(LLMUnavailable, match="base URL"):
        parse_spec("openai:gpt-4o@localhost:8000")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LLMUnavailable, match="OPENAI_API_KEY"):
        make_client("openai:gpt-4o")
    # a local OpenAI-compatible server needs no key
    assert make_client("openai:llama@http://127.0.0.1:9/v1").spec.api_key() == "not-needed"


def test_retry_after_forms():
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_s({}) is None


def test_openai_text_json_tool_stream_cache_and_cost(tmp_path):
    with FakeOpenAI(api_key=KEY) as peer:
        c, _, ledger = _client(peer, "openai", "gpt-4o", tmp_path)
        peer.push("Four.", '{"score": 4.5}', Reply(tool_input={"score": 2}), "streamed reply text")
        r = c.complete(LLMRequest.ask("be brief", "2+2?", temperature=0.1, seed=7, max_tokens=50))
        assert (r.text, r.provider, r.model) == ("Four.", "openai", "gpt-4o")
        body = peer.requests[0].body
        assert body["messages"][0] == {"role": "system", "content": "be brief"}
        assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.1, 7, 50)
        r = c.complete(LLMRequest.ask("s", "rate", json_schema=SCHEMA))
        assert r.data == {"score": 4.5} and peer.requests[1].body["response_format"]["type"] == "json_schema"
        r = c.complete(LLMRequest.ask("s", "call", tool=Tool(name="submit", input_schema=SCHEMA)))
        assert r.data == {"score": 2}
        assert peer.requests[2].body["tool_choice"] == {"type": "function", "function": {"name": "submit"}}
        req = LLMRequest.ask("s", "tell me")
        assert "".join(c.stream(req)) == "streamed reply text"
        assert peer.requests[3].body["stream"] is True
        # a rerun asks nothing: every reply comes from the cache
        n = peer.calls
        assert c.complete(LLMRequest.ask("be brief", "2+2?", temperature=0.1, seed=7, max_tokens=50)).cached
        assert "".join(c.stream(req)) == "streamed reply text"
        assert peer.calls == n
    [line] = ledger.lines()
    assert (line.requests, line.cache_hits) == (4, 2) and line.input_tokens > 0 and line.output_tokens > 0
    assert line.cost_usd == pytest.approx((line.input_tokens * 2.5 + line.output_tokens * 10) / 1e6)
    assert "openai:gpt-4o" in ledger.report()[0] and "$" in ledger.report()[0]


def test_429_then_200_is_retried_honouring_retry_after(tmp_path):
    with FakeOpenAI(api_key=KEY) as peer:
        c, sleeps, _ = _client(peer, "openai", "gpt-4o", tmp_path)
        peer.push(Reply(status=429, text="Rate limit reached", headers={"retry-after": "2"}), "ok")
        assert c.complete(LLMRequest.ask("s", "u")).text == "ok"
        assert peer.calls == 2 and sleeps == [2.0]
        peer.push(Reply(status=503), "ok again")  # no header: exponential backoff
        assert c.complete(LLMRequest.ask("s", "u2")).text == "ok again"
        assert len(sleeps) == 2 and 0 < sleeps[1] <= 1.0
        peer.push(Reply(status=400, text="bad request"))  # not retried
        with pytest.raises(LLMError, match="HTTP 400"):
            c.complete(LLMRequest.ask("s", "u3"))
        assert peer.calls == 5
        c.max_retries = 1
        peer.push(Reply(status=429), Reply(status=429))
        with pytest.raises(LLMError, match="HTTP 429"):
            c.complete(LLMRequest.ask("s", "u4"))


def test_google_text_tool_stream_retry(tmp_path):
    with FakeGemini(api_key=KEY) as peer:
        c, sleeps, ledger = _client(peer, "google", "gemini-2.5-pro", tmp_path)
        peer.push(Reply(status=429, text="Resource has been exhausted", headers={"retry-after": "1"}),
                  "a gemini answer", Reply(tool_input={"score": 3}), "streamed from gemini")
        r = c.complete(LLMRequest.ask("sys", "hello", temperature=0.2, seed=3))
        assert (r.text, r.provider, r.model) == ("a gemini answer", "google", "gemini-2.5-pro") and sleeps == [1.0]
        body = peer.requests[1].body
        assert body["systemInstruction"]["parts"][0]["text"] == "sys"
        assert body["generationConfig"]["seed"] == 3
        assert c.complete(LLMRequest.ask("s", "t", tool=Tool(name="submit", input_schema=SCHEMA))).data == {"score": 3}
        assert "".join(c.stream(LLMRequest.ask("s", "stream"))) == "streamed from gemini"
        assert "streamGenerateContent" in peer.requests[-1].path
    [line] = ledger.lines()
    assert line.requests == 3 and line.output_tokens > 0 and line.cost_usd is not None


def test_anthropic_text_tool_stream(tmp_path):
    with FakeAnthropic(api_key=KEY) as peer:
        c, sleeps, ledger = _client(peer, "anthropic", "claude-sonnet-4-5", tmp_path)
        peer.push(AReply(status=529, headers={"retry-after-ms": "10"}), "hi",
                  {"id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                   "content": [{"type": "tool_use", "id": "t1", "name": "submit", "input": {"score": 1}}],
                   "stop_reason": "tool_use", "stop_sequence": None,
                   "usage": {"input_tokens": 10, "output_tokens": 5}}, "streamed from claude")
        assert c.complete(LLMRequest.ask("s", "u", temperature=0.5)).text == "hi" and sleeps == [0.01]
        assert peer.message_requests[1].body["temperature"] == 0.5
        r = c.complete(LLMRequest.ask("s", "t", tool=Tool(name="submit", input_schema=SCHEMA)))
        assert r.data == {"score": 1}
        assert "".join(c.stream(LLMRequest.ask("s", "stream"))) == "streamed from claude"


def test_malformed_json_is_kept_unparsed(tmp_path):
    with FakeOpenAI(api_key=KEY) as peer:
        c, _, _ = _client(peer, "openai", "gpt-4o", tmp_path)
        peer.push("the score is probably four")
        r = c.complete(LLMRequest.ask("s", "rate", json_schema=SCHEMA))
        assert r.data is None and r.parse_error and r.text == "the score is probably four"


def test_unknown_model_prints_cost_unknown():
    ledger = Ledger()
    from server.llm import Usage

    ledger.add("openai", "qwen2.5-7b", Usage(input_tokens=10, output_tokens=2))
    assert ledger.report() == ["openai:qwen2.5-7b: 1 requests, 0 cached, 10 input + 2 output tokens, cost unknown"]


def test_one_sdk_client_per_provider_only_inside_the_layer():
    """Every LLM call site goes through server/llm: the SDKs are imported in its providers alone."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sdk = re.compile(r"^\s*(import (anthropic|openai)\b|from (anthropic|openai)\b|from google(\.genai)? import genai"
                     r"|from google\.genai\b|import google\.genai)", re.M)
    found = sorted(str(p.relative_to(root)) for d in ("server", "clients", "model_bridges")
                   for p in (root / d).rglob("*.py") if sdk.search(p.read_text("utf-8")))
    assert found == ["server/llm/providers/anthropic_api.py", "server/llm/providers/google_api.py",
                     "server/llm/providers/openai_api.py"]
