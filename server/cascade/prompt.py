"""The cascade's decision prompt, versioned: the duty instruction verbatim, then the room's
running transcript as speech recognition heard it — one line per utterance, with no speaker (the
cascade cannot tell voices apart) — and the reply format the text reference uses
(:func:`server.benchmarks.mpe.textref.prompt.parse_reply` reads it)."""

from __future__ import annotations

from typing import Sequence

PROMPT_VERSION = "cascade-v1"

SYSTEM_TEMPLATE = """{duty}

You hear the room through speech recognition. You are given the running transcript of what the \
people said so far, one utterance per line, oldest first; it does not say who spoke, and it may \
contain recognition errors. The last line was just said. Decide whether you, Aria, respond to it \
now or stay silent.

Reply with exactly one JSON object and nothing else:
{{"decision": "RESPOND" or "SILENT", "answer": "<when you respond: exactly what you say, short, \
direct and spoken (no lists, no markup); when you stay silent: empty>"}}"""

USER_TEMPLATE = """Transcript so far (the last line was just said):
{lines}"""


def system_prompt(duty: str) -> str:
    return SYSTEM_TEMPLATE.format(duty=duty.strip())


def user_prompt(transcript: Sequence[str]) -> str:
    if not transcript:
        raise ValueError("a decision needs at least one utterance")
    return USER_TEMPLATE.format(lines="\n".join(f"- {t}" for t in transcript))
