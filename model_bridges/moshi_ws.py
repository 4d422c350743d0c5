"""``moshi-ws``: the WebSocket protocol of Kyutai's Moshi server (``/api/chat``).

The same protocol is spoken by the FLM-Audio server and NVIDIA PersonaPlex, so one bridge
serves the three. Every WebSocket message is binary; its first byte is its kind:

* 0 handshake (server → client): sent once the server has a free slot (the Python server
  serves one session at a time); one byte, or nine with the Rust server (u32 protocol and
  u32 model version, little-endian).
* 1 audio (both ways): Ogg/Opus pages of 24 kHz mono. We send one page per 80 ms room
  frame; the server answers one 80 ms frame per frame it gets (none for its very first
  step, the model's delay).
* 2 text (server → client): a UTF-8 piece of the model's inner monologue.
* 3 control, 4 metadata (JSON), 6 ping: accepted and counted; 5 error: ends the attempt.

Playout: every decoded frame goes into the playout buffer as it arrives and plays in the
next free 80 ms slot, so the recorded track is the model's output stream as a listener in
the room hears it, delayed by the network and the model's step time. Moshi has no
interruption message: the model itself decides to stop talking, so nothing is flushed.
"""

from __future__ import annotations

import asyncio
import re
import struct

from clients.pcm import float_to_pcm16, pcm16_to_float
from model_bridges import register
from model_bridges.playout import (
    BridgeConfigError,
    EndpointBridge,
    EndpointError,
    EndpointProtocolError,
    EndpointUnavailable,
    load_secret,
    opt_float,
    run_together,
    ws_connect,
)

KIND_HANDSHAKE, KIND_AUDIO, KIND_TEXT, KIND_CONTROL, KIND_METADATA, KIND_ERROR, KIND_PING = range(7)
ITEM = "moshi"  # one open stream: Moshi's output never ends while the session runs
_SENTENCE_END = re.compile(r"[.!?\n]\s*$")


@register("moshi-ws")
class MoshiWS(EndpointBridge):
    """Options: ``model_name`` (model name announced to the server, default ``moshi``),
    ``api_key_env`` / ``api_key_file`` (optional Bearer token, for servers behind a proxy),
    ``text_flush_s`` (emit pending monologue text after this pause, default 1; also at
    sentence ends and after 200 characters), plus the
    common endpoint options (``connect_timeout_s``, ``response_timeout_s``: silence of the
    server while frames are sent, default 5 s)."""

    name = "moshi-ws"

    def __init__(self, endpoint: str | None = None, **options):
        options.setdefault("response_timeout_s", "5")
        super().__init__(endpoint, **options)
        self.name = self.model_name or "moshi"
        key_env = self.options.pop("api_key_env", "MOSHI_API_KEY")
        self._key = load_secret(key_env, self.options.pop("api_key_file", None))
        self.text_flush_s = opt_float(self.options, "text_flush_s", 1.0)
        if not self.endpoint.startswith(("ws://", "wss://")):
            raise BridgeConfigError("moshi-ws: the endpoint must be a ws:// or wss:// URL (…/api/chat)")
        self.check_options()

    def new_episode(self) -> None:
        self._text, self._text_at = "", 0.0
        self.counters.update(frames_sent=0, frames_received=0, lag_frames_max=0)

    async def session(self) -> None:
        try:
            import sphn
        except ImportError:  # pragma: no cover - the [bridges] extra
            raise BridgeConfigError("moshi-ws needs sphn: pip install 'duplex-mpe[bridges]'") from None

        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        ws = await ws_connect(self.endpoint, headers, timeout=self.connect_timeout_s, max_size=1 << 22)
        try:
            await self._handshake(ws)
            self.ready()
            writer, reader = sphn.OpusStreamWriter(self.sample_rate), sphn.OpusStreamReader(self.sample_rate)
            await run_together(self._send_loop(ws, writer), self._recv_loop(ws, reader))
        finally:
            await ws.close()

    async def _handshake(self, ws) -> None:
        # The Python server sends b"\x00" once its lock is free; nothing else comes before it.
        msg = await asyncio.wait_for(ws.recv(), self.connect_timeout_s)
        if not isinstance(msg, bytes) or not msg or msg[0] != KIND_HANDSHAKE:
            raise EndpointProtocolError("moshi-ws: the first message is not a handshake")
        if len(msg) >= 9:  # Rust server: u32 protocol version, u32 model version
            proto, model = struct.unpack_from("<II", msg, 1)
            self.counters.update(server_protocol=proto, server_model_version=model)

    async def _send_loop(self, ws, writer) -> None:
        while True:
            seq, room, _ = await self.next_room()
            page = writer.append_pcm(pcm16_to_float(room))
            if page:
                await ws.send(bytes([KIND_AUDIO]) + page)
            n = self.counters["frames_sent"] = self.counters["frames_sent"] + 1
            lag = n - self.counters["frames_received"]
            self.counters["lag_frames_max"] = max(self.counters["lag_frames_max"], lag)
            if "audio" not in self._watch:  # §issue: an endpoint that stops answering is an error
                self.expect("audio")
            if self._text and self.clock() - self._text_at >= self.text_flush_s:
                self._emit_text()

    async def _recv_loop(self, ws, reader) -> None:
        async for msg in ws:
            if not isinstance(msg, bytes):
                raise EndpointProtocolError("moshi-ws: text WebSocket message (the protocol is binary)")
            if not msg:
                raise EndpointProtocolError("moshi-ws: empty message")
            kind, payload = msg[0], msg[1:]
            if kind == KIND_AUDIO:
                try:
                    pcm = reader.append_bytes(payload)
                except Exception:
                    raise EndpointProtocolError("moshi-ws: invalid Ogg/Opus audio") from None
                if len(pcm):
                    self.playout.push(float_to_pcm16(pcm), ITEM)
                    self.counters["frames_received"] += len(pcm) / self.frame_samples
                    self.expect("audio")  # Moshi answers every frame: re-arm the watchdog
            elif kind == KIND_TEXT:
                self._text += payload.decode("utf-8", "replace")
                self._text_at = self.clock()
                # logged by sentence; a long run without punctuation is logged at a word break
                if _SENTENCE_END.search(self._text) or (len(self._text) >= 200 and self._text.endswith(" ")):
                    self._emit_text()
            elif kind == KIND_ERROR:
                detail = payload[:200].decode("utf-8", "replace").strip()
                raise EndpointError(f"moshi-ws: the endpoint reported an error: {detail or 'no detail'}")
            elif kind in (KIND_HANDSHAKE, KIND_CONTROL, KIND_METADATA, KIND_PING):
                self.count(f"kind{kind}_messages")
            else:
                raise EndpointProtocolError(f"moshi-ws: unknown message kind {kind}")
        raise EndpointUnavailable("moshi-ws: the endpoint closed the connection")

    def _emit_text(self) -> None:
        self.text(self._text)
        self._text = ""

    def stats(self) -> dict:
        out = super().stats()
        if "frames_received" in out:
            out["frames_received"] = int(out["frames_received"])
        return out

