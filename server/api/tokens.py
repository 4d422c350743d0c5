"""API tokens (admin only): list, create (the secret is shown once), revoke."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from sqlalchemy import func, select

from server.api.deps import Admin, Paging, State
from server.api.errors import NotFound
from server.api.schemas import ERRORS, PageOf, TokenCreate, TokenCreated, TokenOut
from server.auth import create_token, hash_token, parse_scopes
from server.db import MAX_INT_ID, Token

router = APIRouter(prefix="/v1", tags=["tokens"], responses={**ERRORS, 403: ERRORS[401]})


def _out(t: Token) -> dict:
    scopes = sorted(parse_scopes(t.scopes))
    return dict(id=t.id, team=t.team, admin="admin" in scopes, scopes=scopes, label=t.label, revoked=t.revoked,
                expires_at=t.expires_at, created_at=t.created_at)


@router.get("/tokens", response_model=PageOf[TokenOut], summary="List tokens (never their secrets)")
def list_tokens(_p: Admin, state: State, paging: Paging,
                team: Annotated[str | None, Query(max_length=64)] = None,
                revoked: Annotated[bool | None, Query()] = None) -> PageOf[TokenOut]:
    """API tokens (never their secrets), optionally of one team or revoked state. Admin only (403)."""
    where = [c for c in (Token.team == team if team else None,
                         Token.revoked.is_(revoked) if revoked is not None else None) if c is not None]
    with state.db.session() as s:
        total = s.scalar(select(func.count()).select_from(Token).where(*where))
        rows = s.scalars(select(Token).where(*where).order_by(Token.id).limit(paging.limit).offset(paging.offset)).all()
    return PageOf[TokenOut](items=[TokenOut(**_out(t)) for t in rows], total=total, limit=paging.limit,
                            offset=paging.offset)


@router.post("/tokens", status_code=201, response_model=TokenCreated, summary="Create a token")
def create(body: TokenCreate, _p: Admin, state: State) -> TokenCreated:
    """A new token for a team, with its secret, shown only this once. Admin only (403)."""
    secret = create_token(state.db, body.team, admin=body.admin, scopes=body.scopes, label=body.label,
                          expires_in_s=body.expires_in_s)
    with state.db.session() as s:
        row = s.scalar(select(Token).where(Token.token_hash == hash_token(secret)))
    return TokenCreated(**_out(row), token=secret)


@router.delete("/tokens/{token_id}", response_model=TokenOut, summary="Revoke a token")
def revoke(token_id: Annotated[int, Path(ge=1, le=MAX_INT_ID)], _p: Admin, state: State) -> TokenOut:
    """Revoke a token: its requests and signed URLs fail at once, and its open bridge and listen
    sockets close within a few seconds. Admin only (403); 404 for an unknown token."""
    with state.db.session() as s:
        row = s.get(Token, token_id)
        if row is None:
            raise NotFound("no such token")
        row.revoked = True
        s.flush()
        return TokenOut(**_out(row))
