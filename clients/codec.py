"""Wire protocol v1 binary frames (DESIGN §4). Pure: numpy and struct only.

Header (8 bytes, little-endian): u8 version, u8 kind, u16 flags, u32 seq; then exactly one
frame of PCM s16le mono samples, or nothing when the SILENT flag is set. Kinds: 1 room audio
and 3 assistant context (server → bridge), 2 assistant audio (bridge → server).
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from clients.errors import ProtocolError

PROTOCOL_VERSION = 1
KIND_ROOM = 1
KIND_ASSISTANT = 2
#: teacher forcing (docs/protocol.md §5.1): the audio the model must take as its own output for
#: slot ``seq``, sent right before the room frame of the same seq, only to bridges that accept it
KIND_CONTEXT = 3
KINDS = (KIND_ROOM, KIND_ASSISTANT, KIND_CONTEXT)
FLAG_SILENT = 0x0001
STREAM_RATE = 24_000  # the one definition of the stream rate (DESIGN §4)
SAMPLE_RATES = (STREAM_RATE, 16_000)
FRAME_MS = 80
HEADER = struct.Struct("<BBHI")
HEADER_SIZE = HEADER.size  # 8
MAX_SEQ = 2**32 - 1


def frame_samples(rate: int) -> int:
    """Samples in one 80 ms frame: 1920 at 24 kHz, 1280 at 16 kHz."""
    return rate * FRAME_MS // 1000


FRAME_SAMPLES = frame_samples(STREAM_RATE)  # 1920: one frame of the stream


def max_binary_size(rate: int) -> int:
    return HEADER_SIZE + 2 * frame_samples(rate)


@dataclass(frozen=True, slots=True)
class Frame:
    kind: int
    seq: int
    flags: int
    pcm: np.ndarray  # int16, exactly one frame (zeros when SILENT)

    @property
    def silent(self) -> bool:
        return bool(self.flags & FLAG_SILENT)


def encode_frame(kind: int, seq: int, pcm: np.ndarray | None) -> bytes:
    """Encode one frame; ``None`` or an all-zero frame is sent as SILENT."""
    if not 0 <= seq <= MAX_SEQ:
        raise ValueError("seq out of range")
    if pcm is None or not pcm.any():
        return HEADER.pack(PROTOCOL_VERSION, kind, FLAG_SILENT, seq)
    return HEADER.pack(PROTOCOL_VERSION, kind, 0, seq) + pcm.astype("<i2", copy=False).tobytes()


def decode_frame(data: bytes, *, n_samples: int, kind: int | Collection[int] | None = None) -> Frame:
    """Decode and check one binary message; raises ProtocolError with a stable code. ``kind``: the
    kind (or kinds) allowed in this direction; None: any kind of the protocol."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError("binary message shorter than the 8-byte header", code="bad_frame")
    version, k, flags, seq = HEADER.unpack_from(data)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"unsupported protocol version {version}", code="unsupported_version")
    if k not in KINDS:
        raise ProtocolError(f"unknown frame kind {k}", code="bad_frame")
    allowed = (kind,) if isinstance(kind, int) else kind
    if allowed is not None and k not in allowed:
        expected = " or ".join(str(a) for a in allowed)
        raise ProtocolError(f"frame kind {k} not allowed here (expected {expected})", code="bad_frame")
    if flags & ~FLAG_SILENT:
        raise ProtocolError("unknown flag bits set", code="bad_frame")
    payload = len(data) - HEADER_SIZE
    if flags & FLAG_SILENT:
        if payload:
            raise ProtocolError("SILENT frame with a payload", code="bad_frame")
        return Frame(k, seq, flags, np.zeros(n_samples, dtype=np.int16))
    if payload != 2 * n_samples:
        raise ProtocolError(
            f"frame payload is {payload} bytes, expected {2 * n_samples} ({n_samples} samples)",
            code="bad_frame",
        )
    pcm = np.frombuffer(data, dtype="<i2", offset=HEADER_SIZE).astype(np.int16, copy=False)
    return Frame(k, seq, flags, pcm)
