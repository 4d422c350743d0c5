"""The text reference's query, in one place: the versioned prompt, the history it shows, how a
reply is read, and the decisions as stored (an attempt's ``stats``, an episode bundle).

The prompt is the duty instruction verbatim (:data:`server.benchmarks.mpe.duty.DUTY_TEXT`),
what to reply, and the conversation so far: one line per human utterance, ``SPEAKER: text``, up
to and including the utterance decided on. No later turn and no answer of an earlier query is
ever shown (the script has no model turns), so the decisions are independent.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from server.benchmarks.mpe.duty import DUTY_TEXT
from server.benchmarks.mpe.entry import TextReferenceInfo
from server.benchmarks.mpe.judging import AnswerLabel, HumanTurn
from server.benchmarks.mpe.rules import RESPONSE_LABELS
from server.scoring.errors import BadBundle
from server.scoring.judges import parse_label, reply_object

PROMPT_VERSION = "text-ref-v1"
Decision = Literal["RESPOND", "SILENT"]
DECISIONS: tuple[Decision, ...] = get_args(Decision)
STATS_KEY = "text_reference"  # where an attempt's stats hold its decisions

SYSTEM_TEMPLATE = """{duty}

You are given what has been said in the room so far, as a transcript: one utterance per line, \
each with its speaker (the people are A, B, C and D). The last line was just said. Decide \
whether you, Aria, respond to it now or stay silent.

Reply with exactly one JSON object and nothing else:
{{"decision": "RESPOND" or "SILENT", "answer": "<when you respond: exactly what you say, short \
and direct; when you stay silent: empty>"}}"""

USER_TEMPLATE = """Conversation so far (the last line was just said):
{history}"""


class ReferenceQuery(BaseModel):
    """One decision's input: the script up to and including the utterance (all that is hashed for
    the cache, with the backend, its model and prompt version)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    history: list[HumanTurn] = Field(min_length=1, description="speaker and text of every turn up to and including "
                                                               "the utterance decided on")
    repeat: int = Field(default=0, ge=0, description="which repetition of the query (a new number asks again; "
                                                      "never shown to the model)")


def history(turns: Sequence[Mapping[str, Any]], idx: int) -> list[HumanTurn]:
    """The turns of a scenario version in order, up to and including turn ``idx``."""
    ordered = sorted(turns, key=lambda t: int(t["idx"]))
    pos = next(i for i, t in enumerate(ordered) if int(t["idx"]) == idx)
    return [HumanTurn(speaker=str(t["speaker"]), text=str(t["text"])) for t in ordered[:pos + 1]]


def queries(turns: Sequence[Mapping[str, Any]], repeat: int = 0) -> list[tuple[Mapping[str, Any], ReferenceQuery]]:
    """Every utterance of a scenario version the reference decides on, with its query."""
    return [(t, ReferenceQuery(history=history(turns, int(t["idx"])), repeat=repeat))
            for t in sorted(turns, key=lambda t: int(t["idx"])) if t["label"] in RESPONSE_LABELS]


def system_prompt() -> str:
    return SYSTEM_TEMPLATE.format(duty=DUTY_TEXT)


def user_prompt(q: ReferenceQuery) -> str:
    return USER_TEMPLATE.format(history="\n".join(f"{t.speaker}: {t.text}" for t in q.history))


def parse_reply(reply: str) -> tuple[Decision | None, str | None]:
    """(decision, answer) of a reply: a JSON object's ``decision`` (else a lone RESPOND or SILENT
    word) and its ``answer``; a decision that is neither is None (unparseable)."""
    decision = parse_label(reply, DECISIONS, key="decision")
    obj = reply_object(reply, "decision")
    answer = obj.get("answer") if obj is not None else None
    answer = answer.strip() if isinstance(answer, str) else ""
    return cast(Decision | None, decision), answer or None


class TextGrade(BaseModel):
    """The answer-grading call's verdict on one T answer (:mod:`.grading`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: AnswerLabel | None = Field(description="null: the grading reply was unparseable (counts as INCORRECT, §6)")
    verdict_id: int | None = Field(description="the verdicts row holding the grading reply (null: not stored)")


class TextDecision(BaseModel):
    """One utterance's decision as stored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turn_idx: int
    label: str
    decision: Decision | None = Field(description="null: the reply was unparseable (counts as failing)")
    answer: str | None = Field(description="what the reference would say (judged on T only)")
    reply_id: int | None = Field(description="the verdicts row holding the raw reply (null: not stored)")
    grade: TextGrade | None = Field(default=None, description="the grading call's verdict on T's answer (null: not "
                                                              "graded by a grading call: not T, no answer, or "
                                                              "the scoring's judge grades it)")


class TextReference(BaseModel):
    """An episode's decisions (``stats["text_reference"]`` of its one attempt)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    info: TextReferenceInfo
    repeat: int
    decisions: list[TextDecision]


def text_reference_of(doc: Mapping[str, Any]) -> TextReference | None:
    """The decisions in an episode document (§7), or None for an episode played to a speech model."""
    data = (doc.get("stats") or {}).get(STATS_KEY)
    if data is None:
        return None
    try:
        return TextReference.model_validate(data)
    except ValidationError as exc:
        raise BadBundle(f"episode {doc.get('episode_id')}: its text reference decisions are malformed ({exc})") from None
