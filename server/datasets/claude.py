"""The LLM script generator's machinery, shared by every benchmark's ``--generator claude``.

For each plan it asks an LLM through :mod:`server.llm` (Claude by default: ``ANTHROPIC_API_KEY``,
model configurable; a model given as a spec such as ``openai:gpt-4o`` or ``google:gemini-2.5-pro``
picks another provider) for one item (a scenario script, a dialogue), returned through a forced
tool call whose input schema the benchmark gives. The benchmark's ``_parse`` checks the reply
against every rule; a malformed or rule-breaking reply is answered with the list of problems (the
assistant turn is the tool input it sent, as JSON) and the model tries again, up to
``max_attempts`` times.

Every exchange is cached by the LLM layer under ``<data_dir>/llm-cache`` keyed by the sha256 of the
whole request (provider, model, prompts, schema, temperature, the conversation so far), so rerunning
a generation replays the same conversation without a single API call, and an interrupted run
resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, ClassVar, Generic, TypeVar

from server.datasets.errors import DatasetError
from server.llm import LLMClient, LLMError, LLMRequest, LLMUnavailable, Message, Tool, is_llm_spec, parse_spec
from server.llm.spec import DEFAULT_MODELS

DEFAULT_MODEL = DEFAULT_MODELS["anthropic"]
INSTALL_HINT = "pip install 'duplex-mpe[claude]'"

PlanT = TypeVar("PlanT")
ItemT = TypeVar("ItemT")


class ClaudeGenerator(ABC, Generic[PlanT, ItemT]):
    """Items from Claude, validated, retried, cached (see the module docstring). A benchmark's
    generator sets what the model is asked to submit through its one tool and parses the reply."""

    name: ClassVar[str]
    prompt_version: ClassVar[str]
    system_prompt: ClassVar[str]
    tool_name: ClassVar[str]
    tool_description: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]
    item: ClassVar[str]  # what one reply is called in the feedback ("script", "dialogue")
    min_max_tokens: ClassVar[int] = 0

    def __init__(
        self,
        *,
        seed: int,
        data_dir: Path | str,
        model: str | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_attempts: int = 4,
        temperature: float | None = None,
        max_tokens: int = 4096,
        concurrency: int = 4,
        max_retries: int = 3,
    ) -> None:
        self.seed = seed
        model = model or os.environ.get("MPE_ANTHROPIC_MODEL") or DEFAULT_MODEL
        self.spec = parse_spec(model if is_llm_spec(model) and ":" in model else f"anthropic:{model}")
        if base_url:
            self.spec = self.spec.model_copy(update={"base_url": base_url})
        self.model = self.spec.model
        self.version = f"{self.prompt_version};model={self.model}" + \
            ("" if self.spec.provider == "anthropic" else f";provider={self.spec.provider}")
        self.max_attempts = max_attempts
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.concurrency = max(1, concurrency)
        self.cache_dir = Path(data_dir) / "llm-cache"
        self._client_args = {"api_key": api_key, "max_retries": max_retries}
        self._client: LLMClient | None = None
        self._lock = threading.Lock()
        self.api_calls = 0
        self.cache_hits = 0

    def _get_client(self) -> LLMClient:
        with self._lock:
            if self._client is None:
                try:
                    self._client = LLMClient(self.spec, cache_dir=self.cache_dir, timeout_s=120.0,
                                             api_key=self._client_args["api_key"],  # type: ignore[arg-type]
                                             max_retries=self._client_args["max_retries"],  # type: ignore[arg-type]
                                             concurrency=self.concurrency)
                except LLMUnavailable as exc:
                    hint = f"; install it with: {INSTALL_HINT}" if "package" in str(exc) else ""
                    raise DatasetError(f"{exc}{hint}") from None
            return self._client

    def _request(self, messages: list[Message]) -> LLMRequest:
        return LLMRequest(messages=messages, system=self.system_prompt, temperature=self.temperature,
                          max_tokens=max(self.max_tokens, self.min_max_tokens),
                          tool=Tool(name=self.tool_name, description=self.tool_description,
                                    input_schema=self.input_schema))

    # ------------------------------------------------------------------ generation

    def generate(self, plan: PlanT) -> ItemT:
        """One plan's item: asked for through the tool, validated, and asked again with the problems
        (at most ``max_attempts`` times)."""
        client = self._get_client()
        messages = [Message(role="user", content=self._first_message(plan))]
        problems: list[str] = []
        for _attempt in range(self.max_attempts):
            try:
                reply = client.complete(self._request(messages))
            except LLMError as exc:
                raise DatasetError(f"the {self.spec.provider} API failed: {exc}") from None
            with self._lock:
                if reply.cached:
                    self.cache_hits += 1
                else:
                    self.api_calls += 1
            payload = reply.data if reply.data is not None else _json_from_text(reply.text)
            item, problems = self._parse(plan, payload)
            if item is not None and not problems:
                return item
            sent = json.dumps(reply.data, ensure_ascii=False) if reply.data is not None else reply.text
            feedback = (f"Your {self.item} cannot be used:\n" + "\n".join(f"- {p}" for p in problems[:20])
                        + f"\nFix every problem and call {self.tool_name} again with the whole corrected {self.item}.")
            messages = messages + [Message(role="assistant", content=sent or "(no content)"),
                                   Message(role="user", content=feedback)]
        raise DatasetError(f"{self._plan_id(plan)}: no valid {self.item} after {self.max_attempts} attempts; "
                           "last problems: " + "; ".join(problems[:5]))

    def generate_many(self, plans: Sequence[PlanT], progress: Callable[[int, int], None] | None = None
                      ) -> list[ItemT]:
        """Several plans at once (``concurrency`` requests in flight), in plan order."""
        done = 0
        results: dict[int, ItemT] = {}
        with ThreadPoolExecutor(self.concurrency) as pool:
            futures = {pool.submit(self.generate, p): i for i, p in enumerate(plans)}
            try:
                for f in _as_completed(futures):
                    results[futures[f]] = f.result()
                    done += 1
                    if progress is not None:
                        progress(done, len(plans))
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return [results[i] for i in range(len(plans))]

    # ------------------------------------------------------------------ the benchmark's side

    @abstractmethod
    def _first_message(self, plan: PlanT) -> str:
        """The first user message for ``plan``."""

    @staticmethod
    @abstractmethod
    def _plan_id(plan: PlanT) -> str:
        """The plan's id, for error messages."""

    @staticmethod
    @abstractmethod
    def _parse(plan: PlanT, payload: Any) -> tuple[ItemT | None, list[str]]:
        """The item in the tool call's input, and what breaks the benchmark's rules (empty: usable)."""


def _as_completed(futures):
    from concurrent.futures import as_completed

    return as_completed(futures)


def _json_from_text(text: str) -> object:
    """Lenient fallback of a reply without the tool call: a JSON object in its text (e.g. inside a code
    fence); the benchmark's ``_parse`` then checks it against every rule like a tool call's input."""
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return None
    try:
        return json.loads(m.group(0))
    except ValueError:
        return None
