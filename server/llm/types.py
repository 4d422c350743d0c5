"""The one request and the one reply every LLM provider speaks (:mod:`server.llm`)."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: a JSON Schema (an object of the schema language; its values are JSON)
JsonSchema = dict[str, object]


class Message(BaseModel):
    """One turn of the conversation; the system prompt is :attr:`LLMRequest.system`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["user", "assistant"]
    content: str


class Tool(BaseModel):
    """A forced tool call: the model must answer by calling it, with input matching ``input_schema``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    input_schema: JsonSchema


class LLMRequest(BaseModel):
    """Everything one call asks; the cache key is its whole content (with the provider and model).

    ``tool`` forces a tool call (its input is :attr:`LLMReply.data`); ``json_schema`` asks for a JSON
    reply matching the schema (parsed into :attr:`LLMReply.data`); at most one of them. ``temperature``
    None: the provider's default. ``seed`` goes to providers that take one (OpenAI, Gemini; Anthropic
    has none and ignores it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: list[Message] = Field(min_length=1)
    system: str = ""
    tool: Tool | None = None
    json_schema: JsonSchema | None = None
    temperature: float | None = None
    max_tokens: int = Field(default=1024, gt=0)
    seed: int | None = None

    def key(self, provider: str, model: str) -> str:
        """sha256 of the whole request, the provider and the model."""
        blob = json.dumps({"provider": provider, "model": model, "request": self.model_dump(mode="json")},
                          sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    @classmethod
    def ask(cls, system: str, user: str, **options: object) -> "LLMRequest":
        """One user message under ``system``."""
        return cls(messages=[Message(role="user", content=user)], system=system, **options)  # type: ignore[arg-type]


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0


class LLMReply(BaseModel):
    """What came back: the text, the tool input or parsed JSON (None when none was asked for or the
    reply held none: ``parse_error`` says why), the tokens, who answered, and whether from the cache."""

    model_config = ConfigDict(frozen=True)

    text: str
    data: dict[str, object] | None = None
    parse_error: str | None = None
    usage: Usage = Usage()
    provider: str
    model: str  # the model the provider says answered
    cached: bool = False
