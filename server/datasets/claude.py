"""The Claude script generator's machinery, shared by every benchmark's ``--generator claude``.

For each plan it asks Claude (through the ``anthropic`` package; ``ANTHROPIC_API_KEY``, model
configurable) for one item (a scenario script, a dialogue), returned through a forced tool call whose
input schema the benchmark gives. The benchmark's ``_parse`` checks the reply against every rule; a
malformed or rule-breaking reply is answered with the list of problems and the model tries again, up
to ``max_attempts`` times.

Every request/response exchange is cached on disk under ``<data_dir>/llm-cache/anthropic`` keyed by
the sha256 of the full request (model, prompts, schema, temperature, the conversation so far), so
rerunning a generation replays the same conversation without a single API call, and an interrupted
run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
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
from server.files import atomic_write_bytes

DEFAULT_MODEL = "claude-sonnet-4-6"
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
        client: Any = None,
    ) -> None:
        self.seed = seed
        self.model = model or os.environ.get("MPE_ANTHROPIC_MODEL") or DEFAULT_MODEL
        self.version = f"{self.prompt_version};model={self.model}"
        self.max_attempts = max_attempts
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.concurrency = max(1, concurrency)
        self.cache_dir = Path(data_dir) / "llm-cache" / "anthropic"
        self._client = client
        self._client_args = {"api_key": api_key, "base_url": base_url, "max_retries": max_retries}
        self._lock = threading.Lock()
        self.api_calls = 0
        self.cache_hits = 0

    # ------------------------------------------------------------------ client

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    import anthropic
                except ImportError:
                    raise DatasetError(f"the anthropic package is not installed; install it with: {INSTALL_HINT}") \
                        from None
                key = self._client_args["api_key"] or os.environ.get("ANTHROPIC_API_KEY")
                if not key:
                    raise DatasetError("ANTHROPIC_API_KEY is not set (needed for --generator anthropic)")
                # The SDK retries 429/5xx/connection errors itself, with backoff.
                kwargs: dict[str, Any] = {"api_key": key, "max_retries": self._client_args["max_retries"],
                                          "timeout": 120.0}
                if self._client_args["base_url"]:
                    kwargs["base_url"] = self._client_args["base_url"]
                self._client = anthropic.Anthropic(**kwargs)
            return self._client

    # ------------------------------------------------------------------ cache

    def _request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max(self.max_tokens, self.min_max_tokens),
            "system": self.system_prompt,
            "messages": messages,
            "tools": [{"name": self.tool_name, "description": self.tool_description,
                       "input_schema": self.input_schema}],
            "tool_choice": {"type": "tool", "name": self.tool_name},
        }
        if self.temperature is not None:
            request["temperature"] = self.temperature
        return request

    def _cache_path(self, request: dict[str, Any]) -> Path:
        key = hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        return self.cache_dir / key[:2] / f"{key}.json"

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to ``request`` as a plain dict, from the cache when possible."""
        path = self._cache_path(request)
        try:
            cached = json.loads(path.read_text("utf-8"))
            with self._lock:
                self.cache_hits += 1
            return cached["response"]
        except (OSError, ValueError, KeyError):
            pass
        client = self._get_client()
        try:
            import anthropic
        except ImportError:  # pragma: no cover - _get_client raised already
            raise
        try:
            args = dict(request)
            if "temperature" in args:  # not a named parameter of every SDK version
                args["extra_body"] = {"temperature": args.pop("temperature")}
            response = client.messages.create(**args)
        except anthropic.APIStatusError as e:
            raise DatasetError(f"the Anthropic API answered {e.status_code}: {_short(e.message)}") from None
        except anthropic.APIConnectionError as e:
            raise DatasetError(f"cannot reach the Anthropic API: {_short(str(e))}") from None
        data = response.model_dump(mode="json") if hasattr(response, "model_dump") else dict(response)
        with self._lock:
            self.api_calls += 1
        atomic_write_bytes(path, json.dumps({"request": request, "response": data}, ensure_ascii=False,
                                            indent=1).encode("utf-8"))
        return data

    # ------------------------------------------------------------------ generation

    def generate(self, plan: PlanT) -> ItemT:
        """One plan's item: asked for through the tool, validated, and asked again with the problems
        (at most ``max_attempts`` times)."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": self._first_message(plan)}]
        problems: list[str] = []
        for _attempt in range(self.max_attempts):
            reply = self._call(self._request(messages))
            content = reply.get("content") or []
            tool = next((b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"), None)
            payload: Any = tool.get("input") if tool else _json_from_text(content)
            item, problems = self._parse(plan, payload)
            if item is not None and not problems:
                return item
            feedback = (f"Your {self.item} cannot be used:\n" + "\n".join(f"- {p}" for p in problems[:20])
                        + f"\nFix every problem and call {self.tool_name} again with the whole corrected {self.item}.")
            messages = messages + [{"role": "assistant", "content": _echo(content, self.tool_name)}]
            if tool is not None:
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": tool.get("id", ""), "is_error": True, "content": feedback}]})
            else:
                messages.append({"role": "user", "content": feedback})
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


def _echo(content: list[Any], tool_name: str) -> list[dict[str, Any]]:
    """The assistant's blocks as they may be sent back (only the fields the API accepts)."""
    out: list[dict[str, Any]] = []
    for b in content:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "tool_use":
            out.append({"type": "tool_use", "id": b.get("id", ""), "name": b.get("name", tool_name),
                        "input": b.get("input") if isinstance(b.get("input"), dict) else {}})
        elif b.get("type") == "text" and b.get("text"):
            out.append({"type": "text", "text": b["text"]})
    return out or [{"type": "text", "text": "(no content)"}]


def _json_from_text(content: list[Any]) -> Any:
    """Lenient fallback: a JSON object in a text reply (e.g. inside a code fence)."""
    text = "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return None
    try:
        return json.loads(m.group(0))
    except ValueError:
        return None


def _short(s: str, n: int = 200) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"
