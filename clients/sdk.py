"""Bridge SDK: write a model bridge by implementing "reset" and "one frame in, one frame out".

Depends only on numpy, websockets and this package (no server code), so a team can ship a
bridge with ``clients/`` alone. The connection loop speaks wire protocol v1 (DESIGN §4):
hello → welcome, then for every ``episode.start`` a reset to fresh state and one assistant
frame per room frame, with the same seq. A bridge that declares ``accepts_context`` is also
handed assistant-context frames (teacher forcing) through ``force`` before ``step`` of the same seq.
The protocol's rules are :class:`clients.lifecycle.BridgeLifecycle`'s: the loop here reads the
socket, feeds it, acts on what it reports and sends what it returns.

It logs through ``logging`` (logger ``mpe.sdk``), one line per record: the connection, the
server's ``status`` (what work matches the bridge, and while none does, why), each episode's
start and end, and errors. Credentials never appear in those records.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import websockets
from pydantic import ValidationError

from clients.codec import KIND_CONTEXT, PROTOCOL_VERSION, SAMPLE_RATES, STREAM_RATE, frame_samples
from clients.errors import CLOSE_CODES, RETRY_LATER_CODES, AuthError, MPEError, ProtocolError, RemoteError, RetryLater
from clients.lifecycle import BridgeLifecycle, EpisodeEnded, EpisodeStarted, ErrorReceived, StatusChanged
from clients.messages import CLOCKS, EpisodeEnd, EpisodeStart, Error, Hello, ModelInfo, Stats, Status, Text
from clients.redact import RedactSecrets, redact

log = logging.getLogger("mpe.sdk")
log.addFilter(RedactSecrets())
# websockets logs the handshake (with the Authorization header) at debug level here
WIRE_LOG = logging.getLogger("mpe.sdk.wire")
WIRE_LOG.addFilter(RedactSecrets())

# Errors after which reconnecting cannot help (docs/protocol.md §10), and the client's own:
# ``not_found`` (no bridge endpoint at the URL), ``refused`` (the upgrade was refused), ``bad_url``.
# ``bad_config``: the bridge class declares what protocol 1 cannot carry (e.g. a sample_rate of 22050).
FATAL_CODES = {"unauthorized", "forbidden", "unsupported_version", "bad_message", "unknown_type", "bad_json",
               "not_found", "refused", "bad_url", "bad_config"}
PAGES_PATH = "ui"  # the server's web pages (/ui/): an address copied from the browser is not the bridges'


class CannotConnect(OSError):
    """No connection could be opened to the server's host and port (refused, unreachable, unknown host)."""


class BaseBridge(ABC):
    """Common part of sync and async bridges."""

    name: str = "bridge"
    revision: str = ""
    sample_rate: int = STREAM_RATE
    clocks: tuple[str, ...] = CLOCKS
    #: True: the model can be given its own past output (``force``), so the bridge is also leased
    #: episodes that start with assistant-context frames (teacher forcing, docs/protocol.md §5.1)
    accepts_context: bool = False
    #: True: an oracle-style reference bridge, told what each episode plays (``episode.reference``);
    #: only an admin token may ask (docs/protocol.md §4.3)
    wants_reference: bool = False

    def __init__(self) -> None:
        self._outbox: list[dict] = []
        self.episode: EpisodeStart | None = None

    @property
    def frame_samples(self) -> int:
        return frame_samples(self.sample_rate)

    def emit_text(self, seq: int, text: str) -> None:
        """Queue model text (logged by the server, never scored)."""
        self._outbox.append(Text(seq=seq, text=text[:4000]).model_dump())

    def emit_stats(self, **data) -> None:
        """Queue bridge-side measurements (stored with the episode)."""
        self._outbox.append(Stats(data=data).model_dump())

    def end_episode(self, end: EpisodeEnd) -> None:
        """Called when the server ends an episode (optional)."""


class Bridge(BaseBridge):
    """A frame-synchronous model: one 80 ms room frame in, one 80 ms assistant frame out."""

    blocking: bool = True  # run step() in a worker thread so pings keep flowing

    @abstractmethod
    def reset(self, episode: EpisodeStart) -> None:
        """Return to fresh model state before an episode."""

    @abstractmethod
    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        """int16 room frame (frame_samples) -> int16 assistant frame, or None for silence."""

    def force(self, seq: int, pcm: np.ndarray) -> None:
        """Teacher forcing (only with ``accepts_context``): ``pcm`` (int16, frame_samples) is what
        the model said in slot ``seq``; take it as its own output. Called right before
        ``step(seq, room)``, whose answer the server then ignores. Default: nothing."""


class AsyncBridge(BaseBridge):
    """A bridge that buffers or talks to a remote endpoint (realtime only, usually)."""

    clocks = ("realtime",)

    @abstractmethod
    async def reset(self, episode: EpisodeStart) -> None: ...

    @abstractmethod
    async def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        """Take one room frame; return the assistant frame to play in this 80 ms slot."""

    async def force(self, seq: int, pcm: np.ndarray) -> None:
        """Teacher forcing, as :meth:`Bridge.force`. Default: nothing."""

    async def close(self) -> None:
        """Release remote resources (optional)."""


@dataclass
class BridgeOptions:
    """How a bridge connects and when it stops."""

    server: str = "ws://127.0.0.1:8600"  # the server's address; /v1/bridge is added unless given
    token: str | None = None
    reconnect: bool = True
    backoff_min_s: float = 0.5
    backoff_max_s: float = 30.0
    max_episodes: int | None = None  # stop after serving this many episodes (tests, demo)
    exit_when_idle_s: float | None = None  # stop after this long without an episode (None: never)
    #: check mode (hello.check): served the episodes of the team's bridge checks only, never a real
    #: run's; clients.check.check_bridge sets it
    check: bool = False


class BridgeClient:
    """Connection loop with reconnect and exponential backoff."""

    def __init__(self, bridge: BaseBridge, options: BridgeOptions):
        self.bridge, self.options = bridge, options
        self.episodes_done = 0
        self.bridge_id: str | None = None
        self.status: Status | None = None  # the server's last word on the work that matches this bridge
        self.idle_exit = False  # True once the bridge stopped after exit_when_idle_s without an episode
        self._stop = asyncio.Event()
        self._idle_since: float | None = None  # loop time since which no episode ran (None: in one)
        self._frames = 0  # room frames of the current episode

    def stop(self) -> None:
        self._stop.set()

    def _url(self) -> str:
        """The bridge endpoint: ``server`` with ``/v1/bridge`` added unless it is there (an
        ``http(s)://`` address is taken as ``ws(s)://``)."""
        try:
            parts = urlsplit(self.options.server.strip())
        except ValueError as exc:
            raise MPEError(f"invalid server URL: {exc}", code="bad_url") from None
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        if scheme not in ("ws", "wss") or not parts.netloc:
            raise MPEError(f"invalid server URL {redact(self.options.server)!r}: expected ws://HOST:PORT",
                           code="bad_url")
        path = parts.path.rstrip("/")
        if PAGES_PATH in path.split("/"):
            base = urlunsplit((scheme, parts.netloc, "", "", ""))
            raise MPEError(f"{redact(self.options.server)} is the address of the server's web pages (/{PAGES_PATH}/), "
                           f"not of its bridges: give the server's address, {base}", code="bad_url")
        if not path.endswith("/v1/bridge"):
            path += "/v1/bridge"
        return urlunsplit((scheme, parts.netloc, path, parts.query, ""))

    def _hello(self) -> Hello:
        """The bridge's ``hello``; MPEError ``bad_config`` when its class declares what protocol 1
        cannot carry (one line naming the attribute and the allowed values)."""
        b = self.bridge
        if b.sample_rate not in SAMPLE_RATES:
            raise MPEError(f"{type(b).__name__}.sample_rate = {b.sample_rate!r} is not supported: use one of "
                           f"{', '.join(map(str, SAMPLE_RATES))} (resample in step)", code="bad_config")
        try:
            return Hello(protocol=PROTOCOL_VERSION, model=ModelInfo(name=b.name, revision=b.revision),
                         sample_rate=b.sample_rate, clocks=list(b.clocks), accepts_context=b.accepts_context,
                         wants_reference=b.wants_reference, check=self.options.check)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise MPEError(f"{type(b).__name__}: {where} {first['input']!r}: {first['msg']}",
                           code="bad_config") from None

    async def run(self) -> None:
        self._hello()  # a bridge class protocol 1 cannot carry fails before connecting
        self._idle_since = asyncio.get_running_loop().time()
        try:
            await self._run()
        finally:
            if isinstance(self.bridge, AsyncBridge):
                await self.bridge.close()  # release remote resources (endpoint sessions)

    async def _run(self) -> None:
        delay = self.options.backoff_min_s
        while not self._stop.is_set():
            hint = 0.0  # the server's word on when to try again (a limit's retry_after_s)
            try:
                await self._session()
                delay = self.options.backoff_min_s
                if self._finished():
                    return
            except RetryLater as exc:  # over a limit of the server (too many bridges, rate): wait, then retry
                if not self.options.reconnect:
                    raise
                hint = exc.retry_after_s or 0.0
                log.warning("%s (%s); retrying%s", exc, exc.code,
                            f" in {hint:.2g} s or later" if hint else " with backoff")
            except MPEError as exc:
                if exc.code in FATAL_CODES or getattr(exc, "fatal", False) or not self.options.reconnect:
                    raise
                log.warning("%s (%s); reconnecting", exc, exc.code)
            except CannotConnect as exc:
                if not self.options.reconnect:
                    raise MPEError(f"{exc}: is the server running there?", code="cannot_connect") from None
                log.warning("%s: is the server running there? Still trying (next in about %.1f s)", exc, delay)
            except (OSError, websockets.ConnectionClosed, asyncio.TimeoutError) as exc:
                if not self.options.reconnect:
                    raise
                log.warning("connection lost (%s); retrying in %.1f s", _one_line(exc), delay)
            if self._finished() or not self.options.reconnect:
                return
            try:
                wait = max(delay * (0.5 + random.random()), hint)
                await asyncio.wait_for(self._stop.wait(), min(wait, self._idle_left()))
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, self.options.backoff_max_s)

    def _finished(self) -> bool:
        n = self.options.max_episodes
        if self._idle_left() <= 0 and not self._stop.is_set():
            log.info("no episode for %g s: exiting", self.options.exit_when_idle_s)
            self.idle_exit = True
            self._stop.set()
        return self._stop.is_set() or (n is not None and self.episodes_done >= n)

    def _idle_left(self) -> float:
        """Seconds until exit_when_idle_s is reached (infinite when it is not set or in an episode)."""
        if self.options.exit_when_idle_s is None or self._idle_since is None:
            return float("inf")
        return self._idle_since + self.options.exit_when_idle_s - asyncio.get_running_loop().time()

    async def _connect(self):
        headers = {"Authorization": f"Bearer {self.options.token}"} if self.options.token else {}
        url = self._url()
        try:
            # compression=None: PCM does not compress, permessage-deflate would only cost CPU.
            return url, await websockets.connect(url, additional_headers=headers, max_size=1 << 20,
                                                 compression=None, logger=WIRE_LOG)
        except websockets.InvalidStatus as exc:
            raise _refused(exc.response.status_code, url, exc.response.headers.get("Retry-After")) from None
        except websockets.InvalidURI as exc:
            raise MPEError(f"invalid server URL {redact(url)!r}: {exc.msg}", code="bad_url") from None
        except OSError as exc:  # refused, unreachable, an unknown host, a TLS failure
            parts = urlsplit(url)
            raise CannotConnect(f"cannot connect to {parts.hostname}:{parts.port or (443 if parts.scheme == 'wss' else 80)}"
                                f" ({_one_line(exc)})") from None

    async def _session(self) -> None:
        """One connection: read from the socket, feed the lifecycle (clients.lifecycle), act on what
        it reports, send what it returns."""
        b = self.bridge
        url, ws = await self._connect()
        async with ws:
            life = BridgeLifecycle(self._hello())
            try:
                await ws.send(life.send_hello())
            except websockets.ConnectionClosed:
                pass  # refused at once (a token, a limit): the server's error is still there to read below
            while life.bridge_id is None:
                raw = await ws.recv()
                if isinstance(raw, bytes):
                    life.receive_bytes(raw)  # raises: no frame comes before welcome
                event = life.receive_text(raw)
                if isinstance(event, ErrorReceived):
                    raise _remote(event.error)
                # None: §4, a message of a type this SDK does not know is skipped, even first
            self.bridge_id = life.bridge_id
            log.info("connected to %s as bridge %s (model %s, %d Hz, clocks %s)", redact(url), life.bridge_id,
                     b.name, b.sample_rate, ",".join(b.clocks))
            stop = asyncio.create_task(self._stop.wait())
            try:
                while True:
                    recv = asyncio.create_task(ws.recv())
                    idle = self._idle_left()
                    done, _ = await asyncio.wait({recv, stop}, timeout=None if idle == float("inf") else max(idle, 0),
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if recv not in done:
                        recv.cancel()
                        if not self._finished():  # exit_when_idle_s only counts outside episodes
                            continue
                        await ws.close()
                        return
                    raw = recv.result()
                    if isinstance(raw, bytes):
                        frame = life.receive_bytes(raw)
                        if frame.kind == KIND_CONTEXT:  # teacher forcing: before the room frame of its seq
                            await self._reported(ws, life, self._force(frame.seq, frame.pcm))
                            continue
                        self._frames += 1
                        out = await self._reported(ws, life, self._step(frame.seq, frame.pcm))
                        await ws.send(life.send_answer(frame.seq, out))
                        await self._flush_outbox(ws)
                        continue
                    event = life.receive_text(raw)
                    if isinstance(event, StatusChanged):
                        msg = self.status = event.status
                        log.info("%s: %s", "work" if msg.queued_episodes else "waiting", msg.hint or msg.reason)
                    elif isinstance(event, EpisodeStarted):
                        start = event.start
                        b.episode, self._idle_since, self._frames = start, None, 0
                        log.info("episode %s: started (%s clock, %d Hz%s)", start.episode_id, start.clock,
                                 start.sample_rate, f", {start.context_frames} context frames"
                                 if start.context_frames else "")
                        await self._reported(ws, life, self._reset(start))
                    elif isinstance(event, EpisodeEnded):
                        end = event.end
                        b.end_episode(end)
                        b.episode, self._idle_since = None, asyncio.get_running_loop().time()
                        self.episodes_done += 1
                        log.info("episode %s: ended, %s (%d room frames)", end.episode_id, end.reason, self._frames)
                        if self._finished():
                            await ws.close()
                            return
                    elif isinstance(event, ErrorReceived):
                        raise _remote(event.error)
            finally:
                stop.cancel()
                if b.episode is not None:  # the connection ended inside an episode
                    b.episode, self._idle_since = None, asyncio.get_running_loop().time()

    async def _reported(self, ws, life: BridgeLifecycle, work):
        """Run bridge code; an error it raises is sent to the server as ``error {code, message}``
        first, so that the attempt ends with that error: an MPEError (e.g. its model endpoint failed)
        with its own code; any other exception (a bug in ``reset``/``step``/``force``) as
        ``bridge_error`` naming its type and message, and then the bridge goes on to the next
        episode (the server closes the connection after an ``error``: the loop reconnects)."""
        try:
            return await work
        except MPEError as exc:
            await self._send_error(ws, life, exc)
            raise
        except ConnectionError:  # the bridge's connection broke (as if it had dropped): retried as one
            raise
        except Exception as exc:
            failed = RemoteError(f"{type(exc).__name__}: {exc}", code="bridge_error")
            where = _where(exc)
            log.error("episode %s: the bridge raised %s%s; this attempt fails (bridge_error), the bridge goes on",
                      self.bridge.episode.episode_id if self.bridge.episode else "-", _one_line(failed),
                      f" at {where}" if where else "")
            await self._send_error(ws, life, failed)
            raise failed from None

    @staticmethod
    async def _send_error(ws, life: BridgeLifecycle, exc: MPEError) -> None:
        try:
            await ws.send(life.send_error(exc))
        except Exception:
            pass

    async def _reset(self, episode: EpisodeStart) -> None:
        b = self.bridge
        if isinstance(b, AsyncBridge):
            await b.reset(episode)
        elif b.blocking:
            await asyncio.to_thread(b.reset, episode)
        else:
            b.reset(episode)

    async def _force(self, seq: int, pcm: np.ndarray) -> None:
        b = self.bridge
        if isinstance(b, AsyncBridge):
            await b.force(seq, pcm)
        elif b.blocking:
            await asyncio.to_thread(b.force, seq, pcm)
        else:
            b.force(seq, pcm)

    async def _step(self, seq: int, pcm: np.ndarray) -> np.ndarray | None:
        b = self.bridge
        if isinstance(b, AsyncBridge):
            out = await b.step(seq, pcm)
        elif b.blocking:
            out = await asyncio.to_thread(b.step, seq, pcm)
        else:
            out = b.step(seq, pcm)
        if out is not None and (out.dtype != np.int16 or out.shape != (b.frame_samples,)):
            raise ValueError(f"{b.name}.step() must return int16[{b.frame_samples}] or None")
        return out

    async def _flush_outbox(self, ws) -> None:
        box, self.bridge._outbox = self.bridge._outbox, []
        for m in box:
            await ws.send(json.dumps(m))


def _remote(msg: Error) -> Exception:
    if msg.code == "unauthorized":
        return AuthError(f"the server refused the token ({msg.message or 'unauthorized'}); "
                         "a team's tokens come from `mpe token create --team TEAM`", code=msg.code)
    if msg.code == "forbidden":
        return AuthError(f"the server refused the token ({msg.message or 'forbidden'}); a bridge needs a token "
                         "with the bridge scope (`mpe token create --team TEAM --scope bridge`)", code=msg.code)
    if msg.code in RETRY_LATER_CODES:  # over a limit: not fatal, retried with backoff (protocol.md §10)
        return RetryLater(f"the server is at a limit ({msg.message or msg.code})", code=msg.code,
                          retry_after_s=msg.retry_after_s)
    cls = ProtocolError if msg.code in CLOSE_CODES else RemoteError
    return cls(f"server error {msg.code}: {msg.message}", code=msg.code)


def _refused(status: int, url: str, retry_after: str | None = None) -> Exception:
    """The server (or a proxy) answered the WebSocket upgrade with an HTTP status."""
    where = redact(url)
    if status in (429, 503):  # a proxy's rate limit or overload: retried, after its Retry-After
        return RetryLater(f"{where} answered HTTP {status}", code="rate_limited",
                          retry_after_s=_seconds(retry_after))
    if status == 404:
        return MPEError(f"no bridge endpoint at {where} (HTTP 404): give the server's address, "
                        "e.g. ws://HOST:8600 (/v1/bridge is added)", code="not_found")
    if status in (401, 403):
        return MPEError(f"{where} refused the WebSocket upgrade (HTTP {status}): not the server's bridge endpoint "
                        "(give the server's address, ws://HOST:PORT; the server checks the token after the upgrade), "
                        "or a proxy in front of it refused the connection", code="refused")
    return OSError(f"{where} answered HTTP {status}")  # 5xx: worth retrying


def _seconds(retry_after: str | None) -> float | None:
    """An HTTP ``Retry-After`` in seconds (its delay-seconds form; a date or garbage: None)."""
    try:
        value = float(retry_after) if retry_after is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value <= 3600 else None


def _where(exc: BaseException) -> str:
    """Where an exception was raised: ``file.py:LINE in function`` of its innermost frame."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    code = tb.tb_frame.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno} in {code.co_name}"


def _one_line(exc: BaseException) -> str:
    return redact(" ".join(str(exc).split()) or type(exc).__name__)


async def serve_bridge(bridge: BaseBridge, options: BridgeOptions) -> BridgeClient:
    """Serve episodes until the bridge stops (``max_episodes``, ``exit_when_idle_s``, :meth:`BridgeClient.stop`);
    an error after which reconnecting cannot help is raised as an ``MPEError`` with its ``code``."""
    client = BridgeClient(bridge, options)
    await client.run()
    return client


def run_bridge(bridge: BaseBridge, options: BridgeOptions) -> BridgeClient:
    """The entry point of a bridge script: :func:`serve_bridge` in its own event loop, with the
    SDK's log records on stderr one per line (unless logging is configured already). An error that
    ends the bridge (a refused token, a wrong URL) is one log line and exit status 2, not a traceback."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ours = logging.getLogger("mpe")
    level = ours.level
    if level == logging.NOTSET:  # a script's own logging.warning() set the root's level: ours still shows INFO
        ours.setLevel(logging.INFO)
    try:
        return asyncio.run(serve_bridge(bridge, options))
    except MPEError as exc:
        log.error("%s (%s)", exc, exc.code)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    finally:
        ours.setLevel(level)  # the process's logging as it was (a caller that runs several bridges)
