"""Wire protocol v1 text messages (DESIGN §4) as pydantic models with a literal ``type``."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from clients.codec import PROTOCOL_VERSION
from clients.errors import ProtocolError

MAX_TEXT_MESSAGE = 64 * 1024
Clock = Literal["lockstep", "realtime"]


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def dumps(self) -> str:
        return self.model_dump_json(exclude_none=True)


class ModelInfo(_Msg):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")
    revision: str = Field(default="", max_length=200)


class Hello(_Msg):
    type: Literal["hello"] = "hello"
    protocol: int
    model: ModelInfo
    sample_rate: Literal[24000, 16000] = 24000
    clocks: list[Clock] = Field(default_factory=lambda: ["lockstep", "realtime"], min_length=1)


class Welcome(_Msg):
    type: Literal["welcome"] = "welcome"
    bridge_id: str
    protocol: int = 1


class Reference(_Msg):
    """Only admin bridges receive this (oracle-style reference bridges)."""

    model_config = ConfigDict(extra="allow")
    scenario_id: str
    condition: str


class EpisodeStart(_Msg):
    type: Literal["episode.start"] = "episode.start"
    episode_id: str
    clock: Clock
    sample_rate: Literal[24000, 16000]
    frame_samples: int
    max_inflight: int = 1
    reference: Reference | None = None


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


BridgeMessage = Annotated[Union[Hello, Text, Stats, Error], Field(discriminator="type")]
ServerMessage = Annotated[Union[Welcome, EpisodeStart, EpisodeEnd, Error], Field(discriminator="type")]
_BRIDGE = TypeAdapter(BridgeMessage)
_SERVER = TypeAdapter(ServerMessage)
_BRIDGE_TYPES = {"hello", "text", "stats", "error"}
_SERVER_TYPES = {"welcome", "episode.start", "episode.end", "error"}


def _parse(raw: str | bytes, adapter: TypeAdapter, known: set[str]):
    size = len(raw)
    if isinstance(raw, str) and 4 * size > MAX_TEXT_MESSAGE:  # the limit counts UTF-8 bytes
        size = len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_MESSAGE:
        raise ProtocolError("text message too large", code="message_too_big")
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        raise ProtocolError("text message is not valid JSON", code="bad_json") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ProtocolError("text message must be a JSON object with a string 'type'", code="bad_message")
    if obj["type"] not in known:
        raise ProtocolError(f"unknown message type {obj['type'][:40]!r}", code="unknown_type")
    # A hello of another protocol version may have another shape: answer with the version
    # error before validating the rest, so that any client learns what we speak.
    if obj["type"] == "hello" and type(obj.get("protocol")) is int and obj["protocol"] != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol {obj['protocol']} is not supported (this server speaks {PROTOCOL_VERSION})",
                            code="unsupported_version")
    try:
        return adapter.validate_python(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "message"
        raise ProtocolError(f"invalid {obj['type']} message: {where}: {first['msg']}", code="bad_message") from None


def parse_bridge_message(raw: str | bytes) -> Hello | Text | Stats | Error:
    """Parse a message sent by a bridge (server side)."""
    return _parse(raw, _BRIDGE, _BRIDGE_TYPES)


def parse_server_message(raw: str | bytes) -> Welcome | EpisodeStart | EpisodeEnd | Error:
    """Parse a message sent by the server (bridge side)."""
    return _parse(raw, _SERVER, _SERVER_TYPES)
