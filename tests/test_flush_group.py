"""Group commit of the running attempts' flushes (DESIGN §8, server/engine/flush_group.py), on
SQLite and on PostgreSQL: the flushes that fall due within the window share one transaction, each
learns whether its own lease holds, and a flush whose rows the database rejects fails alone."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from server.db import AudioChunk, Database, Episode, EventRow, FrameRow, SegmentRow
from server.engine.flush_group import FlushGroup
from server.engine.leasing import Lease, cancel_run, create_run, lease_episode
from server.engine.recorder import Batch

OWNER = "s1"


def _leases(db: Database, suite, n: int, model: str = "m") -> tuple[str, list[Lease]]:
    run = create_run(db, team="local", model=model, suite_path=str(suite), clock="lockstep", limit=n)
    leases = [lease_episode(db, team="local", admin=False, model=model, clocks=["lockstep"], owner=OWNER,
                            bridge_id=f"b{i}", bridge_rate=24000, model_revision="", lease_s=5.0) for i in range(n)]
    assert None not in leases and {x.run_id for x in leases} == {run}
    return run, leases


def _batch(lease: Lease, seq0: int, n: int = 3) -> Batch:
    return Batch(frames=[{"attempt_id": lease.attempt_id, "direction": "room", "seq": seq0 + i, "slot": seq0 + i,
                          "sent_us": None, "arrived_us": None, "silent": True} for i in range(n)])


def _frames(db: Database, lease: Lease) -> list[int]:
    with db.session() as s:
        return list(s.scalars(select(FrameRow.seq).where(FrameRow.attempt_id == lease.attempt_id)
                              .order_by(FrameRow.seq)))


def _expiry(db: Database, lease: Lease) -> float:
    with db.session() as s:
        return s.scalar(select(Episode.lease_expires).where(Episode.id == lease.episode_id))


async def test_flushes_due_together_share_one_transaction(db, mini_suite):
    _, leases = _leases(db, mini_suite, 3)
    before = [_expiry(db, x) for x in leases]
    group = FlushGroup(db, OWNER, lease_s=60.0, window_s=0.2)
    held = await asyncio.gather(*(group.write(_batch(x, 0), x) for x in leases))
    assert held == [True, True, True]
    assert (group.transactions, group.flushes) == (1, 3)
    assert all(_frames(db, x) == [0, 1, 2] for x in leases)
    assert all(_expiry(db, x) > b + 30 for x, b in zip(leases, before))  # renewed to now + 60 s
    # the next flushes: a group of their own, in order after the first
    held = await asyncio.gather(*(group.write(_batch(x, 3), x) for x in leases))
    assert held == [True, True, True] and group.transactions == 2
    assert all(_frames(db, x) == list(range(6)) for x in leases)


async def test_each_flush_learns_of_its_own_lease(db, mini_suite):
    """A lease taken over and a cancelled run answer False for their own flushes only; every
    flush's rows are written all the same."""
    _, leases = _leases(db, mini_suite, 2)
    other_run, (other,) = _leases(db, mini_suite, 1, model="m2")
    with db.session() as s:  # another server took the first episode over
        s.get(Episode, leases[0].episode_id).lease_owner = "s2"
    cancel_run(db, other_run)
    group = FlushGroup(db, OWNER, lease_s=60.0, window_s=0.2)
    held = await asyncio.gather(*(group.write(_batch(x, 0), x) for x in [*leases, other]))
    assert held == [False, True, False] and group.transactions == 1
    assert all(_frames(db, x) == [0, 1, 2] for x in [*leases, other])


async def test_a_flush_the_database_rejects_fails_alone(db, mini_suite):
    """Rows that break a constraint (here: a frame of an attempt that does not exist) fail their
    own flush; the others of its group are written."""
    _, leases = _leases(db, mini_suite, 2)
    group = FlushGroup(db, OWNER, lease_s=60.0, window_s=0.2)
    ghost = dataclasses.replace(leases[1], attempt_id="no-such-attempt")
    results = await asyncio.gather(group.write(_batch(leases[0], 0), leases[0]), group.write(_batch(ghost, 0), ghost),
                                   return_exceptions=True)
    assert results[0] is True and isinstance(results[1], IntegrityError)
    assert _frames(db, leases[0]) == [0, 1, 2]
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(FrameRow).where(FrameRow.attempt_id == ghost.attempt_id)) == 0


async def test_hurry_writes_the_waiting_group_now(db, mini_suite):
    """An ending attempt does not wait out the window (here far longer than the test's patience)."""
    _, (lease,) = _leases(db, mini_suite, 1)
    group = FlushGroup(db, OWNER, lease_s=60.0, window_s=600.0)
    write = asyncio.ensure_future(group.write(_batch(lease, 0), lease))
    await asyncio.sleep(0.05)
    assert not write.done()  # waiting for others
    group.hurry()
    assert await asyncio.wait_for(write, 30) is True
    assert _frames(db, lease) == [0, 1, 2]


async def test_no_window_writes_what_is_due_in_the_same_turn(db, mini_suite):
    _, leases = _leases(db, mini_suite, 2)
    group = FlushGroup(db, OWNER, lease_s=60.0, window_s=0.0)
    assert await asyncio.gather(*(group.write(_batch(x, 0), x) for x in leases)) == [True, True]
    assert group.transactions == 1


async def test_every_table_of_a_flush_is_written_as_given(db, mini_suite):
    """The rows of each table (on PostgreSQL by COPY, server.db.insert_rows) come back as they were
    given, in order: JSON, NULLs, booleans, bytes, a column named by a reserved word (segments.end),
    and text that COPY's format must escape."""
    _, (lease,) = _leases(db, mini_suite, 1)
    a = lease.attempt_id
    odd = 'tab\there, new\nline, back\\slash, "quoted", ünïcode'
    events = [{"attempt_id": a, "t": 24_000 * i, "type": "turn_start", "data": {"who": odd, "n": i, "x": None}}
              for i in range(3)]
    frames = [{"attempt_id": a, "direction": d, "seq": i, "slot": i + 1, "sent_us": None if d == "room" else 10 * i,
               "arrived_us": 2 ** 40 + i, "silent": i % 2 == 0} for i in range(40) for d in ("room", "assistant")]
    chunks = [{"attempt_id": a, "track": "room", "idx": 0, "start_sample": 0, "n_samples": 3, "codec": "raw",
               "data": bytes(range(256)) + b"\\x00\n\t"}]
    segments = [{"attempt_id": a, "source": "live", "start": 10, "end": 20, "detector": odd}]
    group = FlushGroup(db, OWNER, lease_s=60.0, window_s=0.0)
    assert await group.write(Batch(events=[dict(r) for r in events], frames=[dict(r) for r in frames],
                                   chunks=[dict(r) for r in chunks], segments=[dict(r) for r in segments]), lease)
    with db.session() as s:
        for table, rows in ((EventRow, events), (FrameRow, frames), (AudioChunk, chunks), (SegmentRow, segments)):
            cols = [table.__table__.c[k] for k in rows[0]]
            got = [dict(r._mapping) for r in s.execute(select(*cols).order_by(table.id))]
            assert got == rows, table.__tablename__


async def test_a_long_track_is_written_in_chunks_encoded_ahead(db, mini_suite):
    """A track's audio becomes a chunk, encoded in the background, once CHUNK_SAMPLES of it wait
    (server.engine.recorder): whatever the flushes and the close cut, the chunks of each track are
    contiguous from sample 0 and decode to the audio added."""
    import numpy as np

    from server.core.audio import decode_audio
    from server.engine.outage import Outage
    from server.engine.recorder import CHUNK_SAMPLES, Flush, Recorder

    _, (lease,) = _leases(db, mini_suite, 1)
    group = FlushGroup(db, OWNER, lease_s=60.0, window_s=0.0)
    rec = Recorder(db, lease.attempt_id, Outage(5.0, time.monotonic))
    rng = np.random.default_rng(7)
    frame = 1920
    added = {"room": [], "assistant": []}
    per_chunk = CHUNK_SAMPLES // frame
    for i in range(3 * per_chunk + 25):  # flushes after frames 30 and 200 and the close cut 5 chunks a track:
        for track in added:
            pcm = (rng.normal(0, 3000, frame) * (track == "room" or i % 3 == 0)).astype(np.int16)
            added[track].append(pcm)
            rec.add_audio(track, pcm)
        if i in (30, 200):  # [0, 30], [31, 155] encoded ahead, [156, 200], [201, 325] encoded ahead, the rest
            assert await rec.flush(lambda b: group.write(b, lease)) is Flush.written
    await rec.close()
    with db.session() as s:
        for track, parts in added.items():
            rows = s.execute(select(AudioChunk.idx, AudioChunk.start_sample, AudioChunk.n_samples, AudioChunk.data)
                             .where(AudioChunk.attempt_id == lease.attempt_id, AudioChunk.track == track)
                             .order_by(AudioChunk.idx)).all()
            assert [r.idx for r in rows] == [0, 1, 2, 3, 4], track
            assert [r.n_samples // frame for r in rows] == [31, per_chunk, 200 - 30 - per_chunk, per_chunk,
                                                            3 * per_chunk + 25 - 201 - per_chunk]
            assert [r.start_sample for r in rows] == list(np.cumsum([0] + [r.n_samples for r in rows[:-1]]))
            audio = np.concatenate([decode_audio(r.data) for r in rows])
            assert np.array_equal(audio, np.concatenate(parts)), track
