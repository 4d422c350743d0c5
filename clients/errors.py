"""The one exception hierarchy of the wire protocol (DESIGN §4, §11).

Every error has a stable ``code`` (sent in ``error`` messages) and the WebSocket close
code that follows it when fatal. The mapping from code to close code lives here only.
Messages never carry internal details.
"""

from __future__ import annotations

# RFC 6455 close codes used by the protocol.
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_POLICY_VIOLATION = 1008
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
CLOSE_TRY_AGAIN_LATER = 1013

# Stable error codes -> close code (the only place this mapping exists).
CLOSE_CODES: dict[str, int] = {
    "unauthorized": CLOSE_POLICY_VIOLATION,
    "forbidden": CLOSE_POLICY_VIOLATION,  # the token lacks the scope (a read-only token as a bridge)
    "unsupported_version": CLOSE_PROTOCOL_ERROR,
    "bad_json": CLOSE_UNSUPPORTED_DATA,
    "unknown_type": CLOSE_PROTOCOL_ERROR,
    "bad_message": CLOSE_PROTOCOL_ERROR,
    "unexpected_message": CLOSE_PROTOCOL_ERROR,
    "binary_before_hello": CLOSE_PROTOCOL_ERROR,
    "bad_frame": CLOSE_PROTOCOL_ERROR,
    "bad_seq": CLOSE_PROTOCOL_ERROR,
    "message_too_big": CLOSE_MESSAGE_TOO_BIG,
    "timeout": CLOSE_PROTOCOL_ERROR,
    "too_much_data": CLOSE_POLICY_VIOLATION,  # an attempt's text or stats over their total (protocol.md §11)
    "bridge_error": CLOSE_NORMAL,
    "shutdown": CLOSE_GOING_AWAY,
    "internal": CLOSE_INTERNAL_ERROR,
    # over a limit of the server (docs/api.md "Limits"): connect again later, with backoff
    "rate_limited": CLOSE_TRY_AGAIN_LATER,  # too many connection attempts (or failed authentications) from an address
    "too_many_bridges": CLOSE_TRY_AGAIN_LATER,  # the team's bridge connections on this server are at their limit
    "too_many_listeners": CLOSE_TRY_AGAIN_LATER,  # the team's listen sockets on this server are at their limit
}

# Codes that mean "over a limit, try again later" (with backoff; after ``retry_after_s`` when the
# error carries it): never fatal to a client. ``busy`` (an episode's listeners at their cap) and
# ``too_many_queued`` (a team's queued episodes at their limit, on creating a run) are of the REST
# API and the listen socket.
RETRY_LATER_CODES = frozenset({"rate_limited", "too_many_bridges", "too_many_listeners", "too_many_queued", "busy"})


class MPEError(Exception):
    """Base of every error the project raises on purpose."""

    code = "internal"

    def __init__(self, message: str = "", *, code: str | None = None):
        super().__init__(message or self.__class__.__doc__ or self.code)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)

    @property
    def close_code(self) -> int:
        return CLOSE_CODES.get(self.code, CLOSE_INTERNAL_ERROR)


class ProtocolError(MPEError):
    """The peer broke wire protocol v1."""

    code = "bad_message"


class AuthError(ProtocolError):
    """Missing or invalid token."""

    code = "unauthorized"


class RetryLater(MPEError):
    """Over a limit of the server: try again later (``retry_after_s`` seconds from now at the
    earliest, when known). The code says which limit (:data:`RETRY_LATER_CODES`)."""

    code = "rate_limited"

    def __init__(self, message: str = "", *, code: str | None = None, retry_after_s: float | None = None):
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class RemoteError(MPEError):
    """The peer reported an error; ``remote_code`` is the code it sent."""

    code = "bridge_error"

    def __init__(self, message: str = "", *, code: str | None = None, remote_code: str | None = None):
        super().__init__(message, code=code)
        self.remote_code = remote_code


class ModelError(RemoteError):
    """A model that runs inside the bridge process failed (loading it or stepping it). Raised from a
    bridge's ``reset``/``step`` it ends the attempt with its ``code`` (docs/protocol.md §9, "Codes
    stored with an attempt"); ``fatal``: retrying on this host cannot help, the bridge stops."""

    code = "model_error"
    fatal = False


class ModelOutOfMemory(ModelError):
    """The accelerator (or the host) ran out of memory."""

    code = "model_oom"


class ModelMissingWeights(ModelError):
    """The checkpoint's files are not on this host (never downloaded silently)."""

    code = "model_missing_weights"
    fatal = True


class ModelBadCheckpoint(ModelError):
    """The checkpoint is not one this bridge can load (another architecture, a broken file)."""

    code = "model_bad_checkpoint"
    fatal = True


class ModelMissingPackage(ModelError):
    """A package the model needs is not installed (an optional extra of duplex-mpe)."""

    code = "model_missing_package"
    fatal = True
