"""``gemini-live``: the Gemini Live API (``BidiGenerateContent`` over WebSocket).

Wire: a ``setup`` message (audio response modality, a system instruction only with a text prompt,
activity detection by the service or by the bridge, transcriptions, session resumption),
wait for ``setupComplete``; then ``realtimeInput.audio`` (room audio resampled to 16 kHz
PCM16) for every room frame; ``serverContent.modelTurn`` audio (24 kHz PCM16) goes into
the playout buffer. The service sends messages as JSON in text or binary frames; both are
accepted.

Playout: audio arrives faster than real time and plays one 80 ms frame per room frame.
On ``serverContent.interrupted`` the unplayed audio is dropped (the Live API has no
truncate message: its context keeps the whole turn). ``goAway`` makes the bridge open a
new connection with the latest ``sessionResumptionUpdate`` handle before the old one
closes; room audio is held during the switch and sent to the new connection, so the
model misses nothing and the playout never stops. Errors come as WebSocket close codes:
1008 (credentials or policy), 1011 with a quota/``RESOURCE_EXHAUSTED`` reason (rate
limit), 1007 (invalid request).

The ``google-genai`` client is not used: it is not installed here, and its live session
hides the raw close codes and the goAway/resumption switch the bridge must control; the
protocol is small enough to drive directly.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from clients.pcm import float_to_pcm16, pcm16_to_float
from model_bridges import register
from model_bridges.playout import (
    BridgeConfigError,
    EndpointAuthError,
    EndpointBridge,
    EndpointError,
    EndpointProtocolError,
    EndpointRateLimited,
    EndpointUnavailable,
    load_secret,
    opt_bool,
    opt_int,
    ws_connect,
)

DEFAULT_ENDPOINT = ("wss://generativelanguage.googleapis.com/ws/"
                    "google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent")
DEFAULT_MODEL = "models/gemini-2.5-flash-native-audio-preview-09-2025"
INPUT_RATE = 16_000
_RATE = re.compile(r"rate=(\d+)")


@register("gemini-live")
class GeminiLive(EndpointBridge):
    """Options: ``model`` (default ``models/gemini-2.5-flash-native-audio-preview-09-2025``),
    ``model_name`` (model name announced to the server), ``voice``, ``vad`` (``server``: the
    service's automatic activity detection, default; ``client``: the bridge sends
    ``activityStart``/``activityEnd`` from its room detector), ``silence_duration_ms`` and
    ``prefix_padding_ms`` (server VAD), ``resume`` (session resumption on goAway, default
    true), ``api_key_env`` (default ``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``),
    ``api_key_file``, ``auth`` (``query``: ``?key=``, default; ``header``:
    ``x-goog-api-key``), ``instructions`` / ``instructions_file`` (a text prompt; by default
    only the run's, see :mod:`model_bridges.playout`), plus the common endpoint options."""

    name = "gemini-live"
    default_endpoint = DEFAULT_ENDPOINT
    takes_instructions = True

    def __init__(self, endpoint: str | None = None, **options):
        super().__init__(endpoint, **options)
        o = self.options
        self.model = o.pop("model", DEFAULT_MODEL)
        if not self.model.startswith("models/"):
            self.model = "models/" + self.model
        self.name = self.model_name or self.model.split("/", 1)[1]
        self.voice = o.pop("voice", None)
        self.vad = o.pop("vad", "server")
        if self.vad not in ("server", "client"):
            raise BridgeConfigError("vad must be server or client")
        self.silence_duration_ms = opt_int(o, "silence_duration_ms", None)
        self.prefix_padding_ms = opt_int(o, "prefix_padding_ms", None)
        self.resume = opt_bool(o, "resume", True)
        self.auth = o.pop("auth", "query")
        if self.auth not in ("query", "header"):
            raise BridgeConfigError("auth must be query or header")
        env = o.pop("api_key_env", None)
        file = o.pop("api_key_file", None)
        self._key = (load_secret(env, file) if env or file
                     else load_secret("GEMINI_API_KEY") or load_secret("GOOGLE_API_KEY"))
        if not self._key and urlsplit(self.endpoint).hostname == "generativelanguage.googleapis.com":
            raise BridgeConfigError("gemini-live needs an API key: set GEMINI_API_KEY or --opt api_key_file=PATH")
        self.check_options()

    # -- messages ----------------------------------------------------------------------------

    def url(self) -> str:
        if not self._key or self.auth != "query":
            return self.endpoint
        p = urlsplit(self.endpoint)
        q = dict(parse_qsl(p.query))
        q["key"] = self._key
        return urlunsplit((p.scheme, p.netloc, p.path, urlencode(q), ""))

    def headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._key} if self._key and self.auth == "header" else {}

    def setup(self, handle: str | None) -> dict:
        gen: dict = {"responseModalities": ["AUDIO"]}
        if self.voice:
            gen["speechConfig"] = {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": self.voice}}}
        aad: dict = {"disabled": self.vad == "client"}
        if self.silence_duration_ms is not None:
            aad["silenceDurationMs"] = self.silence_duration_ms
        if self.prefix_padding_ms is not None:
            aad["prefixPaddingMs"] = self.prefix_padding_ms
        s = {"model": self.model, "generationConfig": gen,
             "realtimeInputConfig": {"automaticActivityDetection": aad,
                                     "activityHandling": "START_OF_ACTIVITY_INTERRUPTS"},
             "inputAudioTranscription": {}, "outputAudioTranscription": {}}
        if self.instructions is not None:  # §4: a text prompt only when the run or the bridge sets one
            s["systemInstruction"] = {"parts": [{"text": self.instructions}]}
        if self.resume:
            s["sessionResumption"] = {"handle": handle} if handle else {}
        return {"setup": s}

    # -- per episode --------------------------------------------------------------------------

    def new_episode(self) -> None:
        import soxr

        self._resampler = soxr.ResampleStream(self.sample_rate, INPUT_RATE, 1, dtype="float32")
        self._handle: str | None = None
        self._turn = 0
        self._transcript = ""
        self._ws = None
        self._retiring: set = set()
        self._sockets: list = []
        self._children: list[asyncio.Task] = []
        self._send_gate = asyncio.Event()
        self._send_gate.set()
        self.counters.update(turns=0, interruptions=0, resumptions=0)

    async def session(self) -> None:
        try:
            self._ws = await self._open(None)
            self.ready()
            self._child(self._send_loop())
            self._child(self._recv_loop(self._ws))
            await asyncio.Future()  # children report failures through fail(); runs until cancelled
        finally:
            for t in self._children:
                t.cancel()
            await asyncio.gather(*self._children, return_exceptions=True)
            for ws in self._sockets:
                await ws.close()

    def _child(self, coro) -> None:
        async def guarded():
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.fail(exc)
        self._children.append(asyncio.create_task(guarded()))

    async def _open(self, handle: str | None):
        import websockets

        ws = await ws_connect(self.url(), self.headers(), timeout=self.connect_timeout_s, max_size=1 << 24)
        self._sockets.append(ws)
        try:
            await ws.send(json.dumps(self.setup(handle)))
            msg = await asyncio.wait_for(self._recv_json(ws), self.connect_timeout_s)
        except websockets.ConnectionClosed:
            raise self._closed_error(ws) from None
        if "setupComplete" not in msg:
            raise EndpointProtocolError("gemini-live: expected setupComplete")
        return ws

    async def _recv_json(self, ws) -> dict:
        raw = await ws.recv()
        return _parse(raw)

    def _closed_error(self, ws) -> EndpointError:
        code, reason = ws.close_code, (ws.close_reason or "")[:200]
        low = reason.lower()
        text = f"gemini-live: the endpoint closed the connection (code {code}" + (f", {reason!r})" if reason else ")")
        if code == 1008 and ("key" in low or "auth" in low or "permission" in low or "credential" in low):
            return EndpointAuthError(text)
        if "resource_exhausted" in low or "quota" in low or "rate" in low:
            return EndpointRateLimited(text)
        if code == 1007:
            return EndpointProtocolError(text)
        return EndpointUnavailable(text)

    # -- sending ------------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        import websockets

        while True:
            seq, room, event = await self.next_room()
            await self._send_gate.wait()  # held while switching connections (goAway)
            pcm16 = self._resampler.resample_chunk(pcm16_to_float(room))
            data = float_to_pcm16(pcm16).astype("<i2").tobytes()
            msgs = []
            if self.vad == "client" and event == "start":
                msgs.append({"realtimeInput": {"activityStart": {}}})
            if data:
                msgs.append({"realtimeInput": {"audio": {"mimeType": f"audio/pcm;rate={INPUT_RATE}",
                                                         "data": base64.b64encode(data).decode()}}})
            if self.vad == "client" and event == "end":
                msgs.append({"realtimeInput": {"activityEnd": {}}})
            ws = self._ws
            try:
                for m in msgs:
                    await ws.send(json.dumps(m))
            except websockets.ConnectionClosed:
                if ws in self._retiring:
                    continue  # the switch is under way; later frames go to the new connection
                raise self._closed_error(ws) from None

    # -- receiving ----------------------------------------------------------------------------

    async def _recv_loop(self, ws) -> None:
        import websockets

        try:
            async for raw in ws:
                self._on_message(_parse(raw), ws)
        except websockets.ConnectionClosed:
            pass
        if ws in self._retiring:
            return  # closed after goAway: expected
        raise self._closed_error(ws)

    def _item(self) -> str:
        return f"turn-{self._turn}"

    def _on_message(self, msg: dict, ws) -> None:
        if "serverContent" in msg:
            self._on_content(msg["serverContent"] or {})
        if "sessionResumptionUpdate" in msg:
            upd = msg["sessionResumptionUpdate"] or {}
            if upd.get("resumable", True) and upd.get("newHandle"):
                self._handle = str(upd["newHandle"])
        if "goAway" in msg and ws not in self._retiring:
            left = _seconds((msg["goAway"] or {}).get("timeLeft"))
            self._retiring.add(ws)
            self._send_gate.clear()
            self._child(self._switch(ws, left))
        if "usageMetadata" in msg:
            self.counters["usage"] = msg["usageMetadata"]
        if "toolCall" in msg:
            self.count("tool_calls_ignored")
        if "error" in msg:  # not in the documented protocol; honoured if a proxy sends one
            err = msg["error"] or {}
            text = f"gemini-live: endpoint error {err.get('status') or err.get('code')}: {str(err.get('message', ''))[:200]}"
            if "RESOURCE_EXHAUSTED" in text or "429" in text:
                raise EndpointRateLimited(text)
            raise EndpointError(text)

    def _on_content(self, sc: dict) -> None:
        for part in (sc.get("modelTurn") or {}).get("parts") or []:
            inline = part.get("inlineData") if isinstance(part, dict) else None
            if not inline or not str(inline.get("mimeType", "")).startswith("audio/pcm"):
                continue
            try:
                pcm = np.frombuffer(base64.b64decode(inline["data"], validate=True), dtype="<i2").astype(np.int16)
            except (KeyError, ValueError, TypeError):
                raise EndpointProtocolError("gemini-live: invalid inline audio") from None
            m = _RATE.search(inline["mimeType"])
            rate = int(m.group(1)) if m else 24_000
            if rate != self.sample_rate:
                import soxr

                pcm = np.clip(np.round(soxr.resample(pcm.astype(np.float32), rate, self.sample_rate)),
                              -32768, 32767).astype(np.int16)
            self.playout.push(pcm, self._item())
            self.expect("turn audio")  # the turn keeps coming until generationComplete/turnComplete
        if (sc.get("outputTranscription") or {}).get("text"):
            self._transcript += str(sc["outputTranscription"]["text"])
        if sc.get("interrupted"):
            cuts = self.playout.flush()
            if cuts:
                self.counters["interruptions"] += 1
            played = self.playout.played_ms(self._item())
            self._end_turn(f" [cut after {played} ms]")
        if sc.get("generationComplete"):
            self.playout.end_item(self._item())
            self.disarm("turn audio")
        if sc.get("turnComplete"):
            self._end_turn("")

    def _end_turn(self, suffix: str) -> None:
        self.playout.end_item(self._item())
        self.disarm("turn audio")
        if self._transcript.strip():
            self.text(self._transcript.strip() + suffix)
        self._transcript = ""
        self._turn += 1
        self.counters["turns"] += 1

    async def _switch(self, old, time_left: float) -> None:
        """goAway: resume on a new connection, then let the old one finish and close."""
        new = await self._open(self._handle if self.resume else None)
        if not (self.resume and self._handle):
            self.count("resumed_without_handle")
        self.counters["resumptions"] += 1
        self._ws = new
        self._child(self._recv_loop(new))
        self._send_gate.set()
        await asyncio.sleep(max(0.0, min(time_left, 10.0)))
        await old.close()


def _parse(raw) -> dict:
    try:
        msg = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise EndpointProtocolError("gemini-live: a server message is not valid JSON") from None
    if not isinstance(msg, dict):
        raise EndpointProtocolError("gemini-live: a server message is not a JSON object")
    return msg


def _seconds(value) -> float:
    """A protobuf JSON Duration ("10s", "1.5s") in seconds; 0 when absent or invalid."""
    try:
        return float(str(value).rstrip("s"))
    except (TypeError, ValueError):
        return 0.0
