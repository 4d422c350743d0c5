"""``minicpm-o-ws``: MiniCPM-o 4.5 behind its duplex demo server, as a realtime bridge.

The demo server (OpenBMB's PyTorch simple demo: gateway ``/ws/duplex/{session_id}``, or a
worker's ``/ws/duplex?session_id=``) speaks JSON over one WebSocket per session:

- client ``prepare {system_prompt, config, ref_audio_base64?}`` -> server ``prepared``
  (a gateway may first send ``queued`` / ``queue_update`` / ``queue_done``);
- client ``audio_chunk {audio_base64}``: one second of 16 kHz mono float32 (little-endian),
  base64; the server runs one model step per chunk, strictly in order, and answers each
  with ``result {is_listen, text, audio_data (base64 float32, 24 kHz) | null, end_of_turn,
  current_time, cost_*_ms, …}``;
- client ``stop`` -> ``stopped``; server ``error {error}`` and ``timeout {reason}``.

The model decides once per second, our wire protocol moves 80 ms frames (DESIGN §4). The
bridge re-chunks both ways: room frames are resampled to 16 kHz and sent as exact 1 s
chunks; the audio of each ``result`` (any length) goes into the playout buffer, which plays
one 80 ms frame per room frame. What the buffer plays is the recorded assistant track.

Playout rules (what a listener in the room hears):

- a speaking turn runs from the first ``result`` with ``is_listen: false`` to the result
  with ``end_of_turn: true`` or the next ``is_listen: true``; its audio is played in order,
  gap-free while it arrives in time (late results are underruns, counted);
- ``is_listen: true`` together with ``end_of_turn: true`` is the model's own report that
  it was interrupted or stopped: the audio of the turn not yet played is dropped then;
- a listen result may carry silence; silent audio there (peak below -40 dBFS) is not
  queued, since it would only delay later speech (audible audio there is played);
- otherwise nothing the model sent is dropped (the protocol has no other cut signal).

Failures end the attempt with an ``EndpointError`` (the engine retries): a refused or lost
connection, a full gateway queue, ``error`` / ``timeout`` messages, malformed JSON or
audio, ``prepared`` not arriving within ``connect_timeout_s``, or a chunk left without its
``result`` for ``response_timeout_s``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import ssl
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import numpy as np
import websockets

from clients.pcm import float_to_pcm16
from model_bridges import register
from model_bridges.playout import (
    WIRE_LOG,
    BridgeConfigError,
    EndpointBridge,
    EndpointError,
    EndpointProtocolError,
    EndpointRateLimited,
    EndpointTimeout,
    EndpointUnavailable,
    FarewellMixin,
    PlayoutBuffer,
    Rechunker,
    load_secret,
    opt_bool,
    redact_url,
    run_together,
)

MODEL_RATE_IN = 16_000  # the duplex model's input: 16 kHz float32
MODEL_RATE_OUT = 24_000  # its speech output
CHUNK_SAMPLES = 16_000  # one model step = 1 s of input (DuplexConfig.chunk_ms = 1000)
MAX_MESSAGE = 32 << 20  # a result may carry several seconds of float32 audio as base64
MAX_ERROR_TEXT = 300
LISTEN_AUDIBLE = 328  # int16 peak of about -40 dBFS: below it, audio on a listen result is silence


def session_url(endpoint: str, session_id: str) -> str:
    """The WebSocket URL of one duplex session.

    ``ws[s]://host:port`` (or ``http[s]://``) -> the gateway's ``/ws/duplex/{session_id}``;
    a URL ending in ``/ws/duplex`` -> that worker with ``?session_id=``; a URL containing
    ``{session_id}`` -> substituted. ``adx_`` ids make the gateway route to audio duplex.
    """
    try:
        p = urlsplit(endpoint)
    except ValueError:
        raise BridgeConfigError("invalid endpoint URL") from None
    scheme = {"http": "ws", "https": "wss"}.get(p.scheme, p.scheme)
    if scheme not in ("ws", "wss") or not p.hostname:
        raise BridgeConfigError("the endpoint must be a ws://, wss://, http:// or https:// URL with a host")
    sid = quote(session_id, safe="")
    path, query = p.path, p.query
    if "{session_id}" in path or "%7Bsession_id%7D" in path:
        path = path.replace("{session_id}", sid).replace("%7Bsession_id%7D", sid)
    elif path.rstrip("/").endswith("/ws/duplex"):
        path = path.rstrip("/")
        query = f"{query}&session_id={sid}" if query else f"session_id={sid}"
    elif path in ("", "/"):
        path = f"/ws/duplex/{sid}"
    return urlunsplit((scheme, p.netloc, path, query, ""))


def _server_error(msg: dict, where: str) -> EndpointError:
    """An ``error`` message as an EndpointError (the server's text, shortened)."""
    text = str(msg.get("error") or msg.get("message") or "no detail")[:MAX_ERROR_TEXT]
    if "queue full" in text.lower():
        return EndpointRateLimited(f"{where}: the endpoint is at capacity ({text})")
    return EndpointError(f"{where}: the endpoint reported an error: {text}")


class MiniCPMProtocol:
    """The receiving half of a duplex session (pure: messages and a clock value in, effects out).

    Feeds ``result`` audio into the playout buffer under one item per speaking turn, applies
    the cut rule, matches results to chunks (one each, in order) and keeps latency figures.
    Raises an EndpointError for anything the protocol does not allow.
    """

    def __init__(self, playout: PlayoutBuffer, where: str = "minicpm-o-ws"):
        self.playout, self.where = playout, where
        self.sent: list[float] = []  # send times of chunks still without a result
        self.turn = 0
        self.speaking = False
        self.results = 0
        self.speak_results = 0
        self.interruptions = 0
        self.result_ms: list[int] = []  # chunk sent -> its result received
        self.onset_ms: list[int] = []  # the same, for the first result of each speaking turn
        self.model_ms: list[int] = []  # the server's own cost_all_ms
        self.listen_silence_ms = 0  # silent audio that came with listen results (not queued)

    @property
    def item(self) -> str:
        return f"turn-{self.turn}"

    def chunk_sent(self, now: float) -> None:
        self.sent.append(now)

    def parse(self, raw: str | bytes) -> dict:
        """A server message as a JSON object with a string ``type``."""
        if isinstance(raw, bytes):
            raise EndpointProtocolError(f"{self.where}: unexpected binary message")
        try:
            msg = json.loads(raw)
        except (ValueError, RecursionError):
            raise EndpointProtocolError(f"{self.where}: the endpoint sent malformed JSON") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            raise EndpointProtocolError(f"{self.where}: message without a type")
        return msg

    def handle(self, raw: str | bytes, now: float) -> tuple[str, str | None]:
        """One message from the server -> (its type, model text to log or None)."""
        msg = self.parse(raw)
        kind = msg["type"]
        if kind == "result":
            return kind, self._result(msg, now)
        if kind == "error":
            raise _server_error(msg, self.where)
        if kind == "timeout":
            raise EndpointTimeout(f"{self.where}: the endpoint ended the session "
                                  f"({str(msg.get('reason') or 'timeout')[:MAX_ERROR_TEXT]})")
        if kind == "stopped":
            raise EndpointUnavailable(f"{self.where}: the endpoint stopped the session")
        if kind == "audio_only":  # the llama.cpp backend's separate audio stream: not supported
            raise EndpointProtocolError(f"{self.where}: audio_only messages (C++ backend) are not supported")
        # queue_*, paused, resumed and anything newer carry no audio: nothing to play.
        return kind, None

    def _result(self, msg: dict, now: float) -> str | None:
        is_listen, end = msg.get("is_listen"), msg.get("end_of_turn", False)
        text, data = msg.get("text") or "", msg.get("audio_data")
        if not isinstance(is_listen, bool) or not isinstance(end, bool) or not isinstance(text, str) \
                or not (data is None or isinstance(data, str)):
            raise EndpointProtocolError(f"{self.where}: malformed result message")
        if not self.sent:
            raise EndpointProtocolError(f"{self.where}: a result arrived for no audio chunk")
        latency = int(round((now - self.sent.pop(0)) * 1000))
        self.results += 1
        self.result_ms.append(latency)
        cost = msg.get("cost_all_ms")
        if isinstance(cost, (int, float)):
            self.model_ms.append(int(round(cost)))
        pcm = self._decode(data) if data else np.zeros(0, np.int16)
        if is_listen:
            if self.speaking:
                if end:  # §playout: the model reports it was interrupted -> cut what is unplayed
                    self.playout.flush()
                    self.interruptions += 1
                else:
                    self.playout.end_item(self.item)
                self.speaking = False
                self.turn += 1
            if len(pcm) and int(np.abs(pcm.astype(np.int32)).max()) >= LISTEN_AUDIBLE:
                # audible audio on a listen result is still speech someone would hear: play it
                self.playout.push(pcm, self.item)
                self.playout.end_item(self.item)
                self.turn += 1
            elif len(pcm):  # listen results may carry silence: queueing it would only delay speech
                self.listen_silence_ms += len(pcm) * 1000 // MODEL_RATE_OUT
            return text or None
        if not self.speaking:
            self.speaking = True
            self.onset_ms.append(latency)
        self.speak_results += 1
        self.playout.push(pcm, self.item)
        if end:
            self.playout.end_item(self.item)
            self.speaking = False
            self.turn += 1
        return text or None

    def _decode(self, data: str) -> np.ndarray:
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise EndpointProtocolError(f"{self.where}: result audio is not valid base64") from None
        if len(raw) % 4:
            raise EndpointProtocolError(f"{self.where}: result audio is not float32 samples")
        x = np.frombuffer(raw, dtype="<f4")
        if not np.all(np.isfinite(x)):
            raise EndpointProtocolError(f"{self.where}: result audio holds NaN or infinity")
        return float_to_pcm16(x)

    def stats(self) -> dict[str, Any]:
        return {"results": self.results, "speak_results": self.speak_results, "interruptions": self.interruptions,
                "chunks_unanswered": len(self.sent), "listen_silence_ms": self.listen_silence_ms,
                "result_ms": _summary(self.result_ms),
                "turn_onset_ms": _summary(self.onset_ms), "model_step_ms": _summary(self.model_ms)}


def _summary(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    v = sorted(values)
    return {"n": len(v), "mean": int(round(sum(v) / len(v))), "p50": v[len(v) // 2],
            "p90": v[min(len(v) - 1, -(-9 * len(v) // 10) - 1)], "max": v[-1]}


def _ssl_context(url: str, verify: bool) -> ssl.SSLContext | None:
    if not url.startswith("wss:"):
        return None
    ctx = ssl.create_default_context()
    if not verify:  # the demo gateway serves a self-signed certificate
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _ref_audio_b64(path: str) -> str:
    """A reference voice (any WAV/FLAC) as the demo wants it: 16 kHz mono float32, base64."""
    import soundfile as sf
    import soxr

    try:
        x, rate = sf.read(str(Path(path).expanduser()), dtype="float32", always_2d=True)
    except (OSError, RuntimeError) as exc:
        raise BridgeConfigError(f"cannot read ref_audio ({type(exc).__name__})") from None
    x = x.mean(axis=1)
    if rate != MODEL_RATE_IN:
        x = soxr.resample(x, rate, MODEL_RATE_IN)
    return base64.b64encode(np.asarray(x, dtype="<f4").tobytes()).decode("ascii")


@register("minicpm-o-ws")
class MiniCPMBridge(FarewellMixin, EndpointBridge):
    """MiniCPM-o 4.5 duplex demo server (gateway or worker) as a realtime bridge.

    Options (``--opt key=value``): ``model_name`` / ``revision`` (announced to our server,
    default ``minicpm-o-4.5``), ``instructions`` / ``instructions_file`` (system prompt; by
    default only the run's text prompt, see :mod:`model_bridges.playout`), ``config`` (JSON object of DuplexConfig fields, e.g.
    ``{"force_listen_count": 1}``), ``ref_audio`` (voice reference file),
    ``session_prefix`` (``adx_``), ``verify_tls`` (``true``), ``api_key_env``
    (``MINICPM_API_KEY``) / ``api_key_file`` (Bearer token for a proxy in front of the
    demo; the demo itself has none), plus the common ``connect_timeout_s``,
    ``response_timeout_s`` and ``stats_every``.
    """

    name = "minicpm-o-4.5"
    takes_instructions = True

    def __init__(self, endpoint: str | None = None, **options: Any):
        super().__init__(endpoint, **options)
        o = self.options
        raw_config = o.pop("config", None)
        try:
            extra = json.loads(raw_config) if raw_config else {}
        except ValueError:
            raise BridgeConfigError("option config must be a JSON object") from None
        if not isinstance(extra, dict):
            raise BridgeConfigError("option config must be a JSON object")
        # §4/§11: a fresh session is reproducible only if no earlier client's config lingers on
        # the worker, so a config is always sent; the server fills in its own defaults.
        self.config = {"chunk_ms": 1000, "sample_rate": MODEL_RATE_IN, **extra}
        if self.config["chunk_ms"] != 1000 or self.config["sample_rate"] != MODEL_RATE_IN:
            raise BridgeConfigError("this bridge sends 1 s chunks at 16 kHz (chunk_ms=1000, sample_rate=16000)")
        ref = o.pop("ref_audio", None)
        self.ref_audio_b64 = _ref_audio_b64(ref) if ref else None
        self.session_prefix = str(o.pop("session_prefix", "adx_"))
        self.verify_tls = opt_bool(o, "verify_tls", True)
        self._api_key_env = str(o.pop("api_key_env", "MINICPM_API_KEY"))
        self._api_key_file = o.pop("api_key_file", None)
        self.check_options()
        session_url(self.endpoint, "probe")  # a bad URL is a configuration error, found now
        self.protocol: MiniCPMProtocol | None = None
        self.chunker: Rechunker | None = None

    # EndpointBridge --------------------------------------------------------------------

    async def session(self) -> None:
        self.protocol = MiniCPMProtocol(self.playout, self.name)
        self.chunker = Rechunker(CHUNK_SAMPLES, out_rate=MODEL_RATE_IN)
        url = session_url(self.endpoint, self.session_prefix + uuid.uuid4().hex[:12])
        key = load_secret(self._api_key_env, self._api_key_file)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.counters["endpoint"] = redact_url(url)
        try:
            ws = await websockets.connect(url, additional_headers=headers, max_size=MAX_MESSAGE, compression=None,
                                          open_timeout=self.connect_timeout_s, ssl=_ssl_context(url, self.verify_tls),
                                          ping_interval=10, ping_timeout=max(10.0, self.response_timeout_s),
                                          logger=WIRE_LOG)
        except websockets.InvalidStatus as exc:
            # A demo worker that is busy or still loading closes before accepting, which
            # reaches us as HTTP 403; only with a key configured can 403 mean "bad key".
            if exc.response.status_code == 403 and not key:
                raise EndpointUnavailable(f"{self.name}: the endpoint refused the session (HTTP 403: "
                                          "worker busy or not ready)") from None
            raise
        try:
            await self._prepare(ws)
            self.ready()
            await run_together(self._send_loop(ws), self._receive_loop(ws))
        except websockets.ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code == 1013:  # "try again later": queue full, no worker
                raise EndpointRateLimited(f"{self.name}: the endpoint is at capacity "
                                          f"({exc.rcvd.reason[:MAX_ERROR_TEXT] or 'code 1013'})") from None
            raise
        finally:
            self.farewell(self._goodbye(ws))

    async def _prepare(self, ws) -> None:
        msg: dict[str, Any] = {"type": "prepare", "config": self.config}
        if self.instructions is not None:  # §4: a text prompt only when the run or the bridge sets one
            msg["system_prompt"] = self.instructions
        if self.ref_audio_b64:
            msg["ref_audio_base64"] = self.ref_audio_b64
        try:
            await ws.send(json.dumps(msg))
        except websockets.ConnectionClosed:
            pass  # a gateway may refuse at once (error, then close): read why below
        while True:  # the watchdog armed by reset() bounds queueing and preparing together
            raw = await ws.recv()
            kind = self.protocol.parse(raw)["type"]
            if kind == "prepared":
                return
            if kind in ("queued", "queue_update"):
                self.count("queue_messages")
                continue
            if kind == "queue_done":
                continue
            if kind in ("error", "timeout", "stopped"):
                self.protocol.handle(raw, self.clock())  # raises the matching EndpointError
            raise EndpointProtocolError(f"{self.name}: unexpected {kind!r} message before 'prepared'")

    async def _send_loop(self, ws) -> None:
        while True:
            _, room, _ = await self.next_room()
            for chunk in self.chunker.push(room):
                payload = json.dumps({"type": "audio_chunk",
                                      "audio_base64": base64.b64encode(chunk.astype("<f4").tobytes()).decode("ascii")})
                await ws.send(payload)
                now = self.clock()
                if not self.protocol.sent:
                    self.expect("result")  # §watchdog: the oldest chunk must get its result in time
                self.protocol.chunk_sent(now)
                self.count("chunks_sent")

    async def _receive_loop(self, ws) -> None:
        async for raw in ws:
            kind, text = self.protocol.handle(raw, self.clock())
            if kind == "result":
                if self.protocol.sent:  # re-arm for the next oldest chunk
                    self.expect("result", self.protocol.sent[0] + self.response_timeout_s - self.clock())
                else:
                    self.disarm("result")
            if text:
                self.text(text)
        raise EndpointUnavailable(f"{self.name}: the endpoint closed the connection")

    async def _goodbye(self, ws) -> None:
        """Best effort: ``stop`` frees the worker at once (the demo's own client does the same)."""
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(2.0):
                if ws.state.name == "OPEN":
                    await ws.send(json.dumps({"type": "stop"}))
                await ws.close()

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        if self.protocol is not None:
            out.update(self.protocol.stats())
        return out
