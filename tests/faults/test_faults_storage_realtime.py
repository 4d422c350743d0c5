"""PostgreSQL restarted during a realtime episode (docs/guarantees.md "Faults"): the cluster of the
test's own (``own_postgres``, tests/support/faults.py) is stopped for about two seconds while a bridge
that talks (it answers every room frame with the room's audio at half volume, so the detector and
both tracks are busy) serves a realtime episode of a short suite, and started again.

Promise: the session rides it out (its writes kept and written once the database is back) or fails
only the affected attempt, which is retried; the run completes, and the completed attempt's
recording is whole: one room frame per slot of its duration, seq contiguous, audio chunks
contiguous on both tracks, and every assistant frame the bridge sent recorded once and in order.
Paced on the wall clock (tests/conftest.py REALTIME_FILES).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from sqlalchemy import select

from clients.messages import EpisodeStart
from server.core.status import AttemptStatus
from server.db import Attempt, Episode, FrameRow
from server.engine.leasing import create_run
from tests.support.faults import OnLog, bridge_to, check_recording, server_on, wait_run_through_outage
from tests.support.suites import build_mini_suite
from tests.support.world import Quiet, until

OUTAGE_AT = 30  # the room frame at which PostgreSQL stops (2.4 s into the episode)
DOWN_S = 1.0  # how long it stays stopped before it is started again (pg_ctl's own time comes on top)
SCRIPT = {"r1": [("A", "N2", "Ben, the salt?"), ("B", "T", "{aria}What time is it?"), ("C", "N3", "Hmm.")]}


@pytest.fixture(scope="module")
def short_suite(tmp_path_factory, say):
    """A pair of three short turns: a realtime episode of about ten seconds."""
    return build_mini_suite(tmp_path_factory.mktemp("suite") / "short", say, SCRIPT, {"r1": "Nine o'clock"})


class Talker(Quiet):
    """A realtime bridge that talks with the room (its audio at half volume, in the same slot), calls
    ``at()`` once at room frame ``seq`` of its first episode, and notes the frames it sent."""

    clocks = ("realtime",)

    def __init__(self, seq: int, at):
        super().__init__()
        self.seq, self.at, self.fired, self.ends, self.sent = seq, at, False, [], []

    def reset(self, episode: EpisodeStart) -> None:
        self.sent = []

    def step(self, s, room):
        if s == self.seq and not self.fired:
            self.fired = True
            self.at()
        self.sent.append(s)
        return (room // 2).astype(np.int16)

    def end_episode(self, end) -> None:
        self.ends.append(end.reason)


async def test_postgres_restarted_during_a_realtime_episode(tmp_path, short_suite, own_postgres):
    pg = own_postgres
    bounced = threading.Event()

    def bounce() -> None:  # off the bridge's thread: its frames keep their pace
        def run() -> None:
            pg.stop()
            time.sleep(DOWN_S)
            pg.start()
            bounced.set()
        threading.Thread(target=run).start()

    async with server_on(pg.url, tmp_path, short_suite, lease_s=20.0, storage_patience_s=15.0) as (db, server, token):
        run = create_run(db, team="ops", model="x", suite_path=str(short_suite), clock="realtime", limit=1,
                         conditions=["explicit"])
        b = Talker(OUTAGE_AT, bounce)
        with OnLog("mpe.storage", "refused a write", lambda: None) as refused:
            async with bridge_to(server, b, token) as task:
                p = await wait_run_through_outage(db, run, [task])
                await until(lambda: b.ends[-1:] == ["completed"], "the bridge to be told")
        assert b.fired and bounced.is_set() and refused.seen >= 1  # the database was away while it ran
        assert p.completed == 1 and b.ends[-1] == "completed"
        with db.session() as s:
            ep = s.scalars(select(Episode).where(Episode.run_id == run)).one()
            atts = s.scalars(select(Attempt).where(Attempt.episode_id == ep.id).order_by(Attempt.number)).all()
            asst = s.execute(select(FrameRow.seq, FrameRow.slot).where(
                FrameRow.attempt_id == ep.completed_attempt_id, FrameRow.direction == "assistant")
                .order_by(FrameRow.id)).all()
        # ridden out (one attempt), or only the attempt the outage met failed and was retried
        assert atts[-1].status == AttemptStatus.completed and atts[-1].id == ep.completed_attempt_id
        assert len(atts) <= 2 and all(a.status != AttemptStatus.completed for a in atts[:-1])
        att = check_recording(db, ep.id)
        assert att.n_frames * 0.08 >= 5.0  # the episode lasted: the outage fell inside it
        if len(atts) == 1:
            assert att.stats["server"]["storage_refused"] >= 1
        # every assistant frame sent in that attempt is recorded once, in order, at increasing slots
        seqs, slots = [r.seq for r in asst], [r.slot for r in asst]
        assert seqs == list(range(len(seqs))) and seqs == b.sent[:len(seqs)]
        assert all(x < y for x, y in zip(slots, slots[1:]))
        assert len(b.sent) - len(seqs) <= 25  # at most the replies still in flight when it ended
