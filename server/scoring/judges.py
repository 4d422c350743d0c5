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

Backends (``--judge NAME``): ``rule`` (offline default: the manifest's answer keys,
number- and homophone-aware; a backchannel lexicon and a length limit), ``rule:fast`` (the
same, but speech longer than the length limits is decided on its duration without ASR: a
speed option, recorded in the judge's description) and ``claude[:MODEL]`` (Anthropic
Messages API through the ``anthropic`` SDK; ``ANTHROPIC_API_KEY``, optional
``ANTHROPIC_BASE_URL``).
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
from text_to_num import alpha2digit

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
    # reference: a text reference's decision (mpe reference); quality / instruction / safety: the MTR
    # dimension judges (server.benchmarks.mtr.judges)
    task: Literal["answer", "silence", "reference", "quality", "instruction", "safety"]
    label: str | None  # None: missing / unparseable
    raw: str = ""  # the backend's raw reply (or the rule's explanation)
    backend: str
    model: str
    prompt_version: str

    @property
    def passed(self) -> bool:
        return self.label == PASSING[self.task]


def content_key(task: str, backend: str, model: str, prompt_version: str, inputs: BaseModel) -> str:
    """The cache key of a verdict (§8): sha256 of its task, backend, model, prompt version and inputs."""
    blob = json.dumps({"task": task, "backend": backend, "model": model, "prompt_version": prompt_version,
                       "inputs": inputs.model_dump(mode="json")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class Judge(ABC):
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


# --- text normalisation and answer matching (rule judge) ---------------------------------------
#
# §6: "numbers may be spelled out or in digits; ignore transcription noise and homophones".
# Numbers are compared as digits. text2num's ``alpha2digit`` turns spelled-out numbers into
# digits ("four hundred and eighty" -> 480, "nine fifteen" -> "9 15", "fifth" -> "5th"); the
# rewrites below bring together the forms speech and ASR give one quantity: "$4.80" /
# "4.80 dollars", "7:30" / "seven thirty" / "half past seven", "2.5" / "2½" / "two and a
# half", "10%" / "ten percent", "11:00" / "eleven o'clock". Matching then also reads two
# adjacent numbers as one ("four eighty" = "4 80" = 480; "nine fifty" = 950, the key form of
# 9:50), joins or splits compound words ("guest house" = "guesthouse") and, next to a number
# or to the word that follows the number in the gold answer, hears the homophones of small
# numbers as numbers ("for dollars" = "4 dollars", "ate onions" = "8 onions").

_UNIT_SECOND = re.compile(r"(?<!\bthe )\bsecond(s?)\b")  # the unit of time, not the ordinal
_SECOND_MARK = "secnd"


def _spell_out_to_digits(t: str) -> str:
    """Spelled-out numbers to digits (text2num), keeping "one second" a unit of time."""
    t = _UNIT_SECOND.sub(_SECOND_MARK + r"\1", t)
    t = alpha2digit(t, "en", threshold=0)
    return t.replace(_SECOND_MARK, "second")


def _quarter_to(m: re.Match) -> str:
    hour = int(m.group(1))
    return f"{hour - 1 if hour > 1 else 12}:45"


_REWRITES: tuple[tuple[re.Pattern, Any], ...] = tuple((re.compile(p), r) for p, r in (
    (r"(?<=\d),(?=\d{3}\b)", ""),  # 1,000 -> 1000
    (r"\$\s*(\d+(?:\.\d+)?)", r"\1 dollars"),  # $11 -> 11 dollars
    (r"(\d)\s*%", r"\1 percent"),
    (r"(\d)\.00\b", r"\1"),  # $270.00 -> 270
    (r"(\d)\s*(?:\.5\b|½)", r"\1 and a half"),  # 2.5, 2½ -> 2 and a half
    (r"½", " a half"),
    (r"(\d)\s*o\s*'?\s*clock\b", r"\1:00"),  # 11 o'clock -> 11:00
    (r"\bhalf past (\d+)\b", r"\1:30"),
    (r"\bquarter past (\d+)\b", r"\1:15"),
    (r"\bquarter to (\d+)\b", _quarter_to),
    (r"(\d)(?:st|nd|rd|th)\b", r"\1"),  # 11th -> 11
    (r"'s\b", ""),
    (r"[^a-z0-9]+", " "),  # 9:15 -> 9 15, 4.80 -> 4 80
    (r"(?<=\d)(?=[a-z])|(?<=[a-z])(?=\d)", " "),
))


def normalize(text: str) -> list[str]:
    """Lower-case word/number tokens with numbers as digits (see the rewrites above)."""
    t = _spell_out_to_digits(text.lower().replace("\u2019", "'"))
    for pattern, repl in _REWRITES:
        t = pattern.sub(repl, t)
    return [(w.lstrip("0") or "0") if w.isdigit() else w for w in t.split()]


def merge_numbers(tokens: list[str]) -> list[str]:
    """Two adjacent numbers read as one, as speech says hundreds and times: "4 80" -> "480"
    (four eighty, $4.80), "9 50" -> "950" (nine fifty, 9:50), "9 5" -> "905" (9:05)."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        a = tokens[i]
        b = tokens[i + 1] if i + 1 < len(tokens) else ""
        if a.isdigit() and b.isdigit() and 1 <= int(a) <= 99 and int(b) <= 99:
            out.append(str(int(a) * 100 + int(b)))
            i += 2
        else:
            out.append(a)
            i += 1
    return out


NUMBER_HOMOPHONES = {"for": "4", "fore": "4", "to": "2", "too": "2", "won": "1", "ate": "8"}


def hear_numbers(tokens: list[str], gold: list[str]) -> list[str]:
    """Homophones of small numbers read as numbers where a number belongs: right before
    another number ("for 30" = 4:30) or before a word that follows a number in the gold
    answer ("for dollars" when the gold says "4 dollars")."""
    followers = {gold[i + 1] for i in range(len(gold) - 1) if gold[i].isdigit() and not gold[i + 1].isdigit()}
    return [NUMBER_HOMOPHONES[w] if w in NUMBER_HOMOPHONES and i + 1 < len(tokens)
            and (tokens[i + 1].isdigit() or tokens[i + 1] in followers) else w
            for i, w in enumerate(tokens)]


def readings(tokens: list[str], gold: list[str]) -> list[list[str]]:
    """The ways a transcript may be read: as is, with numbers merged, with number homophones."""
    heard = hear_numbers(tokens, gold)
    out: list[list[str]] = []
    for r in (tokens, merge_numbers(tokens), heard, merge_numbers(heard)):
        if r not in out:
            out.append(r)
    return out


FUZZY_MIN_LEN = 5
FUZZY_RATIO = 0.85
SHORT_MIN_LEN = 3


def _one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one inserted, deleted or replaced letter."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    long, short = (a, b) if len(a) > len(b) else (b, a)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _same_word(a: str, b: str) -> bool:
    """Equal, or nearly equal: words of 5+ letters by similarity (kilometres / kilometers,
    small ASR slips), words of 3-4 letters by one letter with the same first letter (names:
    Leo / Leto, Finn / Fin). Numbers must match exactly."""
    if a == b:
        return True
    if a.isdigit() or b.isdigit():
        return False
    if min(len(a), len(b)) >= FUZZY_MIN_LEN:
        return SequenceMatcher(None, a, b).ratio() >= FUZZY_RATIO
    return min(len(a), len(b)) >= SHORT_MIN_LEN and a[0] == b[0] and _one_edit(a, b)


def _joins(a: str, b: str, w: str) -> bool:
    """Two words written as one: "guest" + "house" = "guesthouse"."""
    return not (a.isdigit() or b.isdigit() or w.isdigit()) and _same_word(a + b, w)


def _match_at(hay: list[str], i: int, needle: list[str], j: int) -> bool:
    if j == len(needle):
        return True
    if i >= len(hay):
        return False
    h, w = hay[i], needle[j]
    if _same_word(h, w) and _match_at(hay, i + 1, needle, j + 1):
        return True
    if i + 1 < len(hay) and _joins(h, hay[i + 1], w) and _match_at(hay, i + 2, needle, j + 1):
        return True
    return j + 1 < len(needle) and _joins(w, needle[j + 1], h) and _match_at(hay, i + 1, needle, j + 2)


def _contains(hay: list[str], needle: list[str]) -> bool:
    """``needle`` appears in ``hay`` in order and contiguous (near-equal words, compounds)."""
    return bool(needle) and any(_match_at(hay, i, needle, 0) for i in range(len(hay)))


def covers(heard: list[list[str]], needle: list[str]) -> bool:
    """Some reading of the transcript contains the key (or the key with its numbers merged)."""
    needles = [needle] if merge_numbers(needle) == needle else [needle, merge_numbers(needle)]
    return any(_contains(h, n) for h in heard for n in needles)


def _number_runs(tokens: list[str]) -> list[list[str]]:
    """Maximal runs of adjacent numbers: "9 50 dollars 3" -> [["9", "50"], ["3"]]."""
    runs: list[list[str]] = []
    prev_digit = False
    for w in tokens:
        if w.isdigit():
            if prev_digit:
                runs[-1].append(w)
            else:
                runs.append([w])
        prev_digit = w.isdigit()
    return runs


STOPWORDS = set(
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
            nums = _number_runs(gold_words)
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
DEFAULT_CLAUDE_MODEL = "claude-sonnet-4-5"


def reply_object(reply: str, key: str) -> dict[str, Any] | None:
    """The first JSON object in a reply (anywhere in it) whose ``key`` is a string, else None."""
    for m in re.finditer(r"\{.*?\}", reply, flags=re.S):
        try:
            obj = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get(key), str):
            return obj
    return None


def parse_label(reply: str, labels: tuple[str, ...], key: str = "verdict") -> str | None:
    """The label in a reply: a JSON object's ``key`` (``verdict``; anywhere in the reply), else a
    single label word standing alone. Anything else: None (unparseable)."""
    obj = reply_object(reply, key)
    if obj is not None:
        v = obj[key].strip().upper()
        return v if v in labels else None
    found = {lab for lab in labels if re.search(rf"(?<![A-Z_]){lab}(?![A-Z_])", reply.upper())}
    return found.pop() if len(found) == 1 else None


class ClaudeMessages:
    """The Messages API as every Claude backend of scoring calls it (the judges, the text reference
    of ``mpe reference``): the ``anthropic`` SDK with ``ANTHROPIC_API_KEY`` and optional
    ``ANTHROPIC_BASE_URL``. The SDK itself retries rate limits (429), overload (529), other 5xx and
    connection errors ``max_retries`` times with backoff, waiting as long as ``retry-after-ms`` /
    ``retry-after`` ask; what still fails is a :class:`JudgeError`."""

    def __init__(self, what: str, *, api_key: str | None = None, base_url: str | None = None, max_retries: int = 2,
                 timeout_s: float = 60.0):
        try:
            import anthropic
        except ImportError:
            raise BackendUnavailable(f"the {what} needs the [claude] extra: pip install 'duplex-mpe[claude]'") from None
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise BackendUnavailable(f"the {what} needs ANTHROPIC_API_KEY")
        self.what = what
        self._anthropic = anthropic
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        self._client = anthropic.Anthropic(api_key=key, base_url=self.base_url, max_retries=max_retries,
                                           timeout=timeout_s)

    def ask(self, model: str, system: str, user: str, max_tokens: int = 300,
            temperature: float | None = None) -> tuple[str, str]:
        """One user message: (the reply's text, the model that answered). ``temperature`` None: the
        API's default (the SDK's ``create`` no longer names the field; it goes in the request body)."""
        a = self._anthropic
        extra = {} if temperature is None else {"extra_body": {"temperature": temperature}}
        try:
            msg = self._client.messages.create(model=model, max_tokens=max_tokens, system=system,
                                               messages=[{"role": "user", "content": user}], **extra)
        except a.APIStatusError as exc:
            raise JudgeError(f"{self.what}: HTTP {exc.status_code} from the Messages API") from None
        except a.APIError as exc:
            raise JudgeError(f"{self.what}: request failed ({type(exc).__name__})") from None
        reply = "".join(getattr(b, "text", "") for b in (msg.content or []))
        return reply, getattr(msg, "model", None) or model


class ClaudeJudge(Judge):
    """Claude through the Messages API (``anthropic`` SDK), JSON verdicts (cached, so each input is asked once)."""

    name = "claude"

    def __init__(self, model: str | None = None, *, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int = 2, timeout_s: float = 60.0):
        self.model = model or os.environ.get("MPE_JUDGE_MODEL") or DEFAULT_CLAUDE_MODEL
        self.api = ClaudeMessages("Claude judge", api_key=api_key, base_url=base_url, max_retries=max_retries,
                                  timeout_s=timeout_s)  # the MTR dimension judges ask through it too

    def prompt_version(self, task: str) -> str:
        return CLAUDE_VERSIONS[task]

    def _ask(self, task: str, system: str, user: str, labels: tuple[str, ...]) -> Verdict:
        reply, model = self.api.ask(self.model, system, user)
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


JUDGE_NAMES = ("rule", "rule:fast", "claude", "claude:MODEL")


def make_judge(spec: str | None) -> Judge:
    """Build a judge from ``--judge`` (see the module docstring)."""
    spec = (spec or "rule").strip()
    name, _, arg = spec.partition(":")
    if name == "rule" and arg in ("", "fast"):
        return RuleJudge(fast_duration=arg == "fast")
    if name == "claude":
        return ClaudeJudge(arg or None)
    raise BackendUnavailable(f"unknown judge {spec!r}; choose one of: {', '.join(JUDGE_NAMES)}")
