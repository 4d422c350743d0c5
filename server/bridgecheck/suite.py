"""The probe suite of the bridge check: one Duplex-MPE pair, voiced with the offline TTS.

Each episode probes what a bridge must handle (§3): speech (a short preamble, a remark to
someone else, a request to Aria), silence (the gaps and the waits after the request, when
room frames arrive SILENT) and overlap (the N4 resolution is spoken whatever the bridge is
doing). Both conditions of the pair are queued, so every clock plays two episodes and reset
behaviour can be seen. The suite is valid for its benchmark (``mpe dataset validate``);
its episodes take 20 to 25 s of stream time each.

The build is idempotent: a complete suite of the same definition at
``<data_dir>/suites/bridge-check/`` is reused, anything else is voiced again (clips come
from the TTS cache) in a fresh directory and swapped into place. Piper's noise is off, so
every build has the same content hash.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import threading
from pathlib import Path

import soundfile as sf

from server.benchmarks.mpe.suite import (
    Preamble,
    Scenario,
    Suite,
    SuiteError,
    SuiteMeta,
    Turn,
    bucket_of,
    check_suite,
    write_suite,
)
from server.engine.suitedir import CLIP_RATE
from server.files import atomic_write_bytes
from server.tts import speak

CHECK_SUITE_NAME = "bridge-check"
VERSION = "1"
STAMP_FILE = ".check.json"

VOICES = {"A": "piper:joe@0.84", "B": "piper:joe@1.0", "C": "piper:joe@1.19"}
PREAMBLE_TEXT = "This is a bridge check. Aria, answer when you are asked something."
REQUEST = "can you hear me? Please say a few words."
#: (speaker, label, text by condition); the T turn is the probe whose end the reaction time counts from
TURNS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("A", "N2", {"explicit": "Ben, did you bring the keys?", "implicit": "Ben, did you bring the keys?"}),
    ("B", "T", {"explicit": f"Aria, {REQUEST}", "implicit": REQUEST[0].upper() + REQUEST[1:]}),
    ("C", "N4Q", {"explicit": "Aria, and what time is it?", "implicit": "Aria, and what time is it?"}),
    ("A", "N4R", {"explicit": "Never mind, it is noon.", "implicit": "Never mind, it is noon."}),
)
T_INDEX = next(i for i, (_, label, _) in enumerate(TURNS) if label == "T")
GOLD = "Any short spoken answer"
ATTRIBUTES = {"setting": "bridge check", "activity": "probing a bridge", "relationship": "testers",
              "device_context": "an assistant on the table", "register": "plain"}

_lock = threading.Lock()


def _definition() -> dict:
    return {"version": VERSION, "voices": VOICES, "preamble": PREAMBLE_TEXT,
            "turns": [[s, label, texts] for s, label, texts in TURNS]}


def _definition_sha() -> str:
    return hashlib.sha256(json.dumps(_definition(), sort_keys=True).encode()).hexdigest()


def _is_complete(target: Path, sha: str) -> bool:
    try:
        stamp = json.loads((target / STAMP_FILE).read_text("utf-8"))
        suite = Suite.load(target)
    except (OSError, ValueError):
        return False
    return (stamp.get("definition_sha256") == sha and stamp.get("content_hash") == suite.content_hash()
            and not check_suite(suite))


def _write_clip(root: Path, rel: str, text: str, voice: str, data_dir: Path) -> float:
    pcm = speak(text, voice, data_dir)
    buf = io.BytesIO()
    sf.write(buf, pcm, CLIP_RATE, format="WAV", subtype="PCM_16")
    atomic_write_bytes(root / rel, buf.getvalue())
    return len(pcm) / CLIP_RATE


def _build(root: Path, data_dir: Path) -> None:
    pre_clip = "clips/preamble.wav"
    pre_s = _write_clip(root, pre_clip, PREAMBLE_TEXT, VOICES["B"], data_dir)
    scenarios = []
    for condition in ("explicit", "implicit"):
        turns = []
        for idx, (speaker, label, texts) in enumerate(TURNS):
            rel = f"clips/{condition}/{idx:03d}.wav"
            duration = _write_clip(root, rel, texts[condition], VOICES[speaker], data_dir)
            turns.append(Turn(idx=idx, speaker=speaker, label=label, text=texts[condition], clip=rel,
                              duration_s=duration, addressee="Aria" if label in ("T", "N4Q") else None))
        scenarios.append(Scenario(scenario_id="check", pair_id="check", condition=condition, n_speakers=3,
                                  t_bucket=bucket_of(T_INDEX, len(TURNS)), attributes=ATTRIBUTES,
                                  gold_answer=GOLD, turns=turns))
    meta = SuiteMeta(name=CHECK_SUITE_NAME, version=VERSION, generator="bridge-check", seed=0, voices=VOICES,
                     preamble=Preamble(text=PREAMBLE_TEXT, clip=pre_clip, duration_s=pre_s))
    write_suite(root, meta, scenarios)


def build_check_suite(data_dir: Path | str) -> Path:
    """Write (or reuse) the probe suite at ``<data_dir>/suites/bridge-check/`` and return its path.

    Raises TTSUnavailable when it must be voiced and no TTS engine is installed."""
    data_dir = Path(data_dir)
    suites = data_dir / "suites"
    target = suites / CHECK_SUITE_NAME
    sha = _definition_sha()
    with _lock:
        if _is_complete(target, sha):
            return target
        suites.mkdir(parents=True, exist_ok=True)
        tmp = suites / f".{CHECK_SUITE_NAME}.build-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            _build(tmp, data_dir)
            built = Suite.load(tmp)
            problems = check_suite(built, strict=True)
            if problems:
                raise SuiteError("the bridge-check suite failed validation: " + "; ".join(map(str, problems[:5])))
            stamp = {"definition_sha256": sha, "content_hash": built.content_hash()}
            atomic_write_bytes(tmp / STAMP_FILE, json.dumps(stamp, sort_keys=True).encode())
            if target.exists():
                old = suites / f".{CHECK_SUITE_NAME}.old-{os.getpid()}-{secrets.token_hex(4)}"
                os.replace(target, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target

