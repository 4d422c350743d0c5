"""Shared fixtures: both databases, settings, a small real-speech suite, an in-process server."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from server.settings import Settings
from tests.support.audio import speech_cache_dir, synthesize
from tests.support.databases import database_url
from tests.support.suites import build_mini_suite, demo_build, mtr_dims_mini, mtr_mini, piper_engine  # noqa: F401 (session fixtures)

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


@pytest.fixture(scope="session")
def mini_suite(tmp_path_factory, say) -> Path:
    return build_mini_suite(tmp_path_factory.mktemp("suite") / "mini", say)


@pytest.fixture(scope="session")
def speech_frames(say) -> np.ndarray:
    """A long stretch of real speech (for always-talking test bridges)."""
    return say("I keep talking about the weather and the weekend and the traffic on the way home.")
