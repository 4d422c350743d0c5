"""Backend spec strings: which provider, which model, which server.

``PROVIDER[:MODEL][@BASE_URL]``::

    claude                      anthropic, its default model
    claude:claude-opus-4-1      anthropic (``claude`` is another name for ``anthropic``)
    anthropic:claude-opus-4-1
    openai:gpt-4o               the OpenAI API
    openai:qwen2.5-7b@http://127.0.0.1:8000/v1   any OpenAI-compatible server (vLLM, llama.cpp, Ollama)
    google:gemini-2.5-pro       the Gemini API

A base URL may also come from the provider's environment variable (:data:`BASE_URL_ENV`).
"""

from __future__ import annotations

import os
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from server.llm.errors import LLMUnavailable

Provider = Literal["anthropic", "openai", "google"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)
ALIASES: dict[str, Provider] = {"claude": "anthropic", "gemini": "google"}
DEFAULT_MODELS: dict[Provider, str] = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4o",
                                       "google": "gemini-2.5-pro"}
KEY_ENV: dict[Provider, tuple[str, ...]] = {"anthropic": ("ANTHROPIC_API_KEY",), "openai": ("OPENAI_API_KEY",),
                                            "google": ("GEMINI_API_KEY", "GOOGLE_API_KEY")}
BASE_URL_ENV: dict[Provider, str] = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL",
                                     "google": "GOOGLE_GEMINI_BASE_URL"}
#: an OpenAI-compatible server at a custom base URL needs no real key (vLLM, llama.cpp, Ollama accept any)
LOCAL_KEY = "not-needed"


class ModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider: Provider
    model: str
    base_url: str | None = None

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}" + (f"@{self.base_url}" if self.base_url else "")

    def api_key(self, given: str | None = None) -> str:
        """The key: ``given``, else the provider's environment variable; an OpenAI-compatible server
        at a custom base URL may go without one."""
        if given:
            return given
        for var in KEY_ENV[self.provider]:
            if os.environ.get(var):
                return os.environ[var]
        if self.provider == "openai" and self.base_url:
            return LOCAL_KEY
        raise LLMUnavailable(f"{self}: no API key; set {' or '.join(KEY_ENV[self.provider])}")


def is_llm_spec(spec: str) -> bool:
    """Whether ``spec`` names an LLM provider (as opposed to an offline backend such as ``rule``)."""
    head = spec.strip().partition("@")[0].partition(":")[0].lower()
    return head in PROVIDERS or head in ALIASES


def parse_spec(spec: str, default_model: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from ``PROVIDER[:MODEL][@BASE_URL]`` (module docstring)."""
    text = spec.strip()
    head, at, url = text.partition("@")
    if at and not url.startswith(("http://", "https://")):
        raise LLMUnavailable(f"bad LLM spec {spec!r}: the part after '@' must be an http(s) base URL")
    name, _, model = head.partition(":")
    name = name.strip().lower()
    provider = ALIASES.get(name, name)
    if provider not in PROVIDERS:
        raise LLMUnavailable(f"bad LLM spec {spec!r}: unknown provider {name!r}; choose one of "
                             f"{', '.join(PROVIDERS + tuple(ALIASES))} (e.g. openai:gpt-4o, "
                             "openai:MODEL@http://127.0.0.1:8000/v1, claude, google:gemini-2.5-pro)")
    model = model.strip() or default_model or DEFAULT_MODELS[provider]  # type: ignore[index]
    if any(c.isspace() for c in model):
        raise LLMUnavailable(f"bad LLM spec {spec!r}: a model name has no spaces")
    base = url.rstrip("/") or os.environ.get(BASE_URL_ENV[provider]) or None  # type: ignore[index]
    return ModelSpec(provider=provider, model=model, base_url=base)  # type: ignore[arg-type]
