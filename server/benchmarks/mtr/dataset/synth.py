"""Voice an MTR suite: every clip of every round, in parallel, cached, resumable.

One job per distinct (voice, text) (a backchannel said many times is synthesised once), run
through the shared synthesis driver (:func:`server.datasets.synth.fill_cache`:
the clip cache, worker processes, progress). The ``broadcast`` role's clips are cached as the
engine speaks them and pass through :func:`.voices.broadcast_filter` when written. Once every
clip is written, the manifest gets the real durations, the placements are fitted to them
(:func:`.timing.fit_round`: a part moves only where the real reply is too short), the voice
map, and ``"audio"`` is cleared; scenarios.jsonl first, suite.json last.
"""

from __future__ import annotations

import time
from pathlib import Path

from server.benchmarks.mtr.dataset.timing import fit_round
from server.benchmarks.mtr.dataset.voices import broadcast_filter, role_of_part, role_voices
from server.benchmarks.mtr.suite import Suite, SuiteError, check_suite
from server.datasets.errors import DatasetError
from server.datasets.synth import Progress, SynthReport, voice_clips
from server.engine.suitedir import write_suite_files
from server.tts import OUTPUT_RATE, TTSEngine, TTSUnavailable, get_engine, voice_engine


def voices_for(suite: Suite, engine_name: str) -> dict[str, str]:
    """The suite's role voices when they belong to the engine, else the engine's."""
    voices = dict(suite.meta.voices)
    try:
        defaults = role_voices(engine_name)
    except TTSUnavailable:  # an engine outside the registry (tests, plug-ins) speaks the suite's ids
        return voices
    if set(defaults) <= set(voices) and all(voice_engine(voices[r]) == engine_name for r in defaults):
        return voices
    return defaults


def clip_roles(suite: Suite) -> dict[str, tuple[str, str]]:
    """clip path -> (role, text) of every clip; the same path always means the same line."""
    out: dict[str, tuple[str, str]] = {}
    for d in suite.dialogues:
        for r in d.rounds:
            kind = r.background.kind if r.background else None
            for key, c in r.clips():
                part = key.split(".", 1)[1]
                part = "backchannel" if part.startswith("backchannel") else part
                job = (role_of_part(part, kind), c.text)
                if out.setdefault(c.clip, job) != job:
                    raise SuiteError(f"{d.dialogue_id} round {r.round}: clip {c.clip!r} is used for different lines")
    return out


def synthesize_suite(
    root: Path | str,
    *,
    data_dir: Path | str,
    engine_name: str = "piper",
    engine: TTSEngine | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> SynthReport:
    """Synthesise every clip of the MTR suite at ``root`` and update its manifest.

    ``engine`` (an object) runs in this process; otherwise ``engine_name`` runs in ``workers``
    processes (default: one per CPU core)."""
    t_start = time.perf_counter()
    root = Path(root)
    suite = Suite.load(root)
    local = engine if engine is not None else get_engine(engine_name)  # fails early with the install hint
    name = local.name
    voices = voices_for(suite, name)
    clips = clip_roles(suite)
    missing = sorted({role for role, _ in clips.values()} - set(voices))
    if missing:
        raise DatasetError(f"no voice for role(s) {', '.join(missing)} (engine {name})")
    by_voice = {rel: (voices[role], text) for rel, (role, text) in clips.items()}
    broadcast = {rel for rel, (role, _) in clips.items() if role == "broadcast"}
    durations, report = voice_clips(
        by_voice, suite.clip_path, data_dir=data_dir, local=local, engine=engine, workers=workers,
        progress=progress, t_start=t_start,
        post=lambda rel, audio: broadcast_filter(audio, OUTPUT_RATE) if rel in broadcast else audio)

    dialogues = []
    for d in suite.dialogues:
        d = d.model_copy(deep=True)
        for r in d.rounds:
            for _, c in r.clips():
                c.duration_s = durations[c.clip]
        try:
            d.rounds = [fit_round(r) for r in d.rounds]
        except DatasetError as e:
            raise DatasetError(f"{d.dialogue_id} {e}") from None
        dialogues.append(d)
    meta = suite.meta.model_copy(update={"voices": voices, "audio": None})
    write_suite_files(root, meta, dialogues)

    problems = check_suite(Suite.load(root), check_audio=True)
    if problems:
        raise DatasetError("the synthesised suite has problems: " + "; ".join(map(str, problems[:5])))
    return report
