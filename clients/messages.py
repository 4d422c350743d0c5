"""Wire protocol v1 text messages (DESIGN §4) as pydantic models with a literal ``type``."""

from __future__ import annotations

import json
import math
import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from clients.codec import PROTOCOL_VERSION
from clients.errors import ProtocolError

MAX_TEXT_MESSAGE = 64 * 1024
# What one attempt stores of a bridge's side messages (docs/protocol.md §11); over it: ``too_much_data``.
MAX_STATS_BYTES = 256 * 1024  # the attempt's stats, every ``stats`` message merged, as compact UTF-8 JSON
MAX_TEXT_BYTES = 1024 * 1024  # the ``text`` of all its ``text`` messages, UTF-8
MAX_TEXT_MESSAGES = 20_000  # its ``text`` messages
MAX_TURN_TEXT = 4000  # the words of one history line (``ContextTurn.text``, docs/protocol.md §5.2)
#: objects and arrays nested in one text message, the message itself included (docs/protocol.md §4):
#: what is stored must serialise again, and pydantic's serialiser stops at 255
MAX_DEPTH = 64
Clock = Literal["lockstep", "realtime"]
CLOCKS: tuple[str, ...] = get_args(Clock)  # in the order runs, checks and reports list them


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: optional fields added within protocol 1 that are left off the wire while they hold their
    #: default, so that a peer which predates them (and rejects unknown fields) still accepts the message
    _omit_default: ClassVar[tuple[str, ...]] = ()

    def dumps(self) -> str:
        fields = type(self).model_fields
        left_off = {f for f in self._omit_default if getattr(self, f) == fields[f].get_default(call_default_factory=True)}
        return self.model_dump_json(exclude_none=True, exclude=left_off or None)


class ModelInfo(_Msg):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")
    revision: str = Field(default="", max_length=200)


class Hello(_Msg):
    type: Literal["hello"] = "hello"
    protocol: int
    model: ModelInfo
    sample_rate: Literal[24000, 16000] = 24000
    clocks: list[Clock] = Field(default_factory=lambda: ["lockstep", "realtime"], min_length=1)
    #: the bridge takes assistant-context frames (kind 3, teacher forcing): only such bridges are
    #: given episodes with ``episode.start.context_frames`` (docs/protocol.md §5.1)
    accepts_context: bool = False
    #: the bridge asks to be told what it plays (``episode.start.reference``): oracle-style reference
    #: bridges only; granted to admin tokens, refused (``forbidden``) to any other (§4.3)
    wants_reference: bool = False
    #: the bridge is under a bridge check: it is given the episodes of its team's check runs only,
    #: never a real run's (a bridge without it is never given a check's); docs/protocol.md §2
    check: bool = False

    _omit_default = ("accepts_context", "wants_reference", "check")


class Welcome(_Msg):
    type: Literal["welcome"] = "welcome"
    bridge_id: str
    protocol: int = 1


class WorkReason(StrEnum):
    """Why a bridge has (or has no) work, as ``status.reason`` says (docs/protocol.md §4.5). A
    bridge must accept values it does not know: later servers may add some."""

    queued = "queued"  # episodes are queued for this bridge: one starts now
    busy = "busy"  # matching runs exist, but their open episodes run on other bridges
    other_clocks = "other_clocks"  # runs for this model name exist only for clocks this bridge does not serve
    ended = "ended"  # every run for this model name has ended: no more work
    no_run = "no_run"  # no run for this model name (in the token's team)
    #: the queued episodes need assistant-context frames, which this bridge did not accept in hello
    needs_context = "needs_context"


class Status(_Msg):
    """What work matches this bridge now (its model name, team and clocks): sent after
    ``welcome`` and again, while the bridge is idle, whenever it changes."""

    type: Literal["status"] = "status"
    matching_runs: int = Field(ge=0)
    queued_episodes: int = Field(ge=0)
    reason: str = Field(max_length=64)  # a WorkReason value (plain str: unknown future values still parse)
    hint: str = Field(default="", max_length=1000)


class Reference(_Msg):
    """Only admin bridges that asked for it (``hello.wants_reference``) receive this (oracle-style
    reference bridges)."""

    model_config = ConfigDict(extra="allow")
    scenario_id: str
    condition: str


class ContextTurn(_Msg):
    """One turn of the ground-truth history of an episode with assistant-context frames
    (docs/protocol.md §5.2): who speaks, the words, and the slots its audio spans. An
    ``assistant`` turn's audio arrives as the context frames of those slots, a ``user`` turn's in
    the room frames. ``played`` < 1: only that leading fraction of the clip's audio plays (a reply
    cut short by a barge-in); ``text`` is still the whole line's words."""

    role: Literal["user", "assistant"]
    text: str = Field(max_length=MAX_TURN_TEXT)
    start_seq: int = Field(ge=0, lt=2**32)  # the slot its audio starts in
    end_seq: int = Field(ge=0, lt=2**32)  # the slot after the one its audio ends in
    played: float = Field(default=1.0, gt=0, le=1)

    def spoken_text(self) -> str:
        """The words of the part that plays: all of ``text``, or its leading words in proportion
        to ``played`` (at least one word) when the clip is cut short."""
        if self.played >= 1:
            return self.text
        words = self.text.split()
        return " ".join(words[:max(1, round(len(words) * self.played))])


class EpisodeStart(_Msg):
    type: Literal["episode.start"] = "episode.start"
    episode_id: str
    clock: Clock
    sample_rate: Literal[24000, 16000]
    frame_samples: int
    max_inflight: int = 1
    reference: Reference | None = None
    #: the benchmark's duty as text, only when the run was created with a text prompt; bridges
    #: that take text instructions use it, others ignore it (absent: send no text prompt)
    instructions: str | None = Field(default=None, max_length=16_000)
    #: teacher forcing (docs/protocol.md §5.1): slots 0 … context_frames−1 each bring one
    #: assistant-context frame (kind 3) right before their room frame; 0 (absent on the wire): none.
    #: Only bridges that sent ``hello.accepts_context`` are given episodes with context frames.
    context_frames: int = Field(default=0, ge=0, lt=2**32)
    #: the words of the history that the context frames belong to, in time order (docs/protocol.md
    #: §5.2): only with ``context_frames`` and only where the benchmark has them; empty (absent): none
    context_turns: list[ContextTurn] = Field(default_factory=list, max_length=256)

    _omit_default = ("context_frames", "context_turns")


class EpisodeEnd(_Msg):
    type: Literal["episode.end"] = "episode.end"
    episode_id: str
    reason: str


class Text(_Msg):
    type: Literal["text"] = "text"
    seq: int = Field(ge=0, lt=2**32)
    text: str = Field(max_length=4000)


class Stats(_Msg):
    """Optional bridge-side measurements (latency, buffer depth, …), stored with the episode."""

    type: Literal["stats"] = "stats"
    data: dict[str, Any]


class Error(_Msg):
    type: Literal["error"] = "error"
    code: str = Field(max_length=64)
    message: str = Field(default="", max_length=1000)
    #: server → client, only with a code of clients.errors.RETRY_LATER_CODES when the server knows:
    #: the earliest a new attempt can succeed, in seconds (absent on the wire otherwise)
    retry_after_s: float | None = Field(default=None, ge=0, le=86_400, allow_inf_nan=False)


BridgeMessage = Annotated[Union[Hello, Text, Stats, Error], Field(discriminator="type")]
ServerMessage = Annotated[Union[Welcome, Status, EpisodeStart, EpisodeEnd, Error], Field(discriminator="type")]
_BRIDGE = TypeAdapter(BridgeMessage)
_SERVER = TypeAdapter(ServerMessage)
_BRIDGE_TYPES = {"hello", "text", "stats", "error"}
_SERVER_MODELS: dict[str, type[_Msg]] = {"welcome": Welcome, "status": Status, "episode.start": EpisodeStart,
                                         "episode.end": EpisodeEnd, "error": Error}

# Validation failures in the protocol's words (never the library's, which name internal classes).
_PLAIN = {
    "missing": "is required",
    "extra_forbidden": "is not a field of this message",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be an array",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
}


def _explain(err: dict) -> str:
    """One validation error of pydantic as the protocol document would say it."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind in _PLAIN:
        return _PLAIN[kind]
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        if "'" not in expected and (type(value) is not int):  # integer choices, e.g. sample_rate
            return f"must be an integer ({expected})"
        return f"must be {expected}"
    if kind in ("string_too_short", "too_short"):
        n = ctx.get("min_length")
        return f"must have at least {n} {'character' if kind.startswith('string') else 'item'}{'s' * (n != 1)}"
    if kind in ("string_too_long", "too_long"):
        n = ctx.get("max_length")
        return f"must have at most {n} {'character' if kind.startswith('string') else 'item'}{'s' * (n != 1)}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    bounds = {"greater_than_equal": ("≥", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("≤", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        op, key = bounds[kind]
        return f"must be {op} {ctx.get(key)}"
    return "has an invalid value"


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL, and surrogates (in a str from JSON: unpaired ones)


def storable(value: Any) -> Any:
    """JSON data with every character that a database or a UTF-8 document cannot hold -- NUL
    (PostgreSQL refuses it in text) and unpaired surrogates (``"\\ud800"`` is valid JSON, but not
    encodable as UTF-8) -- replaced by U+FFFD, in strings and object keys at any depth, and numbers
    that JSON cannot write back (``1e999`` and ``NaN`` parse as non-finite floats) replaced by None.
    The server applies it to everything a bridge sends (docs/protocol.md §4), so what it stores of a
    bridge's messages is always storable and servable."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value


def _too_deep(obj: Any) -> bool:
    """Whether ``obj`` nests objects and arrays more than :data:`MAX_DEPTH` deep (without recursing)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def _parse(raw: str | bytes, adapter: TypeAdapter, known: set[str] | dict[str, type[_Msg]],
           clean: bool = False):
    size = len(raw)
    if isinstance(raw, str) and 4 * size > MAX_TEXT_MESSAGE:  # the limit counts UTF-8 bytes
        size = len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_MESSAGE:
        raise ProtocolError("text message too large", code="message_too_big")
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        raise ProtocolError("text message is not valid JSON", code="bad_json") from None
    if _too_deep(obj):
        raise ProtocolError(f"text message nests objects and arrays more than {MAX_DEPTH} deep", code="bad_message")
    if clean:
        obj = storable(obj)
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ProtocolError("text message must be a JSON object with a string 'type'", code="bad_message")
    if obj["type"] not in known:
        raise ProtocolError(f"unknown message type {obj['type'][:40]!r}", code="unknown_type")
    # A hello of another protocol version may have another shape: answer with the version
    # error before validating the rest, so that any client learns what we speak.
    if obj["type"] == "hello" and type(obj.get("protocol")) is int and obj["protocol"] != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol {obj['protocol']} is not supported (this server speaks {PROTOCOL_VERSION})",
                            code="unsupported_version")
    if isinstance(known, dict):  # server messages: fields a later server adds are ignored (§4)
        model = known[obj["type"]]
        obj = {k: v for k, v in obj.items() if k in model.model_fields}
    try:  # strict: on the wire a string is not an integer ("16000" is refused, not converted), nor is true
        return adapter.validate_python(obj, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "message"
        raise ProtocolError(f"invalid {obj['type']} message: {where} {_explain(first)}", code="bad_message") from None


def parse_bridge_message(raw: str | bytes) -> Hello | Text | Stats | Error:
    """Parse a message sent by a bridge (server side), its text made :func:`storable` first."""
    return _parse(raw, _BRIDGE, _BRIDGE_TYPES, clean=True)


def parse_server_message(raw: str | bytes) -> Welcome | Status | EpisodeStart | EpisodeEnd | Error:
    """Parse a message sent by the server (bridge side). Fields it does not know are ignored; a
    type it does not know raises ``unknown_type`` (the SDK skips such messages)."""
    return _parse(raw, _SERVER, _SERVER_MODELS)
