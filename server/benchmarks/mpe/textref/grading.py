"""The text reference's answer-grading call (``mpe reference --grader``), as the Duplex-MPE paper
grades its text reference: after the reference decided RESPOND on T and answered, a separate LLM
call (by default the reference's own provider and model) grades that answer against the gold
answer, CORRECT or INCORRECT.

The prompt (version :data:`GRADE_PROMPT_VERSION`, written here only) gives the request put to
Aria, the gold answer and the reference's answer; the reply is read as the answer judge's is (a
JSON object's ``verdict``, else a lone label word). A reply without a label is kept as it came,
with label null, and counts as INCORRECT, the failing label of an unparseable answer verdict (§6,
:data:`server.benchmarks.mpe.judging.ANSWER_TASK`).

Every grade is a :class:`server.scoring.judges.Verdict` of task ``answer`` in the ``verdicts``
table, with the grader's backend, model and prompt version, cached by content hash (task, backend,
model, prompt version, request, gold answer, answer, repeat), so a rerun asks nothing.

Grader specs (:func:`make_grader`): ``same`` (the reference's own LLM; the default for an LLM
backend), an LLM spec (``google:MODEL``, ``claude[:MODEL]``, ``openai:MODEL[@URL]``), or ``judge``
(no grading call: ``mpe score --judge`` judges the answers as transcripts; the default for the rule
baseline).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from server.benchmarks.mpe.entry import GraderInfo
from server.benchmarks.mpe.judging import ANSWER_LABELS
from server.benchmarks.mpe.textref.backends import LLMReference, ReferenceBackend
from server.llm import is_llm_spec
from server.scoring.errors import BackendUnavailable
from server.scoring.judges import LLMMessages, Verdict, content_key, parse_label

TASK = "answer"
GRADE_PROMPT_VERSION = "text-ref-grade-v1"
SAME, JUDGE = "same", "judge"
GRADER_NAMES = (SAME, JUDGE, "claude[:MODEL]", "google:MODEL", "openai:MODEL[@BASE_URL]")

GRADE_SYSTEM = """You grade the answers of a voice assistant called Aria in a benchmark. Aria \
was given a conversation as a transcript and chose to answer the request put to it. You receive \
the request, the reference (gold) answer and Aria's answer. Decide whether Aria's answer gives \
the gold answer.

- CORRECT if the answer states the information of the gold answer (the same facts; numbers may \
be written in words or digits; the wording may differ). Extra correct detail is fine.
- INCORRECT if it gives a different or contradictory answer, hedges between answers, only \
stalls, asks a question back, or says nothing relevant.

Reply with exactly one JSON object and nothing else:
{"verdict": "CORRECT" or "INCORRECT", "reason": "<one short sentence>"}"""

GRADE_USER_TEMPLATE = """Request put to Aria: {question}
Gold answer: {gold_answer}
Aria's answer: {answer}"""


class GradeQuery(BaseModel):
    """One grading call's input (all that is hashed for the cache, with the grader's backend, model
    and prompt version)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str = Field(description="the T utterance")
    gold_answer: str
    answer: str = Field(min_length=1, description="the reference's answer (an empty one is never graded)")
    repeat: int = Field(default=0, ge=0, description="the repetition of the reference run (never shown)")


def grade_user_prompt(q: GradeQuery) -> str:
    return GRADE_USER_TEMPLATE.format(question=q.question, gold_answer=q.gold_answer, answer=q.answer)


class AnswerGrader:
    """An LLM grading the reference's answers (module docstring)."""

    prompt_version = GRADE_PROMPT_VERSION

    def __init__(self, spec: str, *, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int = 4, timeout_s: float = 60.0, max_tokens: int = 200):
        self.max_tokens = max_tokens
        self._api = LLMMessages("text reference grader", spec, api_key=api_key, base_url=base_url,
                                max_retries=max_retries, timeout_s=timeout_s)
        self.name, self.model = self._api.backend, self._api.model

    def info(self) -> GraderInfo:
        return GraderInfo(backend=self.name, model=self.model, prompt_version=self.prompt_version)  # type: ignore[arg-type]

    def cache_key(self, q: GradeQuery) -> str:
        return content_key(TASK, self.name, self.model, self.prompt_version, q)

    def grade(self, q: GradeQuery) -> Verdict:
        reply, model = self._api.ask(GRADE_SYSTEM, grade_user_prompt(q), max_tokens=self.max_tokens)
        return Verdict(task=TASK, label=parse_label(reply, ANSWER_LABELS), raw=reply, backend=self.name, model=model,
                       prompt_version=self.prompt_version)


def make_grader(spec: str | None, backend: ReferenceBackend, **llm_options) -> AnswerGrader | None:
    """The grader of ``--grader`` (module docstring); None: the scoring's judge grades the answers.
    ``spec`` None: ``same`` for an LLM backend, ``judge`` for the rule baseline."""
    spec = (spec or (SAME if isinstance(backend, LLMReference) else JUDGE)).strip()
    if spec == JUDGE:
        return None
    if spec == SAME:
        if not isinstance(backend, LLMReference):
            raise BackendUnavailable(f"--grader same: the {backend.name} backend is not an LLM; give an LLM spec "
                                     f"or {JUDGE}")
        return AnswerGrader(str(backend.spec), **llm_options)
    if is_llm_spec(spec):
        return AnswerGrader(spec, **llm_options)
    raise BackendUnavailable(f"unknown text reference grader {spec!r}; choose one of: {', '.join(GRADER_NAMES)}")
