"""Semantic judges (§6), behind one interface, each with a versioned prompt/rubric.

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

Backends (``--judge NAME``): ``rule`` (offline default: the manifest's answer keys; a
backchannel lexicon and a length limit) and ``claude[:MODEL]`` (Anthropic Messages API
through the ``anthropic`` SDK; ``ANTHROPIC_API_KEY``, optional ``ANTHROPIC_BASE_URL``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from abc import ABC, abstractmethod
from difflib import SequenceMatcher
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from server.scoring.errors import BackendUnavailable, JudgeError

AnswerLabel = Literal["CORRECT", "INCORRECT"]
SilenceLabel = Literal["BACKCHANNEL", "SUBSTANTIVE_INTRUSION"]
ANSWER_LABELS: tuple[AnswerLabel, ...] = get_args(AnswerLabel)
SILENCE_LABELS: tuple[SilenceLabel, ...] = get_args(SilenceLabel)
PASSING = {"answer": "CORRECT", "silence": "BACKCHANNEL"}


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


class Verdict(BaseModel):
    task: Literal["answer", "silence"]
    label: str | None  # None: missing / unparseable
    raw: str = ""  # the backend's raw reply (or the rule's explanation)
    backend: str
    model: str
    prompt_version: str

    @property
    def passed(self) -> bool:
        return self.label == PASSING[self.task]


class Judge(ABC):
    name = "base"
    model = ""

    @abstractmethod
    def prompt_version(self, task: str) -> str: ...

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model,
                "prompt_versions": {t: self.prompt_version(t) for t in ("answer", "silence")}}

    def cache_key(self, task: str, inputs: BaseModel) -> str:
        blob = json.dumps({"task": task, "backend": self.name, "model": self.model,
                           "prompt_version": self.prompt_version(task), "inputs": inputs.model_dump(mode="json")},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    @abstractmethod
    def judge_answer(self, inp: AnswerInput) -> Verdict: ...

    @abstractmethod
    def judge_silence(self, inp: SilenceInput) -> Verdict: ...

    def decide_on_duration(self, task: str, speech_ms: int) -> Verdict | None:
        """A verdict that no transcript could change, so ASR can be skipped; None otherwise."""
        return None

    def judge(self, task: str, inp: BaseModel) -> Verdict:
        return self.judge_answer(inp) if task == "answer" else self.judge_silence(inp)  # type: ignore[arg-type]


# --- text normalisation (rule judge) ----------------------------------------------------------

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if w != "_"}
_ORDINALS = {w: i for i, w in enumerate(
    "zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
    "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split())}
_ORDINALS.pop("second")  # "second" is far more often the unit of time
_SCALES = {"hundred": 100, "thousand": 1000}


def _words_to_numbers(tokens: list[str]) -> list[str]:
    """Spelled-out numbers to digits: "twenty one" -> "21", "nine fifteen" -> "9 15"."""
    out: list[str] = []
    cur: int | None = None  # value of the number being read
    last = ""  # kind of the last number word: unit, teen, tens, scale

    def flush():
        nonlocal cur, last
        if cur is not None:
            out.append(str(cur))
        cur, last = None, ""

    for tok in tokens:
        if tok in _UNITS:
            v = _UNITS[tok]
            kind = "unit" if v < 10 else "teen"
            if cur is not None and last == "tens" and kind == "unit" and v > 0:
                cur += v
            elif cur is not None and last == "scale":
                cur += v
            else:
                flush()
                cur = v
            last = kind
        elif tok in _TENS:
            if cur is not None and last == "scale":
                cur += _TENS[tok]
            else:
                flush()
                cur = _TENS[tok]
            last = "tens"
        elif tok in _SCALES and cur is not None and last != "scale":
            cur *= _SCALES[tok]
            last = "scale"
        elif tok == "and" and last == "scale":
            continue  # "one hundred and five"
        elif tok in _ORDINALS:
            flush()
            out.append(str(_ORDINALS[tok]))
        else:
            flush()
            out.append(tok)
    flush()
    return out


def normalize(text: str) -> list[str]:
    """Lower-case word/number tokens; spelled-out numbers become digits; "9:15" -> "9 15"."""
    t = text.lower().replace("\u2019", "'")
    t = re.sub(r"(\d),(\d{3})", r"\1\2", t)  # 1,000 -> 1000
    t = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", t)  # 11th -> 11
    t = re.sub(r"'s\b", "", t)
    t = re.sub(r"[^a-z0-9]+", " ", t)
    t = re.sub(r"(?<=\d)(?=[a-z])|(?<=[a-z])(?=\d)", " ", t)
    toks = [w for w in t.split() if w]
    toks = [(w.lstrip("0") or "0") if w.isdigit() else w for w in toks]
    return _words_to_numbers(toks)


FUZZY_MIN_LEN = 5
FUZZY_RATIO = 0.85


def _same_word(a: str, b: str) -> bool:
    """Equal, or (words of 5+ letters) nearly equal: spelling variants such as kilometres /
    kilometers and small transcription slips. Numbers must match exactly."""
    if a == b:
        return True
    if a.isdigit() or b.isdigit() or min(len(a), len(b)) < FUZZY_MIN_LEN:
        return False
    return SequenceMatcher(None, a, b).ratio() >= FUZZY_RATIO


def _contains(hay: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(all(_same_word(h, w) for h, w in zip(hay[i:i + n], needle))
                         for i in range(len(hay) - n + 1))


_STOPWORDS = set(
    "a an the of to in on at for by with and or but is are was were be been it its this that these those "
    "there here we you i he she they them us our your their my me per each about from as so do does did "
    "will would can could should one".split())

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
    normalised words appear, in order and contiguous, in the normalised transcript (words of
    five letters or more may differ slightly: spelling variants, small ASR slips).
    Without keys, keys are derived from the gold answer: all of its numbers and at least
    half of its other content words must appear. A reply of more than 60 words is a
    monologue, not an answer, and is INCORRECT whatever it mentions.
    silence: BACKCHANNEL only if every word is in the lexicon, there are at most four
    words and the speech lasts at most 2 s; so a short answer such as "nine dollars" is
    an intrusion.
    """

    name = "rule"
    model = "rule"
    VERSIONS = {"answer": "rule-answer-v2", "silence": "rule-silence-v1"}

    def prompt_version(self, task: str) -> str:
        return self.VERSIONS[task]

    def _verdict(self, task: str, label: str, why: str) -> Verdict:
        return Verdict(task=task, label=label, raw=why, backend=self.name, model=self.model,
                       prompt_version=self.prompt_version(task))

    def judge_answer(self, inp: AnswerInput) -> Verdict:
        words = normalize(inp.transcript)
        if len(words) > ANSWER_MAX_WORDS:
            return self._verdict("answer", "INCORRECT", f"{len(words)} words > {ANSWER_MAX_WORDS}: not a direct answer")
        if inp.answer_keys:
            missing = [alts for alts in inp.answer_keys if not any(_contains(words, normalize(a)) for a in alts)]
            ok = not missing
            why = "all answer keys covered" if ok else f"missing keys: {missing}"
        else:
            gold = [w for w in normalize(inp.gold_answer) if w not in _STOPWORDS]
            nums = [w for w in gold if w.isdigit()]
            others = [w for w in gold if not w.isdigit()]
            nums_ok = all(n in words for n in nums)
            covered = sum(_contains(words, [w]) for w in others)
            ok = bool(gold) and nums_ok and (not others or 2 * covered >= len(others))
            why = f"derived keys from gold answer: numbers {nums} {'all' if nums_ok else 'not all'} present, " \
                  f"{covered}/{len(others)} content words present"
        return self._verdict("answer", "CORRECT" if ok else "INCORRECT", why)

    def decide_on_duration(self, task: str, speech_ms: int) -> Verdict | None:
        # Length limits alone decide these, whatever the words: no transcription needed.
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
DEFAULT_CLAUDE_MODEL = "claude-sonnet-4-5"


def parse_label(reply: str, labels: tuple[str, ...]) -> str | None:
    """The verdict in a reply: a JSON object's ``verdict`` (anywhere in the reply), else a
    single label word standing alone. Anything else: None (unparseable)."""
    for m in re.finditer(r"\{.*?\}", reply, flags=re.S):
        try:
            obj = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("verdict"), str):
            v = obj["verdict"].strip().upper()
            return v if v in labels else None
    found = {lab for lab in labels if re.search(rf"(?<![A-Z_]){lab}(?![A-Z_])", reply.upper())}
    return found.pop() if len(found) == 1 else None


class ClaudeJudge(Judge):
    """Claude through the Messages API (``anthropic`` SDK), JSON verdicts (cached, so each input is asked once)."""

    name = "claude"

    def __init__(self, model: str | None = None, *, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int = 2, timeout_s: float = 60.0):
        try:
            import anthropic
        except ImportError:
            raise BackendUnavailable("the Claude judge needs the [claude] extra: pip install 'duplex-mpe[claude]'") from None
        self.model = model or os.environ.get("MPE_JUDGE_MODEL") or DEFAULT_CLAUDE_MODEL
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise BackendUnavailable("the Claude judge needs ANTHROPIC_API_KEY")
        self._anthropic = anthropic
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        self._client = anthropic.Anthropic(api_key=key, base_url=self.base_url, max_retries=max_retries,
                                           timeout=timeout_s)

    def prompt_version(self, task: str) -> str:
        return CLAUDE_VERSIONS[task]

    def _ask(self, task: str, system: str, user: str, labels: tuple[str, ...]) -> Verdict:
        a = self._anthropic
        try:
            msg = self._client.messages.create(model=self.model, max_tokens=300, system=system,
                                               messages=[{"role": "user", "content": user}])
        except a.APIStatusError as exc:
            raise JudgeError(f"Claude judge: HTTP {exc.status_code} from the Messages API") from None
        except a.APIError as exc:
            raise JudgeError(f"Claude judge: request failed ({type(exc).__name__})") from None
        reply = "".join(getattr(b, "text", "") for b in (msg.content or []))
        return Verdict(task=task, label=parse_label(reply, labels), raw=reply, backend=self.name,
                       model=getattr(msg, "model", None) or self.model, prompt_version=self.prompt_version(task))

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


JUDGE_NAMES = ("rule", "claude", "claude:MODEL")


def make_judge(spec: str | None) -> Judge:
    spec = (spec or "rule").strip()
    name, _, arg = spec.partition(":")
    if name == "rule":
        return RuleJudge()
    if name == "claude":
        return ClaudeJudge(arg or None)
    raise BackendUnavailable(f"unknown judge {spec!r}; choose one of: {', '.join(JUDGE_NAMES)}")
