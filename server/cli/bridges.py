"""The bridges ``mpe bridge`` and ``mpe demo`` can start: the SDK bridges of ``model_bridges``
(built in), the bridges that need the server's parts — ``always-talk`` (speaks through
the offline TTS), ``oracle`` (reads the Duplex-MPE script and drives the engine's episode
core) and ``cascade`` (the cascaded baseline, :mod:`server.cascade`) —, bridges that installed packages declare as entry points (group
:data:`ENTRY_POINT_GROUP`, ``name = "module:Class"``), and any bridge class by its import path
(``mpe bridge --class module:Class``). A bridge class subclasses ``clients.sdk.Bridge`` or
``AsyncBridge``; its ``--opt key=value`` options are its constructor's keyword arguments."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from clients.codec import STREAM_RATE
from clients.errors import MPEError
from clients.messages import EpisodeStart
from clients.sdk import BaseBridge, Bridge
from model_bridges import REGISTRY, load_all
from server.engine.registry import all_benchmarks
from server.settings import Settings
from server.tts import speak

MONOLOGUE = (
    "So I was thinking about the weekend, and honestly there are a lot of options. "
    "We could go hiking up by the lake, or stay in town and try that new noodle bar. "
    "The weather is supposed to be nice on Saturday, a little cooler on Sunday, "
    "and I still have to finish the laundry and call my sister at some point."
)
VOICE = "piper:joe@1.0"


class AlwaysTalk(Bridge):
    """Speaks continuously from the first frame (a looped synthesised monologue)."""

    name = "always-talk"
    blocking = False
    accepts_context = True  # its output never depends on its past output: teacher forcing changes nothing

    def __init__(self, data_dir: Path):
        super().__init__()
        self.audio24 = speak(MONOLOGUE, VOICE, data_dir)
        self.audio = self.audio24
        self.pos = 0

    def reset(self, episode: EpisodeStart) -> None:
        self.pos = 0
        if episode.sample_rate != STREAM_RATE:
            import soxr

            self.audio = soxr.resample(self.audio24, STREAM_RATE, episode.sample_rate).astype(np.int16)
        else:
            self.audio = self.audio24

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        n = self.frame_samples
        idx = (self.pos + np.arange(n)) % len(self.audio)
        self.pos = (self.pos + n) % len(self.audio)
        return self.audio[idx]


def _cascade(data_dir: Path, **options: str) -> BaseBridge:
    """The cascaded baseline: Silero end of utterance, faster-whisper, a decider (Claude or offline), piper."""
    from server.cascade.bridge import Cascade

    takes = {p.name for p in inspect.signature(Cascade).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD}
    unknown = sorted(set(options) - takes - {"data_dir"})
    if unknown:
        raise BridgeConfigError(f"bridge 'cascade' does not take the options {', '.join(unknown)} "
                                f"(it takes {', '.join(sorted(takes - {'data_dir'}))})")
    return Cascade(data_dir, **options)


def _oracles() -> dict[str, Callable[..., BaseBridge]]:
    """Every registered benchmark's oracle, under the name the benchmark gives it."""
    return {b.oracle_bridge: b.oracle for b in all_benchmarks() if b.oracle_bridge}


def server_bridges() -> dict[str, Callable[..., BaseBridge]]:
    """The bridges built on the server's parts: the loud reference, the cascade, the benchmarks' oracles."""
    return {"always-talk": AlwaysTalk, "cascade": _cascade, **_oracles()}
ENTRY_POINT_GROUP = "duplex_mpe.bridges"  # an installed package's bridges: name = "module:Class"


class BridgeNotFound(MPEError):
    """No bridge by that name or import path."""

    code = "unknown_bridge"


class BridgeConfigError(MPEError):
    """The bridge does not take the options given."""

    code = "bridge_config"


@dataclass(frozen=True)
class BridgeInfo:
    """One bridge ``mpe bridge list`` shows: its name, where it comes from, its docstring's first line."""

    name: str
    source: str  # "built-in", "server", or "entry point module:Class (distribution version)"
    summary: str


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _first_line(obj: Any) -> str:
    doc = (inspect.getdoc(obj) or "").strip()
    return doc.splitlines()[0] if doc else ""


def _summary(obj: Any) -> str:
    """The first line of a bridge's docstring; when that only lists options, its module's (without
    the module's leading ````name``: ````)."""
    line = _first_line(obj)
    if line.startswith("Options") and inspect.getmodule(obj) is not None:
        line = re.sub(r"^``[^`]+``:\s*", "", _first_line(inspect.getmodule(obj))) or line
    return line[:1].upper() + line[1:]


def bridge_names() -> list[str]:
    """Every bridge name ``mpe bridge NAME`` accepts."""
    load_all()
    return sorted({*REGISTRY, *server_bridges(), *_entry_points()})


def available_bridges() -> list[BridgeInfo]:
    """The bridges of every source, by name; an entry point that cannot be loaded says why."""
    load_all()
    out = [BridgeInfo(n, "built-in", _summary(f)) for n, f in REGISTRY.items()]
    out += [BridgeInfo(n, "server", _summary(f)) for n, f in server_bridges().items()]
    for name, ep in _entry_points().items():
        dist = f" ({ep.dist.name} {ep.dist.version})" if ep.dist is not None else ""
        source = f"entry point {ep.value}{dist}"
        if name in REGISTRY or name in server_bridges():
            out.append(BridgeInfo(name, source, "hidden by the bridge of the same name above"))
            continue
        try:
            summary = _summary(ep.load())
        except Exception as exc:  # one broken package must not hide the others
            summary = f"cannot be loaded: {type(exc).__name__}: {exc}"
        out.append(BridgeInfo(name, source, summary))
    return sorted(out, key=lambda b: (b.name, b.source))


def load_bridge_class(spec: str) -> Callable[..., BaseBridge]:
    """The class (or factory) that ``module:Class`` names. The current directory is searched
    first, as for ``python -m``."""
    module, sep, attr = spec.partition(":")
    if not (sep and module and attr):
        raise BridgeNotFound(f"--class expects module:Class (e.g. my_bridge:MyBridge), got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        obj: Any = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise BridgeNotFound(f"cannot import {module!r}: no such module in the current directory or on "
                                 "PYTHONPATH") from None
        raise
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise BridgeNotFound(f"module {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type) and not issubclass(obj, BaseBridge):
        raise BridgeNotFound(f"{spec} is not a bridge: a bridge class subclasses clients.sdk.Bridge or AsyncBridge")
    return obj


def _build(factory: Callable[..., BaseBridge], label: str, options: dict[str, str]) -> BaseBridge:
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        raise BridgeConfigError(f"{label} does not take these options: {exc}") from None
    except ValueError:  # no signature to check (a builtin): let the call decide
        pass
    bridge = factory(**options)
    if not isinstance(bridge, BaseBridge):
        raise BridgeNotFound(f"{label} did not make a bridge (got {type(bridge).__name__}): a bridge class "
                             "subclasses clients.sdk.Bridge or AsyncBridge")
    return bridge


def create_bridge(name: str, data_dir: str | None = None, **options: str) -> BaseBridge:
    """A bridge by name — built in, of the server, or an installed entry point; ``options`` are
    its ``--opt key=value`` settings."""
    if (factory := server_bridges().get(name)) is not None:
        return factory(Path(data_dir) if data_dir else Settings().data_dir, **options)
    load_all()
    if name in REGISTRY:
        return REGISTRY[name](**options)
    ep = _entry_points().get(name)
    if ep is None:
        raise BridgeNotFound(f"unknown bridge {name!r}; known: {', '.join(bridge_names())} "
                             "(or --class module:Class)")
    return _build(ep.load(), f"bridge {name!r} ({ep.value})", options)


def create_bridge_from(spec: str, **options: str) -> BaseBridge:
    """A bridge from its class's import path ``module:Class``, made with ``options``."""
    return _build(load_bridge_class(spec), spec, options)
