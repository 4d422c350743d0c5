"""Building a built-in suite in place, whatever its benchmark.

A built-in suite is a definition shipped with the code and written to
``<data_dir>/suites/<name>/`` on first use. :func:`build_in_place` is idempotent: a complete
build of the same definition (and the same TTS engine, when audio is wanted) is reused as is;
anything else is rebuilt in a temporary directory, validated, stamped and swapped into place
under a lock, so an interrupted build leaves the previous suite untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from server.core.benchmark import SuiteLike
from server.engine.suitedir import SuiteError
from server.files import atomic_write_bytes
from server.tts import TTSEngine, TTSUnavailable, get_engine

STAMP_FILE = ".build.json"


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
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


def fresh_dir(parent: Path, name: str, kind: str) -> Path:
    """A new, empty, uniquely named hidden directory ``.NAME.KIND-…`` in ``parent``."""
    while True:
        path = parent / f".{name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:  # pragma: no cover
            continue


def _is_complete(target: Path, sha: str, engine: TTSEngine | None, audio: bool,
                 load: Callable[[Path], SuiteLike], problems: Callable[[SuiteLike, bool], list]) -> bool:
    try:
        stamp = json.loads((target / STAMP_FILE).read_text("utf-8"))
        if stamp.get("definition_sha256") != sha or stamp.get("audio") != audio:
            return False
        if audio and engine is not None and stamp.get("engine") != {"name": engine.name, "version": engine.version}:
            return False
        suite = load(target)
    except (OSError, ValueError, AttributeError):
        return False
    if suite.content_hash() != stamp.get("content_hash"):
        return False
    return not problems(suite, audio)


def build_in_place(
    suites_dir: Path,
    name: str,
    *,
    builder: str,
    sha: str,
    audio: bool,
    engine: TTSEngine | None,
    engine_name: str,
    write_text: Callable[[Path, str], None],
    synthesize: Callable[[Path, TTSEngine | None, str], None],
    load: Callable[[Path], SuiteLike],
    problems: Callable[[SuiteLike, bool], list],
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write (or reuse) built-in suite ``name`` at ``suites_dir/name``.

    ``sha`` identifies the definition (``builder`` names the builder version); ``write_text(dir,
    engine_name)`` writes the text suite; ``synthesize(dir, engine, engine_name)`` voices it
    (``engine`` None: by name, in worker processes); ``problems(suite, audio)`` validates it.
    ``progress(done, total)`` is called once with ``(1, 1)`` when a complete build is reused.
    Raises TTSUnavailable when audio must be made and no engine is installed."""
    target = suites_dir / name
    suites_dir.mkdir(parents=True, exist_ok=True)
    in_process = engine is not None  # an engine object runs here; by name, in worker processes
    with build_lock(suites_dir / f".{name}.lock"):
        unavailable: TTSUnavailable | None = None
        if audio and engine is None:
            try:
                engine = get_engine(engine_name)
            except TTSUnavailable as e:
                unavailable = e
        if _is_complete(target, sha, engine, audio, load, problems):
            if progress is not None:
                progress(1, 1)
            return target
        if unavailable is not None:
            raise unavailable
        for stale in list(suites_dir.glob(f".{name}.build-*")) + list(suites_dir.glob(f".{name}.old-*")):
            shutil.rmtree(stale, ignore_errors=True)  # leftovers of killed builds (we hold the lock)
        tmp = fresh_dir(suites_dir, name, "build")
        try:
            write_text(tmp, engine.name if engine else engine_name)
            stamp: dict = {"builder": builder, "definition_sha256": sha, "audio": audio}
            if audio:
                assert engine is not None
                synthesize(tmp, engine if in_process else None, engine.name)
                stamp["engine"] = {"name": engine.name, "version": engine.version}
            built = load(tmp)
            found = problems(built, audio)
            if found:
                raise SuiteError(f"built-in suite {name} failed validation: " + "; ".join(str(p) for p in found[:5]))
            stamp["content_hash"] = built.content_hash()
            atomic_write_bytes(tmp / STAMP_FILE, (json.dumps(stamp, indent=2, sort_keys=True) + "\n").encode())
            old: Path | None = None
            if target.exists() or target.is_symlink():
                old = fresh_dir(suites_dir, name, "old")
                os.replace(target, old / "suite")
            os.replace(tmp, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target
