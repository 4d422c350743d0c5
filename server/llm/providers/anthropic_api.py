"""Anthropic's Messages API through the ``anthropic`` SDK (``POST /v1/messages``; SSE with ``stream``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from server.llm.errors import APIStatus, LLMError, LLMUnavailable
from server.llm.providers import UsageSink
from server.llm.providers.common import parse_json_object, retry_after_s, short
from server.llm.spec import ModelSpec
from server.llm.types import LLMReply, LLMRequest, Usage

if TYPE_CHECKING:
    import anthropic


class AnthropicAPI:
    provider = "anthropic"

    def __init__(self, spec: ModelSpec, api_key: str | None = None, timeout_s: float = 120.0):
        try:
            import anthropic
        except ImportError:
            raise LLMUnavailable("the anthropic provider needs the anthropic package: "
                                 "pip install 'duplex-mpe[claude]'") from None
        self.spec = spec
        self._sdk = anthropic
        self._client: anthropic.Anthropic = anthropic.Anthropic(
            api_key=spec.api_key(api_key), base_url=spec.base_url, max_retries=0, timeout=timeout_s)

    def _args(self, r: LLMRequest) -> dict[str, object]:
        args: dict[str, object] = {"model": self.spec.model, "max_tokens": r.max_tokens,
                                   "messages": [{"role": m.role, "content": m.content} for m in r.messages]}
        system = r.system
        if r.json_schema is not None:  # no schema-constrained decoding here: the schema goes in the prompt
            import json

            system = (system + "\n\n" if system else "") + ("Reply with one JSON object matching this JSON "
                                                            f"Schema, and nothing else:\n{json.dumps(r.json_schema)}")
        if system:
            args["system"] = system
        if r.tool is not None:
            args["tools"] = [{"name": r.tool.name, "description": r.tool.description,
                              "input_schema": r.tool.input_schema}]
            args["tool_choice"] = {"type": "tool", "name": r.tool.name}
        if r.temperature is not None:  # not a named parameter of the SDK's create: sent in the body
            args["extra_body"] = {"temperature": r.temperature}
        return args

    def _error(self, exc: Exception) -> LLMError:
        a = self._sdk
        if isinstance(exc, a.APIStatusError):
            return APIStatus(self.provider, exc.status_code, short(exc.message),
                             retry_after_s(exc.response.headers))
        return LLMError(f"{self.provider}: request failed ({type(exc).__name__}: {short(str(exc))})")

    def complete(self, request: LLMRequest) -> LLMReply:
        try:
            msg = self._client.messages.create(**self._args(request))  # type: ignore[call-overload]
        except self._sdk.APIError as exc:
            raise self._error(exc) from None
        text = "".join(getattr(b, "text", "") for b in msg.content if b.type == "text")
        data: dict[str, object] | None = None
        error: str | None = None
        if request.tool is not None:
            tool = next((b for b in msg.content if b.type == "tool_use"), None)
            if tool is not None and isinstance(tool.input, dict):
                data = tool.input
            else:
                error = "no tool call in the reply"
        elif request.json_schema is not None:
            data, error = parse_json_object(text)
        usage = Usage(input_tokens=msg.usage.input_tokens, output_tokens=msg.usage.output_tokens)
        return LLMReply(text=text, data=data, parse_error=error, usage=usage, provider=self.provider,
                        model=msg.model or self.spec.model)

    def stream(self, request: LLMRequest, on_usage: UsageSink) -> Iterator[str]:
        try:
            with self._client.messages.stream(**self._args(request)) as s:  # type: ignore[arg-type]
                yield from s.text_stream
                msg = s.get_final_message()
        except self._sdk.APIError as exc:
            raise self._error(exc) from None
        on_usage(Usage(input_tokens=msg.usage.input_tokens, output_tokens=msg.usage.output_tokens),
                 msg.model or self.spec.model)
