"""Short-lived signed URLs for what a browser cannot send headers with (``<audio>``, the
listen WebSocket): an HMAC, keyed by the server's secret, over the token id, the resource and
an expiry at most :data:`TTL_S` ahead.

The secret is generated on first use and kept in the database (``server_secrets``), so every
server process on one database agrees; ``mpe secret rotate`` makes a new one, which voids every
URL signed before. Nothing stored beside a token can sign (a token hash is no key), the token
itself never appears in a URL or an access log, and a revoked or expired token's URLs fail at
once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from urllib.parse import urlencode

from sqlalchemy import select

from clients.errors import AuthError
from server.auth import Principal, Scope, principal_of, require, usable
from server.db import MAX_INT_ID, Database, ServerSecret, Token

TTL_S = 3600  # the longest a signed URL lives
CLOCK_SLACK_S = 5  # server processes' clocks may differ this much


def rotate_secret(db: Database) -> None:
    """Make a new signing secret: URLs signed with an older one stop working."""
    with db.session() as s:
        s.add(ServerSecret(secret=secrets.token_hex(32)))


def current_secret(db: Database) -> str:
    """The newest signing secret (made on first use)."""
    q = select(ServerSecret.secret).order_by(ServerSecret.id.desc()).limit(1)
    with db.session() as s:
        secret = s.scalar(q)
    if secret is None:
        rotate_secret(db)
        with db.session() as s:  # two processes starting at once: the newest row wins for both
            secret = s.scalar(q)
    return secret


def sign(secret: str, *parts: object) -> str:
    """The HMAC-SHA256 of ``parts`` keyed by ``secret`` (hex, 40 characters)."""
    msg = "|".join("" if p is None else str(p) for p in parts).encode()
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()[:40]


def signed_query(db: Database, p: Principal, *parts: object, ttl_s: int = TTL_S) -> tuple[dict, int]:
    """Query parameters (``tid``, ``exp``, ``sig``) that sign ``parts`` for the caller's token for
    ``ttl_s`` seconds (at most :data:`TTL_S`), and their expiry in epoch seconds."""
    exp = int(time.time()) + min(ttl_s, TTL_S)
    return {"tid": p.token_id, "exp": exp, "sig": sign(current_secret(db), p.token_id, *parts, exp)}, exp


def verify(db: Database, tid: int | str | None, exp: int | str | None, sig: str | None, *parts: object) -> Principal:
    """The principal of a signed URL; AuthError when it is missing, forged, expired, dated further
    ahead than a URL of this server lives, or its token is revoked or expired."""
    try:
        tid_i, exp_i = int(tid), int(exp)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise AuthError("missing token: send 'Authorization: Bearer <token>' or use a signed URL") from None
    if not sig:
        raise AuthError("missing token: send 'Authorization: Bearer <token>' or use a signed URL")
    if not 1 <= tid_i <= MAX_INT_ID:  # no token has that id (and the database cannot look it up)
        raise AuthError("invalid or expired signed URL")
    t = time.time()
    with db.session() as s:
        row = s.get(Token, tid_i)
    if (not usable(row) or not t <= exp_i <= t + TTL_S + CLOCK_SLACK_S
            # as bytes: compare_digest refuses a str with non-ASCII characters, and a forged sig is any text
            or not hmac.compare_digest(sign(current_secret(db), tid_i, *parts, exp_i).encode(),
                                       sig.encode("utf-8", "replace"))):
        raise AuthError("invalid or expired signed URL")
    return require(principal_of(row), Scope.read)


def query_string(q: dict) -> str:
    """``q`` as a URL query string."""
    return urlencode(q)
