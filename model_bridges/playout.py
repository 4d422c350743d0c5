"""Shared parts of endpoint bridges: the bridge is the model's loudspeaker.

Endpoint bridges (``moshi-ws``, ``openai-realtime``, ``gemini-live``, ``minicpm-o-ws``,
``freeze-omni-sio``) connect wire protocol v1 (DESIGN §4, realtime clock) to a model that
already runs behind its own network protocol. This module holds what they share; its API is
stable.

:class:`PlayoutBuffer` (pure: numpy and an injected clock)
    Model audio goes in as it arrives (``push(pcm, item)``, any length, int16 at the
    buffer's rate, usually faster or slower than real time); exactly one frame comes out per
    80 ms slot (``pull()``, called once per room frame). What ``pull`` returns is what a
    person in the room hears, so the buffer knows, per *item* (a response, a turn, a
    segment: any string the protocol uses), how many samples were actually played.
    ``flush()`` drops everything not yet played (barge-in, ``interrupted``, ``stop_tts``)
    and returns one :class:`Truncation` per cut item with the milliseconds really played
    (OpenAI's ``conversation.item.truncate`` wants exactly that); later pushes for a cut
    item are dropped. ``end_item(item)`` says no more audio is coming for an item: its
    last partial frame is then played padded with zeros. While an item is open, a partial
    frame is held back (each slot in which an audible, still open item has nothing to play
    is an *underrun*, counted). Latency: ``mark_request(ago_s)`` when a request ended
    ``ago_s`` seconds ago (see :class:`RoomActivity`; ignored while the model is audible);
    the first audio pushed and played afterwards gives "first audio after a request"
    figures. ``stats()`` returns frames played, underruns, buffer depth, flushes, dropped
    audio and latencies (milliseconds).

:class:`RoomActivity` (pure)
    Energy end-pointing on room frames: ``push(frame)`` returns ``"start"``, ``"end"`` or
    ``None``. Bridges call ``playout.mark_request()`` on ``"end"`` and may use it as
    client-side turn detection.

Errors
    :class:`EndpointError` and subclasses (stable ``code``): raising one from a bridge's
    ``reset``/``step`` makes the SDK report it to the server (the attempt ends with that
    error and the engine retries the episode) and reconnect, unless the error is
    ``fatal`` (bad credentials, bad configuration), which stops the bridge.
    :func:`classify` maps websockets/aiohttp/OS exceptions to them.

:func:`load_secret`, :func:`redact_url`, :data:`WIRE_LOG`, :func:`ws_connect`
    Credentials come from a file or an environment variable and never appear in logs or
    messages: URLs are reported without their query string, and transport loggers should
    be ``WIRE_LOG`` (it masks Authorization/api-key headers and ``key=`` query values in
    the handshake debug log); ``ws_connect`` opens a websockets client that way.

:func:`instructions_option`, :func:`text_prompt_record`, ``opt_float``/``opt_int``/``opt_bool``, :func:`run_together`
    The bridge-side text prompt option and the record of what a bridge sent, option parsing
    that raises :class:`BridgeConfigError`, and "run these loops until the first one fails".

Text prompt (§4): every speech system gets the same input, the room audio. An endpoint that
takes text instructions (``takes_instructions``) gets none unless the run was created with a
text prompt (``episode.start`` then carries the benchmark's duty text as ``instructions``) or
the bridge is started with ``instructions`` / ``instructions_file`` (which wins). Each episode
the bridge reports what it sent in a ``stats`` message (``instructions``), stored with the
attempt.

:class:`EndpointBridge` (an ``AsyncBridge``)
    The asyncio shell shared by endpoint bridges. ``step`` never waits for the network: it
    queues the room frame for the subclass's ``session()`` coroutine (connect, handshake,
    send and receive loops, running in the background for the whole episode), pulls one
    frame from the playout buffer and returns it. A failure of the session is raised by
    the next ``step``; ``expect(what, seconds)`` arms a watchdog that ends the attempt with
    ``endpoint_timeout`` when the endpoint stays silent. Subclasses implement
    ``session()`` and call ``ready()`` once the endpoint accepts audio, then read room
    frames with ``next_room()``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import time
from abc import abstractmethod
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from clients.errors import RemoteError
from clients.messages import EpisodeEnd, EpisodeStart
from clients.pcm import pcm16_to_float
from clients.redact import RedactSecrets
from clients.sdk import AsyncBridge

log = logging.getLogger("mpe.bridges")


# Pass as ``logger=`` to websockets.connect (its debug log shows the handshake headers):
# credentials never reach a log.
WIRE_LOG = logging.getLogger("mpe.bridges.wire")
WIRE_LOG.addFilter(RedactSecrets())



# --- errors ------------------------------------------------------------------------------


class EndpointError(RemoteError):
    """The model endpoint failed."""

    code = "endpoint_error"
    fatal = False  # True: retrying cannot help (credentials, configuration); the bridge stops


class EndpointUnavailable(EndpointError):
    """The endpoint cannot be reached or closed the connection."""

    code = "endpoint_unavailable"


class EndpointTimeout(EndpointError):
    """The endpoint did not answer in time."""

    code = "endpoint_timeout"


class EndpointRateLimited(EndpointError):
    """The endpoint refused the request for rate or quota reasons."""

    code = "endpoint_rate_limited"


class EndpointProtocolError(EndpointError):
    """The endpoint sent something its protocol does not allow."""

    code = "endpoint_protocol"


class EndpointAuthError(EndpointError):
    """The endpoint rejected the credentials."""

    code = "endpoint_unauthorized"
    fatal = True


class BridgeConfigError(EndpointError):
    """The bridge's options are invalid."""

    code = "bridge_config"
    fatal = True


def redact_url(url: str) -> str:
    """``scheme://host:port/path`` without query, fragment or user info (keys live there)."""
    try:
        p = urlsplit(url)
        host = p.hostname or ""
        netloc = f"{host}:{p.port}" if p.port else host
        return urlunsplit((p.scheme, netloc, p.path, "", ""))
    except ValueError:
        return "<invalid url>"


def classify(exc: BaseException, where: str = "endpoint") -> EndpointError:
    """Map a transport exception to an EndpointError with a message free of secrets."""
    if isinstance(exc, EndpointError):
        return exc
    if isinstance(exc, asyncio.TimeoutError):
        return EndpointTimeout(f"{where}: timed out")
    try:
        import websockets.exceptions as wse
    except ImportError:  # pragma: no cover
        wse = None
    if wse is not None:
        if isinstance(exc, wse.InvalidStatus):
            return _from_status(exc.response.status_code, where)
        if isinstance(exc, wse.InvalidURI):
            return BridgeConfigError(f"{where}: invalid endpoint URL")
        if isinstance(exc, wse.ConnectionClosed):
            rcvd = exc.rcvd
            if rcvd is None:
                return EndpointUnavailable(f"{where}: connection lost")
            return EndpointUnavailable(f"{where}: closed the connection (code {rcvd.code}"
                                       + (f", {rcvd.reason[:200]!r})" if rcvd.reason else ")"))
        if isinstance(exc, wse.InvalidHandshake):
            return EndpointProtocolError(f"{where}: WebSocket handshake failed ({type(exc).__name__})")
    try:
        import aiohttp
    except ImportError:  # pragma: no cover
        aiohttp = None
    if aiohttp is not None:
        if isinstance(exc, aiohttp.WSServerHandshakeError) or isinstance(exc, aiohttp.ClientResponseError):
            return _from_status(exc.status, where)
        if isinstance(exc, aiohttp.ClientConnectionError):
            return EndpointUnavailable(f"{where}: cannot connect ({type(exc).__name__})")
    if isinstance(exc, OSError):
        return EndpointUnavailable(f"{where}: cannot connect ({exc.strerror or type(exc).__name__})")
    return EndpointError(f"{where}: unexpected failure ({type(exc).__name__})")


def _from_status(status: int, where: str) -> EndpointError:
    if status in (401, 403):
        return EndpointAuthError(f"{where}: credentials rejected (HTTP {status})")
    if status == 429:
        return EndpointRateLimited(f"{where}: rate limited (HTTP 429)")
    if status in (404, 400):
        return EndpointProtocolError(f"{where}: endpoint refused the connection (HTTP {status})")
    return EndpointUnavailable(f"{where}: HTTP {status}")


# --- options and credentials ---------------------------------------------------------------


def load_secret(env: str | None, file: str | None = None) -> str | None:
    """A credential from ``file`` (first line) or the environment variable ``env``; never logged."""
    if file:
        try:
            text = Path(file).expanduser().read_text().strip()
        except OSError as exc:
            raise BridgeConfigError(f"cannot read the credentials file ({exc.strerror})") from None
        if not text:
            raise BridgeConfigError("the credentials file is empty")
        return text.splitlines()[0].strip()
    value = os.environ.get(env) if env else None
    return value.strip() if value else None


def opt_float(options: dict, key: str, default: float | None) -> float | None:
    v = options.pop(key, None)
    if v is None or v == "":
        return default
    try:
        return float(v)
    except (TypeError, ValueError):
        raise BridgeConfigError(f"option {key}={v!r} is not a number") from None


def opt_int(options: dict, key: str, default: int | None) -> int | None:
    v = opt_float(options, key, None if default is None else float(default))
    return None if v is None else int(v)


def opt_bool(options: dict, key: str, default: bool) -> bool:
    v = options.pop(key, None)
    if v is None or v == "":
        return default
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise BridgeConfigError(f"option {key}={v!r} is not a boolean")


def instructions_option(options: dict) -> str | None:
    """A text prompt set on the bridge: ``instructions=TEXT`` or ``instructions_file=PATH``
    (None when neither is given: the bridge sends what ``episode.start`` carries, if anything)."""
    text, path = options.pop("instructions", None), options.pop("instructions_file", None)
    if text and path:
        raise BridgeConfigError("give instructions or instructions_file, not both")
    if path:
        try:
            text = Path(path).expanduser().read_text()
        except OSError as exc:
            raise BridgeConfigError(f"cannot read the instructions file ({exc.strerror})") from None
    text = str(text).strip() if text else ""
    if len(text) > MAX_INSTRUCTIONS:
        raise BridgeConfigError(f"the instructions are {len(text)} characters (at most {MAX_INSTRUCTIONS})")
    return text or None


MAX_INSTRUCTIONS = 16_000  # as episode.start's instructions
RECORDED_CHARS = 2_000  # a stats message stays far below the wire's text limit


def text_prompt_record(text: str | None, source: str, offered: bool) -> dict[str, Any]:
    """What a bridge reports about its text prompt for one episode (§4): ``source`` is
    ``episode.start`` (the run's text prompt), ``option`` (set on the bridge) or ``none``;
    ``offered`` says whether ``episode.start`` carried instructions; the text sent is recorded
    with its length and sha256 (the text itself up to its first 2,000 characters)."""
    if text is None:
        return {"source": "none", "offered": offered}
    return {"source": source, "offered": offered, "chars": len(text),
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "text": text[:RECORDED_CHARS]}


# --- the playout buffer --------------------------------------------------------------------


@dataclass(frozen=True)
class Truncation:
    """An item cut by ``flush``: what was really played of it, and what was dropped."""

    item: str
    played_samples: int
    dropped_samples: int
    sample_rate: int

    @property
    def played_ms(self) -> int:
        return self.played_samples * 1000 // self.sample_rate


@dataclass
class _Item:
    pushed: int = 0
    played: int = 0
    ended: bool = False
    cut: bool = False


class PlayoutBuffer:
    """The loudspeaker: audio in at any pace, exactly one frame out per slot (pure core).

    All counts are integer samples at ``sample_rate``; milliseconds only in ``stats`` and
    :class:`Truncation`. The clock (seconds, monotonic) serves the latency figures only.
    """

    MAX_LATENCIES = 200
    REQUEST_WINDOW_S = 15.0  # a request older than this without audio is forgotten

    def __init__(self, frame_samples: int = 1920, sample_rate: int = 24_000, *,
                 clock: Callable[[], float] = time.monotonic):
        self.n, self.rate, self.clock = frame_samples, sample_rate, clock
        self._queue: deque[list] = deque()  # [item, pcm int16, offset]
        self._buffered = 0
        self._items: dict[str, _Item] = {}
        self._playing: str | None = None  # item whose audio was in the last pulled frame
        self._starved: str | None = None  # open item that ran dry (underrun slots are counted)
        self._request: float | None = None
        self._awaiting_play: float | None = None  # request time whose first audio is queued
        self.slots = 0
        self.frames_played = 0
        self.underruns = 0
        self.flushes = 0
        self.dropped_samples = 0  # unplayed audio dropped by flush
        self.late_samples = 0  # audio that arrived for an already cut item
        self._depth_max = 0
        self._depth_sum = 0
        self._depth_n = 0
        self.first_audio_ms: list[int] = []
        self.first_play_ms: list[int] = []

    # model side -------------------------------------------------------------------------

    def push(self, pcm: np.ndarray, item: str = "") -> None:
        """Queue model audio (int16 at ``sample_rate``) for ``item``."""
        it = self._items.setdefault(item, _Item())
        pcm = np.asarray(pcm, dtype=np.int16).reshape(-1)
        if it.cut:
            self.late_samples += len(pcm)
            return
        if it.ended:
            it.ended = False  # more audio after end_item: the item is open again
        if not len(pcm):
            return
        now = self.clock()
        if self._request is not None:
            if now - self._request <= self.REQUEST_WINDOW_S:
                self.first_audio_ms.append(int(round((now - self._request) * 1000)))
                self.first_audio_ms = self.first_audio_ms[-self.MAX_LATENCIES:]
                self._awaiting_play = self._request
            self._request = None
        it.pushed += len(pcm)
        self._queue.append([item, pcm, 0])
        self._buffered += len(pcm)

    def end_item(self, item: str) -> None:
        """No more audio comes for ``item``: its last partial frame may play (zero-padded)."""
        self._items.setdefault(item, _Item()).ended = True

    def flush(self) -> list[Truncation]:
        """Drop all unplayed audio (barge-in); one Truncation per item cut, in queue order."""
        dropped: dict[str, int] = {}
        for item, pcm, off in self._queue:
            dropped[item] = dropped.get(item, 0) + len(pcm) - off
        for item, it in self._items.items():  # open items still receiving count as cut too
            if not it.cut and not it.ended and it.pushed and item not in dropped:
                dropped[item] = 0
        out = []
        for item, d in dropped.items():
            it = self._items[item]
            it.cut = True
            out.append(Truncation(item, it.played, d, self.rate))
        if self._queue or out:
            self.flushes += 1
        self.dropped_samples += self._buffered
        self._queue.clear()
        self._buffered = 0
        self._playing = self._starved = None
        self._awaiting_play = None
        return out

    def mark_request(self, ago_s: float = 0.0) -> None:
        """A request ended ``ago_s`` seconds ago (e.g. room speech stopped and the detector
        has just confirmed it); ignored while the model is audible."""
        if self._buffered or self._playing is not None:
            return
        self._request = self.clock() - ago_s

    # loudspeaker side -------------------------------------------------------------------

    def pull(self) -> np.ndarray | None:
        """The frame for this 80 ms slot (int16[frame_samples]), or None when nothing plays."""
        self.slots += 1
        depth = self._buffered
        self._depth_max = max(self._depth_max, depth)
        if depth:
            self._depth_sum += depth
            self._depth_n += 1
        if depth < self.n and (depth == 0 or not self._items[self._queue[-1][0]].ended):
            # Not a full frame and more is coming: hold it. Every slot in which an item that
            # was audible and is still open has nothing to play is an underrun.
            if self._playing is not None:
                self._starved = self._playing
            if self._starved is not None:
                it = self._items[self._starved]
                if it.ended or it.cut:
                    self._starved = None
                else:
                    self.underruns += 1
            self._playing = None
            return None
        out = np.zeros(self.n, dtype=np.int16)
        pos = 0
        last = None
        while pos < self.n and self._queue:
            entry = self._queue[0]
            item, pcm, off = entry
            take = min(self.n - pos, len(pcm) - off)
            out[pos:pos + take] = pcm[off:off + take]
            self._items[item].played += take
            pos += take
            last = item
            if off + take == len(pcm):
                self._queue.popleft()
            else:
                entry[2] = off + take
        self._buffered -= pos
        self._playing, self._starved = last, None
        self.frames_played += 1
        if self._awaiting_play is not None:
            self.first_play_ms.append(int(round((self.clock() - self._awaiting_play) * 1000)))
            self.first_play_ms = self.first_play_ms[-self.MAX_LATENCIES:]
            self._awaiting_play = None
        return out

    # state --------------------------------------------------------------------------------

    @property
    def depth_samples(self) -> int:
        return self._buffered

    @property
    def depth_ms(self) -> int:
        return self._buffered * 1000 // self.rate

    @property
    def audible(self) -> bool:
        """Audio is queued or was in the last frame."""
        return bool(self._buffered) or self._playing is not None

    def played_samples(self, item: str) -> int:
        it = self._items.get(item)
        return it.played if it else 0

    def played_ms(self, item: str) -> int:
        return self.played_samples(item) * 1000 // self.rate

    def is_cut(self, item: str) -> bool:
        it = self._items.get(item)
        return bool(it and it.cut)

    def stats(self) -> dict[str, Any]:
        ms = 1000 / self.rate
        return {
            "slots": self.slots,
            "frames_played": self.frames_played,
            "underruns": self.underruns,
            "flushes": self.flushes,
            "dropped_ms": int(self.dropped_samples * ms),
            "late_dropped_ms": int(self.late_samples * ms),
            "depth_ms_max": int(self._depth_max * ms),
            "depth_ms_mean": int(self._depth_sum / self._depth_n * ms) if self._depth_n else 0,
            "first_audio_ms": _summary(self.first_audio_ms),
            "first_play_ms": _summary(self.first_play_ms),
        }


def _summary(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    v = sorted(values)
    return {"n": len(v), "mean": int(round(sum(v) / len(v))), "p50": v[len(v) // 2],
            "p90": v[min(len(v) - 1, math.ceil(0.9 * len(v)) - 1)], "max": v[-1], "values": values[-50:]}


# --- room activity -------------------------------------------------------------------------


class RoomActivity:
    """Energy end-pointing on room frames (pure).

    A frame is voiced when its RMS is at least ``threshold_dbfs``. Speech starts after
    ``start_ms`` of consecutive voiced frames and ends after ``end_ms`` of unvoiced ones.
    """

    def __init__(self, frame_samples: int = 1920, sample_rate: int = 24_000, *, threshold_dbfs: float = -45.0,
                 start_ms: int = 160, end_ms: int = 480):
        frame_ms = frame_samples * 1000 // sample_rate
        self.start_frames = max(1, -(-start_ms // frame_ms))
        self.end_frames = max(1, -(-end_ms // frame_ms))
        self.threshold = 32768.0 * 10 ** (threshold_dbfs / 20)
        self.speaking = False
        self._run = 0

    def push(self, pcm: np.ndarray) -> str | None:
        x = pcm.astype(np.float64)
        voiced = bool(len(x)) and math.sqrt(float(np.mean(x * x))) >= self.threshold
        if voiced != self.speaking:
            self._run += 1
        else:
            self._run = 0
        if not self.speaking and self._run >= self.start_frames:
            self.speaking, self._run = True, 0
            return "start"
        if self.speaking and self._run >= self.end_frames:
            self.speaking, self._run = False, 0
            return "end"
        return None


# --- the asyncio shell ---------------------------------------------------------------------


async def ws_connect(url: str, headers: dict[str, str], *, timeout: float, max_size: int = 1 << 24):
    """websockets client connection with keepalive pings, a connect+handshake time limit and
    the secret-redacting logger."""
    import websockets

    return await asyncio.wait_for(
        websockets.connect(url, additional_headers=headers, max_size=max_size, open_timeout=None, ping_interval=10,
                           ping_timeout=20, compression=None, logger=WIRE_LOG),
        timeout)


async def run_together(*coros) -> None:
    """Run coroutines until the first one fails (its exception is raised, the others are
    cancelled) or all return."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        while tasks:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()
            tasks = list(pending)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)



class EndpointBridge(AsyncBridge):
    """Base of endpoint bridges: background endpoint session, playout, watchdog, stats.

    Subclasses set ``name`` and implement :meth:`session`. Options common to all:
    ``revision`` (announced with the model name), ``connect_timeout_s`` (connect and
    handshake, default 10), ``response_timeout_s``
    (silence of the endpoint while an answer is owed, default 15), ``stats_every`` (frames
    between stats messages, default 12), and the room activity detector's
    ``activity_threshold_dbfs`` / ``activity_end_ms``; bridges whose endpoint takes a text
    prompt (``takes_instructions``) also ``instructions`` / ``instructions_file``.
    """

    clocks = ("realtime",)  # §4: closed-API bridges run in realtime only
    sample_rate = 24_000
    default_endpoint: str | None = None
    #: the endpoint takes text instructions; ``self.instructions`` is then what to send this
    #: episode (None: send no text prompt)
    takes_instructions = False

    def __init__(self, endpoint: str | None = None, **options: Any):
        super().__init__()
        # The model name announced to our server (hello); each bridge has its own default.
        self.model_name: str | None = options.pop("model_name", None)
        if self.model_name:
            self.name = str(self.model_name)
        self.endpoint = endpoint or options.pop("url", None) or self.default_endpoint
        if not self.endpoint:
            raise BridgeConfigError(f"{self.name} needs --endpoint URL")
        self.connect_timeout_s = opt_float(options, "connect_timeout_s", 10.0)
        self.response_timeout_s = opt_float(options, "response_timeout_s", 15.0)
        self.stats_every = opt_int(options, "stats_every", 12)
        self.revision = str(options.pop("revision", "") or self.revision)
        self._activity_opts = {"threshold_dbfs": opt_float(options, "activity_threshold_dbfs", -45.0),
                               "end_ms": opt_int(options, "activity_end_ms", 480)}
        # §4: a text prompt set on the bridge wins over the run's; None: the run's, if any
        self.instructions_option = instructions_option(options) if self.takes_instructions else None
        self.instructions: str | None = None
        self.clock: Callable[[], float] = time.monotonic
        self.options = options  # what the subclass did not consume
        self._task: asyncio.Task | None = None
        self._failure: EndpointError | None = None
        self._rooms: asyncio.Queue | None = None
        self._watch: dict[str, float] = {}  # what -> deadline
        self._closing = False
        self.seq = 0
        self.playout = PlayoutBuffer(self.frame_samples, self.sample_rate, clock=self.clock)
        self.activity = RoomActivity(self.frame_samples, self.sample_rate, **self._activity_opts)
        self.counters: dict[str, Any] = {}

    def check_options(self) -> None:
        """Call at the end of a subclass __init__: unknown options are an error, not ignored."""
        unknown = sorted(k for k in self.options if k not in ("data_dir", "suite"))
        if unknown:
            raise BridgeConfigError(f"{self.name}: unknown option(s) {', '.join(unknown)}")

    # to implement ----------------------------------------------------------------------

    @abstractmethod
    async def session(self) -> None:
        """Connect, handshake, call ready(), then send next_room() frames and receive audio
        into self.playout until cancelled. Raise (any exception) on failure."""

    def new_episode(self) -> None:
        """Reset per-episode state (called by reset before the session starts)."""

    def on_activity(self, event: str) -> None:
        """Room speech "start" / "end" (local detector); default: latency marks only."""

    # for subclasses --------------------------------------------------------------------

    def ready(self) -> None:
        """The endpoint accepts audio: disarm the connect watchdog."""
        self.disarm("connection")
        self.counters.setdefault("connect_ms", int(round((self.clock() - self._started) * 1000)))

    async def next_room(self) -> tuple[int, np.ndarray, str | None]:
        """The next room frame (seq, int16 pcm, activity event), in order, none skipped."""
        return await self._rooms.get()

    def room_backlog(self) -> int:
        return self._rooms.qsize() if self._rooms else 0

    def expect(self, what: str, seconds: float | None = None) -> None:
        """Arm (or re-arm) a watchdog: the endpoint must do ``what`` within ``seconds``."""
        self._watch[what] = self.clock() + (self.response_timeout_s if seconds is None else seconds)

    def disarm(self, what: str) -> None:
        self._watch.pop(what, None)

    def fail(self, exc: BaseException) -> None:
        """Record the first failure; the next step() raises it."""
        if self._failure is None and not self._closing:
            self._failure = classify(exc, self.name)
            log.warning("%s (%s)", self._failure, self._failure.code)

    def text(self, text: str) -> None:
        """Log the model's own text/transcript (wire ``text`` message, never scored)."""
        text = text.strip()
        if text:
            self.emit_text(self.seq, text)

    def count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    # AsyncBridge -----------------------------------------------------------------------

    async def reset(self, episode: EpisodeStart) -> None:
        await self._shutdown()
        if episode.sample_rate != self.sample_rate:  # pragma: no cover - the server honours hello
            raise BridgeConfigError(f"{self.name} speaks {self.sample_rate} Hz only")
        self.playout = PlayoutBuffer(self.frame_samples, self.sample_rate, clock=self.clock)
        self.activity = RoomActivity(self.frame_samples, self.sample_rate, **self._activity_opts)
        self.counters = {}
        self._failure, self._closing, self._watch = None, False, {}
        self._rooms = asyncio.Queue()
        self.seq = 0
        self._started = self.clock()
        self._choose_instructions(episode)
        self.new_episode()
        self.expect("connection", self.connect_timeout_s)
        # The endpoint is reached in the background: step() never blocks, so the first room
        # frames are answered (silence) on time instead of shifting the whole timeline (§4).
        self._task = asyncio.create_task(self._run_session())

    def _choose_instructions(self, episode: EpisodeStart) -> None:
        """§4: no text prompt unless the run sends one or the bridge was given one; the choice
        is reported in the attempt's stats."""
        offered = bool(episode.instructions)
        source, text = "none", None
        if self.takes_instructions:
            if self.instructions_option:
                source, text = "option", self.instructions_option
            elif offered:
                source, text = "episode.start", episode.instructions
        self.instructions = text
        self.emit_stats(instructions=text_prompt_record(text, source, offered))

    async def _run_session(self) -> None:
        try:
            await self.session()
            if not self._closing:
                raise EndpointUnavailable(f"{self.name}: the endpoint session ended")
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # every failure ends the attempt with a clear error
            if not isinstance(exc, EndpointError):
                log.debug("%s: session failed", self.name, exc_info=True)
            self.fail(exc)

    async def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        self.seq = seq
        if self._failure is not None:
            raise self._failure
        now = self.clock()
        for what, deadline in self._watch.items():
            if now > deadline:
                limit = self.connect_timeout_s if what == "connection" else self.response_timeout_s
                self.fail(EndpointTimeout(f"{self.name}: no {what} from the endpoint in time (limit {limit:g} s)"))
                raise self._failure
        event = self.activity.push(room)
        if event == "end":  # latency counts from the end of room speech, not its confirmation
            self.playout.mark_request(self.activity.end_frames * self.frame_samples / self.sample_rate)
        if event:
            self.on_activity(event)
        self._rooms.put_nowait((seq, room, event))
        out = self.playout.pull()
        if self.stats_every and (seq + 1) % self.stats_every == 0:
            self.emit_stats(bridge=self.stats())
        return out

    def stats(self) -> dict[str, Any]:
        return {"name": self.name, **self.playout.stats(), **self.counters, "room_backlog": self.room_backlog()}

    def end_episode(self, end: EpisodeEnd) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()

    async def close(self) -> None:
        await self._shutdown(wait_s=3.0)

    async def _shutdown(self, wait_s: float = 0.2) -> None:
        """End the endpoint session. reset() waits only briefly: a slow close handshake of
        the old session must not delay the new episode's first frames (§4)."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=wait_s)


class Rechunker:
    """Room frames (int16, 24 kHz) -> float32 chunks of exactly ``chunk_samples`` at ``out_rate``.

    soxr's streaming resampler keeps its state across frames (causal, no per-frame edges);
    leftovers wait for the next frame, so the chunks tile the room stream without gaps.
    """

    def __init__(self, chunk_samples: int, in_rate: int = 24_000, out_rate: int = 16_000):
        import soxr

        self.chunk = chunk_samples
        self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality="HQ")
        self._buf = np.zeros(0, dtype=np.float32)

    def push(self, pcm: np.ndarray) -> list[np.ndarray]:
        self._buf = np.concatenate([self._buf, self._stream.resample_chunk(pcm16_to_float(pcm))])
        n = len(self._buf) // self.chunk
        chunks = [self._buf[i * self.chunk:(i + 1) * self.chunk] for i in range(n)]
        self._buf = self._buf[n * self.chunk:]
        return chunks

    @property
    def pending(self) -> int:
        return len(self._buf)


class FarewellMixin:
    """Closing an endpoint session politely takes round trips; it must never delay the next
    episode's reset (a blocked reset shifts the whole realtime timeline, §4), so goodbyes
    run detached and only ``close()`` waits for them, briefly."""

    _farewells: set[asyncio.Task]

    def farewell(self, coro) -> None:
        if not hasattr(self, "_farewells"):
            self._farewells = set()
        task = asyncio.get_running_loop().create_task(coro)
        self._farewells.add(task)
        task.add_done_callback(self._farewells.discard)

    async def close(self) -> None:
        await super().close()
        pending = getattr(self, "_farewells", set())
        if pending:
            await asyncio.wait(pending, timeout=3.0)
