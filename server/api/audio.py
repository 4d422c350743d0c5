"""Episode audio as WAV: room, assistant, or a stereo mix (left room, right assistant).

Range requests (RFC 9110 §14) let a browser seek. Since ``<audio>`` cannot send headers,
``/audio-url`` hands out a signed URL that expires (server.api.signed).
"""

from __future__ import annotations

import io
import re
import threading
from collections import OrderedDict
from typing import Annotated, Literal

import numpy as np
import soundfile as sf
from fastapi import APIRouter, Query, Request, Response, Security
from fastapi.security import HTTPAuthorizationCredentials

from clients.codec import STREAM_RATE
from server.api.deps import Caller, State, admit, bearer, visible_episode
from server.api.errors import NotFound, RangeNotSatisfiable
from server.api.schemas import ERRORS, AudioUrl
from server.api.signed import query_string, signed_query, verify
from server.auth import Scope, authenticate
from server.core.status import AttemptStatus
from server.db import Attempt, Database, Episode
from server.engine.bundles import load_track
from server.engine.live import levels

router = APIRouter(prefix="/v1", tags=["audio"], responses=ERRORS)
Track = Literal["room", "assistant", "mix"]
CACHE_BYTES = 128 << 20  # finished episodes' WAVs kept in memory for seeking
RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")
PAST_ANY_END = 1 << 62  # a byte offset of more digits than this has lies beyond every resource


# --- pure helpers ---------------------------------------------------------------------------


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """Inclusive (start, end) of a single byte range, or None to send the whole body.

    Other units, several ranges and malformed headers are ignored (allowed by RFC 9110);
    a range that starts beyond the end raises RangeNotSatisfiable (416). Numbers may have any
    number of digits (one too long for ``int()`` is simply past the end).
    """
    m = RANGE_RE.match((header or "").strip())
    if not m or m.groups() == ("", ""):
        return None
    a, b = m.groups()
    if not a:  # suffix range: the last b bytes
        n = _offset(b)
        if n == 0 or size == 0:
            raise RangeNotSatisfiable(size)
        return max(0, size - n), size - 1
    start = _offset(a)
    if b and _offset(b) < start:
        return None
    if start >= size:
        raise RangeNotSatisfiable(size)
    return start, min(_offset(b) if b else size - 1, size - 1)


def _offset(digits: str) -> int:
    """A byte offset of a Range header, however many digits it has (leading zeros are zeros; a
    number too long to be an offset is :data:`PAST_ANY_END`)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) < 19 else PAST_ANY_END


def wav_bytes(pcm: np.ndarray) -> bytes:
    """``pcm`` as a 24 kHz 16-bit WAV file (mono, or stereo given (n, 2) samples)."""
    buf = io.BytesIO()
    sf.write(buf, pcm, STREAM_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def track_wav(db: Database, attempt_id: str, track: str) -> bytes:
    """WAV bytes of an attempt's ``room`` or ``assistant`` track, or of ``mix`` (stereo: left room,
    right assistant, the shorter padded with silence)."""
    if track != "mix":
        return wav_bytes(load_track(db, attempt_id, track))
    room, assistant = load_track(db, attempt_id, "room"), load_track(db, attempt_id, "assistant")
    n = max(len(room), len(assistant))
    return wav_bytes(np.stack([np.pad(room, (0, n - len(room))), np.pad(assistant, (0, n - len(assistant)))], axis=1))


class WavCache:
    """A small LRU of finished attempts' WAVs, bounded in bytes (thread-safe)."""

    def __init__(self, budget: int = CACHE_BYTES):
        self.budget, self.used = budget, 0
        self.items: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> bytes | None:
        with self.lock:
            data = self.items.get(key)
            if data is not None:
                self.items.move_to_end(key)
            return data

    def put(self, key: tuple[str, str], data: bytes) -> None:
        if len(data) > self.budget // 4:
            return
        with self.lock:
            if key in self.items:
                return
            self.items[key] = data
            self.used += len(data)
            while self.used > self.budget:
                _, old = self.items.popitem(last=False)
                self.used -= len(old)


CACHE = WavCache()


# --- routes ---------------------------------------------------------------------------------


def _attempt(s, ep: Episode, number: int | None) -> Attempt:
    if number is not None:
        att = s.query(Attempt).filter(Attempt.episode_id == ep.id, Attempt.number == number).one_or_none()
    else:
        att = s.get(Attempt, ep.completed_attempt_id or ep.current_attempt_id or "")
    if att is None:
        raise NotFound("this episode has no audio yet" if number is None else "no such attempt")
    return att


@router.get("/episodes/{episode_id}/audio-url", response_model=AudioUrl, summary="A signed URL for <audio>")
def audio_url(episode_id: str, p: Caller, state: State, track: Track = "mix",
              attempt: Annotated[int | None, Query(ge=1, le=1000)] = None) -> AudioUrl:
    """A URL that plays without headers for an hour (``<audio src>`` cannot send the token)."""
    with state.db.session() as s:
        ep, _ = visible_episode(s, p, episode_id)
        _attempt(s, ep, attempt)
    q, exp = signed_query(state.db, p, ep.id, track, attempt)
    if attempt is not None:
        q["attempt"] = attempt
    return AudioUrl(url=f"/v1/episodes/{ep.id}/audio/{track}?{query_string(q)}", expires_at=exp)


@router.get("/episodes/{episode_id}/levels", summary="Loudness per 80 ms frame of both tracks")
def track_levels(episode_id: str, p: Caller, state: State,
                 attempt: Annotated[int | None, Query(ge=1, le=1000)] = None) -> dict[str, list[int]]:
    """0..100 per frame (RMS mapped from -60..0 dBFS; 0 = digital silence), for drawing."""
    with state.db.session() as s:
        ep, _ = visible_episode(s, p, episode_id)
        att = _attempt(s, ep, attempt)
    return {track: levels(load_track(state.db, att.id, track)) for track in ("room", "assistant")}


@router.get("/episodes/{episode_id}/audio/{track}", summary="Episode audio (WAV)",
                  response_class=Response,
                  responses={200: {"content": {"audio/wav": {}}}, 206: {"description": "partial content"},
                             416: {"model": ERRORS[400]["model"]}})
def audio(request: Request, episode_id: str, track: Track, state: State,
          creds: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None,
          attempt: Annotated[int | None, Query(ge=1, le=1000)] = None,
          tid: Annotated[int | None, Query(ge=1)] = None, exp: Annotated[int | None, Query(ge=0)] = None,
          sig: Annotated[str | None, Query(max_length=64)] = None) -> Response:
    """24 kHz 16-bit WAV: `room`, `assistant` or `mix` (stereo: left room, right assistant).
    Honours single byte ranges; a running episode serves what is recorded so far."""
    p = admit(request, lambda: authenticate(state.db, creds.credentials, Scope.read) if creds is not None else
              verify(state.db, tid, exp, sig, episode_id, track, attempt))
    with state.db.session() as s:
        ep, _ = visible_episode(s, p, episode_id)
        att = _attempt(s, ep, attempt)
        final = att.status != AttemptStatus.running
    key = (att.id, track)
    data = CACHE.get(key) if final else None
    if data is None:
        data = track_wav(state.db, att.id, track)
        if final:
            CACHE.put(key, data)
    size = len(data)
    etag = f'"{att.id}-{track}-{size}"'
    headers = {"Accept-Ranges": "bytes", "ETag": etag,
               "Cache-Control": "private, max-age=3600" if final else "no-store"}
    rng = request.headers.get("range")
    if_range = request.headers.get("if-range")
    span = parse_range(rng, size) if rng and (if_range is None or if_range == etag) else None
    status = 200
    if span is not None:
        status = 206
        headers["Content-Range"] = f"bytes {span[0]}-{span[1]}/{size}"
        data = data[span[0]:span[1] + 1]
    headers["Content-Length"] = str(len(data))
    body = b"" if request.method == "HEAD" else data
    return Response(content=body, status_code=status, media_type="audio/wav", headers=headers)


router.add_api_route("/episodes/{episode_id}/audio/{track}", audio, methods=["HEAD"], include_in_schema=False)
