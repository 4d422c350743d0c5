"""The benchmark-neutral judge machinery of scoring: verdicts and their content keys, the judge
interface the verdict cache calls (:class:`TaskJudge`), the text matching that offline rule judges
share (numbers as digits, homophones, near-equal words), the label parsing of LLM replies, and the
LLM client every LLM backend asks through (:class:`LLMMessages`, on :mod:`server.llm`).

The judges themselves, with their tasks, labels, prompts and rules, belong to the benchmarks:
Duplex-MPE's ``answer`` and ``silence`` judges in :mod:`server.benchmarks.mpe.judging`, the MTR
dimension judges in :mod:`server.benchmarks.mtr.judges`; each benchmark names its tasks' labels
(:attr:`server.core.benchmark.Benchmark.judge_tasks`) and builds its judge from ``--judge``
(:meth:`server.core.benchmark.Benchmark.make_judge`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel
from text_to_num import alpha2digit

from server.llm import LLMClient, LLMError, LLMReply, LLMRequest, LLMUnavailable, parse_spec
from server.llm.spec import DEFAULT_MODELS
from server.scoring.errors import BackendUnavailable, JudgeError


class Verdict(BaseModel):
    """One judge decision: its task (named by the benchmark that asked, e.g. Duplex-MPE's ``answer``,
    MTR's ``quality``, a text reference's ``reference``), its label and the raw reply."""

    task: str
    label: str | None  # None: missing / unparseable
    raw: str = ""  # the backend's raw reply (or the rule's explanation)
    backend: str
    model: str
    prompt_version: str


def content_key(task: str, backend: str, model: str, prompt_version: str, inputs: BaseModel) -> str:
    """The cache key of a verdict (§8): sha256 of its task, backend, model, prompt version and inputs."""
    blob = json.dumps({"task": task, "backend": backend, "model": model, "prompt_version": prompt_version,
                       "inputs": inputs.model_dump(mode="json")}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()



class TaskJudge(Protocol):
    """What the verdict cache (:class:`server.scoring.store.Cache`) needs of a judge: the content key
    of a decision and the decision itself."""

    name: str
    model: str

    def cache_key(self, task: str, inputs: BaseModel) -> str: ...

    def judge(self, task: str, inputs: BaseModel) -> Verdict: ...


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


def number_runs(tokens: list[str]) -> list[list[str]]:
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


# --- LLM backends ------------------------------------------------------------------------------------

DEFAULT_CLAUDE_MODEL = DEFAULT_MODELS["anthropic"]  # a Claude spec without a model, where no paper names one


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


#: the judge backend name of each provider, stored with every verdict (``claude``: the project's name
#: of its Anthropic backends, as ``--judge claude`` says)
PROVIDER_BACKENDS: dict[str, str] = {"anthropic": "claude", "openai": "openai", "google": "google"}


class LLMMessages:
    """The LLM layer (:mod:`server.llm`) as every LLM backend of scoring and the benchmarks calls it (the
    judges, the text reference, segmentation, the cascade's decider): one client for ``spec``
    (``claude[:MODEL]``, ``openai:MODEL[@BASE_URL]``, ``google:MODEL``; keys from the provider's
    environment variable), which retries rate limits (429) and 5xx with backoff, honouring
    ``retry-after``; a bad spec or a missing key is :class:`BackendUnavailable`, a failed call a
    :class:`JudgeError`."""

    def __init__(self, what: str, spec: str = "claude", *, default_model: str | None = None,
                 api_key: str | None = None, base_url: str | None = None, max_retries: int = 2,
                 timeout_s: float = 60.0, cache_dir: Path | None = None, concurrency: int = 8):
        self.what = what
        try:
            parsed = parse_spec(spec, default_model)
            if base_url:
                parsed = parsed.model_copy(update={"base_url": base_url})
            self.client = LLMClient(parsed, api_key=api_key, max_retries=max_retries, timeout_s=timeout_s,
                                    cache_dir=cache_dir, concurrency=concurrency)
        except LLMUnavailable as exc:
            raise BackendUnavailable(f"the {what} cannot start: {exc}") from None

    @property
    def provider(self) -> str:
        return self.client.provider

    @property
    def model(self) -> str:
        return self.client.model

    @property
    def backend(self) -> str:
        """The backend name stored with a verdict (:data:`PROVIDER_BACKENDS`)."""
        return PROVIDER_BACKENDS[self.client.provider]

    @property
    def base_url(self) -> str | None:
        return self.client.spec.base_url

    def complete(self, request: LLMRequest) -> LLMReply:
        try:
            return self.client.complete(request)
        except LLMError as exc:
            raise JudgeError(f"{self.what}: {exc}") from None

    def stream(self, request: LLMRequest) -> Iterator[str]:
        try:
            yield from self.client.stream(request)
        except LLMError as exc:
            raise JudgeError(f"{self.what}: {exc}") from None

    def ask(self, system: str, user: str, max_tokens: int = 300, temperature: float | None = None) -> tuple[str, str]:
        """One user message: (the reply's text, the model that answered). ``temperature`` None: the
        provider's default."""
        reply = self.complete(LLMRequest.ask(system, user, max_tokens=max_tokens, temperature=temperature))
        return reply.text, reply.model or self.model
