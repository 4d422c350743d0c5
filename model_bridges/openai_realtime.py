"""``openai-realtime``: OpenAI's Realtime WebSocket API (GA event names; beta names accepted).

Wire: ``session.update`` once connected (instructions only with a text prompt, PCM16 24 kHz in and
out, turn detection ``server_vad`` / ``semantic_vad`` / ``none``), one
``input_audio_buffer.append`` per 80 ms room frame, and ``response.output_audio.delta``
(beta: ``response.audio.delta``) into the playout buffer, keyed by ``item_id``.

The bridge is the model's loudspeaker: the API sends audio faster than real time, the
bridge plays exactly one 80 ms frame per room frame. When the API reports that the user
started speaking (``input_audio_buffer.speech_started``; with ``turn_detection=none`` the
bridge's own room detector), it drops the unplayed audio and sends
``conversation.item.truncate`` with the milliseconds actually played, so the model's
context and the recorded assistant track both hold what a person in the room heard.

The ``openai`` package's realtime client is not used: it builds the URL itself from a
base URL and a model (no arbitrary endpoint such as a proxy or another vendor's
implementation), only knows one generation of event names, and adds nothing the bridge
needs (playout and truncation are the bridge's own). The protocol is driven directly.
"""

from __future__ import annotations

import asyncio
import base64
import json
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

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
    opt_float,
    opt_int,
    run_together,
    ws_connect,
)

# Beta event names -> GA names (§issue: accept the older beta audio event names).
BETA_NAMES = {
    "response.audio.delta": "response.output_audio.delta",
    "response.audio.done": "response.output_audio.done",
    "response.audio_transcript.delta": "response.output_audio_transcript.delta",
    "response.audio_transcript.done": "response.output_audio_transcript.done",
    "response.text.delta": "response.output_text.delta",
    "response.text.done": "response.output_text.done",
    "conversation.item.created": "conversation.item.added",
}
TURN_DETECTION = ("server_vad", "semantic_vad", "none")
# Errors caused by races of our own cancel/truncate with the server: logged, not fatal.
BENIGN_CODES = {"response_cancel_not_active", "item_truncate_invalid_item_id"}


@register("openai-realtime")
class OpenAIRealtime(EndpointBridge):
    """Options: ``model`` (default ``gpt-realtime``; added as ``?model=`` unless the URL has
    one), ``model_name`` (model name announced to the server, default the model), ``voice``,
    ``turn_detection`` (``server_vad`` | ``semantic_vad`` | ``none``), ``vad_threshold``,
    ``prefix_padding_ms``, ``silence_duration_ms``, ``eagerness`` (semantic VAD),
    ``interrupt`` (default true: barge-in cuts the model), ``api`` (``ga`` | ``beta``
    session shape and header), ``api_key_env`` (default ``OPENAI_API_KEY``),
    ``api_key_file``, ``auth_header`` (``authorization`` | ``api-key``),
    ``instructions`` / ``instructions_file`` (a text prompt; by default only the run's, see
    :mod:`model_bridges.playout`), plus the common endpoint options."""

    name = "openai-realtime"
    default_endpoint = "wss://api.openai.com/v1/realtime"
    takes_instructions = True

    def __init__(self, endpoint: str | None = None, **options):
        super().__init__(endpoint, **options)
        o = self.options
        self.model = o.pop("model", "gpt-realtime")
        self.name = self.model_name or self.model
        self.voice = o.pop("voice", None)
        self.turn_detection = o.pop("turn_detection", "server_vad")
        if self.turn_detection not in TURN_DETECTION:
            raise BridgeConfigError(f"turn_detection must be one of {', '.join(TURN_DETECTION)}")
        self.vad_threshold = opt_float(o, "vad_threshold", None)
        self.prefix_padding_ms = opt_int(o, "prefix_padding_ms", None)
        self.silence_duration_ms = opt_int(o, "silence_duration_ms", None)
        self.eagerness = o.pop("eagerness", None)
        self.interrupt = opt_bool(o, "interrupt", True)
        self.api = o.pop("api", "ga")
        if self.api not in ("ga", "beta"):
            raise BridgeConfigError("api must be ga or beta")
        self.auth_header = o.pop("auth_header", "authorization").lower()
        if self.auth_header not in ("authorization", "api-key"):
            raise BridgeConfigError("auth_header must be authorization or api-key")
        self._key = load_secret(o.pop("api_key_env", "OPENAI_API_KEY"), o.pop("api_key_file", None))
        if not self._key and urlsplit(self.endpoint).hostname == "api.openai.com":
            raise BridgeConfigError("openai-realtime needs an API key: set OPENAI_API_KEY or --opt api_key_file=PATH")
        self.check_options()

    # -- connection ------------------------------------------------------------------------

    def url(self) -> str:
        p = urlsplit(self.endpoint)
        q = dict(parse_qsl(p.query))
        q.setdefault("model", self.model)
        return urlunsplit((p.scheme, p.netloc, p.path, urlencode(q), ""))

    def headers(self) -> dict[str, str]:
        h = {}
        if self._key:
            h["Authorization" if self.auth_header == "authorization" else "api-key"] = (
                f"Bearer {self._key}" if self.auth_header == "authorization" else self._key)
        if self.api == "beta":
            h["OpenAI-Beta"] = "realtime=v1"
        return h

    def session_config(self) -> dict:
        td = None
        if self.turn_detection != "none":
            td = {"type": self.turn_detection, "create_response": True, "interrupt_response": self.interrupt}
            if self.turn_detection == "server_vad":
                for k, v in (("threshold", self.vad_threshold), ("prefix_padding_ms", self.prefix_padding_ms),
                             ("silence_duration_ms", self.silence_duration_ms)):
                    if v is not None:
                        td[k] = v
            elif self.eagerness:
                td["eagerness"] = self.eagerness
        if self.api == "beta":
            s = {"modalities": ["audio", "text"], "input_audio_format": "pcm16", "output_audio_format": "pcm16",
                 "turn_detection": td}
            if self.voice:
                s["voice"] = self.voice
        else:
            fmt = {"type": "audio/pcm", "rate": 24000}
            out = {"format": fmt}
            if self.voice:
                out["voice"] = self.voice
            s = {"type": "realtime", "output_modalities": ["audio"],
                 "audio": {"input": {"format": fmt, "turn_detection": td}, "output": out}}
        if self.instructions is not None:  # §4: a text prompt only when the run or the bridge sets one
            s["instructions"] = self.instructions
        return s

    def new_episode(self) -> None:
        self._n_events = 0
        self._control: asyncio.Queue = asyncio.Queue()
        self._transcripts: dict[str, str] = {}
        self._response: str | None = None  # id of the response in progress
        self._soft: set[str] = set()  # our event ids whose errors are benign
        self._items: set[str] = set()  # items with audio in the response in progress
        self.counters.update(truncations=[], responses=0, interruptions=0)

    async def session(self) -> None:
        ws = await ws_connect(self.url(), self.headers(), timeout=self.connect_timeout_s, max_size=1 << 24)
        try:
            first = await asyncio.wait_for(self._recv_event(ws), self.connect_timeout_s)
            if first.get("type") == "error":
                self._on_error(first)
            if first.get("type") != "session.created":
                raise EndpointProtocolError(f"openai-realtime: expected session.created, got {first.get('type')!r}")
            await self._send(ws, {"type": "session.update", "session": self.session_config()})
            self.ready()
            await run_together(self._send_loop(ws), self._recv_loop(ws))
        finally:
            await ws.close()

    async def _send(self, ws, event: dict) -> None:
        self._n_events += 1
        event.setdefault("event_id", f"evt_mpe_{self._n_events}")
        await ws.send(json.dumps(event))

    async def _recv_event(self, ws) -> dict:
        raw = await ws.recv()
        try:
            ev = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise EndpointProtocolError("openai-realtime: a server event is not valid JSON") from None
        if not isinstance(ev, dict) or not isinstance(ev.get("type"), str):
            raise EndpointProtocolError("openai-realtime: a server event has no type")
        ev["type"] = BETA_NAMES.get(ev["type"], ev["type"])
        return ev

    # -- sending ---------------------------------------------------------------------------

    async def _send_loop(self, ws) -> None:
        while True:
            seq, room, _ = await self.next_room()
            await self._send(ws, {"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(room.astype("<i2").tobytes()).decode()})
            while not self._control.empty():
                await self._send(ws, self._control.get_nowait())

    def on_activity(self, event: str) -> None:
        # turn_detection=none: the bridge's own room detector takes the turns (§issue).
        if self.turn_detection != "none":
            return
        if event == "start" and self.interrupt:
            if self._response is not None:
                self._control.put_nowait(self._soft_event({"type": "response.cancel"}))
            for ev in self._barge_in():
                self._control.put_nowait(ev)
        elif event == "end":
            self._control.put_nowait({"type": "input_audio_buffer.commit"})
            self._control.put_nowait({"type": "response.create"})

    def _soft_event(self, ev: dict) -> dict:
        self._n_events += 1
        ev["event_id"] = f"evt_mpe_{self._n_events}"
        self._soft.add(ev["event_id"])
        return ev

    def _barge_in(self) -> list[dict]:
        """Drop unplayed audio; one truncate per cut item with what was really played."""
        cuts = self.playout.flush()
        if cuts:
            self.counters["interruptions"] += 1
        out = []
        for t in cuts:
            self.text(f"[cut after {t.played_ms} ms]")
            self.counters["truncations"].append({"item_id": t.item, "audio_end_ms": t.played_ms,
                                                 "dropped_ms": t.dropped_samples * 1000 // t.sample_rate})
            out.append(self._soft_event({"type": "conversation.item.truncate", "item_id": t.item,
                                         "content_index": 0, "audio_end_ms": t.played_ms}))
        return out

    # -- receiving -------------------------------------------------------------------------

    async def _recv_loop(self, ws) -> None:
        while True:
            ev = await self._recv_event(ws)
            t = ev["type"]
            if t == "response.output_audio.delta":
                item = ev.get("item_id")
                try:
                    pcm = np.frombuffer(base64.b64decode(ev["delta"], validate=True), dtype="<i2")
                except (KeyError, ValueError, TypeError):
                    raise EndpointProtocolError("openai-realtime: invalid audio delta") from None
                if not isinstance(item, str):
                    raise EndpointProtocolError("openai-realtime: audio delta without item_id")
                self.playout.push(pcm.astype(np.int16), item)
                self._items.add(item)
                self.expect("response")  # audio keeps coming while the response runs
            elif t == "response.output_audio.done":
                if isinstance(ev.get("item_id"), str):
                    self.playout.end_item(ev["item_id"])
            elif t == "input_audio_buffer.speech_started":
                if self.interrupt and self.turn_detection != "none":
                    for out in self._barge_in():
                        await self._send(ws, out)
            elif t == "response.created":
                self._response = (ev.get("response") or {}).get("id") or "?"
                self.counters["responses"] += 1
                self.expect("response")
            elif t == "response.done":
                self._response = None
                self.disarm("response")
                for item in self._items:  # whatever the status, no more audio comes for these
                    self.playout.end_item(item)
                self._items.clear()
                resp = ev.get("response") or {}
                if resp.get("status") == "failed":
                    err = (resp.get("status_details") or {}).get("error") or {}
                    raise _classify_api_error(err, "response failed")
            elif t == "response.output_audio_transcript.delta":
                item = ev.get("item_id") or ""
                self._transcripts[item] = self._transcripts.get(item, "") + str(ev.get("delta", ""))
            elif t == "response.output_audio_transcript.done":
                item = ev.get("item_id") or ""
                text = ev.get("transcript") or self._transcripts.get(item, "")
                self._transcripts.pop(item, None)
                self.text(text)  # what the model generated; a cut is logged as its own text
            elif t == "rate_limits.updated":
                self.counters["rate_limits"] = ev.get("rate_limits")
            elif t == "error":
                self._on_error(ev)
            elif t == "session.created":
                raise EndpointProtocolError("openai-realtime: session.created twice")

    def _on_error(self, ev: dict) -> None:
        err = ev.get("error") or {}
        if err.get("event_id") in self._soft or err.get("code") in BENIGN_CODES:
            self.count("benign_errors")
            return
        raise _classify_api_error(err, "error event")

    def stats(self) -> dict:
        out = super().stats()
        if "truncations" in out:
            out["truncations"] = out["truncations"][-50:]
        return out


def _classify_api_error(err: dict, what: str) -> EndpointError:
    code, etype = str(err.get("code") or ""), str(err.get("type") or "")
    message = str(err.get("message") or "")[:200]
    text = f"openai-realtime: {what}: {code or etype or 'unknown'}" + (f" ({message})" if message else "")
    key = f"{code} {etype}".lower()
    if "rate_limit" in key or "quota" in key:
        return EndpointRateLimited(text)
    if "api_key" in key or "authentication" in key or "unauthorized" in key:
        return EndpointAuthError(text)
    if "session_expired" in key or "server_error" in key:
        return EndpointUnavailable(text)
    return EndpointProtocolError(text)
