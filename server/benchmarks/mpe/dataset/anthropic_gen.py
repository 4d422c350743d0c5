"""The Claude scenario generator (``--generator anthropic``): Duplex-MPE's prompts, script schema and
checks on the shared request loop and cache of :class:`server.datasets.claude.ClaudeGenerator`.

The script's JSON schema (:data:`SCRIPT_SCHEMA`) is the forced tool call's input schema; a reply is
checked against every rule (:func:`server.benchmarks.mpe.dataset.rules.check_script`, including the
plan).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from server.benchmarks.mpe.dataset.rules import check_script
from server.benchmarks.mpe.dataset.schema import PairPlan, PairScript, ScriptTurn
from server.benchmarks.mpe.suite import T_BUCKETS, UTTERANCE_TYPES
from server.datasets.claude import DEFAULT_MODEL, INSTALL_HINT, ClaudeGenerator  # noqa: F401  (re-exported)

PROMPT_VERSION = "2"  # 2: utterance_type on every turn
TOOL_NAME = "submit_scenario"

_TURN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["speaker", "label", "addressee", "text", "utterance_type"],
    "properties": {
        "speaker": {"type": "string", "enum": ["A", "B", "C", "D"]},
        "label": {"type": "string", "enum": ["T", "N1", "N2", "N3", "N4Q", "N4R"]},
        "addressee": {
            "type": ["string", "null"],
            "description": "A-D (one human), 'group' (several humans), 'Aria', 'device' (another "
                           "assistant), or null (nobody: thinking aloud)",
        },
        "text": {"type": "string", "description": "the line as spoken in the explicit condition"},
        "utterance_type": {
            "type": ["string", "null"], "enum": [*UTTERANCE_TYPES, None],
            "description": "what the turn is: device_request (a request or question to another device, or "
                           "an N4Q to Aria), human_request (a request or question to the people), statement "
                           "(anything else said to the people), self_talk (nobody addressed); null on T",
        },
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

Utterance types (utterance_type, one per turn; null on T): device_request (a request or question put to
another device, and every N4Q), human_request (a request or question to one of the people or the group),
statement (anything else said to the people: facts, remarks, replies, N4R), self_talk (every N3).

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


class AnthropicGenerator(ClaudeGenerator[PairPlan, PairScript]):
    """Duplex-MPE scripts from Claude (see the module docstring)."""

    name = "anthropic"
    prompt_version = PROMPT_VERSION
    system_prompt = SYSTEM_PROMPT
    tool_name = TOOL_NAME
    tool_description = "Submit the finished scenario script."
    input_schema = SCRIPT_SCHEMA
    item = "script"

    def _first_message(self, plan: PairPlan) -> str:
        return _user_prompt(plan, self.seed)

    @staticmethod
    def _plan_id(plan: PairPlan) -> str:
        return plan.pair_id

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
