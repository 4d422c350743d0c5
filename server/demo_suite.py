"""The small built-in suite behind ``mpe demo``.

Three hand-written scenario pairs (explicit + implicit), voiced offline with the piper
voices of :mod:`server.tts`, written in the suite format of DESIGN §2 to
``<data_dir>/suites/demo/``. :data:`DEMO_SUITE_SCRIPT` is the scripted content as plain
data. :func:`build_demo_suite` is idempotent: a complete suite built from the same script
and engine is reused as is; anything else is rebuilt (from the clip cache, so only new
lines are synthesised) in a temporary directory and swapped into place.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import soundfile as sf

from server.suite import (
    SuiteError,
    Preamble,
    Scenario,
    Suite,
    SuiteMeta,
    Turn,
    atomic_write_bytes,
    validate_suite,
    write_suite,
)
from server.tts import DEFAULT_VOICES, OUTPUT_RATE, ClipCache, TTSEngine, TTSUnavailable, get_engine

DEMO_SUITE_NAME = "demo"
BUILDER_VERSION = "demo_suite/1"
STAMP_FILE = ".build.json"
PREAMBLE_CLIP = "clips/preamble.wav"
PREAMBLE_SPEAKER = "B"  # the voice as shipped reads the duty

# Addressee conventions: a speaker letter, "group" (several humans), "Aria", "device"
# (another voice assistant), or None (nobody: thinking aloud).

# §3: the duty preamble -- Aria, spelled out; answer only when spoken to directly and asked
# something answerable; silent for talk between people or to another device, for thinking
# aloud, and when someone else has already answered.
_PREAMBLE = (
    "Hello. You are Aria, the voice assistant in this room. "
    "Your name is spelled A, R, I, A. "
    "Several people will be talking here. "
    "Only answer when someone speaks to you, Aria, directly, "
    "and asks you something you can answer. "
    "Stay quiet when people are talking to each other or to another device, "
    "or when someone is just thinking out loud. "
    "And if someone else has already answered the question, let it go and stay quiet."
)

# Compact source. Each turn is (speaker, label, addressee, text); the text is a dict
# {"explicit": ..., "implicit": ...} for the one turn that differs between conditions (T).
_PAIRS: list[dict[str, Any]] = [
    {
        "pair_id": "p0001",
        "scenario_id": "s0001",
        "attributes": {
            "setting": "shared flat, living room",
            "activity": "choosing a takeaway dinner",
            "relationship": "flatmates",
            "device_context": "Aria on a smart speaker by the sofa",
            "register": "casual",
        },
        "gold_answer": "The noodle bar, eleven dollars each.",
        "answer_keys": [["noodle"], ["eleven", "11"]],
        "turns": [
            ("A", "N2", "B", "I'm starving. Are we ordering in tonight, or cooking?"),
            ("B", "N2", "A", "Ordering in. The noodle bar does a big bowl for eleven dollars."),
            ("C", "N2", "B", "And the burger place is fourteen dollars each, with fries."),
            ("D", "N3", None, "Hmm. Where is my wallet?"),
            ("A", "N1", "group", "Aria read both menus out to us earlier, so those prices are right."),
            (
                "B",
                "T",
                "Aria",
                {
                    "explicit": "Aria, which of the two places is cheaper per person?",
                    "implicit": "Since you read us both menus, which place is cheaper per person?",
                },
            ),
            ("C", "N4Q", "Aria", "Aria, do they still deliver after ten?"),
            ("A", "N4R", "C", "They do. I got a delivery from them at midnight last week."),
            ("D", "N2", "A", "Great. Get me the spicy one."),
        ],
    },
    {
        "pair_id": "p0002",
        "scenario_id": "s0002",
        "attributes": {
            "setting": "family kitchen",
            "activity": "baking a birthday cake",
            "relationship": "family",
            "device_context": "Aria on the counter; a phone assistant next to the oven",
            "register": "casual",
        },
        "gold_answer": "Six eggs.",
        "answer_keys": [["six", "6"]],
        "turns": [
            ("A", "N2", "B", "The recipe says two cups of flour and three eggs for one cake."),
            ("B", "N2", "A", "We've got twenty people coming, so let's make it twice."),
            ("C", "N2", "device", "Hey Google, set a timer for forty minutes."),
            ("A", "N1", "group", "Aria did all the recipe maths for us last time, too."),
            (
                "B",
                "T",
                "Aria",
                {
                    "explicit": "Aria, how many eggs do we need if we double it?",
                    "implicit": "Can you work it out again? How many eggs do we need if we double it?",
                },
            ),
            ("A", "N3", None, "Now, where did I put the big mixing bowl? Maybe in the cupboard."),
            ("C", "N2", "A", "It's in the dishwasher. I'll grab it for you."),
        ],
    },
    {
        "pair_id": "p0003",
        "scenario_id": "s0003",
        "attributes": {
            "setting": "home office",
            "activity": "planning a day trip by train",
            "relationship": "friends",
            "device_context": "Aria on a laptop on the desk",
            "register": "casual",
        },
        "gold_answer": "The nine fifteen train.",
        "answer_keys": [["nine fifteen", "9:15", "9.15", "915", "nine-fifteen"]],
        "turns": [
            ("B", "N2", "C", "We need to be in Brighton by noon. Which train should we take?"),
            ("C", "N2", "B", "There's one at nine fifteen and another at ten forty."),
            ("A", "N3", None, "Did I pack the phone charger? I think I did."),
            ("C", "N2", "B", "The journey takes about an hour and a half, either way."),
            ("A", "N1", "group", "I asked Aria to save that timetable this morning."),
            (
                "B",
                "T",
                "Aria",
                {
                    "explicit": "Aria, which of those trains gets us there before noon?",
                    "implicit": "You've got the timetable, so which train gets us there before noon?",
                },
            ),
            ("A", "N4Q", "Aria", "Aria, is there a coffee shop at Brighton station?"),
            ("B", "N4R", "A", "Yes, there's one right by platform one. I've been there."),
            ("C", "N2", "group", "Perfect. Let's leave the house at half past eight, then."),
        ],
    },
]


def _t_bucket(t_idx: int, n_turns: int) -> str:
    # Relative position of T among the turns: first third early, middle third, last third late.
    pos3 = 3 * t_idx
    if pos3 < (n_turns - 1):
        return "early"
    if pos3 <= 2 * (n_turns - 1):
        return "middle"
    return "late"


def _expand_script() -> dict[str, Any]:
    pairs = []
    for p in _PAIRS:
        conditions: dict[str, list[dict[str, Any]]] = {}
        for cond in ("explicit", "implicit"):
            turns = []
            for speaker, label, addressee, text in p["turns"]:
                turns.append(
                    {
                        "speaker": speaker,
                        "label": label,
                        "addressee": addressee,
                        "text": text[cond] if isinstance(text, dict) else text,
                    }
                )
            conditions[cond] = turns
        labels = [t[1] for t in p["turns"]]
        pairs.append(
            {
                "pair_id": p["pair_id"],
                "scenario_id": p["scenario_id"],
                "n_speakers": len({t[0] for t in p["turns"]}),
                "t_bucket": _t_bucket(labels.index("T"), len(labels)),
                "attributes": dict(p["attributes"]),
                "gold_answer": p["gold_answer"],
                "answer_keys": [list(k) for k in p["answer_keys"]],
                "conditions": conditions,
            }
        )
    return {
        "name": DEMO_SUITE_NAME,
        "version": "1",
        "generator": "scripted",
        "seed": 0,
        "voices": dict(DEFAULT_VOICES),
        "preamble": {"text": _PREAMBLE, "speaker": PREAMBLE_SPEAKER},
        "pairs": pairs,
    }


#: The scripted content of the demo suite as plain data (dicts, lists, strings).
DEMO_SUITE_SCRIPT: dict[str, Any] = _expand_script()


def _script_sha256(script: dict[str, Any]) -> str:
    data = json.dumps([BUILDER_VERSION, script], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def clip_rel(pair_id: str, condition: str, idx: int) -> str:
    return f"clips/{pair_id}/{condition}/{idx:03d}.wav"


def _jobs(script: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(clip path, voice, text) for every clip, preamble first."""
    voices = script["voices"]
    jobs = [(PREAMBLE_CLIP, voices[script["preamble"]["speaker"]], script["preamble"]["text"])]
    for pair in script["pairs"]:
        for cond, turns in pair["conditions"].items():
            for idx, turn in enumerate(turns):
                jobs.append((clip_rel(pair["pair_id"], cond, idx), voices[turn["speaker"]], turn["text"]))
    return jobs


def _is_complete(target: Path, script_sha: str, engine: TTSEngine | None) -> bool:
    """A finished build of this script (by this engine, when known) whose files are intact."""
    try:
        stamp = json.loads((target / STAMP_FILE).read_text("utf-8"))
        if stamp.get("script_sha256") != script_sha:
            return False
        if engine is not None and stamp.get("engine") != {"name": engine.name, "version": engine.version}:
            return False
        suite = Suite.load(target)
    except (OSError, ValueError, AttributeError):
        return False
    if suite.content_hash() != stamp.get("content_hash"):
        return False
    return not validate_suite(suite, check_audio=True)


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """Serialise concurrent builds of the same data dir (POSIX advisory lock)."""
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


def _fresh_dir(parent: Path, kind: str) -> Path:
    """A new directory ``.demo.<kind>-<random>`` (ordinary permissions, unlike mkdtemp)."""
    while True:
        path = parent / f".{DEMO_SUITE_NAME}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:  # pragma: no cover
            continue


def _write_clip(path: Path, audio: Any) -> float:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), audio, OUTPUT_RATE, format="WAV", subtype="PCM_16")
    return round(len(audio) / OUTPUT_RATE, 3)


def build_demo_suite(
    data_dir: Path,
    *,
    engine: TTSEngine | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write (or reuse) the demo suite at ``<data_dir>/suites/demo/`` and return its path.

    ``progress(done, total)`` is called after every clip (once with ``(total, total)`` when
    an existing build is reused). Raises TTSUnavailable when a build is needed and no
    engine is installed.
    """
    data_dir = Path(data_dir)
    suites_dir = data_dir / "suites"
    target = suites_dir / DEMO_SUITE_NAME
    suites_dir.mkdir(parents=True, exist_ok=True)
    script = _expand_script()  # fresh: callers mutating DEMO_SUITE_SCRIPT cannot affect builds
    script_sha = _script_sha256(script)
    jobs = _jobs(script)
    total = len(jobs)

    with _build_lock(suites_dir / f".{DEMO_SUITE_NAME}.lock"):
        unavailable: TTSUnavailable | None = None
        if engine is None:
            try:
                engine = get_engine("piper")
            except TTSUnavailable as e:
                unavailable = e
        # Reuse a complete build; without an engine, any complete build of this script will do.
        if _is_complete(target, script_sha, engine):
            if progress is not None:
                progress(total, total)
            return target
        if engine is None:
            assert unavailable is not None
            raise unavailable

        # Leftovers of builds that were killed half-way (we hold the lock: none is running).
        for stale in suites_dir.glob(f".{DEMO_SUITE_NAME}.build-*"):
            shutil.rmtree(stale, ignore_errors=True)
        for stale in suites_dir.glob(f".{DEMO_SUITE_NAME}.old-*"):
            shutil.rmtree(stale, ignore_errors=True)

        cache = ClipCache(data_dir)
        tmp = _fresh_dir(suites_dir, "build")
        try:
            durations: dict[str, float] = {}
            for done, (rel, voice, text) in enumerate(jobs, start=1):
                audio = cache.synthesize(engine, text, voice)
                durations[rel] = _write_clip(tmp / rel, audio)
                if progress is not None:
                    progress(done, total)

            pre = script["preamble"]
            meta = SuiteMeta(
                name=script["name"],
                version=script["version"],
                generator=script["generator"],
                seed=script["seed"],
                voices=dict(script["voices"]),
                preamble=Preamble(
                    text=pre["text"],
                    clip=PREAMBLE_CLIP,
                    duration_s=durations[PREAMBLE_CLIP],
                    voice=script["voices"][pre["speaker"]],
                ),
            )
            scenarios = []
            for pair in script["pairs"]:
                for cond in ("explicit", "implicit"):
                    turns = []
                    for idx, t in enumerate(pair["conditions"][cond]):
                        rel = clip_rel(pair["pair_id"], cond, idx)
                        turns.append(
                            Turn(
                                idx=idx,
                                speaker=t["speaker"],
                                label=t["label"],
                                text=t["text"],
                                clip=rel,
                                duration_s=durations[rel],
                                addressee=t["addressee"],
                            )
                        )
                    scenarios.append(
                        Scenario(
                            scenario_id=pair["scenario_id"],
                            pair_id=pair["pair_id"],
                            condition=cond,
                            n_speakers=pair["n_speakers"],
                            t_bucket=pair["t_bucket"],
                            attributes=copy.deepcopy(pair["attributes"]),
                            gold_answer=pair["gold_answer"],
                            answer_keys=copy.deepcopy(pair["answer_keys"]),
                            turns=turns,
                        )
                    )
            write_suite(tmp, meta, scenarios)
            built = Suite.load(tmp)
            problems = validate_suite(built, check_audio=True)
            if problems:  # a bug in the script, never expected
                raise SuiteError("demo suite failed validation: " + "; ".join(problems))
            stamp = {
                "builder": BUILDER_VERSION,
                "script_sha256": script_sha,
                "engine": {"name": engine.name, "version": engine.version},
                "content_hash": built.content_hash(),
            }
            atomic_write_bytes(tmp / STAMP_FILE, (json.dumps(stamp, indent=2, sort_keys=True) + "\n").encode())

            # Swap into place: the old directory (if any) is moved aside, then removed.
            old: Path | None = None
            if target.exists() or target.is_symlink():
                old = _fresh_dir(suites_dir, "old")
                os.replace(target, old / "suite")
            os.replace(tmp, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target
