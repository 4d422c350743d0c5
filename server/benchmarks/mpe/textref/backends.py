"""Who decides for the text reference (``mpe reference --backend``): an LLM, or a rule baseline.

* an LLM: ``claude[:MODEL]``, ``google:MODEL`` (Gemini, the paper's reference), ``openai:MODEL[@URL]``,
  through :mod:`server.llm` as the LLM judge calls it (:class:`server.scoring.judges.LLMMessages`:
  the provider's key variable; retries of 429 and 5xx with backoff, honouring ``retry-after``),
  with the versioned prompt of :mod:`.prompt`. A reply without a RESPOND or SILENT decision is
  kept as it came, with no label.
* ``rule``: a **rule baseline**, not a language model and not the paper's reference. It never
  reads the duty: it responds exactly when the utterance addresses Aria by name (a vocative:
  "Aria, …", "hey Aria, …", "…, Aria?") and asks something (a question mark, or a request such
  as "tell us …"); its answer is extractive, the earlier turn that shares the most content words
  with the request. So it cannot hear an implicit request (no name), cannot tell a question it
  already heard answered (N4R) from a new one, and cannot work anything out (its answers only
  repeat what was said).

Every decision, of either backend, is a :class:`server.scoring.judges.Verdict` with task
``reference``: label RESPOND / SILENT (or null), the raw reply, backend, model and prompt
version, cached by content hash in the ``verdicts`` table. The answers an LLM backend gives on T are
graded by a separate call (:mod:`.grading`).
"""

from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod

from server.benchmarks.mpe.entry import TextReferenceInfo
from server.benchmarks.mpe.judging import HumanTurn
from server.benchmarks.mpe.textref.prompt import (
    DECISIONS,
    PROMPT_VERSION,
    ReferenceQuery,
    parse_reply,
    system_prompt,
    user_prompt,
)
from server.llm import ModelSpec, is_llm_spec
from server.scoring.errors import BackendUnavailable
from server.scoring.judges import DEFAULT_CLAUDE_MODEL, STOPWORDS, LLMMessages, Verdict, content_key, normalize

TASK = "reference"
RULE_VERSION = "text-ref-rule-v1"


class ReferenceBackend(ABC):
    """Decides RESPOND or SILENT for one query (see the module docstring)."""

    name: str
    model: str
    prompt_version: str

    def info(self) -> TextReferenceInfo:
        return TextReferenceInfo(backend=self.name, model=self.model, prompt_version=self.prompt_version)

    def cache_key(self, q: ReferenceQuery) -> str:
        return content_key(TASK, self.name, self.model, self.prompt_version, q)

    def _verdict(self, raw: str, model: str | None = None) -> Verdict:
        return Verdict(task=TASK, label=parse_reply(raw)[0], raw=raw, backend=self.name, model=model or self.model,
                       prompt_version=self.prompt_version)

    @abstractmethod
    def decide(self, q: ReferenceQuery) -> Verdict:
        """The decision on the query's last utterance; its raw reply holds the answer too."""


# --- the rule baseline -------------------------------------------------------------------------

# Aria named as the one spoken to: at the start of a clause or after an interjection, and followed
# by punctuation or the end ("Aria, ...", "hey Aria, ...", "..., Aria?"), never "Aria's" or "ask Aria".
_VOCATIVE = re.compile(r"(?:^|[,.;:!?]\s*|\b(?:hey|hi|hello|ok|okay|oh|and|so|well|um|uh|right)\s+)"
                       r"aria\s*(?:[,.;:!?]|$)", re.IGNORECASE)
# Asking something: a question, or a request at the start of a clause.
_REQUEST = re.compile(r"(?:^|[,.;:!]\s*)(?:please\s+|so\s+)?(?:tell|remind|give|show|find|check|work out|"
                      r"figure out|calculate|help)\b", re.IGNORECASE)
_QUESTION_WORDS = frozenset("what how when where which who whom whose why much many aria".split())


def addresses_aria(text: str) -> bool:
    """The utterance speaks to Aria by name (a vocative), rather than about it."""
    return _VOCATIVE.search(text) is not None


def asks_something(text: str) -> bool:
    return "?" in text or _REQUEST.search(text) is not None


def _content(text: str) -> set[str]:
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in normalize(text)
            if w not in STOPWORDS and w not in _QUESTION_WORDS}


def extract_answer(hist: list[HumanTurn]) -> str | None:
    """The rule baseline's answer: the earlier turn sharing the most content words with the request
    (the latest of equals); without any shared word, the latest earlier turn with a number, else the
    turn just before."""
    earlier = hist[:-1]
    if not earlier:
        return None
    asked = _content(hist[-1].text)
    overlap = [len(asked & _content(t.text)) for t in earlier]
    best = max(overlap)
    if best:
        return earlier[max(i for i, n in enumerate(overlap) if n == best)].text
    numbered = [t for t in earlier if any(w.isdigit() for w in normalize(t.text))]
    return (numbered or earlier)[-1].text


class RuleReference(ReferenceBackend):
    """The name-detection rule baseline (module docstring)."""

    name = "rule"
    model = "name-detection"
    prompt_version = RULE_VERSION

    def decide(self, q: ReferenceQuery) -> Verdict:
        text = q.history[-1].text
        named, asks = addresses_aria(text), asks_something(text)
        respond = named and asks
        why = ("addresses Aria by name and asks something" if respond
               else "does not address Aria by name" if not named else "addresses Aria but asks nothing")
        answer = extract_answer(q.history) if respond else None
        return self._verdict(json.dumps({"decision": DECISIONS[0] if respond else DECISIONS[1],
                                         "answer": answer or "", "reason": why}))


# --- LLMs --------------------------------------------------------------------------------------


class LLMReference(ReferenceBackend):
    """An LLM with the versioned prompt of :mod:`.prompt` (module docstring)."""

    prompt_version = PROMPT_VERSION

    def __init__(self, spec: str = "claude", *, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int = 4, timeout_s: float = 60.0, max_tokens: int = 400):
        claude = spec.strip().partition(":")[0].lower() in ("claude", "anthropic")
        default = (os.environ.get("MPE_REFERENCE_MODEL") or DEFAULT_CLAUDE_MODEL) if claude else None
        self.max_tokens = max_tokens
        self._api = LLMMessages("text reference", spec, default_model=default, api_key=api_key, base_url=base_url,
                                max_retries=max_retries, timeout_s=timeout_s)
        self.name, self.model = self._api.backend, self._api.model

    @property
    def spec(self) -> ModelSpec:
        """The provider, model and server asked (the default grader asks the same)."""
        return self._api.client.spec

    def decide(self, q: ReferenceQuery) -> Verdict:
        reply, model = self._api.ask(system_prompt(), user_prompt(q), max_tokens=self.max_tokens)
        return self._verdict(reply, model)


class ClaudeReference(LLMReference):
    """The Anthropic text reference (``--backend claude[:MODEL]``)."""

    def __init__(self, model: str | None = None, **options):
        super().__init__(f"claude:{model}" if model else "claude", **options)


BACKEND_NAMES = ("rule", "claude", "claude:MODEL", "google:MODEL", "openai:MODEL[@BASE_URL]")


def make_reference_backend(spec: str, **llm_options) -> ReferenceBackend:
    """``rule`` or an LLM spec (``--backend``); the options go to an LLM backend only."""
    name, _, arg = spec.strip().partition(":")
    if name == "rule" and not arg:
        return RuleReference()
    if is_llm_spec(spec):
        return LLMReference(spec, **llm_options)
    raise BackendUnavailable(f"unknown text reference backend {spec!r}; choose one of: {', '.join(BACKEND_NAMES)}")
