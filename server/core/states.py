"""Guarded transitions for the enums that name states (episode and run statuses, scheduler
phases): each enum lists which states may follow which, and :func:`advance` refuses the rest."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

from clients.errors import MPEError

S = TypeVar("S", bound=Enum)


class IllegalTransition(MPEError):
    """A status change that the enum's transition table does not allow."""

    code = "illegal_transition"


def advance(table: Mapping[S, frozenset[S]], current: S, new: S) -> S:
    """``new`` if ``current -> new`` is in ``table``; raises :class:`IllegalTransition` otherwise."""
    if new not in table.get(current, frozenset()):
        raise IllegalTransition(f"{type(current).__name__}: {current.value} -> {new.value} is not allowed")
    return new


def sources(table: Mapping[S, frozenset[S]], new: S) -> frozenset[S]:
    """The states that may move to ``new``: what a bulk UPDATE to ``new`` must restrict its rows to."""
    return frozenset(current for current, nexts in table.items() if new in nexts)
