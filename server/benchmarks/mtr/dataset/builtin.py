"""The built-in MTR suites, shipped as definitions and voiced on first use.

* ``mtr-mini``: two short dialogues (S+I+P+B and backchannel, four rounds each) covering every
  feature, for the demo and the tests.
* ``mtr-features``: the published conversational-features shape, 200 ten-round dialogues,
  25 of each single-feature set and of S+I, S+I+P, S+I+P+B; text-only unless voiced on request.
* ``mtr-dims-mini``: one short dialogue of each dimension set (quality, instruction,
  instruction+I, safety, safety+I), for the demo and the tests.
* ``mtr-dimensions``: 50 ten-round dialogues, 10 of each dimension set; text-only unless voiced.

:func:`build_builtin` writes ``<data_dir>/suites/<name>/`` as the Duplex-MPE built-ins do
(:mod:`server.benchmarks.mpe.dataset.builtin`): a complete build of the same definition (and
engine) is reused; anything else is rebuilt in a temporary directory, from the clip cache,
validated, stamped and swapped into place.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from server.benchmarks.mtr.dataset.build import build_text_suite
from server.benchmarks.mtr.dataset.generators import make_generator
from server.benchmarks.mtr.dataset.plan import plan_dialogues
from server.benchmarks.mtr.dataset.schema import DialoguePlan
from server.benchmarks.mtr.dataset.sets import DEFAULT_ROUNDS, DIMENSION_SETS, MIXED, Combine, sets_for
from server.benchmarks.mtr.suite import Suite, check_suite
from server.datasets.errors import DatasetError
from server.engine.suitebuild import build_in_place
from server.tts import TTSEngine

BUILDER_VERSION = "mtr-builtin/1"


@dataclass(frozen=True)
class BuiltinSuite:
    name: str
    dialogues: tuple[tuple[str, int], ...]  # (feature set, rounds) of each dialogue
    seed: int
    generator: str
    description: str
    audio_by_default: bool  # whether `mpe dataset build NAME` voices it unless told --no-audio
    combine: Combine = "overlay"  # how its combination sets give features to rounds (sets.py)

    def plans(self) -> list[DialoguePlan]:
        return plan_dialogues(list(self.dialogues), self.seed, self.combine)


BUILTINS: dict[str, BuiltinSuite] = {
    "mtr-mini": BuiltinSuite("mtr-mini", (("S+I+P+B", 4), ("backchannel", 4)), 3, "procedural",
                             "2 dialogues of 4 rounds, one feature per round, covering every feature, for the demo and "
                             "the tests", True, combine="alternate"),
    "mtr-features": BuiltinSuite("mtr-features", tuple((s, DEFAULT_ROUNDS) for s in sets_for(200, MIXED)),
                                 20260511, "procedural",
                                 "the published features shape: 200 ten-round dialogues, 25 per set", False),
    "mtr-dims-mini": BuiltinSuite("mtr-dims-mini", (("quality", 2), ("instruction", 2), ("instruction+I", 1),
                                                    ("safety", 3), ("safety+I", 2)), 5, "procedural",
                                  "one short dialogue per dimension set, for the demo and the tests", True),
    "mtr-dimensions": BuiltinSuite("mtr-dimensions", tuple((s, DEFAULT_ROUNDS) for _ in range(10)
                                                           for s in DIMENSION_SETS), 20260512, "procedural",
                                   "the dimensions: 50 ten-round dialogues, 10 per dimension set", False),
}


def builtin(name: str) -> BuiltinSuite:
    try:
        return BUILTINS[name]
    except KeyError:
        raise DatasetError(f"no built-in MTR suite {name!r} (available: {', '.join(BUILTINS)})") from None


def _definition_sha(spec: BuiltinSuite) -> str:
    from server.benchmarks.mtr.dataset.procedural import VERSION

    data = json.dumps([BUILDER_VERSION, VERSION, asdict(spec)], sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()


def build_builtin(
    name: str,
    data_dir: Path | str,
    *,
    engine: TTSEngine | None = None,
    engine_name: str = "piper",
    audio: bool | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write (or reuse) built-in MTR suite ``name`` at ``<data_dir>/suites/<name>/``
    (:func:`server.engine.suitebuild.build_in_place`).

    ``audio`` None: the suite's default (``mtr-mini`` voiced, ``mtr-features`` text-only).
    Raises TTSUnavailable when audio must be made and no engine is installed."""
    from server.benchmarks.mtr.dataset.synth import synthesize_suite

    spec = builtin(name)
    data_dir = Path(data_dir)

    def write_text(tmp: Path, engine_used: str) -> None:
        build_text_suite(tmp, name=spec.name, plans=spec.plans(), seed=spec.seed,
                         generator=make_generator(spec.generator, spec.seed), engine_name=engine_used, force=True)

    def synthesize(tmp: Path, eng: TTSEngine | None, engine_used: str) -> None:
        synthesize_suite(tmp, data_dir=data_dir, engine=eng, engine_name=engine_used, workers=workers,
                         progress=progress)

    return build_in_place(data_dir / "suites", spec.name, builder=BUILDER_VERSION, sha=_definition_sha(spec),
                          audio=spec.audio_by_default if audio is None else audio, engine=engine,
                          engine_name=engine_name, write_text=write_text, synthesize=synthesize, load=Suite.load,
                          problems=lambda suite, with_audio: check_suite(suite, check_audio=with_audio),
                          progress=progress)
