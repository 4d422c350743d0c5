"""Dependencies shared by the routers: server state, the team token, pagination, visibility.

Team isolation lives here: every lookup goes through :func:`visible_run`,
:func:`visible_episode` or :func:`visible_suite`, which give the same 404 for an id that
does not exist and for one that belongs to another team.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from clients.errors import AuthError
from server.api.errors import Forbidden, NotFound
from server.auth import Principal, Scope, authenticate
from server.db import Episode, Run
from server.db import Suite as SuiteRow
from server.engine.limits import client_address

MAX_PAGE = 200
ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

bearer = HTTPBearer(auto_error=False, scheme_name="team token",
                    description="A team token from `mpe token create` (admin tokens see every team).")


def get_state(request: Request) -> Any:
    """The server's ServerState (settings, database, live hub)."""
    return request.app.state.mpe


State = Annotated[Any, Depends(get_state)]


def admit(request: Request, who: Callable[[], Principal]) -> Principal:
    """The caller of a REST request, as ``who`` authenticates it, within the limits (docs/api.md
    "Limits"): RetryLater ``rate_limited`` (429) while the client's address has used up its
    attempts (checked first, so a flood of bad tokens costs no database work), or when the
    caller's token is over its request rate; a failed authentication costs the address one."""
    limits = get_state(request).limits
    address = client_address(request)
    limits.check_address(address)
    p = limits.authenticate(address, who)
    limits.request(p)
    return p


def current_principal(request: Request,
                      creds: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None) -> Principal:
    """The caller, from the request's bearer token; raises AuthError (401) when it is missing or invalid,
    Forbidden (403) without the read scope, RetryLater (429) over a limit (:func:`admit`)."""
    return _caller(request, creds, Scope.read)


def checking_principal(request: Request,
                       creds: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None) -> Principal:
    """The caller of the bridge check's routes: as :func:`current_principal`, but a token with the
    bridge scope alone is enough (the host that runs the bridge checks it with the bridge's token;
    the check's runs and report are its own team's, and hold nothing of any real run)."""
    return _caller(request, creds, Scope.read, Scope.bridge)


def _caller(request: Request, creds: HTTPAuthorizationCredentials | None, *scopes: Scope) -> Principal:
    def who() -> Principal:
        if creds is None:
            raise AuthError("missing token: send 'Authorization: Bearer <token>'")
        return authenticate(get_state(request).db, creds.credentials, *scopes)

    return admit(request, who)


def admin_principal(p: Annotated[Principal, Depends(current_principal)]) -> Principal:
    """The caller, who must hold an admin token; raises Forbidden (403) otherwise."""
    if not p.admin:
        raise Forbidden("this needs an admin token")
    return p


Caller = Annotated[Principal, Depends(current_principal)]
Checker = Annotated[Principal, Depends(checking_principal)]
Admin = Annotated[Principal, Depends(admin_principal)]


@dataclass(frozen=True)
class Page:
    """One page of a list: at most ``limit`` items after skipping ``offset``."""

    limit: int
    offset: int


def page(limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"page size (at most {MAX_PAGE})")] = 50,
         offset: Annotated[int, Query(ge=0, le=10_000_000, description="items to skip")] = 0) -> Page:
    """The ``limit`` and ``offset`` query parameters of a list route."""
    return Page(limit, offset)


Paging = Annotated[Page, Depends(page)]


def _sees(p: Principal, team: str) -> bool:
    return p.admin or team == p.team


def visible_run(s: Session, p: Principal, run_id: str) -> Run:
    """The run if the caller may see it; NotFound (404) alike for an unknown id and another team's run."""
    run = s.get(Run, run_id) if ID_RE.match(run_id or "") else None
    if run is None or not _sees(p, run.team):
        raise NotFound("no such run")
    return run


def visible_episode(s: Session, p: Principal, episode_id: str) -> tuple[Episode, Run]:
    """The episode and its run if the caller may see them; NotFound (404) alike for an unknown id and
    another team's episode."""
    ep = s.get(Episode, episode_id) if ID_RE.match(episode_id or "") else None
    run = s.get(Run, ep.run_id) if ep is not None else None
    if ep is None or run is None or not _sees(p, run.team):
        raise NotFound("no such episode")
    return ep, run


def visible_suite(s: Session, p: Principal, suite_id: str) -> SuiteRow:
    """The suite row if the caller may see it; NotFound (404) alike for an unknown id and another
    team's suite."""
    row = s.get(SuiteRow, suite_id) if ID_RE.match(suite_id or "") else None
    if row is None or not _sees(p, row.team):
        raise NotFound("no such suite")
    return row


def team_filter(p: Principal, column, team: str | None = None):
    """WHERE clause: a team sees its own rows; an admin all (or one team when asked)."""
    if not p.admin:
        return column == p.team
    return column == team if team else None
