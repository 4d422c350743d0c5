"""Shared fixtures: both databases, settings, a small real-speech suite, an in-process server."""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from server.benchmarks.mpe.suite import Preamble, Scenario, SuiteMeta, Turn, write_suite
from server.settings import Settings
from tests.support.audio import speech_cache_dir, synthesize
from tests.support.suites import demo_build, mtr_dims_mini, mtr_mini, piper_engine  # noqa: F401 (session fixtures)

PG_URL = os.environ.get("MPE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

# Test files with realtime episodes: they pace episodes on the wall clock (`-m realtime`). Most of
# them only wait on it and hold whatever the timing is, so `make test` runs them beside the rest,
# in three workers on the two cores (the paced ones mostly sleep).
REALTIME_FILES = frozenset({
    "test_bridge_check.py", "test_bridge_freeze_omni.py", "test_bridge_gemini.py", "test_bridge_minicpm.py",
    "test_bridge_moshi.py", "test_bridge_openai.py", "test_context_frames.py", "test_engine_e2e.py", "test_impairment.py", "test_listen.py",
    "test_outsider_bridge.py", "test_protocol_errors.py", "test_faults_storage_realtime.py",
})

# Tests that assert bounds on wall-clock pacing (frames on their deadlines, a listener from the first
# frame, gaps of a given length, a cut within frames of a barge-in): `make test` runs them last, one at a time, with the machine to
# themselves (`-m strict_timing`). A whole file, or file::test.
STRICT_TIMING = frozenset({
    "test_listen.py", "test_engine_e2e.py::test_realtime_episode",
    "test_bridge_moshi.py::test_realtime_episode_with_retry_and_burst",
    "test_bridge_gemini.py::test_realtime_episode_with_retry_resumption_and_interruption",
    "test_bridge_openai.py::test_realtime_episode_with_retry_answer_and_barge_in",
    "test_bridge_check.py::test_correct_bridge_passes_in_both_clocks",
})


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if item.path.name in REALTIME_FILES:
            item.add_marker(pytest.mark.realtime)
        if {item.path.name, f"{item.path.name}::{item.originalname}"} & STRICT_TIMING:
            item.add_marker(pytest.mark.strict_timing)

@contextmanager
def database_url(kind: str, tmp: Path):
    """A fresh database: a SQLite file in ``tmp``, or its own schema in the test PostgreSQL."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'mpe.db'}"
        return
    schema = "t_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(PG_URL)
    with admin.begin() as c:
        c.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as c:
            c.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    """Every database test runs on SQLite and on the real PostgreSQL (own schema per test)."""
    with database_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    return Settings(data_dir=tmp_path / "data", DATABASE_URL=db_url, lease_s=3.0, flush_s=0.2, poll_s=0.05,
                    handshake_timeout_s=2.0, lockstep_timeout_s=5.0)


@pytest.fixture
def db(settings):
    from server.db import Database

    d = Database(settings.db_url)
    yield d
    d.dispose()


@pytest.fixture(scope="session")
def say(pytestconfig, tmp_path_factory):
    cache = speech_cache_dir(pytestconfig, tmp_path_factory)
    return lambda text, **kw: synthesize(text, cache, **kw)


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


@pytest.fixture(scope="session")
def mini_suite(tmp_path_factory, say) -> Path:
    return build_mini_suite(tmp_path_factory.mktemp("suite") / "mini", say)


@pytest.fixture(scope="session")
def speech_frames(say) -> np.ndarray:
    """A long stretch of real speech (for always-talking test bridges)."""
    return say("I keep talking about the weather and the weekend and the traffic on the way home.")
