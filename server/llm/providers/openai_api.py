"""OpenAI's Chat Completions API through the ``openai`` SDK (``POST {base}/chat/completions``; SSE with
``stream``), for the OpenAI API and any OpenAI-compatible server at a base URL (vLLM, llama.cpp's
server, Ollama's ``/v1``).

The reply length goes as ``max_completion_tokens`` to the OpenAI API and as ``max_tokens`` to other
servers (the compatible servers read the older field; OpenAI's reasoning models refuse it). A forced
tool is a ``function`` tool with ``tool_choice`` naming it; a JSON schema is ``response_format``
``json_schema`` (structured outputs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from server.llm.errors import APIStatus, LLMError, LLMUnavailable
from server.llm.providers import UsageSink
from server.llm.providers.common import parse_json_object, retry_after_s, short
from server.llm.spec import ModelSpec
from server.llm.types import LLMReply, LLMRequest, Usage

if TYPE_CHECKING:
    import openai


class OpenAIAPI:
    provider = "openai"

    def __init__(self, spec: ModelSpec, api_key: str | None = None, timeout_s: float = 120.0):
        try:
            import openai
        except ImportError:
            raise LLMUnavailable("the openai provider needs the openai package: pip install 'duplex-mpe[openai]'") \
                from None
        self.spec = spec
        self._sdk = openai
        self._client: openai.OpenAI = openai.OpenAI(api_key=spec.api_key(api_key), base_url=spec.base_url,
                                                    max_retries=0, timeout=timeout_s)

    def _args(self, r: LLMRequest) -> dict[str, object]:
        messages: list[dict[str, str]] = ([{"role": "system", "content": r.system}] if r.system else [])
        messages += [{"role": m.role, "content": m.content} for m in r.messages]
        args: dict[str, object] = {"model": self.spec.model, "messages": messages}
        args["max_tokens" if self.spec.base_url else "max_completion_tokens"] = r.max_tokens
        if r.temperature is not None:
            args["temperature"] = r.temperature
        if r.seed is not None:
            args["seed"] = r.seed
        if r.tool is not None:
            args["tools"] = [{"type": "function", "function": {
                "name": r.tool.name, "description": r.tool.description, "parameters": r.tool.input_schema}}]
            args["tool_choice"] = {"type": "function", "function": {"name": r.tool.name}}
        elif r.json_schema is not None:
            args["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "reply", "schema": r.json_schema}}
        return args

    def _error(self, exc: Exception) -> LLMError:
        o = self._sdk
        if isinstance(exc, o.APIStatusError):
            return APIStatus(self.provider, exc.status_code, short(exc.message), retry_after_s(exc.response.headers))
        return LLMError(f"{self.provider}: request failed ({type(exc).__name__}: {short(str(exc))})")

    def complete(self, request: LLMRequest) -> LLMReply:
        try:
            resp = self._client.chat.completions.create(**self._args(request))  # type: ignore[call-overload]
        except self._sdk.APIError as exc:
            raise self._error(exc) from None
        if not resp.choices:
            raise LLMError(f"{self.provider}: a reply without choices")
        msg = resp.choices[0].message
        text = msg.content or ""
        data: dict[str, object] | None = None
        error: str | None = None
        if request.tool is not None:
            call = next((c for c in (msg.tool_calls or []) if c.type == "function"), None)
            if call is None:
                error = "no tool call in the reply"
            else:
                text = text or call.function.arguments
                data, error = parse_json_object(call.function.arguments)
        elif request.json_schema is not None:
            data, error = parse_json_object(text)
        u = resp.usage
        usage = Usage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens) if u else Usage()
        return LLMReply(text=text, data=data, parse_error=error, usage=usage, provider=self.provider,
                        model=resp.model or self.spec.model)

    def stream(self, request: LLMRequest, on_usage: UsageSink) -> Iterator[str]:
        args = {**self._args(request), "stream": True, "stream_options": {"include_usage": True}}
        usage, model = Usage(), self.spec.model
        try:
            for chunk in self._client.chat.completions.create(**args):  # type: ignore[call-overload]
                model = chunk.model or model
                if chunk.usage is not None:
                    usage = Usage(input_tokens=chunk.usage.prompt_tokens, output_tokens=chunk.usage.completion_tokens)
                for choice in chunk.choices:
                    if choice.delta.content:
                        yield choice.delta.content
        except self._sdk.APIError as exc:
            raise self._error(exc) from None
        on_usage(usage, model)


