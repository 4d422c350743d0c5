"""The Claude scenario generator (``--generator anthropic``).

For each pair plan it asks Claude (through the ``anthropic`` package; ``ANTHROPIC_API_KEY``,
model configurable) for one script, returned through a forced tool call whose input
schema is the script's JSON schema (:data:`SCRIPT_SCHEMA`). The reply is checked against
every rule (:func:`server.benchmarks.mpe.dataset.rules.check_script`, including the plan); a malformed or
rule-breaking reply is answered with the list of problems and the model tries again, up
to ``max_attempts`` times.

Every request/response exchange is cached on disk under ``<data_dir>/llm-cache/anthropic``
keyed by the sha256 of the full request (model, prompts, schema, temperature, the
conversation so far), so rerunning a generation replays the same conversation without a
single API call, and an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from server.benchmarks.mpe.dataset.rules import check_script
from server.benchmarks.mpe.dataset.schema import DatasetError, PairPlan, PairScript, ScriptTurn
from server.benchmarks.mpe.suite import T_BUCKETS
from server.files import atomic_write_bytes

DEFAULT_MODEL = "claude-sonnet-4-6"
PROMPT_VERSION = "1"
TOOL_NAME = "submit_scenario"
INSTALL_HINT = "pip install 'duplex-mpe[claude]'"

_TURN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["speaker", "label", "addressee", "text"],
    "properties": {
        "speaker": {"type": "string", "enum": ["A", "B", "C", "D"]},
        "label": {"type": "string", "enum": ["T", "N1", "N2", "N3", "N4Q", "N4R"]},
        "addressee": {
            "type": ["string", "null"],
            "description": "A-D (one human), 'group' (several humans), 'Aria', 'device' (another "
                           "assistant), or null (nobody: thinking aloud)",
        },
        "text": {"type": "string", "description": "the line as spoken in the explicit condition"},
        "implicit_text": {
            "type": ["string", "null"],
            "description": "only on T (required there) and optionally on the turn just before T: the "
                           "line as spoken in the implicit condition",
        },
    },
}

#: JSON schema of a script as Claude returns it (the tool's input).
SCRIPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["turns", "gold_answer", "answer_keys"],
    "properties": {
        "turns": {"type": "array", "minItems": 6, "maxItems": 18, "items": _TURN_SCHEMA},
        "gold_answer": {"type": "string", "description": "short correct answer to T"},
        "answer_keys": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "description": "each inner list: alternative spellings of one element a correct answer must "
                           "contain (give numbers in words and digits)",
        },
    },
}

SYSTEM_PROMPT = """You write scripts for a benchmark of voice assistants in multi-party conversation.
An assistant called Aria sits in a room with several people. The people talk naturally; only one line
in the whole conversation is a real request to Aria. Your script is turned into speech by a TTS voice per
speaker, so write spoken English only: no stage directions, no brackets, no emojis, no speaker tags in the
text, numbers written as words ("twenty-five dollars", "nine fifteen"), each line one short turn of about
4 to 25 words.

Labels (one per turn):
- T: the single request to Aria. It is still unresolved when asked, and its answer follows from facts
  people stated EARLIER in the conversation (prices, times, quantities, who said what). It is never the
  first turn and is always followed by more conversation.
- N1: a person mentions Aria by name but does not ask Aria anything.
- N2: a person speaks to another person, the group, or another device (e.g. "Alexa, ...").
  N2 lines never contain the word "Aria".
- N3: a person thinks aloud or talks to themselves, addressed to nobody. Never contains "Aria".
- N4Q: a question to Aria, after T; it must be immediately followed by N4R. A script has at most two
  N4 events (N4Q + N4R pairs).
- N4R: a person resolves the N4Q at once: answers it, or tells Aria it need not answer
  (spoken by the asker or by someone else).

Addressing: every script exists in two conditions. In the explicit condition T names Aria ("Aria, ...").
In the implicit condition T must NOT contain the word "Aria" and the addressee must still be clear from
context: either T itself carries the cue ("You heard all of that, right? ...") or the turn just before T is
revised to hand over to Aria (that turn keeps its label; an N1 revision may name Aria). Put the implicit
wording in implicit_text, only on T (always) and on the turn just before T (optional). All other turns are
identical in both conditions.

T's position: with n turns and T at 0-based index t: early-middle means 5t < 2(n-1); middle means
2(n-1) <= 5t <= 3(n-1); late-middle means 5t > 3(n-1). Example with 10 turns: early-middle t = 1..3,
middle t = 4..5, late-middle t = 6..8.

Use exactly the speakers you are given (every one of them speaks at least once), include at least one N1
and at least one N3, and call the submit_scenario tool with the script."""


def _user_prompt(plan: PairPlan, seed: int) -> str:
    a = plan.attributes
    speakers = ", ".join("ABCD"[: plan.n_speakers])
    # §2: each N4 event is an N4Q immediately followed by its N4R, after T; a plan asks for 0, 1 or 2.
    n4 = {0: "Do not include any N4Q or N4R turn.",
          1: "Include exactly one N4 event (N4Q immediately followed by N4R) somewhere after T."}.get(
        plan.n4_events,
        f"Include exactly {plan.n4_events} N4 events after T, each an N4Q immediately followed by its N4R, "
        "on different side questions, with other conversation between them when there is room.")
    turns = "between 8 and 14" if plan.n4_events < 2 else "between 10 and 16"
    return (
        f"Write scenario {plan.pair_id}.\n"
        f"Speakers: {speakers} ({plan.n_speakers} people; all of them speak).\n"
        f"Setting: {a.setting}\nActivity: {a.activity}\nRelationship: {a.relationship}\n"
        f"Other devices present besides Aria: {a.device_context}\nRegister: {a.register}\n"
        f"T position bucket: {plan.t_bucket}\n{n4}\n"
        f"Use {turns} turns.\n"
        f"Plan (machine-readable): {json.dumps({'plan': plan.model_dump(), 'seed': seed}, sort_keys=True)}"
    )


class AnthropicGenerator:
    """Scripts from Claude, validated, retried, cached (see the module docstring)."""

    name = "anthropic"
    # what the model is asked to submit through its one tool (another benchmark's generator sets its own)
    system_prompt = SYSTEM_PROMPT
    tool_name = TOOL_NAME
    tool_description = "Submit the finished scenario script."
    input_schema = SCRIPT_SCHEMA
    item = "script"
    min_max_tokens = 0

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
        self.version = f"{PROMPT_VERSION};model={self.model}"
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

    def _first_message(self, plan: Any) -> str:
        return _user_prompt(plan, self.seed)

    @staticmethod
    def _plan_id(plan: Any) -> str:
        return plan.pair_id

    def generate(self, plan: Any) -> Any:
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
            messages = messages + [{"role": "assistant", "content": _echo(content)}]
            if tool is not None:
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": tool.get("id", ""), "is_error": True, "content": feedback}]})
            else:
                messages.append({"role": "user", "content": feedback})
        raise DatasetError(f"{self._plan_id(plan)}: no valid {self.item} after {self.max_attempts} attempts; "
                           "last problems: " + "; ".join(problems[:5]))

    def generate_many(self, plans: list[PairPlan], progress: Callable[[int, int], None] | None = None
                      ) -> list[PairScript]:
        """Several plans at once (``concurrency`` requests in flight), in plan order."""
        done = 0
        results: dict[int, PairScript] = {}
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

    @staticmethod
    def _parse(plan: PairPlan, payload: Any) -> tuple[PairScript | None, list[str]]:
        if not isinstance(payload, dict):
            return None, [f"reply was not a call of the {TOOL_NAME} tool with a JSON object"]
        try:
            turns = [ScriptTurn.model_validate(t) for t in payload.get("turns") or []]
            if not turns:
                return None, ["turns is missing or empty"]
            script = PairScript(
                pair_id=plan.pair_id, scenario_id=plan.scenario_id, n_speakers=plan.n_speakers,
                t_bucket=plan.t_bucket, attributes=plan.attributes,
                gold_answer=str(payload.get("gold_answer") or "").strip(),
                answer_keys=payload.get("answer_keys") or None, turns=turns,
            )
        except ValidationError as e:
            return None, [f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()[:10]]
        except (TypeError, AttributeError) as e:
            return None, [f"script does not match the schema ({e})"]
        if script.t_bucket not in T_BUCKETS:  # pragma: no cover - the plan guarantees it
            return None, ["bad bucket"]
        return script, [str(p) for p in check_script(script, plan)]


def _as_completed(futures):
    from concurrent.futures import as_completed

    return as_completed(futures)


def _echo(content: list[Any]) -> list[dict[str, Any]]:
    """The assistant's blocks as they may be sent back (only the fields the API accepts)."""
    out: list[dict[str, Any]] = []
    for b in content:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "tool_use":
            out.append({"type": "tool_use", "id": b.get("id", ""), "name": b.get("name", TOOL_NAME),
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
