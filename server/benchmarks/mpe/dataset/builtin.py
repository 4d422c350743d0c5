"""The built-in suites, shipped as definitions and voiced on first use.

* ``mini``: 10 pairs from the procedural generator with short turns (one line each), used
  by ``mpe demo`` and the tests: quick to voice.
* ``full``: the benchmark's shape, 2,000 pairs from a fixed seed, with turns of the
  paper's length.

:func:`build_builtin` writes a suite to ``<data_dir>/suites/<name>/`` and is idempotent:
a complete build of the same definition (and the same TTS engine, when one is given) is
reused as is; anything else is rebuilt in a temporary directory, from the clip cache
(only new lines are synthesised), validated, and swapped into place. An interrupted
build leaves the previous suite untouched and its finished clips in the cache.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from server.benchmarks.mpe.dataset.build import PREAMBLE_TEXT, build_text_suite, make_generator
from server.benchmarks.mpe.dataset.compose import Composition
from server.benchmarks.mpe.suite import Suite, audio_pending, check_suite
from server.datasets.errors import DatasetError
from server.engine.suitebuild import build_in_place
from server.tts import TTSEngine

BUILDER_VERSION = "builtin/2"  # 2: the turns carry their utterance types (Table 19)


@dataclass(frozen=True)
class BuiltinSuite:
    name: str
    pairs: int
    seed: int
    generator: str
    description: str
    turn_length: str = "paper"  # the procedural generator's TurnLength

    def composition(self) -> Composition:
        return Composition.from_shares(self.pairs)


BUILTINS: dict[str, BuiltinSuite] = {
    "mini": BuiltinSuite("mini", 10, 7, "procedural", "10 pairs for the demo and the tests", turn_length="short"),
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


def _problems(suite: Suite, audio: bool) -> list:
    found = check_suite(suite, check_audio=audio, strict=True)
    if not found and audio and audio_pending(suite.meta):
        found = ["the audio is still pending"]
    return found


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
    """Write (or reuse) built-in suite ``name`` at ``<data_dir>/suites/<name>/``
    (:func:`server.engine.suitebuild.build_in_place`).

    ``progress(done, total)`` follows the synthesis (once with ``(1, 1)`` when a complete
    build is reused). Raises TTSUnavailable when audio must be made and no engine is installed.
    """
    from server.benchmarks.mpe.dataset.synth import synthesize_suite

    spec = builtin(name)
    data_dir = Path(data_dir)

    def write_text(tmp: Path, engine_used: str) -> None:
        options = {"turn_length": spec.turn_length} if spec.generator == "procedural" else {}
        build_text_suite(tmp, name=spec.name, pairs=spec.pairs, seed=spec.seed,
                         generator=make_generator(spec.generator, spec.seed, **options),
                         composition=spec.composition(), engine_name=engine_used, force=True)

    def synthesize(tmp: Path, eng: TTSEngine | None, engine_used: str) -> None:
        synthesize_suite(tmp, data_dir=data_dir, engine=eng, engine_name=engine_used, workers=workers,
                         progress=progress)

    return build_in_place(data_dir / "suites", spec.name, builder=BUILDER_VERSION, sha=_definition_sha(spec),
                          audio=audio, engine=engine, engine_name=engine_name, write_text=write_text,
                          synthesize=synthesize, load=Suite.load, problems=_problems, progress=progress)
