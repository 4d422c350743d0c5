"""The Claude backend: Claude reads the time-stamped two-channel transcript and proposes user turns.

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
* **Retries**: the Messages API client of the judges (:class:`server.scoring.judges.ClaudeMessages`:
  the SDK retries 429, 529, 5xx and connection errors with backoff, honouring retry-after); a
  reply that cannot be read as turns is asked again, up to ``max_attempts`` times per run. Every
  raw reply is kept in the proposal; a run with no readable reply is unusable (it casts no votes).
* **Cache**: every exchange is stored under ``cache_dir`` by the SHA-256 of the whole request
  (prompt version, model, temperature, prompts, run and attempt number), so a rerun asks nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from server.benchmarks.mtr.segmentation.proposer import Proposer
from server.benchmarks.mtr.segmentation.schema import Proposal, ProposedTurn, SegmentInput, seconds
from server.core.timebase import STREAM_RATE
from server.files import atomic_write_bytes
from server.scoring.errors import JudgeError
from server.scoring.judges import DEFAULT_CLAUDE_MODEL, ClaudeMessages

PROMPT_VERSION = "segment-claude-v1"
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


class ClaudeProposer(Proposer):
    """Claude with the versioned prompt above (``--backend claude[:MODEL]``)."""

    name = "claude"
    version = PROMPT_VERSION
    deterministic = False

    def __init__(self, model: str | None = None, *, cache_dir: Path | None = None, temperature: float = TEMPERATURE,
                 max_attempts: int = 3, max_tokens: int = 2000, api_key: str | None = None,
                 base_url: str | None = None, max_retries: int = 4, timeout_s: float = 120.0):
        self.model = model or os.environ.get("MPE_SEGMENT_MODEL") or DEFAULT_CLAUDE_MODEL
        self.temperature = temperature
        self.max_attempts = max(1, max_attempts)
        self.max_tokens = max_tokens
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._api = ClaudeMessages("Claude segmentation backend", api_key=api_key, base_url=base_url,
                                   max_retries=max_retries, timeout_s=timeout_s)

    def _request(self, user: str, run: int, attempt: int) -> dict:
        return {"prompt_version": self.version, "model": self.model, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "system": SYSTEM_PROMPT, "user": user, "run": run, "attempt": attempt}

    def _ask(self, request: dict) -> tuple[str, bool]:
        """(raw reply, from the cache) for one request."""
        path = None
        if self.cache_dir is not None:
            key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
            path = self.cache_dir / key[:2] / f"{key}.json"
            try:
                return json.loads(path.read_text("utf-8"))["reply"], True
            except (OSError, ValueError, KeyError, TypeError):
                pass
        reply, model = self._api.ask(self.model, SYSTEM_PROMPT, request["user"], max_tokens=self.max_tokens,
                                     temperature=self.temperature)
        if path is not None:
            atomic_write_bytes(path, json.dumps({"request": request, "reply": reply, "answered_by": model}).encode())
        return reply, False

    def propose(self, inp: SegmentInput, run: int) -> Proposal:
        user = user_prompt(inp)
        raw: list[str] = []
        cached = 0
        error = "no reply"
        for attempt in range(self.max_attempts):
            try:
                reply, hit = self._ask(self._request(user, run, attempt))
            except JudgeError as exc:
                return Proposal(run=run, turns=[], usable=False, raw=raw, error=str(exc), cached=cached)
            raw.append(reply)
            cached += hit
            try:
                return Proposal(run=run, turns=parse_turns(reply, inp.n_samples), raw=raw, cached=cached)
            except ValueError as exc:
                error = f"unreadable reply: {exc}"
        return Proposal(run=run, turns=[], usable=False, raw=raw, error=error, cached=cached)
