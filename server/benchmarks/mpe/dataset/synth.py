"""Voice a Duplex-MPE suite: every human turn and the preamble, through the shared synthesis driver
(:mod:`server.datasets.synth`: parallel, cached, resumable).
"""

from __future__ import annotations

import time
from pathlib import Path

from server.benchmarks.mpe.dataset.build import PREAMBLE_SPEAKER, PreamblePace, preamble_voice
from server.benchmarks.mpe.suite import Suite, SuiteError, check_suite, write_suite
from server.datasets.errors import DatasetError
from server.datasets.synth import Progress, SynthReport, voice_clips
from server.tts import TTSEngine, TTSUnavailable, default_voices, get_engine, voice_engine


def voices_for(suite: Suite, engine_name: str) -> dict[str, str]:
    """The suite's voice map when it belongs to the engine, else the engine's defaults."""
    voices = dict(suite.meta.voices)
    if voices and all(voice_engine(v) == engine_name for v in voices.values()) and \
            {t.speaker for sc in suite.scenarios for t in sc.turns} <= set(voices):
        return voices
    try:
        return default_voices(engine_name)
    except TTSUnavailable:  # an engine outside the registry (tests, plug-ins) speaks the suite's ids
        return voices


def synthesize_suite(
    root: Path | str,
    *,
    data_dir: Path | str,
    engine_name: str = "piper",
    engine: TTSEngine | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> SynthReport:
    """Synthesise every clip of the suite at ``root`` and update its manifest.

    ``engine`` (an object) runs in this process; otherwise ``engine_name`` runs in
    ``workers`` processes (default: one per CPU core).
    """
    t_start = time.perf_counter()
    root = Path(root)
    suite = Suite.load(root)
    local = engine if engine is not None else get_engine(engine_name)  # fails early with the install hint
    name, version = local.name, local.version
    voices = voices_for(suite, name)

    # clip path -> (voice, text); the same path must always mean the same audio.
    clips: dict[str, tuple[str, str]] = {}
    pre = suite.meta.preamble
    pace = (pre.model_extra or {}).get("pace", PreamblePace.voice.value)
    pre_voice = preamble_voice(voices.get(PREAMBLE_SPEAKER) or next(iter(voices.values())), pace)
    clips[pre.clip] = (pre_voice, pre.text)
    for sc in suite.scenarios:
        for t in sc.turns:
            job = (voices[t.speaker], t.text)
            if clips.setdefault(t.clip, job) != job:
                raise SuiteError(f"{sc.scenario_id}/{sc.condition} turn {t.idx}: clip {t.clip!r} is used for "
                                 "different lines")
    # Every clip is cached and written; then the manifest.
    durations, report = voice_clips(clips, suite.clip_path, data_dir=data_dir, local=local, engine=engine,
                                    workers=workers, progress=progress, t_start=t_start)

    meta = suite.meta.model_copy(deep=True)
    meta.voices = voices
    meta.preamble.duration_s = durations[pre.clip]
    extra = dict(meta.model_extra or {})
    meta = meta.model_validate({**meta.model_dump(), **extra, "audio": {"engine": name, "version": version},
                                "preamble": {**meta.preamble.model_dump(), "voice": pre_voice}})
    scenarios = [sc.model_copy(deep=True) for sc in suite.scenarios]
    for sc in scenarios:
        for t in sc.turns:
            t.duration_s = durations[t.clip]
    write_suite(root, meta, scenarios)

    problems = [p for p in check_suite(Suite.load(root), check_audio=True) if p.rule.startswith("clip")]
    if problems:
        raise DatasetError("synthesised suite has clip problems: " + "; ".join(map(str, problems[:5])))
    return report


__all__ = ["synthesize_suite", "voices_for"]
