"""The cascade's decision prompts, versioned, one per conversation kind (:class:`Party`).

* **multi-party** (Duplex-MPE, `cascade-v1`): the duty instruction verbatim, then the room's running
  transcript as speech recognition heard it — one line per utterance, with no speaker (the cascade
  cannot tell voices apart) — and the reply format the text reference uses
  (:func:`server.benchmarks.mpe.textref.prompt.parse_reply` reads it).
* **two-party** (MTR-DuplexBench, `cascade-two-party-v1`): one user talks with the assistant and
  every user turn is addressed to it. That benchmark gives the model no duty (no preamble clip and
  no text prompt), so the situation is :data:`TWO_PARTY_DUTY`, the cascade's own, unless the run
  sends a text prompt; same transcript lines, same reply format.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Sequence

PROMPT_VERSION = "cascade-v1"
TWO_PARTY_PROMPT_VERSION = "cascade-two-party-v1"


class Party(StrEnum):
    """Who the cascade talks with: a room of people (Duplex-MPE) or one user (MTR-DuplexBench)."""

    multi = "multi-party"
    two = "two-party"


TWO_PARTY_DUTY = ("You are a voice assistant in a spoken conversation with one user. Everything the user says is "
                  "said to you: when the user finishes a turn, answer it briefly and helpfully. A voice from a TV, "
                  "a radio or another person in the room is not the user.")

SYSTEM_TEMPLATE = """{duty}

You hear the room through speech recognition. You are given the running transcript of what the \
people said so far, one utterance per line, oldest first; it does not say who spoke, and it may \
contain recognition errors. The last line was just said. Decide whether you, Aria, respond to it \
now or stay silent.

Reply with exactly one JSON object and nothing else:
{{"decision": "RESPOND" or "SILENT", "answer": "<when you respond: exactly what you say, short, \
direct and spoken (no lists, no markup); when you stay silent: empty>"}}"""

TWO_PARTY_TEMPLATE = """{duty}

You hear the user through speech recognition. You are given the running transcript of what was \
said to you so far, one utterance per line, oldest first (your own replies are not in it); it may \
contain recognition errors, and a line may be a voice that is not the user's. The last line was \
just said. Answer the user, or stay silent when the last line is not the user speaking to you.

Reply with exactly one JSON object and nothing else:
{{"decision": "RESPOND" or "SILENT", "answer": "<when you respond: exactly what you say, short, \
direct and spoken (no lists, no markup); when you stay silent: empty>"}}"""

USER_TEMPLATE = """Transcript so far (the last line was just said):
{lines}"""


def prompt_version(party: Party) -> str:
    return TWO_PARTY_PROMPT_VERSION if party is Party.two else PROMPT_VERSION


def system_prompt(duty: str, party: Party = Party.multi) -> str:
    return (TWO_PARTY_TEMPLATE if party is Party.two else SYSTEM_TEMPLATE).format(duty=duty.strip())


def user_prompt(transcript: Sequence[str]) -> str:
    if not transcript:
        raise ValueError("a decision needs at least one utterance")
    return USER_TEMPLATE.format(lines="\n".join(f"- {t}" for t in transcript))
