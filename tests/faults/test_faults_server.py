"""A fault of the server's own code during an attempt (docs/guarantees.md "Faults"): the attempt is
stored as the server's failure (``internal``, with the exception's text), never as the bridge's
departure, and the episode is tried again."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from clients.errors import ProtocolError, RemoteError
from server.core.episode import EpisodeCore
from server.core.status import AttemptStatus
from server.db import Attempt
from server.engine.leasing import create_run
from server.engine.session import Disconnected, attempt_error
from tests.support.world import Scripted, bridge, wait_run, world_on


def test_an_attempts_error_names_whose_fault_it_was():
    assert attempt_error(ProtocolError("seq 9 after 7", code="bad_seq")) == ("bad_seq", "seq 9 after 7")
    assert attempt_error(RemoteError("bridge reported oom: out of memory", remote_code="oom"))[0] == "oom"
    assert attempt_error(Disconnected()) == ("disconnected", "the bridge closed the connection")
    assert attempt_error(ConnectionResetError())[0] == "disconnected"
    assert attempt_error(AttributeError("'Handle' object has no attribute 'when'")) == \
        ("internal", "AttributeError: 'Handle' object has no attribute 'when'")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_fault_of_the_server_is_stored_as_its_own_and_the_episode_retried(
        kind, tmp_path, mini_suite, speech_frames, monkeypatch):
    calls = {"n": 0}
    next_room = EpisodeCore.next_room

    def failing_once(self):
        calls["n"] += 1
        if calls["n"] == 20:  # the first attempt, 19 room frames in
            raise KeyError("injected")
        return next_room(self)

    monkeypatch.setattr(EpisodeCore, "next_room", failing_once)
    async with world_on(kind, tmp_path, mini_suite) as w:
        run = create_run(w.db, team="ops", model="scripted", suite_path=str(w.suite), clock="lockstep", limit=1)
        async with bridge(w, Scripted("scripted", speech_frames)) as task:
            p = await wait_run(w.db, run, [task])
        with w.db.session() as s:
            got = [(a.status, a.error_code, a.error_message, a.n_frames)
                   for a in s.scalars(select(Attempt).order_by(Attempt.started_at))]
    assert p.completed == p.total == 2
    assert got[0] == (AttemptStatus.failed, "internal", "KeyError: 'injected'", 19)
    assert [g[0] for g in got[1:]] == [AttemptStatus.completed] * 2  # the episode again, then the other one
