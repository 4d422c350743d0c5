"""Concrete bridges built on the SDK (``clients.sdk``), registered by name.

This package imports only ``clients``: external teams can use it without the server.
"""

from __future__ import annotations

from typing import Callable

from clients.sdk import BaseBridge

REGISTRY: dict[str, Callable[..., BaseBridge]] = {}


def register(name: str):
    def deco(factory):
        REGISTRY[name] = factory
        return factory

    return deco


def load_all() -> None:
    """Import every bridge module of this package (each registers its bridges)."""
    from model_bridges import (  # noqa: F401
        freeze_omni,
        freeze_omni_sio,
        gemini_live,
        minicpm_duplex,
        minicpm_ws,
        moshi_lm,
        moshi_ws,
        openai_realtime,
        reference,  # noqa: F401
        voila,
    )


def create_bridge(name: str, **options: str) -> BaseBridge:
    load_all()
    if name not in REGISTRY:
        raise KeyError(f"unknown bridge {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](**options)
