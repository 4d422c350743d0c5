"""API tokens: random secrets shown once, stored as SHA-256 hashes, owned by a team."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select

from clients.errors import AuthError
from server.db import Database, Token

TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class Principal:
    team: str
    admin: bool
    token_id: int


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(db: Database, team: str, *, admin: bool = False, label: str = "") -> str:
    if not TEAM_RE.match(team):
        raise ValueError("team names are 1-64 characters of a-z, 0-9, '_' and '-'")
    token = "mpe_" + secrets.token_urlsafe(32)
    with db.session() as s:
        s.add(Token(team=team, token_hash=hash_token(token), admin=admin, label=label))
    return token


def authenticate(db: Database, token: str | None) -> Principal:
    if not token:
        raise AuthError("missing token")
    with db.session() as s:
        row = s.scalar(select(Token).where(Token.token_hash == hash_token(token), Token.revoked.is_(False)))
    if row is None:
        raise AuthError("invalid token")
    return Principal(team=row.team, admin=row.admin, token_id=row.id)


def socket_token(conn) -> str | None:
    """The token of a WebSocket connection: ``Authorization: Bearer`` or, where a header is
    impossible (browsers), ``?token=`` (DESIGN §4)."""
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return conn.query_params.get("token")
