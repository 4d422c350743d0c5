"""Concrete bridges built on the SDK (``clients.sdk``), registered by name."""

from __future__ import annotations

from typing import Callable

from clients.sdk import BaseBridge

REGISTRY: dict[str, Callable[..., BaseBridge]] = {}


def register(name: str):
    def deco(factory):
        REGISTRY[name] = factory
        return factory

    return deco


def create_bridge(name: str, **options: str) -> BaseBridge:
    from . import reference  # noqa: F401  (registers the reference bridges)
    from . import gemini_live, moshi_ws, openai_realtime  # noqa: F401  (endpoint bridges)
    from . import freeze_omni_sio, minicpm_ws  # noqa: F401  (endpoint bridges)

    if name not in REGISTRY:
        raise KeyError(f"unknown bridge {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](**options)
