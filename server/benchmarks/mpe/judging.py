"""Duplex-MPE's semantic judges (§6), behind one interface, each with a versioned prompt/rubric.

Two tasks:

* **answer**: is the transcript of the model's response to T a correct answer to the
  request, given the gold answer? ``CORRECT`` / ``INCORRECT``; filler, politeness and
  transcription noise are ignored.
* **silence**: model speech inside an N1-N3 window: ``BACKCHANNEL`` (a brief
  acknowledgement that adds nothing and answers nothing: passes) or
  ``SUBSTANTIVE_INTRUSION`` (fails). The judge sees the transcript, up to three human
  turns ending at the current one, the model's speech duration and its overlap with human
  speech.

A verdict whose label is missing or not one of the task's labels counts as INCORRECT /
fail (§6); the raw reply is kept. Empty transcripts never reach a judge (the scorer
fails them itself).

Backends (``--judge NAME``): ``rule`` (offline default: the manifest's answer keys,
number- and homophone-aware; a backchannel lexicon and a length limit), ``rule:fast`` (the
same, but speech longer than the length limits is decided on its duration without ASR: a
speed option, recorded in the judge's description) and an LLM: ``claude[:MODEL]`` (Anthropic;
``ANTHROPIC_API_KEY``, optional ``ANTHROPIC_BASE_URL``), ``openai:MODEL[@BASE_URL]`` (OpenAI or an
OpenAI-compatible server; ``OPENAI_API_KEY``), ``google:MODEL`` (Gemini; ``GEMINI_API_KEY``), all
through :mod:`server.llm` (docs/llm.md).

The judge machinery they use (verdicts, content keys, text matching, the LLM client) is
scoring's, :mod:`server.scoring.judges`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from server.core.benchmark import JudgeTask
from server.llm import is_llm_spec
from server.scoring.errors import BackendUnavailable
from server.scoring.judges import (
    STOPWORDS,
    LLMMessages,
    Verdict,
    content_key,
    covers,
    normalize,
    number_runs,
    parse_label,
    readings,
)

AnswerLabel = Literal["CORRECT", "INCORRECT"]
SilenceLabel = Literal["BACKCHANNEL", "SUBSTANTIVE_INTRUSION"]
ANSWER_LABELS: tuple[AnswerLabel, ...] = get_args(AnswerLabel)
SILENCE_LABELS: tuple[SilenceLabel, ...] = get_args(SilenceLabel)
PASSING = {"answer": "CORRECT", "silence": "BACKCHANNEL"}
#: the judge tasks as the judge audit reads them: §6, an unparseable verdict counts as the failing label
ANSWER_TASK = JudgeTask(name="answer", labels=ANSWER_LABELS, unparseable="INCORRECT",
                        synonyms={"RIGHT": "CORRECT", "WRONG": "INCORRECT"})
SILENCE_TASK = JudgeTask(name="silence", labels=SILENCE_LABELS, unparseable="SUBSTANTIVE_INTRUSION",
                         synonyms={"INTRUSION": "SUBSTANTIVE_INTRUSION", "SUBSTANTIVE": "SUBSTANTIVE_INTRUSION",
                                   "BC": "BACKCHANNEL"})
JUDGE_TASKS: tuple[JudgeTask, ...] = (ANSWER_TASK, SILENCE_TASK)


def passed(v: Verdict) -> bool:
    """The verdict is its task's passing label (a missing or unknown label fails, §6)."""
    return v.label == PASSING[v.task]


class HumanTurn(BaseModel):
    speaker: str
    text: str


class AnswerInput(BaseModel):
    question: str = ""  # the T turn's text
    gold_answer: str
    answer_keys: list[list[str]] | None = None
    transcript: str


class SilenceInput(BaseModel):
    transcript: str
    context: list[HumanTurn] = Field(default_factory=list)  # up to three turns, ending at the current one
    speech_ms: int
    overlap_ms: int



class Judge(ABC):
    """A Duplex-MPE judge: the ``answer`` and ``silence`` tasks of §6."""

    name = "base"
    model = ""

    @abstractmethod
    def prompt_version(self, task: str) -> str: ...

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model,
                "prompt_versions": {t: self.prompt_version(t) for t in ("answer", "silence")}}

    def cache_key(self, task: str, inputs: BaseModel) -> str:
        return content_key(task, self.name, self.model, self.prompt_version(task), inputs)

    @abstractmethod
    def judge_answer(self, inp: AnswerInput) -> Verdict: ...

    @abstractmethod
    def judge_silence(self, inp: SilenceInput) -> Verdict: ...

    def decide_on_duration(self, task: str, speech_ms: int) -> Verdict | None:
        """A verdict that no transcript could change, so ASR can be skipped; None otherwise."""
        return None

    def judge(self, task: str, inp: BaseModel) -> Verdict:
        return self.judge_answer(inp) if task == "answer" else self.judge_silence(inp)  # type: ignore[arg-type]



BACKCHANNEL_LEXICON = frozenset(
    "mm mmm mhm hmm hm uh huh um ah oh ooh aha ha haha ok okay yeah yep yup right sure alright "
    "i see got it cool nice great wow thanks thank you sounds good indeed gotcha".split())
BACKCHANNEL_MAX_WORDS = 4
ANSWER_MAX_WORDS = 60  # about 20 s of speech: longer is a monologue, not an answer
ANSWER_MAX_SPEECH_MS = 30_000  # no answer of 60 words or fewer takes this long
BACKCHANNEL_MAX_MS = 2000


class RuleJudge(Judge):
    """Offline judge: answer-key coverage; backchannel lexicon and length limit.

    answer: every alternatives-list of ``answer_keys`` must have one alternative whose
    normalised words appear, in order and contiguous, in a reading of the normalised
    transcript (numbers as digits, two adjacent numbers also as one, number homophones next
    to a number; words may differ slightly and compounds may be split or joined: see
    :func:`covers`). Without keys, keys are derived from the gold answer: all of its numbers
    and at least half of its other content words must appear. A reply of more than 60 words
    is a monologue, not an answer, and is INCORRECT whatever it mentions.
    silence: BACKCHANNEL only if every word is in the lexicon, there are at most four
    words and the speech lasts at most 2 s; so a short answer such as "nine dollars" is
    an intrusion.

    §6: every verdict is made on the transcript. ``fast_duration`` (``--judge rule:fast``)
    is an explicit speed option that skips ASR where the length limits alone decide
    (more than 2 s of speech in a silence window, more than 30 s in an answer); it is part
    of the judge's description, so scorings made with it are kept apart.
    """

    name = "rule"
    model = "rule"
    VERSIONS = {"answer": "rule-answer-v3", "silence": "rule-silence-v1"}

    def __init__(self, *, fast_duration: bool = False):
        self.fast_duration = fast_duration

    def prompt_version(self, task: str) -> str:
        return self.VERSIONS[task]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "decide_on_duration": self.fast_duration}

    def _verdict(self, task: str, label: str, why: str) -> Verdict:
        return Verdict(task=task, label=label, raw=why, backend=self.name, model=self.model,
                       prompt_version=self.prompt_version(task))

    def judge_answer(self, inp: AnswerInput) -> Verdict:
        words = normalize(inp.transcript)
        if len(words) > ANSWER_MAX_WORDS:
            return self._verdict("answer", "INCORRECT", f"{len(words)} words > {ANSWER_MAX_WORDS}: not a direct answer")
        gold_words = normalize(inp.gold_answer)
        heard = readings(words, gold_words)
        if inp.answer_keys:
            missing = [alts for alts in inp.answer_keys if not any(covers(heard, normalize(a)) for a in alts)]
            ok = not missing
            why = "all answer keys covered" if ok else f"missing keys: {missing}"
        else:
            gold = [w for w in gold_words if w not in STOPWORDS]
            nums = number_runs(gold_words)
            others = [w for w in gold if not w.isdigit()]
            nums_ok = all(covers(heard, n) for n in nums)
            covered = sum(covers(heard, [w]) for w in others)
            ok = bool(gold) and nums_ok and (not others or 2 * covered >= len(others))
            why = f"derived keys from gold answer: numbers {[' '.join(n) for n in nums]} " \
                  f"{'all' if nums_ok else 'not all'} present, {covered}/{len(others)} content words present"
        return self._verdict("answer", "CORRECT" if ok else "INCORRECT", why)

    def decide_on_duration(self, task: str, speech_ms: int) -> Verdict | None:
        if not self.fast_duration:
            return None  # §6: the transcript decides
        # The speed option: length limits alone decide these, whatever the words.
        if task == "silence" and speech_ms > BACKCHANNEL_MAX_MS:
            return self._verdict("silence", "SUBSTANTIVE_INTRUSION",
                                 f"{speech_ms} ms of speech > {BACKCHANNEL_MAX_MS} ms (decided on duration)")
        if task == "answer" and speech_ms > ANSWER_MAX_SPEECH_MS:
            return self._verdict("answer", "INCORRECT",
                                 f"{speech_ms} ms of speech > {ANSWER_MAX_SPEECH_MS} ms: not a direct answer "
                                 "(decided on duration)")
        return None

    def judge_silence(self, inp: SilenceInput) -> Verdict:
        words = normalize(inp.transcript)
        outside = [w for w in words if w not in BACKCHANNEL_LEXICON]
        if not words:
            return self._verdict("silence", "SUBSTANTIVE_INTRUSION", "no words")
        if outside:
            why = f"words outside the backchannel lexicon: {outside[:8]}"
        elif len(words) > BACKCHANNEL_MAX_WORDS:
            why = f"{len(words)} words > {BACKCHANNEL_MAX_WORDS}"
        elif inp.speech_ms > BACKCHANNEL_MAX_MS:
            why = f"{inp.speech_ms} ms of speech > {BACKCHANNEL_MAX_MS} ms"
        else:
            return self._verdict("silence", "BACKCHANNEL", "lexicon words only, short")
        return self._verdict("silence", "SUBSTANTIVE_INTRUSION", why)



# --- Claude ------------------------------------------------------------------------------------

ANSWER_SYSTEM = """You grade a voice assistant called Aria in a benchmark. You receive a spoken \
request put to Aria, the reference (gold) answer, and an automatic transcript of what Aria said \
in reply. Decide whether Aria's reply gives the gold answer.

Rules:
- CORRECT if the reply states the information of the gold answer (same facts; numbers may be \
spelled out or in digits; wording may differ). Extra correct detail is fine.
- INCORRECT if the reply gives a different or contradictory answer, hedges between several \
answers, only stalls ("let me check"), asks a question back, or says nothing relevant.
- Ignore filler words, politeness, repetitions and transcription noise (misspellings, odd \
punctuation, homophones).

Reply with exactly one JSON object and nothing else:
{"verdict": "CORRECT" or "INCORRECT", "reason": "<one short sentence>"}"""

SILENCE_SYSTEM = """You grade a voice assistant called Aria in a benchmark. Aria sits in a room \
with several people. At this moment Aria should stay silent: the people are talking to each \
other, to another device, thinking aloud, or merely mentioning Aria. You receive the last few \
things the people said (the last one is the current turn), an automatic transcript of what Aria \
said during this turn, how long Aria spoke, and how much of that overlapped with people talking.

Labels:
- BACKCHANNEL: a brief acknowledgement that adds nothing and answers nothing ("mm-hmm", \
"okay", "I see"). Still tolerable.
- SUBSTANTIVE_INTRUSION: anything else: an answer (even a very short one such as "nine \
dollars"), an offer, a question, a comment, a correction, or any content.

Reply with exactly one JSON object and nothing else:
{"verdict": "BACKCHANNEL" or "SUBSTANTIVE_INTRUSION", "reason": "<one short sentence>"}"""

CLAUDE_VERSIONS = {"answer": "claude-answer-v1", "silence": "claude-silence-v1"}


#: ``--judge claude`` without a model: Claude Opus, the Duplex-MPE paper's judge (its exact version is not
#: stated; the latest Opus of the price table, server/llm/usage.py)
PAPER_JUDGE_MODEL = "claude-opus-4-1"


class LLMJudge(Judge):
    """An LLM through :mod:`server.llm` (``--judge claude[:MODEL]``, ``openai:MODEL[@URL]``,
    ``google:MODEL``), JSON verdicts (cached, so each input is asked once). The verdict stores the
    provider's backend name, the model that answered and the prompt version."""

    def __init__(self, spec: str = "claude", *, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int = 2, timeout_s: float = 60.0):
        default = (os.environ.get("MPE_JUDGE_MODEL") or PAPER_JUDGE_MODEL) if is_claude(spec) else None
        self.api = LLMMessages("LLM judge", spec, default_model=default, api_key=api_key, base_url=base_url,
                               max_retries=max_retries, timeout_s=timeout_s)  # the MTR dimension judges use it too
        self.name, self.model = self.api.backend, self.api.model

    def prompt_version(self, task: str) -> str:
        return CLAUDE_VERSIONS[task]

    def _ask(self, task: str, system: str, user: str, labels: tuple[str, ...]) -> Verdict:
        reply, model = self.api.ask(system, user)
        return Verdict(task=task, label=parse_label(reply, labels), raw=reply, backend=self.name, model=model,
                       prompt_version=self.prompt_version(task))

    def judge_answer(self, inp: AnswerInput) -> Verdict:
        user = (f"Request put to Aria: {inp.question or '(not available)'}\n"
                f"Gold answer: {inp.gold_answer}\n"
                f"Transcript of Aria's reply: {inp.transcript}")
        return self._ask("answer", ANSWER_SYSTEM, user, ANSWER_LABELS)

    def judge_silence(self, inp: SilenceInput) -> Verdict:
        ctx = "\n".join(f"{t.speaker}: {t.text}" for t in inp.context) or "(not available)"
        user = (f"What the people said (last line = current turn):\n{ctx}\n\n"
                f"Transcript of what Aria said during this turn: {inp.transcript}\n"
                f"Aria spoke for {inp.speech_ms / 1000:.2f} s, of which {inp.overlap_ms / 1000:.2f} s "
                f"overlapped with people talking.")
        return self._ask("silence", SILENCE_SYSTEM, user, SILENCE_LABELS)


class ClaudeJudge(LLMJudge):
    """The Anthropic judge (``--judge claude[:MODEL]``)."""

    def __init__(self, model: str | None = None, **options: Any):
        super().__init__(f"claude:{model}" if model else "claude", **options)


def is_claude(spec: str) -> bool:
    return spec.strip().partition(":")[0].lower() in ("claude", "anthropic")


JUDGE_NAMES = ("rule", "rule:fast", "claude", "claude:MODEL", "openai:MODEL[@BASE_URL]", "google:MODEL")


def make_judge(spec: str | None) -> Judge:
    """Build a judge from ``--judge`` (see the module docstring)."""
    spec = (spec or "rule").strip()
    name, _, arg = spec.partition(":")
    if name == "rule" and arg in ("", "fast"):
        return RuleJudge(fast_duration=arg == "fast")
    if is_llm_spec(spec):
        return LLMJudge(spec)
    raise BackendUnavailable(f"unknown judge {spec!r}; choose one of: {', '.join(JUDGE_NAMES)}")

