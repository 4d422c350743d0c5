"""From plans to a suite directory: generate scripts, lay out clips, write the manifest.

A freshly generated suite is text-only: ``suite.json`` says ``"audio": "pending"``, every
turn has its clip path and ``duration_s`` 0. :mod:`server.benchmarks.mpe.dataset.synth` fills in the
audio and the durations. The text of a suite depends only on the generator, its seed and
the composition, so regenerating gives the same bytes.

Clip layout: a turn whose text is the same in both conditions is one clip shared by both
(``clips/<pair>/<idx>.wav``); a turn that differs has one clip per condition
(``clips/<pair>/<condition>/<idx>.wav``).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Callable

from server.benchmarks.mpe.dataset.compose import Composition, plan_pairs
from server.benchmarks.mpe.dataset.schema import PairPlan, PairScript, ScenarioGenerator
from server.benchmarks.mpe.duty import DUTY_TEXT
from server.benchmarks.mpe.suite import (
    AUDIO_PENDING,
    CONDITIONS,
    Scenario,
    Suite,
    SuiteError,
    SuiteMeta,
    Turn,
)
from server.datasets.errors import DatasetError
from server.engine.suitedir import write_text_suite_files
from server.tts import default_voices, parse_espeak_voice, parse_piper_voice, voice_engine

SUITE_VERSION = "1"
PREAMBLE_CLIP = "clips/preamble.wav"
PREAMBLE_SPEAKER = "B"  # the voice as shipped reads the duty

# §3.1: the spoken duty preamble of the built-in suites is the paper's duty text, verbatim.
PREAMBLE_TEXT = DUTY_TEXT


class PreamblePace(str, Enum):
    """How fast the preamble voice reads the duty: ``paper`` at the paper's length (31.9 s for its 71
    words, App. A3.1), ``voice`` at the speaker's own rate (piper's joe: about 20.1 s)."""

    paper = "paper"
    voice = "voice"


#: The paper's spoken preamble (App. A3.1), the length the ``paper`` pace reproduces.
PAPER_PREAMBLE_S = 31.9
#: The preamble voice's slowing per engine, measured on the duty text: piper ``joe@1.0~1.75`` reads
#: it in 31.75 s (``joe@1.0``: 20.09 s; the tempo part stretches piper's length_scale without the
#: pitch resample), espeak-ng ``en-us+m5@115`` in 32.11 s (its default 165 wpm: 22.11 s). Kokoro has
#: no rate control here: its preamble keeps the voice's own rate.
PIPER_PREAMBLE_TEMPO = 1.75
ESPEAK_PREAMBLE_WPM = 115


def preamble_voice(voice: str, pace: PreamblePace | str) -> str:
    """The voice that reads the preamble: the speaker's ``voice`` itself, or at the paper's pace."""
    if PreamblePace(pace) is PreamblePace.voice:
        return voice
    engine = voice_engine(voice)
    if engine == "piper":
        spec = parse_piper_voice(voice)
        return f"piper:{spec.model}@{spec.ratio:g}~{PIPER_PREAMBLE_TEMPO:g}"
    if engine == "espeak":
        spec = parse_espeak_voice(voice)
        return f"espeak:{spec.lang}{'+' + spec.variant if spec.variant else ''}@{ESPEAK_PREAMBLE_WPM}"
    return voice

Progress = Callable[[int, int], None]


def clip_path(pair_id: str, condition: str, idx: int, shared: bool) -> str:
    return f"clips/{pair_id}/{idx:03d}.wav" if shared else f"clips/{pair_id}/{condition}/{idx:03d}.wav"


def script_to_scenarios(script: PairScript) -> list[Scenario]:
    """The two scenario versions of a script, with clip paths and pending durations."""
    out = []
    for cond in CONDITIONS:
        turns = []
        for pos, t in enumerate(script.turns):  # a clip is named by its place in the script
            if not t.in_version(cond):
                continue
            shared = t.only is None and (t.implicit_text is None or t.implicit_text == t.text)
            turns.append(Turn(idx=len(turns), speaker=t.speaker, label=t.label, text=t.text_for(cond),
                              clip=clip_path(script.pair_id, cond, pos, shared), duration_s=0.0,
                              addressee=t.addressee, utterance_type=t.utterance_type))
        out.append(Scenario(scenario_id=script.scenario_id, pair_id=script.pair_id, condition=cond,
                            n_speakers=script.n_speakers, t_bucket=script.t_bucket,
                            attributes=script.attributes.model_dump(), gold_answer=script.gold_answer,
                            answer_keys=script.answer_keys, turns=turns,
                            version_difference=script.version_difference))
    return out


def generate_scripts(generator: ScenarioGenerator, plans: list[PairPlan],
                     progress: Progress | None = None) -> list[PairScript]:
    many = getattr(generator, "generate_many", None)
    if many is not None:  # e.g. several API requests in flight
        return many(plans, progress)
    scripts = []
    for i, plan in enumerate(plans, start=1):
        scripts.append(generator.generate(plan))
        if progress is not None:
            progress(i, len(plans))
    return scripts


def suite_meta(*, name: str, seed: int, generator: ScenarioGenerator, composition: Composition,
               engine_name: str = "piper", extra: dict | None = None,
               pace: PreamblePace = PreamblePace.voice) -> SuiteMeta:
    voices = default_voices(engine_name)
    paced = {"pace": pace.value} if pace is not PreamblePace.voice else {}  # absent: the suites made before
    return SuiteMeta.model_validate({
        "name": name,
        "version": SUITE_VERSION,
        "generator": generator.name,
        "seed": seed,
        "voices": voices,
        "preamble": {"text": PREAMBLE_TEXT, "clip": PREAMBLE_CLIP, "duration_s": 0.0,
                     "voice": preamble_voice(voices[PREAMBLE_SPEAKER], pace), **paced},
        "audio": AUDIO_PENDING,
        "generator_version": generator.version,
        "composition": composition.model_dump(),
        **(extra or {}),
    })


def same_text_suite(root: Path, meta: SuiteMeta, scenarios: list[Scenario]) -> bool:
    """Whether ``root`` holds this suite already (same text; audio may be done)."""
    try:
        old = Suite.load(root)
    except SuiteError:
        return False
    keys = ("name", "version", "generator", "seed", "generator_version", "composition")
    a, b = old.meta.model_dump(), meta.model_dump()
    if any(a.get(k) != b.get(k) for k in keys) or a["preamble"]["text"] != b["preamble"]["text"] \
            or a["preamble"].get("pace") != b["preamble"].get("pace"):
        return False
    if len(old.scenarios) != len(scenarios):
        return False
    strip = lambda sc: [(t.speaker, t.label, t.text, t.clip, t.addressee, t.utterance_type)  # noqa: E731
                        for t in sc.turns]
    return all(
        (x.scenario_id, x.pair_id, x.condition, x.gold_answer, x.answer_keys, strip(x))
        == (y.scenario_id, y.pair_id, y.condition, y.gold_answer, y.answer_keys, strip(y))
        for x, y in zip(old.scenarios, scenarios)
    )


def write_text_suite(out: Path, meta: SuiteMeta, scenarios: list[Scenario], *, force: bool = False) -> str:
    """Write a text-only suite to ``out`` (see :func:`server.engine.suitedir.write_text_suite_files`)."""
    return write_text_suite_files(out, meta, scenarios, same=lambda root: same_text_suite(root, meta, scenarios),
                                  force=force)


def make_generator(name: str, seed: int, **options) -> ScenarioGenerator:
    if name == "procedural":
        from server.benchmarks.mpe.dataset.procedural import ProceduralGenerator

        turn_length = options.pop("turn_length", "paper")
        if options:
            raise DatasetError(f"the procedural generator takes only turn_length ({', '.join(options)} given)")
        return ProceduralGenerator(seed, turn_length)
    if name == "anthropic":
        from server.benchmarks.mpe.dataset.anthropic_gen import AnthropicGenerator

        return AnthropicGenerator(seed=seed, **options)
    raise DatasetError(f"unknown generator {name!r} (procedural, anthropic)")


def build_text_suite(out: Path, *, name: str, pairs: int, seed: int, generator: ScenarioGenerator,
                     composition: Composition | None = None, engine_name: str = "piper",
                     force: bool = False, progress: Progress | None = None,
                     pace: PreamblePace = PreamblePace.voice) -> tuple[Suite, str]:
    """Plan, generate and write a text-only suite; returns the loaded suite and what happened."""
    composition = composition or Composition.from_shares(pairs)
    if composition.pairs != pairs:
        raise DatasetError(f"the composition is for {composition.pairs} pairs, not {pairs}")
    plans = plan_pairs(composition, seed)
    scripts = generate_scripts(generator, plans, progress)
    scenarios = [sc for s in scripts for sc in script_to_scenarios(s)]
    meta = suite_meta(name=name, seed=seed, generator=generator, composition=composition, engine_name=engine_name,
                      pace=pace)
    what = write_text_suite(out, meta, scenarios, force=force)
    return Suite.load(out), what
