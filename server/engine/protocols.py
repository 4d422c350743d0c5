"""The uvicorn protocols the server runs (docs/guarantees.md "Connections").

* :class:`HttpProtocol`: an HTTP connection must complete a request head within uvicorn's
  ``timeout_keep_alive`` (``MPE_HTTP_IDLE_TIMEOUT_S``) of going idle — after it opens, after each
  response — or it is closed: a connection that never sends a request, a keep-alive connection left
  open, or a head that trickles in do not hold a socket for ever (uvicorn alone arms its keep-alive
  timer only after a first response). A request head is also capped in size: once
  :data:`MAX_HEAD_BYTES` have arrived without completing it, the connection gets ``431`` and is
  closed at once. The check is a counter of the bytes received while a head is awaited (linear);
  without it, a head that never ends costs the parser time growing with the square of its length
  (it joins each new piece of a URL or header to what came before), a core held for the whole
  head deadline, which delays every realtime episode of the process.
* :class:`WebSocketProtocol`: a handler can reset the socket of a client that stopped reading
  (:func:`reset`). Closing such a socket would keep it open until the kernel had delivered what
  it buffers, which a client that never reads never takes; a reset frees it at once. A client that
  does not answer the server's close frame within uvicorn's close timeout (10 s), or its pings
  within ``ws_ping_timeout``, is reset the same way. A text message that is not UTF-8 closes the
  connection with 1007 and one WARNING line naming the client (uvicorn alone logs an ERROR with a
  traceback for each: any client, authenticated or not, could fill the log with them).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from contextlib import suppress
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

RESET = "mpe.reset"  # the ASGI scope extension that carries the reset of a WebSocket's socket


MAX_HEAD_BYTES = 64 * 1024  # the most bytes a request head may take (request line and header fields)
_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
              b"content-length: %d\r\nconnection: close\r\n\r\n%s")


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with a deadline and a size cap for each request head (see the module)."""

    head_timer: asyncio.TimerHandle | None = None
    head_bytes = 0  # bytes received since the head now awaited began (while head_timer is armed)

    def data_received(self, data: bytes) -> None:
        if self.head_timer is None:  # a body, or a head already complete: not counted
            return super().data_received(data)
        self.head_bytes += len(data)
        super().data_received(data)
        if self.head_timer is not None and self.head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._too_large()

    def _too_large(self) -> None:
        self._disarm()
        body = f"request head over {MAX_HEAD_BYTES} bytes".encode()
        self.logger.warning("Request head over %d bytes from %s: closed.", MAX_HEAD_BYTES,
                            "%s:%d" % self.client if self.client else "unknown")
        self.transport.write(_TOO_LARGE % (len(body), body))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        waiting = bool(self.pipeline)  # a pipelined request's head is complete already
        super().on_response_complete()
        if not waiting:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self.head_bytes = 0
        if not self.transport.is_closing():
            self.head_timer = self.loop.call_later(self.timeout_keep_alive, self._expired)

    def _disarm(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _expired(self) -> None:
        self.head_timer = None
        if self.transport.get_protocol() is self and not self.transport.is_closing():  # not upgraded meanwhile
            self.transport.close()


READ_HIGH_WATER = 8  # messages received and not yet taken by the app before the socket's reading pauses


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol whose scope carries :data:`RESET` (see the module), and whose
    reading pauses only once READ_HIGH_WATER messages wait for the app. uvicorn alone pauses after
    every message and resumes when the app takes it: two changes of the event loop's selector per
    message (about 5 % of the loop thread in a profile of 32 realtime sessions)."""

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent and not _utf8(self.frames):
            self.frames = []
            self.logger.warning("WebSocket text message that is not UTF-8 from %s: closed (1007).",
                                _client(self.client))
            self.conn.send_close(1007)
            self.handle_parser_exception()
            return
        if self.read_paused or self.queue.qsize() + 1 >= READ_HIGH_WATER:
            return super().send_receive_event_to_app()  # pauses reading (uvicorn resumes it once drained)
        self.read_paused = True  # below the mark: uvicorn takes reading as paused already, and leaves it on
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = False

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)  # absent when the handshake was refused
        if scope is not None:
            scope["extensions"][RESET] = {"reset": self.reset}

    async def send(self, message: Any) -> None:
        timer = self.close_timer
        await super().send(message)
        if self.close_timer is not None and self.close_timer is not timer:  # a close frame went out
            self.close_timer.cancel()
            self.close_timer = self.loop.call_later(self.close_timeout, self.reset)

    def keepalive_timeout(self) -> None:
        if self.close_sent or self.transport.is_closing():
            return super().keepalive_timeout()
        super().keepalive_timeout()
        self.reset()

    def reset(self) -> None:
        """Drop what is buffered and reset the connection (TCP RST: SO_LINGER 0, then abort)."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()


def _utf8(frames: list[bytes]) -> bool:
    try:
        (frames[0] if len(frames) == 1 else b"".join(frames)).decode()
    except UnicodeDecodeError:
        return False
    return True


def _client(client: tuple[str, int] | None) -> str:
    return "%s:%d" % client if client else "an unknown client"


def reset(ws: Any) -> bool:
    """Reset a WebSocket's socket (a Starlette ``WebSocket``); False when its server cannot."""
    ext = ws.scope.get("extensions", {}).get(RESET)
    if ext is None:
        return False
    ext["reset"]()
    return True
