"""Short-lived signed URLs for what a browser cannot send headers with (``<audio>``, the
listen WebSocket): an HMAC keyed by the caller's *stored* token hash over the resource and
an expiry. No shared server secret is needed (replicas agree), the token itself never
appears in a URL or an access log, and revoking the token kills its URLs at once."""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlencode

from clients.errors import AuthError
from server.auth import Principal
from server.db import Database, Token

TTL_S = 3600


def sign(token_hash: str, *parts: object) -> str:
    """The HMAC-SHA256 of ``parts`` keyed by a stored token hash (hex, 40 characters)."""
    msg = "|".join("" if p is None else str(p) for p in parts).encode()
    return hmac.new(token_hash.encode(), msg, hashlib.sha256).hexdigest()[:40]


def signed_query(db: Database, p: Principal, *parts: object, ttl_s: int = TTL_S) -> tuple[dict, int]:
    """Query parameters (``tid``, ``exp``, ``sig``) that sign ``parts`` with the caller's token for
    ``ttl_s`` seconds, and their expiry in epoch seconds."""
    with db.session() as s:
        token_hash = s.get(Token, p.token_id).token_hash
    exp = int(time.time()) + ttl_s
    return {"tid": p.token_id, "exp": exp, "sig": sign(token_hash, *parts, exp)}, exp


def verify(db: Database, tid: int | str | None, exp: int | str | None, sig: str | None, *parts: object) -> Principal:
    """The principal of a signed URL; AuthError when it is missing, forged, expired or revoked."""
    try:
        tid_i, exp_i = int(tid), int(exp)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise AuthError("missing token: send 'Authorization: Bearer <token>' or use a signed URL") from None
    if not sig:
        raise AuthError("missing token: send 'Authorization: Bearer <token>' or use a signed URL")
    with db.session() as s:
        row = s.get(Token, tid_i)
    if (row is None or row.revoked or exp_i < time.time()
            or not hmac.compare_digest(sign(row.token_hash, *parts, exp_i), sig)):
        raise AuthError("invalid or expired signed URL")
    return Principal(team=row.team, admin=row.admin, token_id=row.id)


def query_string(q: dict) -> str:
    """``q`` as a URL query string."""
    return urlencode(q)
