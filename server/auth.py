"""API tokens: random secrets shown once, stored as SHA-256 hashes, owned by a team, with scopes
and an optional expiry (docs/api.md "Tokens").

Scopes say what a token may do: ``bridge`` serves episodes at ``/v1/bridge`` (and nothing else:
a bridge cannot read the REST API), ``read`` reads and drives the team's REST API, pages and
listen sockets, ``admin`` does everything for every team. A revoked or expired token fails at
once, on open connections too (:class:`TokenWatch`: one query per process every
:data:`TOKEN_CHECK_S` seconds looks at the tokens of all its open connections).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import secrets
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

from sqlalchemy import select

from clients.errors import AuthError, MPEError
from server.db import UNAVAILABLE, Database, Token, utcnow

log = logging.getLogger("mpe.auth")

TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
TOKEN_CHECK_S = 2.0  # how often an open connection looks again at its token


class Scope(StrEnum):
    """What a token may do."""

    bridge = "bridge"  # serve episodes at /v1/bridge
    read = "read"  # the team's REST API, pages and listen sockets
    admin = "admin"  # everything, every team


DEFAULT_SCOPES = frozenset({Scope.bridge, Scope.read})  # what every token could do before scopes existed


class Forbidden(MPEError):
    """This needs another scope (an admin token, say)."""

    code = "forbidden"


@dataclass(frozen=True)
class Principal:
    team: str
    scopes: frozenset[Scope]
    token_id: int

    @property
    def admin(self) -> bool:
        return Scope.admin in self.scopes

    def allows(self, scope: Scope) -> bool:
        return self.admin or scope in self.scopes


def parse_scopes(value: str | Iterable[str]) -> frozenset[Scope]:
    """Scopes from ``"bridge,read"`` or a list of names; ValueError names an unknown one."""
    names = value.split(",") if isinstance(value, str) else list(value)
    out = set()
    for name in (n.strip() for n in names):
        if name not in Scope.__members__:
            raise ValueError(f"unknown scope {name!r} (scopes: {', '.join(Scope)})")
        out.add(Scope(name))
    if not out:
        raise ValueError(f"a token needs at least one scope ({', '.join(Scope)})")
    return frozenset(out)


def format_scopes(scopes: Iterable[Scope]) -> str:
    return ",".join(sorted(Scope(s).value for s in scopes))


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


MAX_TOKEN_LIFETIME_DAYS = 3650  # a token's lifetime (``expires_in_s``) is at most ten years
MAX_TOKEN_LIFETIME_S = MAX_TOKEN_LIFETIME_DAYS * 86400.0


def create_token(db: Database, team: str, *, admin: bool = False, scopes: Iterable[str] | str | None = None,
                 label: str = "", expires_in_s: float | None = None) -> str:
    """A new token's secret (stored only as its hash). ``admin`` is the scope ``admin``; without
    ``scopes`` a token may serve bridges and read (:data:`DEFAULT_SCOPES`)."""
    if not TEAM_RE.match(team):
        raise ValueError("team names are 1-64 characters of a-z, 0-9, '_' and '-'")
    chosen = frozenset({Scope.admin}) if admin else DEFAULT_SCOPES if scopes is None else parse_scopes(scopes)
    if expires_in_s is not None and not 0 < expires_in_s <= MAX_TOKEN_LIFETIME_S:  # NaN fails too
        raise ValueError(f"token lifetime must be > 0 and <= {MAX_TOKEN_LIFETIME_DAYS}d")
    expires = None if expires_in_s is None else utcnow() + timedelta(seconds=expires_in_s)
    token = "mpe_" + secrets.token_urlsafe(32)
    with db.session() as s:
        s.add(Token(team=team, token_hash=hash_token(token), scopes=format_scopes(chosen), label=label,
                    expires_at=expires))
    return token


def usable(row: Token | None) -> bool:
    """Whether a stored token may be used now: known, not revoked, not expired."""
    return row is not None and not row.revoked and (row.expires_at is None or row.expires_at > utcnow())


def principal_of(row: Token) -> Principal:
    return Principal(team=row.team, scopes=parse_scopes(row.scopes), token_id=row.id)


def require(p: Principal, scope: Scope, *alternatives: Scope) -> Principal:
    """``p`` if it has ``scope`` (or one of ``alternatives``); Forbidden otherwise."""
    wanted = (scope, *alternatives)
    if not any(p.allows(x) for x in wanted):
        raise Forbidden(f"this token's scopes ({format_scopes(p.scopes)}) do not include "
                        + " or ".join(map(str, wanted)))
    return p


def authenticate(db: Database, token: str | None, scope: Scope, *alternatives: Scope) -> Principal:
    """The principal of a secret that may be used now and has ``scope`` (or one of ``alternatives``):
    AuthError for a missing, unknown, revoked or expired token (one message for all three),
    Forbidden for a missing scope."""
    if not token:
        raise AuthError("missing token")
    with db.session() as s:
        row = s.scalar(select(Token).where(Token.token_hash == hash_token(token)))
    if not usable(row):
        raise AuthError("invalid, revoked or expired token")
    return require(principal_of(row), scope, *alternatives)


def usable_ids(db: Database, token_ids: Iterable[int]) -> set[int]:
    """Which of these tokens may be used now (one query)."""
    ids = sorted(set(token_ids))
    if not ids:
        return set()
    with db.session() as s:
        return {row.id for row in s.scalars(select(Token).where(Token.id.in_(ids))) if usable(row)}


class TokenWatch:
    """Watches an open connection's token and calls ``on_lost`` once (with the AuthError to report)
    when it is revoked or expires: within :data:`TOKEN_CHECK_S` seconds, by the one check that the
    process shares among all its open connections on ``db`` (:class:`_Watches`)."""

    def __init__(self, db: Database, token_id: int, on_lost: Callable[[AuthError], Awaitable[None] | None]):
        self.token_id, self.on_lost = token_id, on_lost
        self.watches = _Watches.of(db)
        self.watches.add(self)

    def cancel(self) -> None:
        self.watches.discard(self)


class _Watches:
    """The open connections' token watches on one database, and the task that checks them all with
    one query every :data:`TOKEN_CHECK_S` seconds (running while there is any)."""

    _by_db: "weakref.WeakKeyDictionary[Database, _Watches]" = weakref.WeakKeyDictionary()

    def __init__(self, db: Database):
        self.db = db
        self.watches: set[TokenWatch] = set()
        self.task: asyncio.Task | None = None
        self.told: set[asyncio.Future] = set()  # on_lost calls still running

    @classmethod
    def of(cls, db: Database) -> "_Watches":
        if db not in cls._by_db:
            cls._by_db[db] = cls(db)
        return cls._by_db[db]

    def add(self, watch: TokenWatch) -> None:
        self.watches.add(watch)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())

    def discard(self, watch: TokenWatch) -> None:
        self.watches.discard(watch)
        if not self.watches and self.task is not None:
            self.task.cancel()
            self.task = None

    async def _run(self) -> None:
        while self.watches:
            await asyncio.sleep(TOKEN_CHECK_S)
            try:
                ok = await asyncio.to_thread(usable_ids, self.db, {w.token_id for w in self.watches})
            except UNAVAILABLE as exc:  # the database is away (restarting): checked again next time
                log.warning("token check: database unavailable (%s)", type(exc).__name__)
                continue
            for watch in [w for w in self.watches if w.token_id not in ok]:
                self.watches.discard(watch)
                done = watch.on_lost(AuthError("this token was revoked or has expired"))
                if done is not None:
                    fut = asyncio.ensure_future(done)
                    self.told.add(fut)
                    fut.add_done_callback(self.told.discard)


def read_token(token: str | None, token_file: Path | None) -> str | None:
    """A command's token: from ``--token-file`` (its first line; no process list shows it) when
    given, else ``--token`` / ``MPE_TOKEN``."""
    if token_file is None:
        return token
    text = token_file.read_text("utf-8").strip()
    return text.splitlines()[0].strip() if text else None


def socket_token(conn) -> str | None:
    """The token of a WebSocket connection: ``Authorization: Bearer`` or, where a header is
    impossible (browsers), ``?token=`` (DESIGN §4)."""
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return conn.query_params.get("token")
