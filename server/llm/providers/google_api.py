"""Google's Gemini API through the ``google-genai`` SDK (``POST {base}/v1/models/MODEL:generateContent``;
``:streamGenerateContent?alt=sse`` for streaming), key in ``x-goog-api-key``.

A forced tool is a function declaration with ``tool_config`` mode ``ANY`` allowing only it; a JSON
schema is ``response_mime_type`` ``application/json`` with ``response_json_schema``. The assistant
role is ``model``.
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
    from google import genai


class GoogleAPI:
    provider = "google"

    def __init__(self, spec: ModelSpec, api_key: str | None = None, timeout_s: float = 120.0):
        try:
            from google import genai
            from google.genai import errors, types
        except ImportError:
            raise LLMUnavailable("the google provider needs the google-genai package: "
                                 "pip install 'duplex-mpe[google]'") from None
        self.spec = spec
        self._types, self._errors = types, errors
        options = types.HttpOptions(base_url=spec.base_url, timeout=int(timeout_s * 1000))  # ms
        self._client: genai.Client = genai.Client(api_key=spec.api_key(api_key), http_options=options)

    def _args(self, r: LLMRequest) -> dict[str, object]:
        t = self._types
        contents = [t.Content(role="model" if m.role == "assistant" else "user", parts=[t.Part(text=m.content)])
                    for m in r.messages]
        config = t.GenerateContentConfig(system_instruction=r.system or None, temperature=r.temperature,
                                         max_output_tokens=r.max_tokens, seed=r.seed)
        if r.tool is not None:
            config.tools = [t.Tool(function_declarations=[t.FunctionDeclaration(
                name=r.tool.name, description=r.tool.description, parameters_json_schema=r.tool.input_schema)])]
            config.tool_config = t.ToolConfig(function_calling_config=t.FunctionCallingConfig(
                mode=t.FunctionCallingConfigMode.ANY, allowed_function_names=[r.tool.name]))
        elif r.json_schema is not None:
            config.response_mime_type = "application/json"
            config.response_json_schema = r.json_schema
        return {"model": self.spec.model, "contents": contents, "config": config}

    def _error(self, exc: Exception) -> LLMError:
        if isinstance(exc, self._errors.APIError):
            headers = getattr(getattr(exc, "response", None), "headers", None)
            return APIStatus(self.provider, exc.code, short(exc.message or str(exc)), retry_after_s(headers))
        return LLMError(f"{self.provider}: request failed ({type(exc).__name__}: {short(str(exc))})")

    @staticmethod
    def _usage(meta: object) -> Usage:
        if meta is None:
            return Usage()
        return Usage(input_tokens=getattr(meta, "prompt_token_count", None) or 0,
                     output_tokens=getattr(meta, "candidates_token_count", None) or 0)

    @staticmethod
    def _text(resp: object) -> str:
        out: list[str] = []
        for cand in getattr(resp, "candidates", None) or []:
            for part in getattr(getattr(cand, "content", None), "parts", None) or []:
                if getattr(part, "text", None) and not getattr(part, "thought", False):
                    out.append(part.text)
            break  # the first candidate only
        return "".join(out)

    def complete(self, request: LLMRequest) -> LLMReply:
        try:
            resp = self._client.models.generate_content(**self._args(request))  # type: ignore[arg-type]
        except (self._errors.APIError, OSError) as exc:
            raise self._error(exc) from None
        except Exception as exc:  # httpx transport errors
            if type(exc).__module__.startswith(("httpx", "httpcore")):
                raise self._error(exc) from None
            raise
        text = self._text(resp)
        data: dict[str, object] | None = None
        error: str | None = None
        if request.tool is not None:
            call = next(iter(resp.function_calls or []), None)
            if call is None or not isinstance(call.args, dict):
                error = "no function call in the reply"
            else:
                data = dict(call.args)
        elif request.json_schema is not None:
            data, error = parse_json_object(text)
        return LLMReply(text=text, data=data, parse_error=error, usage=self._usage(resp.usage_metadata),
                        provider=self.provider, model=resp.model_version or self.spec.model)

    def stream(self, request: LLMRequest, on_usage: UsageSink) -> Iterator[str]:
        usage, model = Usage(), self.spec.model
        try:
            for chunk in self._client.models.generate_content_stream(**self._args(request)):  # type: ignore[arg-type]
                model = chunk.model_version or model
                if chunk.usage_metadata is not None:
                    usage = self._usage(chunk.usage_metadata)
                text = self._text(chunk)
                if text:
                    yield text
        except self._errors.APIError as exc:
            raise self._error(exc) from None
        on_usage(usage, model)
