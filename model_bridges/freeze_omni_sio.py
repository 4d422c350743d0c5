"""``freeze-omni-sio``: Freeze-Omni behind its Socket.IO demo server, as a realtime bridge.

Freeze-Omni's demo server (``bin/server.py``: Flask-SocketIO, default namespace) is not
frame-synchronous: a VAD and a chunk-level state classifier decide when the model speaks,
and its speech decoder produces int16 segments at 24 kHz cut at punctuation. The events:

- client ``prompt_text`` (the system prompt, a string) -> server ``prompt_success``;
- client ``recording-started`` -> server ``stop_tts`` (a fresh dialogue state);
- client ``audio``: a JSON *string* ``{"sample_rate": 16000, "audio": [bytes of int16 LE]}``;
  for every such packet the server emits at most one queued segment (``audio``, binary
  int16 24 kHz) and then ``stop_tts`` if the model cut its own speech (barge-in) since the
  previous packet. Output is pulled by input: the bridge sends every room frame, silence
  included, so the model's speech keeps flowing;
- server ``too_many_users`` (on connect, beyond ``--max_users``) and ``out_time`` (session
  timer) end the session; the client ends with ``recording-stopped`` and a disconnect.

Playout rules (what a listener in the room hears): segments are played in arrival order,
gap-free while the next one is already there, each one's last partial frame padded with
zeros; ``stop_tts`` drops everything not yet played (the demo's browser client does the
same), and later segments start a new reply. The demo server sends no text.

Failures end the attempt with an ``EndpointError`` (the engine retries): a refused or lost
connection, ``too_many_users``, ``out_time``, a malformed ``audio`` payload, the handshake
not completing within ``connect_timeout_s``, or the server leaving ``audio`` packets
unacknowledged for ``response_timeout_s`` (each packet asks for a Socket.IO ack, which
any Socket.IO server sends once its handler has run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from clients.pcm import float_to_pcm16
from model_bridges import register
from model_bridges.playout import (
    BridgeConfigError,
    EndpointBridge,
    EndpointProtocolError,
    EndpointRateLimited,
    EndpointTimeout,
    EndpointUnavailable,
    FarewellMixin,
    PlayoutBuffer,
    Rechunker,
    load_secret,
    opt_bool,
    opt_int,
    redact_url,
)

MODEL_RATE_IN = 16_000
MAX_SEGMENT_BYTES = 24_000 * 2 * 60  # one minute of speech in a single segment is already absurd
_SENDER_FAILED = object()  # event-queue marker: the sending task failed (never a server event name)


def endpoint_url(endpoint: str) -> str:
    """Socket.IO wants the HTTP(S) origin; ws:// and wss:// are accepted as aliases."""
    try:
        p = urlsplit(endpoint)
    except ValueError:
        raise BridgeConfigError("invalid endpoint URL") from None
    scheme = {"ws": "http", "wss": "https"}.get(p.scheme, p.scheme)
    if scheme not in ("http", "https") or not p.hostname:
        raise BridgeConfigError("the endpoint must be an http://, https://, ws:// or wss:// URL with a host")
    return urlunsplit((scheme, p.netloc, p.path.rstrip("/"), p.query, ""))


def audio_packet(pcm16k: np.ndarray) -> str:
    """The demo's ``audio`` payload: a JSON string with the int16 bytes as a list of numbers."""
    return json.dumps({"sample_rate": MODEL_RATE_IN, "audio": list(pcm16k.astype("<i2").tobytes())},
                      separators=(",", ":"))


class FreezeOmniProtocol:
    """The receiving half (pure): segments into the playout buffer, ``stop_tts`` cuts."""

    def __init__(self, playout: PlayoutBuffer, where: str = "freeze-omni"):
        self.playout, self.where = playout, where
        self.reply = 0
        self.live = False  # after the handshake: stop_tts is a cut, not an acknowledgement
        self.segments = 0
        self.segment_ms: list[int] = []
        self.stop_tts = 0
        self.interruptions = 0
        self.unknown_events: dict[str, int] = {}

    @property
    def item(self) -> str:
        return f"reply-{self.reply}"

    def on_audio(self, data: Any) -> None:
        if not isinstance(data, (bytes, bytearray)):
            raise EndpointProtocolError(f"{self.where}: an audio event without binary int16 data")
        if len(data) % 2:
            raise EndpointProtocolError(f"{self.where}: an audio segment with an odd number of bytes")
        if len(data) > MAX_SEGMENT_BYTES:
            raise EndpointProtocolError(f"{self.where}: an audio segment longer than a minute")
        pcm = np.frombuffer(bytes(data), dtype="<i2").astype(np.int16)
        self.segments += 1
        self.segment_ms.append(len(pcm) * 1000 // 24_000)
        # §playout: segments of one reply follow each other gap-free when in time; each one is
        # complete, so its last partial frame may play (padded) when nothing follows yet.
        self.playout.push(pcm, self.item)
        self.playout.end_item(self.item)

    def on_stop_tts(self) -> None:
        self.stop_tts += 1
        if not self.live:
            return
        if self.playout.flush():  # the model cut its speech: drop what was not played yet
            self.interruptions += 1
        self.reply += 1

    def on_other(self, event: str) -> None:
        if event == "too_many_users":
            raise EndpointRateLimited(f"{self.where}: the endpoint is at capacity (too_many_users)")
        if event == "out_time":
            raise EndpointTimeout(f"{self.where}: the endpoint ended the session (out_time)")
        self.unknown_events[event[:40]] = self.unknown_events.get(event[:40], 0) + 1

    def stats(self) -> dict[str, Any]:
        seg = sorted(self.segment_ms)
        return {"segments": self.segments, "segment_ms_max": seg[-1] if seg else 0,
                "segment_ms_mean": int(round(sum(seg) / len(seg))) if seg else 0,
                "stop_tts": self.stop_tts, "interruptions": self.interruptions,
                **({"unknown_events": dict(self.unknown_events)} if self.unknown_events else {})}


@register("freeze-omni-sio")
class FreezeOmniBridge(FarewellMixin, EndpointBridge):
    """Freeze-Omni's Socket.IO demo server as a realtime bridge.

    Options (``--opt key=value``): ``model_name`` / ``revision`` (announced to our server,
    default ``freeze-omni``), ``instructions`` / ``instructions_file`` (sent as
    ``prompt_text``; by default only the run's text prompt, see :mod:`model_bridges.playout`),
    ``send_prompt`` (``true``; ``false``: never send a text prompt),
    ``packet_samples`` (16 kHz samples per ``audio`` packet, default 1280 = 80 ms),
    ``transport`` (``auto`` | ``websocket`` | ``polling``), ``socketio_path``
    (``socket.io``), ``acks`` (``true``: ask for an ack per packet, the liveness check),
    ``verify_tls`` (``true``), ``api_key_env`` (``FREEZE_OMNI_API_KEY``) / ``api_key_file``
    (Bearer token for a proxy; the demo has none), plus the common ``connect_timeout_s``,
    ``response_timeout_s`` and ``stats_every``.
    """

    name = "freeze-omni"
    takes_instructions = True

    def __init__(self, endpoint: str | None = None, **options: Any):
        super().__init__(endpoint, **options)
        o = self.options
        if not opt_bool(o, "send_prompt", True):
            if self.instructions_option:
                raise BridgeConfigError("instructions were given but send_prompt is false")
            self.takes_instructions = False  # the run's text prompt is ignored too (reported)
        self.packet_samples = opt_int(o, "packet_samples", 1280)
        if not 16 <= self.packet_samples <= 16_000:
            raise BridgeConfigError("packet_samples must be between 16 and 16000")
        transport = str(o.pop("transport", "auto"))
        if transport not in ("auto", "websocket", "polling"):
            raise BridgeConfigError("transport must be auto, websocket or polling")
        self.transports = None if transport == "auto" else [transport]
        self.socketio_path = str(o.pop("socketio_path", "socket.io"))
        self.acks = opt_bool(o, "acks", True)
        self.verify_tls = opt_bool(o, "verify_tls", True)
        self._api_key_env = str(o.pop("api_key_env", "FREEZE_OMNI_API_KEY"))
        self._api_key_file = o.pop("api_key_file", None)
        self.check_options()
        self.url = endpoint_url(self.endpoint)
        self.protocol: FreezeOmniProtocol | None = None

    async def session(self) -> None:
        import socketio

        proto = self.protocol = FreezeOmniProtocol(self.playout, self.name)
        events: asyncio.Queue = asyncio.Queue()  # handled in order by this task, never in callbacks
        sio = socketio.AsyncClient(reconnection=False, handle_sigint=False, ssl_verify=self.verify_tls)
        sio.on("*", lambda event, *args: events.put_nowait((event, args)))
        sio.on("audio", lambda *args: events.put_nowait(("audio", args)))
        sio.on("stop_tts", lambda *args: events.put_nowait(("stop_tts", args)))
        sio.on("disconnect", lambda *args: events.put_nowait(("disconnect", args)))
        key = load_secret(self._api_key_env, self._api_key_file)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.counters["endpoint"] = redact_url(self.url)
        try:
            try:
                await sio.connect(self.url, headers=headers, transports=self.transports,
                                  socketio_path=self.socketio_path, wait_timeout=self.connect_timeout_s)
            except socketio.exceptions.ConnectionError as exc:
                raise EndpointUnavailable(f"{self.name}: cannot connect ({str(exc)[:200]})") from None
            if self.instructions is not None:  # §4: a text prompt only when the run or the bridge sets one
                await sio.emit("prompt_text", self.instructions)
                await self._until(events, "prompt_success")
            await sio.emit("recording-started")
            await self._until(events, "stop_tts")  # the server's reset acknowledges the start
            proto.live = True
            self.ready()
            sender = asyncio.create_task(self._send_loop(sio, events))
            try:
                while True:
                    self._dispatch(*await events.get())
            finally:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
        finally:
            self.farewell(self._goodbye(sio))

    async def _until(self, events: asyncio.Queue, wanted: str) -> None:
        """Handshake: handle events until ``wanted`` (the connect watchdog bounds the wait)."""
        while True:
            event, args = await events.get()
            if event == wanted:
                if event == "stop_tts":
                    self.protocol.on_stop_tts()
                return
            self._dispatch(event, args)

    def _dispatch(self, event: str, args: tuple) -> None:
        proto = self.protocol
        if event == "audio":
            if len(args) != 1:
                raise EndpointProtocolError(f"{self.name}: an audio event with {len(args)} arguments")
            proto.on_audio(args[0])
        elif event == "stop_tts":
            proto.on_stop_tts()
        elif event is _SENDER_FAILED:
            raise args[0]
        elif event == "disconnect":
            raise EndpointUnavailable(f"{self.name}: the endpoint closed the connection")
        else:
            proto.on_other(event)

    async def _send_loop(self, sio, events: asyncio.Queue) -> None:
        try:
            await self._send(sio)
        except Exception as exc:  # handed to the session task, which ends the attempt
            events.put_nowait((_SENDER_FAILED, (exc,)))

    async def _send(self, sio) -> None:
        chunker = Rechunker(self.packet_samples)
        proto, unacked = self.protocol, []  # this session's packets awaiting their ack

        def on_ack(*_: Any) -> None:
            if proto is not self.protocol or not unacked:
                return  # a late ack from an earlier session's connection
            unacked.pop(0)
            self.count("acks")
            if unacked:
                self.expect("ack", unacked[0] + self.response_timeout_s - self.clock())
            else:
                self.disarm("ack")

        while True:
            _, room, _ = await self.next_room()
            for chunk in chunker.push(room):
                payload = audio_packet(float_to_pcm16(chunk))
                if self.acks:
                    if not unacked:
                        self.expect("ack")  # §watchdog: a live server acknowledges every packet
                    unacked.append(self.clock())
                    await sio.emit("audio", payload, callback=on_ack)
                else:
                    await sio.emit("audio", payload)
                self.count("packets_sent")

    async def _goodbye(self, sio) -> None:
        """Best effort: end the recording (acknowledged, so it is handled before we leave)."""
        with contextlib.suppress(BaseException):
            if sio.connected:
                await sio.call("recording-stopped", timeout=1.0)
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(2.0):
                await sio.disconnect()

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        if self.protocol is not None:
            out.update(self.protocol.stats())
        return out
