"""From plans to a text-only MTR suite directory.

A freshly generated suite says ``"audio": "pending"`` in ``suite.json``; its durations are
estimates (:func:`server.benchmarks.mtr.dataset.timing.estimate_s`) until
:mod:`server.benchmarks.mtr.dataset.synth` voices it. The text depends only on the generator,
its seed and the plans, so regenerating gives the same bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from server.benchmarks.mtr.dataset.schema import DialogueGenerator, DialoguePlan
from server.benchmarks.mtr.dataset.voices import role_voices
from server.benchmarks.mtr.suite import (
    AUDIO_PENDING,
    BENCHMARK_NAME,
    Dialogue,
    MTRMeta,
    Suite,
    SuiteError,
    check_suite,
)
from server.core.audio import write_wav
from server.datasets.errors import DatasetError
from server.engine.suitedir import write_text_suite_files

SUITE_VERSION = "1"

Progress = Callable[[int, int], None]


def generate_dialogues(generator: DialogueGenerator, plans: list[DialoguePlan],
                       progress: Progress | None = None) -> list[Dialogue]:
    many = getattr(generator, "generate_many", None)
    if many is not None:  # several API requests in flight
        return many(plans, progress)
    out = []
    for i, plan in enumerate(plans, start=1):
        out.append(generator.generate(plan))
        if progress is not None:
            progress(i, len(plans))
    return out


def suite_meta(*, name: str, seed: int, generator: str, engine_name: str = "piper") -> MTRMeta:
    return MTRMeta(benchmark=BENCHMARK_NAME, name=name, version=SUITE_VERSION, generator=generator, seed=seed,
                   voices=role_voices(engine_name), audio=AUDIO_PENDING)


def _text_of(d: Dialogue) -> list:
    """A dialogue without durations: what must match for two suites to be the same text."""
    out = []
    for r in d.rounds:
        out.append((r.round, r.feature, [(k, c.text, c.clip) for k, c in r.clips()],
                    r.background.kind if r.background else None, r.task.model_dump() if r.task else None))
    return [d.dialogue_id, d.set, d.topic, out]


def same_text_suite(root: Path, meta: MTRMeta, dialogues: list[Dialogue]) -> bool:
    """Whether ``root`` holds this suite already (same text; audio may be done)."""
    try:
        old = Suite.load(root)
    except SuiteError:
        return False
    keys = ("benchmark", "name", "version", "generator", "seed")
    if any(getattr(old.meta, k) != getattr(meta, k) for k in keys) or len(old.dialogues) != len(dialogues):
        return False
    return all(_text_of(a) == _text_of(b) for a, b in zip(old.dialogues, dialogues))


def write_text_suite(out: Path, meta: MTRMeta, dialogues: list[Dialogue], *, force: bool = False) -> str:
    """Write a text-only suite to ``out`` (see :func:`server.engine.suitedir.write_text_suite_files`)."""
    return write_text_suite_files(out, meta, dialogues, same=lambda root: same_text_suite(root, meta, dialogues),
                                  force=force)


def build_text_suite(out: Path, *, name: str, plans: list[DialoguePlan], seed: int, generator: DialogueGenerator,
                     engine_name: str = "piper", force: bool = False,
                     progress: Progress | None = None) -> tuple[Suite, str]:
    """Generate and write a text-only suite; returns the loaded suite and what happened.
    Raises DatasetError when a generated dialogue breaks a rule of the schema."""
    dialogues = generate_dialogues(generator, plans, progress)
    meta = suite_meta(name=name, seed=seed, generator=generator.name, engine_name=engine_name)
    problems = check_suite(Suite(out, meta, dialogues), check_audio=False)
    if problems:
        raise DatasetError("generated dialogues break the suite rules: " + "; ".join(map(str, problems[:5])))
    what = write_text_suite(out, meta, dialogues, force=force)
    return Suite.load(out), what


def write_voiced_suite(out: Path, meta: MTRMeta, made: list[tuple[Dialogue, dict[str, np.ndarray]]], *,
                       force: bool = False) -> Suite:
    """A suite whose clips are given (an importer's cuts of real recordings: relative path -> 24 kHz
    audio), checked whole before it replaces ``out``: nothing is written when a rule breaks."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise DatasetError(f"{out} exists and is not empty; --force replaces it")
    tmp = out.parent / f".{out.name}.import"
    shutil.rmtree(tmp, ignore_errors=True)
    for _, clips in made:
        for rel, pcm in clips.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            write_wav(tmp / rel, pcm)
    suite = Suite(tmp, meta, [d for d, _ in made])
    problems = check_suite(suite)
    if problems:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DatasetError("the imported dialogues break the suite rules: " + "; ".join(map(str, problems[:5])))
    suite.write()
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return Suite.load(out)
