"""The LLM backend: an LLM reads the time-stamped two-channel transcript and proposes user turns.

The published method has GPT-4o segment a Whisper + Silero transcript six times (MTR-DuplexBench,
arXiv 2511.10262); the companion code of the same authors asks, at the API's default
temperature, to (1) split the conversation into turns with the user's speech start and end as
boundaries, not splitting where the model only backchannels or drifts, (2) flag model replies that
run on into the next turn, and (3) answer in JSON. :data:`SYSTEM_PROMPT` asks for the same, in our
words, and adds what our recordings hold: other voices on the user's channel (a third party, a TV)
and the user's own backchannels are not turns, and a pause inside an utterance does not end it.

* **Transcript**: one line per speech segment of either channel, in time order, ``[start–end]
  USER|MODEL: text`` (seconds); without ASR the text is ``(speech)``, so the backend also works on
  the speech segments alone.
* **Sampling**: each of the n runs is its own request at temperature 1.0 (the API default the paper
  used with GPT-4o), so the runs differ and the voting has something to vote on.
* **Backends**: any LLM of :mod:`server.llm` (``--backend claude[:MODEL]``, ``openai:gpt-4o`` as the
  paper, ``google:MODEL``, an OpenAI-compatible server ``openai:MODEL@URL``) through the judges'
  client (:class:`server.scoring.judges.LLMMessages`: retries of 429 and 5xx with backoff, honouring
  retry-after); a reply that cannot be read as turns is asked again, up to ``max_attempts`` times
  per run. Every raw reply is kept in the proposal; a run with no readable reply is unusable (it
  casts no votes).
* **Cache**: the LLM layer's reply cache under ``cache_dir``, keyed by the whole request (prompts,
  temperature, provider, model); each run and attempt is its own request (its number is in the
  user message), so the six runs are six samples and a rerun asks nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from server.benchmarks.mtr.segmentation.proposer import Proposer
from server.benchmarks.mtr.segmentation.schema import Proposal, ProposedTurn, SegmentInput, seconds
from server.core.timebase import STREAM_RATE
from server.llm import LLMRequest, Message
from server.scoring.errors import JudgeError
from server.scoring.judges import DEFAULT_CLAUDE_MODEL, LLMMessages

PROMPT_VERSION = "segment-llm-v2"
TEMPERATURE = 1.0
END_SLACK = STREAM_RATE // 2  # a turn may end up to 0.5 s past the recording (rounding): clipped to it

SYSTEM_PROMPT = """You segment recordings of spoken conversations between a user and a voice \
assistant (the model) into the user's turns. You receive a transcript with one line per stretch of \
speech, in time order: [start-end] in seconds from the start of the recording, the channel (USER or \
MODEL) and what was said ("(speech)" when no transcript is available).

Rules:
1. A user turn is the user speaking to the model: it starts where the user starts speaking and ends \
where the user stops. Give every user turn with its start and end taken from the USER lines.
2. A pause inside one utterance (the user breaks off mid-sentence and carries on) does not end the \
turn: the turn runs to the end of the continuation.
3. Do not make a turn of the user's backchannels while the model talks ("mm-hmm", "right", \
"I see"), nor of other voices heard on the user's channel that are not speaking to the model (a \
person talking to someone else in the room, a TV or radio) and that the model talks through.
4. When the user interrupts the model with a new or changed request, that is a new turn.
5. Set "continuation" to true on a turn when the model's reply to it is still going on when the \
user's next turn starts.

Reply with exactly one JSON object and nothing else:
{"turns": [{"start": <seconds>, "end": <seconds>, "continuation": true or false}, ...]}"""


def transcript_lines(inp: SegmentInput) -> list[str]:
    """The transcript shown to the model: one line per speech segment (see the module docstring)."""
    texts = {(u.channel, u.start, u.end): u.text.strip() for u in inp.utterances}
    rows = [(s.start, 0 if ch == "user" else 1, s.end, ch) for ch in ("user", "model")
            for s in getattr(inp, ch)]
    return [f"[{seconds(a):.2f}-{seconds(b):.2f}] {ch.upper()}: {texts.get((ch, a, b)) or '(speech)'}"
            for a, _, b, ch in sorted(rows)]


def user_prompt(inp: SegmentInput) -> str:
    lines = transcript_lines(inp) or ["(no speech detected)"]
    return f"Recording length: {seconds(inp.n_samples):.2f} s\nTranscript:\n" + "\n".join(lines)


def _first_object_with(reply: str, key: str) -> dict | None:
    dec = json.JSONDecoder()
    for i, ch in enumerate(reply):
        if ch != "{":
            continue
        try:
            obj, _ = dec.raw_decode(reply, i)
        except ValueError:
            continue
        if isinstance(obj, dict) and key in obj:
            return obj
    return None


def parse_turns(reply: str, n_samples: int) -> list[ProposedTurn]:
    """The turns of a reply, in stream samples; raises ValueError saying what is wrong with it."""
    obj = _first_object_with(reply, "turns")
    if obj is None or not isinstance(obj["turns"], list):
        raise ValueError("no JSON object with a list of turns")
    out = []
    for i, t in enumerate(obj["turns"]):
        if not isinstance(t, dict):
            raise ValueError(f"turn {i} is not an object")
        s, e, cont = t.get("start"), t.get("end"), t.get("continuation", False)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (s, e)):
            raise ValueError(f"turn {i}: start and end must be numbers of seconds")
        if not isinstance(cont, bool):
            raise ValueError(f"turn {i}: continuation must be true or false")
        a, b = round(s * STREAM_RATE), round(e * STREAM_RATE)
        if not 0 <= a <= b <= n_samples + END_SLACK:
            raise ValueError(f"turn {i}: [{s}, {e}] s is not an interval inside the recording")
        out.append(ProposedTurn(start=a, end=min(b, n_samples), continuation=cont))
    return sorted(out, key=lambda t: (t.start, t.end))


class LLMProposer(Proposer):
    """An LLM with the versioned prompt above (``--backend claude[:MODEL]``, ``openai:gpt-4o``, …)."""

    version = PROMPT_VERSION
    deterministic = False

    def __init__(self, spec: str = "claude", *, cache_dir: Path | None = None, temperature: float = TEMPERATURE,
                 max_attempts: int = 3, max_tokens: int = 2000, api_key: str | None = None,
                 base_url: str | None = None, max_retries: int = 4, timeout_s: float = 120.0):
        claude = spec.strip().partition(":")[0].lower() in ("claude", "anthropic")
        default = (os.environ.get("MPE_SEGMENT_MODEL") or DEFAULT_CLAUDE_MODEL) if claude else None
        self.temperature = temperature
        self.max_attempts = max(1, max_attempts)
        self.max_tokens = max_tokens
        self._api = LLMMessages("segmentation backend", spec, default_model=default, api_key=api_key,
                                base_url=base_url, max_retries=max_retries, timeout_s=timeout_s,
                                cache_dir=Path(cache_dir) if cache_dir is not None else None)
        self.name, self.model = self._api.backend, self._api.model

    def _ask(self, user: str, run: int, attempt: int) -> tuple[str, bool]:
        """(raw reply, from the cache) for one run's attempt; the run and attempt numbers make each
        its own request, so the cache replays every sample."""
        text = f"{user}\n\n(Segmentation run {run + 1}, attempt {attempt + 1}.)"
        reply = self._api.complete(LLMRequest(messages=[Message(role="user", content=text)], system=SYSTEM_PROMPT,
                                              temperature=self.temperature, max_tokens=self.max_tokens))
        return reply.text, reply.cached

    def propose(self, inp: SegmentInput, run: int) -> Proposal:
        user = user_prompt(inp)
        raw: list[str] = []
        cached = 0
        error = "no reply"
        for attempt in range(self.max_attempts):
            try:
                reply, hit = self._ask(user, run, attempt)
            except JudgeError as exc:
                return Proposal(run=run, turns=[], usable=False, raw=raw, error=str(exc), cached=cached)
            raw.append(reply)
            cached += hit
            try:
                return Proposal(run=run, turns=parse_turns(reply, inp.n_samples), raw=raw, cached=cached)
            except ValueError as exc:
                error = f"unreadable reply: {exc}"
        return Proposal(run=run, turns=[], usable=False, raw=raw, error=error, cached=cached)


class ClaudeProposer(LLMProposer):
    """The Anthropic backend (``--backend claude[:MODEL]``)."""

    def __init__(self, model: str | None = None, **options):
        super().__init__(f"claude:{model}" if model else "claude", **options)
