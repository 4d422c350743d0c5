"""The built-in suites, shipped as definitions and voiced on first use.

* ``mini``: 10 pairs from the procedural generator, used by ``mpe demo`` and the tests.
* ``full``: the benchmark's shape, 2,000 pairs from a fixed seed.

:func:`build_builtin` writes a suite to ``<data_dir>/suites/<name>/`` and is idempotent:
a complete build of the same definition (and the same TTS engine, when one is given) is
reused as is; anything else is rebuilt in a temporary directory, from the clip cache
(only new lines are synthesised), validated, and swapped into place. An interrupted
build leaves the previous suite untouched and its finished clips in the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from server.benchmarks.mpe.dataset.build import PREAMBLE_TEXT, build_text_suite, make_generator
from server.benchmarks.mpe.dataset.compose import Composition
from server.benchmarks.mpe.dataset.schema import DatasetError
from server.benchmarks.mpe.suite import Suite, SuiteError, audio_pending, check_suite
from server.files import atomic_write_bytes
from server.tts import TTSEngine, TTSUnavailable, get_engine

STAMP_FILE = ".build.json"
BUILDER_VERSION = "builtin/1"


@dataclass(frozen=True)
class BuiltinSuite:
    name: str
    pairs: int
    seed: int
    generator: str
    description: str

    def composition(self) -> Composition:
        return Composition.from_shares(self.pairs)


BUILTINS: dict[str, BuiltinSuite] = {
    "mini": BuiltinSuite("mini", 10, 7, "procedural", "10 pairs for the demo and the tests"),
    "full": BuiltinSuite("full", 2000, 20260902, "procedural",
                         "the benchmark's shape: 2,000 pairs (1,500 three-human, 500 four-human)"),
}


def builtin(name: str) -> BuiltinSuite:
    try:
        return BUILTINS[name]
    except KeyError:
        raise DatasetError(f"no built-in suite {name!r} (available: {', '.join(BUILTINS)})") from None


def _definition_sha(spec: BuiltinSuite) -> str:
    """What a complete build must have been made from: a new generator version or duty text
    (the spoken preamble) makes every earlier build of the suite stale."""
    from server.benchmarks.mpe.dataset.procedural import VERSION

    data = json.dumps([BUILDER_VERSION, VERSION, PREAMBLE_TEXT, asdict(spec), spec.composition().model_dump()],
                      sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()


def _is_complete(target: Path, sha: str, engine: TTSEngine | None, audio: bool) -> bool:
    try:
        stamp = json.loads((target / STAMP_FILE).read_text("utf-8"))
        if stamp.get("definition_sha256") != sha or stamp.get("audio") != audio:
            return False
        if audio and engine is not None and stamp.get("engine") != {"name": engine.name, "version": engine.version}:
            return False
        suite = Suite.load(target)
    except (OSError, ValueError, AttributeError):
        return False
    if suite.content_hash() != stamp.get("content_hash"):
        return False
    return not check_suite(suite, check_audio=audio)


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """Serialise concurrent builds of the same suite (POSIX advisory lock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _fresh_dir(parent: Path, name: str, kind: str) -> Path:
    while True:
        path = parent / f".{name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:  # pragma: no cover
            continue


def build_builtin(
    name: str,
    data_dir: Path | str,
    *,
    engine: TTSEngine | None = None,
    engine_name: str = "piper",
    audio: bool = True,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write (or reuse) built-in suite ``name`` at ``<data_dir>/suites/<name>/``.

    ``progress(done, total)`` follows the synthesis (once with ``(total, total)`` when a
    complete build is reused). Raises TTSUnavailable when audio must be made and no
    engine is installed.
    """
    from server.benchmarks.mpe.dataset.synth import synthesize_suite

    spec = builtin(name)
    data_dir = Path(data_dir)
    suites_dir = data_dir / "suites"
    target = suites_dir / spec.name
    suites_dir.mkdir(parents=True, exist_ok=True)
    sha = _definition_sha(spec)

    in_process = engine is not None  # an engine object runs here; by name, in worker processes
    with _build_lock(suites_dir / f".{spec.name}.lock"):
        unavailable: TTSUnavailable | None = None
        if audio and engine is None:
            try:
                engine = get_engine(engine_name)
            except TTSUnavailable as e:
                unavailable = e
        if _is_complete(target, sha, engine, audio):
            if progress is not None:
                progress(1, 1)
            return target
        if unavailable is not None:
            raise unavailable

        for stale in list(suites_dir.glob(f".{spec.name}.build-*")) + list(suites_dir.glob(f".{spec.name}.old-*")):
            shutil.rmtree(stale, ignore_errors=True)  # leftovers of killed builds (we hold the lock)
        tmp = _fresh_dir(suites_dir, spec.name, "build")
        try:
            generator = make_generator(spec.generator, spec.seed)
            build_text_suite(tmp, name=spec.name, pairs=spec.pairs, seed=spec.seed, generator=generator,
                             composition=spec.composition(), engine_name=engine.name if engine else engine_name,
                             force=True)
            stamp: dict = {"builder": BUILDER_VERSION, "definition_sha256": sha, "audio": audio}
            if audio:
                assert engine is not None
                synthesize_suite(tmp, data_dir=data_dir, engine=engine if in_process else None,
                                 engine_name=engine.name, workers=workers, progress=progress)
                stamp["engine"] = {"name": engine.name, "version": engine.version}
            built = Suite.load(tmp)
            problems = check_suite(built, check_audio=audio, strict=True)
            if problems or (audio and audio_pending(built.meta)):
                raise SuiteError(f"built-in suite {spec.name} failed validation: "
                                 + "; ".join(str(p) for p in problems[:5]))
            stamp["content_hash"] = built.content_hash()
            atomic_write_bytes(tmp / STAMP_FILE, (json.dumps(stamp, indent=2, sort_keys=True) + "\n").encode())
            old: Path | None = None
            if target.exists() or target.is_symlink():
                old = _fresh_dir(suites_dir, spec.name, "old")
                os.replace(target, old / "suite")
            os.replace(tmp, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target
