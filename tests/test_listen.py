"""The listen socket over real WebSockets: many listeners hear exactly what was recorded,
a stalled listener's queue stays bounded and never holds the episode up, a vanished one
is dropped, late joiners catch up, other replicas tail the database, errors are clean."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time

import httpx
import numpy as np
import pytest
import websockets
from sqlalchemy import select

from server.api.listen import LISTEN_INBOUND_BYTES
from server.app import BackgroundServer
from server.db import Attempt, Episode, EventRow, FrameRow
from server.engine.bundles import load_track
from server.engine.leasing import cancel_run, create_run
from tests.support.world import FRAME, Scripted, bridge, narrow_server_side, stalled, wait_run, world_on


class Heard:
    """Everything one listener received."""

    def __init__(self):
        self.json: list[dict] = []
        self.frames: dict[str, list[tuple[int, np.ndarray]]] = {"room": [], "assistant": []}
        self.close_code: int | None = None

    def of(self, type_: str) -> list[dict]:
        return [m for m in self.json if m["type"] == type_]

    def pcm(self, track: str) -> np.ndarray:
        return np.concatenate([p for _, p in self.frames[track]])

    def seqs(self, track: str) -> list[int]:
        return [s for s, _ in self.frames[track]]


def decode(data: bytes) -> tuple[str, int, np.ndarray]:
    version, kind, flags, seq = data[0], data[1], int.from_bytes(data[2:4], "little"), int.from_bytes(data[4:8], "little")
    assert version == 1 and kind in (1, 2)
    pcm = np.zeros(FRAME, np.int16) if flags & 1 else np.frombuffer(data[8:], "<i2").astype(np.int16)
    assert len(pcm) == FRAME
    return ("room" if kind == 1 else "assistant"), seq, pcm


async def listen(url: str, heard: Heard, *, until: str | None = None) -> Heard:
    async with websockets.connect(url, max_size=1 << 20) as ws:
        try:
            async for msg in ws:
                if isinstance(msg, bytes):
                    track, seq, pcm = decode(msg)
                    heard.frames[track].append((seq, pcm))
                else:
                    heard.json.append(json.loads(msg))
                    if until and heard.json[-1]["type"] == until:
                        ws.transport.abort()  # vanish: no close handshake
                        return heard
        except websockets.ConnectionClosed:
            pass
        heard.close_code = ws.close_code
    return heard


def db_events(db, attempt_id: str) -> list[tuple]:
    with db.session() as s:
        return [(e.t, e.type, e.data) for e in s.scalars(
            select(EventRow).where(EventRow.attempt_id == attempt_id).order_by(EventRow.id))]


def heard_events(h: Heard) -> list[tuple]:
    return [(m["t"], m["event"], {k: v for k, v in m["data"].items() if k != "text"}) for m in h.of("event")]


# What a team's listener may hear of a Duplex-MPE episode while its run is unfinished (api.md "What
# a team sees"): when the preamble and the clips played (by index), the model's speech as the
# detector saw it, the end. Written out here, not taken from the code under test.
TEAM_EVENTS = {"preamble.start": set(), "preamble.end": set(), "clip.start": {"idx"}, "clip.end": {"idx"},
               "vad.onset": {"at", "seen_at"}, "vad.offset": {"at", "seen_at"}, "episode.end": set()}


def team_view(events: list[tuple]) -> list[tuple]:
    return [(t, ty, {k: v for k, v in d.items() if k in TEAM_EVENTS[ty]}) for t, ty, d in events if ty in TEAM_EVENTS]


async def watch_hub(hub, episode_id: str, stats: dict, stop: asyncio.Event) -> None:
    """Record the worst backlog and drops of every listener while the episode is live."""
    while not stop.is_set():
        ch = hub.get(episode_id)
        for lst in list(ch.listeners) if ch else ():
            s = stats.setdefault(id(lst), {"dropped": 0, "backlog": 0})
            s["dropped"], s["backlog"] = max(s["dropped"], lst.dropped), max(s["backlog"], lst.max_backlog)
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_listeners_hear_everything_and_a_stalled_one_costs_nothing(kind, tmp_path, mini_suite, speech_frames):
    async with world_on(kind, tmp_path, mini_suite) as w:
        run = create_run(w.db, team="alpha", model="scripted", suite_path=str(w.suite), clock="lockstep", limit=1,
                         conditions=["implicit"])
        with w.db.session() as s:
            ep_id = s.scalars(select(Episode).where(Episode.run_id == run)).one().id
        path = f"/v1/episodes/{ep_id}/listen?token={w.tokens['admin']}"  # admins hear the script too
        url = w.ws + path
        early = [Heard() for _ in range(3)]
        team = Heard()  # the run's own team: no script while the run is unfinished
        tasks = [asyncio.create_task(listen(url, h)) for h in early]
        tasks.append(asyncio.create_task(listen(f"{w.ws}/v1/episodes/{ep_id}/listen?token={w.tokens['alpha']}", team)))
        vanish = asyncio.create_task(listen(url, Heard(), until="hello"))
        stuck = [await asyncio.to_thread(stalled, w.server.port, path) for _ in range(2)]
        while not all(h.of("waiting") for h in [*early, team]):  # queued: the socket says so and waits
            await asyncio.sleep(0.01)
        stats: dict = {}
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch_hub(w.hub, ep_id, stats, stop))
        late = Heard()
        t0 = time.monotonic()
        # It talks all the time: the T wait runs to its 60 s cap, so the stream (about 7 MB per
        # listener) outgrows what the kernel buffers of a stalled socket can take.
        async with bridge(w, Scripted("scripted", speech_frames, delay_s=0.002, always=True)) as task:
            while (ch := w.hub.get(ep_id)) is None or ch.t < 8 * 24000:  # join 8 s into the stream
                await asyncio.sleep(0.005)
            tasks.append(asyncio.create_task(listen(url, late)))
            await wait_run(w.db, run, [task])
        wall = time.monotonic() - t0
        await asyncio.wait_for(asyncio.gather(*tasks, vanish), 30)
        stop.set()
        await watcher
        for sock in stuck:
            sock.close()

        with w.db.session() as s:
            att = s.get(Attempt, s.get(Episode, ep_id).completed_attempt_id)
        room, assistant = load_track(w.db, att.id, "room"), load_track(w.db, att.id, "assistant")
        events = db_events(w.db, att.id)
        n = att.n_frames
        for h in early:
            kinds = [m["type"] for m in h.json]
            assert kinds[0] == "waiting" and h.json[0]["status"] == "queued" and kinds[1] == "hello"
            assert kinds[-2:] == ["end", "done"] and h.json[-2]["reason"] == "completed"
            assert h.json[-1]["status"] == "completed" and h.close_code == 1000
            hello = h.of("hello")[0]
            assert hello["attempt_id"] == att.id and hello["live"] is True and hello["t"] == 0
            # every frame of both tracks, in order, sample for sample what was recorded
            assert h.seqs("room") == list(range(n)) and h.seqs("assistant") == list(range(n))
            assert np.array_equal(h.pcm("room"), room) and np.array_equal(h.pcm("assistant"), assistant)
            assert heard_events(h) == events
            texts = {t["idx"]: t["text"] for t in s_turns(w.db, ep_id)}
            assert all(m["data"]["text"] == texts[m["data"]["idx"]] for m in h.of("event") if m["event"].startswith("clip."))
            states = [m["state"] for m in h.of("status")]
            assert {"preamble", "playing", "gap", "t_wait_silence"} <= set(states)
            caps = [m["cap_left_s"] for m in h.of("status") if m["state"] == "t_wait_silence"]
            assert caps == sorted(caps, reverse=True) and 58 < caps[0] <= 60 and caps[-1] < 1
            assert [m["t"] for m in h.of("status")] == sorted(m["t"] for m in h.of("status"))
        # the team heard every frame, but of the events only what its model heard anyway, and no state
        assert team.seqs("room") == list(range(n)) and np.array_equal(team.pcm("room"), room)
        assert np.array_equal(team.pcm("assistant"), assistant)
        assert heard_events(team) == team_view(events) and any(e[1] == "clip.start" for e in team_view(events))
        assert all("text" not in m["data"] for m in team.of("event"))
        assert team.of("status") and {m["state"] for m in team.of("status")} == {"withheld"}
        assert '"label"' not in json.dumps(team.json) and team.close_code == 1000
        # the late joiner got the history (events so far, loudness so far) and then every frame from there on
        hello = late.of("hello")[0]
        k = hello["t"] // FRAME
        assert k >= 100 and late.json[1]["type"] == "levels" and len(late.json[1]["room"]) == k
        assert late.seqs("room") == list(range(k, n)) and np.array_equal(late.pcm("room"), room[k * FRAME:])
        assert heard_events(late) == events and late.close_code == 1000
        # the stalled listeners were bounded and dropped audio instead of holding the episode up
        assert len(stats) >= 2
        worst = max(stats.values(), key=lambda s: s["dropped"])
        assert worst["dropped"] > 0 and worst["backlog"] <= w.hub.audio_max
        assert w.hub.get(ep_id) is None
        print(f"\nlockstep episode: {n} frames in {wall:.2f} s with 6 listeners (2 stalled, 1 vanished, 1 late); "
              f"stalled listeners dropped {sorted(s['dropped'] for s in stats.values())} frames")


def s_turns(db, episode_id):
    with db.session() as s:
        return s.get(Episode, episode_id).scenario["turns"]


async def test_realtime_pacing_with_stalled_listeners(tmp_path, mini_suite, speech_frames):
    """A realtime episode with listeners, two of them stalled: room frames still leave on their
    deadlines (figures printed; bench/listen.py compares against no listeners)."""
    async with world_on("sqlite", tmp_path, mini_suite) as w:
        run = create_run(w.db, team="alpha", model="scripted", suite_path=str(w.suite), clock="realtime", limit=1,
                         conditions=["explicit"])
        with w.db.session() as s:
            ep_id = s.scalars(select(Episode).where(Episode.run_id == run)).one().id
        path = f"/v1/episodes/{ep_id}/listen?token={w.tokens['alpha']}"
        heard = [Heard(), Heard()]
        tasks = [asyncio.create_task(listen(w.ws + path, h)) for h in heard]
        stuck = [await asyncio.to_thread(stalled, w.server.port, path) for _ in range(2)]
        for sock in stuck:
            narrow_server_side(w.server, sock)
        stats: dict = {}
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch_hub(w.hub, ep_id, stats, stop))
        async with bridge(w, Scripted("scripted", speech_frames)) as task:
            await wait_run(w.db, run, [task], timeout=90)
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        stop.set()
        await watcher
        for sock in stuck:
            sock.close()
        with w.db.session() as s:
            att = s.get(Attempt, s.get(Episode, ep_id).completed_attempt_id)
            sent = [(r.seq, r.sent_us) for r in s.scalars(select(FrameRow).where(
                FrameRow.attempt_id == att.id, FrameRow.direction == "room").order_by(FrameRow.seq))]
        assert [q for q, _ in sent] == list(range(att.n_frames))
        for h in heard:
            assert h.seqs("room") == list(range(att.n_frames)) and h.close_code == 1000
        assert max(s["dropped"] for s in stats.values()) > 0
        late_ms = [(us - seq * 80_000) / 1000 for seq, us in sent]
        assert min(late_ms) >= 0  # never early
        print(f"\nrealtime episode, 2 listeners + 2 stalled: {len(sent)} room frames sent "
              f"p50 {statistics.median(late_ms):.2f} ms, p99 {np.percentile(late_ms, 99):.2f} ms, "
              f"max {max(late_ms):.2f} ms after their deadlines")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_listen_errors_and_finished_episodes(kind, tmp_path, mini_suite, speech_frames):
    async with world_on(kind, tmp_path, mini_suite) as w:
        run = create_run(w.db, team="alpha", model="scripted", suite_path=str(w.suite), clock="lockstep", limit=1,
                         conditions=["explicit"])
        with w.db.session() as s:
            ep_id = s.scalars(select(Episode).where(Episode.run_id == run)).one().id
        base = f"{w.ws}/v1/episodes"
        cases = [(f"{base}/{ep_id}/listen", "unauthorized"), (f"{base}/{ep_id}/listen?token=mpe_bad", "unauthorized"),
                 (f"{base}/{ep_id}/listen?token={w.tokens['beta']}", "not_found"),
                 (f"{base}/nope/listen?token={w.tokens['alpha']}", "not_found")]
        errors = []
        for url, code in cases:
            h = await listen(url, Heard())
            assert [m["type"] for m in h.json] == ["error"] and h.json[0]["code"] == code, h.json
            assert h.close_code == 1008
            errors.append(h.json[0])
        assert errors[2] == errors[3]  # another team's episode looks like a missing one
        # the pages use signed URLs: no token in the URL, scoped to one episode, expiring
        async with httpx.AsyncClient(base_url=w.http, headers={"Authorization": f"Bearer {w.tokens['alpha']}"}) as c:
            signed = (await c.get(f"/v1/episodes/{ep_id}/listen-url")).json()
            other = create_run(w.db, team="alpha", model="y", suite_path=str(w.suite), clock="lockstep", limit=1)
            with w.db.session() as s:
                other_ep = s.scalars(select(Episode).where(Episode.run_id == other)).first().id
            assert (await c.get(f"/v1/episodes/{other_ep}/listen-url")).status_code == 200
        assert w.tokens["alpha"] not in signed["url"] and signed["expires_at"] <= time.time() + 301
        q = signed["url"].split("?", 1)[1]
        for url in (f"{base}/{other_ep}/listen?{q}", f"{base}/{ep_id}/listen?{q.replace('sig=', 'sig=0')}"):
            h = await listen(url, Heard())
            assert h.json[0]["code"] == "unauthorized" and h.close_code == 1008
        signed_listener = Heard()
        # a bearer header works too (for non-browser clients); too many listeners -> 1013
        w.limits.episode_listeners.limit = 1
        first = Heard()
        async with bridge(w, Scripted("scripted", speech_frames, delay_s=0.02)) as task:
            t1 = asyncio.create_task(listen(f"{base}/{ep_id}/listen?token={w.tokens['admin']}", first))
            while not first.of("hello"):
                await asyncio.sleep(0.01)
            second = await listen(f"{base}/{ep_id}/listen?token={w.tokens['alpha']}", Heard())
            assert second.json[-1]["code"] == "busy" and second.close_code == 1013
            w.limits.episode_listeners.limit = 8
            t2 = asyncio.create_task(listen(f"{w.ws}{signed['url']}", signed_listener))
            await wait_run(w.db, run, [task])
        await t1
        await t2
        assert first.json[-1] == {"type": "done", "status": "completed"}
        assert signed_listener.of("hello") and signed_listener.json[-1] == {"type": "done", "status": "completed"}
        # a finished episode: the socket says so and closes normally (the page then replays it)
        done = await listen(f"{base}/{ep_id}/listen?token={w.tokens['alpha']}", Heard())
        assert done.json == [{"type": "done", "status": "completed"}] and done.close_code == 1000
        run2 = create_run(w.db, team="alpha", model="x", suite_path=str(w.suite), clock="lockstep", limit=1)
        cancel_run(w.db, run2)
        with w.db.session() as s:
            ep2 = s.scalars(select(Episode).where(Episode.run_id == run2)).first().id
        gone = await listen(f"{base}/{ep2}/listen?token={w.tokens['alpha']}", Heard())
        assert gone.json == [{"type": "done", "status": "cancelled"}]


async def test_an_episode_on_another_server_is_tailed_from_the_database(tmp_path, mini_suite, speech_frames):
    async with world_on("postgres", tmp_path, mini_suite) as w:
        run = create_run(w.db, team="alpha", model="scripted", suite_path=str(w.suite), clock="lockstep", limit=1,
                         conditions=["implicit"])
        with w.db.session() as s:
            ep_id = s.scalars(select(Episode).where(Episode.run_id == run)).one().id
        async with BackgroundServer(w.settings) as other:  # a second replica on the same database
            h = Heard()
            async with bridge(w, Scripted("scripted", speech_frames, delay_s=0.02)) as task:
                while (ch := w.hub.get(ep_id)) is None or ch.t < 3 * 24000:
                    await asyncio.sleep(0.01)
                t = asyncio.create_task(listen(f"ws://127.0.0.1:{other.port}/v1/episodes/{ep_id}/listen"
                                               f"?token={w.tokens['alpha']}", h))
                await wait_run(w.db, run, [task])
            await asyncio.wait_for(t, 30)
            assert other.app.state.mpe.live.channels == {}
        with w.db.session() as s:
            att = s.get(Attempt, s.get(Episode, ep_id).completed_attempt_id)
        hello = h.of("hello")[0]
        assert hello["tail"] is True and hello["attempt_id"] == att.id
        room, assistant = load_track(w.db, att.id, "room"), load_track(w.db, att.id, "assistant")
        k = hello["t"] // FRAME
        assert 0 < k < att.n_frames and len(h.json[1]["room"]) == k
        assert h.seqs("room") == list(range(k, att.n_frames)) and np.array_equal(h.pcm("room"), room[k * FRAME:])
        assert np.array_equal(h.pcm("assistant"), assistant[h.seqs("assistant")[0] * FRAME:])
        assert heard_events(h) == team_view(db_events(w.db, att.id))  # the team's token: no script
        assert [m["type"] for m in h.json[-2:]] == ["end", "done"] and h.close_code == 1000


async def test_status_is_built_only_while_someone_listens():
    """Nobody listening, a room frame does not build the scheduler's status at all (lockstep runs
    hundreds of frames a second); a listener who joins gets it then, as of the last room frame, and
    from then on every STATUS_EVERY frames."""
    from server.engine.live import STATUS_EVERY, LiveHub

    hub = LiveHub(audio_max=8, json_max=50)
    ch = hub.open(episode_id="e", attempt_id="a", run_id="r", clock="lockstep")
    built = []

    def status() -> dict:
        built.append(len(built))
        return {"state": f"s{len(built)}"}

    frame = np.zeros(FRAME, np.int16)
    for seq in range(10):
        ch.room(seq, frame, (), status)
    assert built == []
    late = hub.new_listener()
    ch.attach(late)
    got = [json.loads(m) for m in await late.next_batch() if isinstance(m, str) and '"status"' in m]
    assert got == [{"type": "status", "t": 10 * FRAME, "t_s": 0.8, "state": "s1"}]
    for seq in range(10, 10 + 2 * STATUS_EVERY):
        ch.room(seq, frame, (), status)
    assert len(built) == 3


async def test_listener_queues_are_bounded():
    """The hub's core, driven directly: audio keeps the newest frames, status only the latest
    value, JSON overflow cuts the listener off, the final message comes after everything."""
    from server.benchmarks.mpe.scheduler import Event
    from server.benchmarks.mpe.suite import Scenario, Turn
    from server.engine.live import Listener, ListenerOverflow, LiveHub
    from server.engine.registry import get_benchmark

    hub = LiveHub(audio_max=8, json_max=5)
    scenario = Scenario.model_construct(turns=[Turn.model_construct(idx=0, text="hello there")])
    ch = hub.open(episode_id="e", attempt_id="a", run_id="r", clock="lockstep",
                  texts=get_benchmark(None).clip_texts(scenario))
    slow, fine = hub.new_listener(), hub.new_listener()
    ch.attach(slow)
    ch.attach(fine)
    frame = (np.arange(FRAME) % 200).astype(np.int16)
    for seq in range(100):
        ch.room(seq, frame, (), lambda: {"state": "gap"})
        ch.assistant(seq, np.zeros(FRAME, np.int16))
        if seq % 10 == 0:
            assert [decode(b)[1] for b in (await fine.next_batch()) if isinstance(b, bytes)][-1] == seq
    assert len(slow.audio) == 8 and slow.dropped == 192 and slow.max_backlog == 8
    assert [decode(b)[:2] for b in slow.audio][-2:] == [("room", 99), ("assistant", 99)]
    batch = await slow.next_batch()
    statuses = [json.loads(m) for m in batch if isinstance(m, str) and '"status"' in m]
    assert len(statuses) == 1 and statuses[0]["t"] == 100 * FRAME  # latest value only
    ch.events([Event(t=5, type="clip.start", data={"idx": 0, "label": "T", "speaker": "A"})])
    msg = json.loads((await slow.next_batch())[0])
    assert msg["event"] == "clip.start" and msg["data"]["text"] == "hello there"
    for i in range(10):
        ch.events([Event(t=6 + i, type="text", data={"seq": i, "text": "x"})])
        await fine.next_batch()  # this one keeps up
    with pytest.raises(ListenerOverflow):
        await slow.next_batch()
    ch.room(100, frame, (), lambda: {"state": "ended"})
    ch.end("completed")
    rest = await fine.next_batch()
    assert decode(rest[-1])[:2] == ("room", 100)  # queued items first ...
    final = await fine.next_batch()
    assert json.loads(final[0]) == {"type": "end", "reason": "completed", "t": 101 * FRAME}
    assert await fine.next_batch() is None and hub.get("e") is None
    late = Listener()
    ch.attach(late)  # joining an ended channel: history, then the end at once
    kinds = [json.loads(m)["type"] for m in await late.next_batch()] + [json.loads(m)["type"] for m in await late.next_batch()]
    assert kinds[0] == "hello" and kinds[-1] == "end"


async def test_a_listener_that_floods_the_socket_is_closed(tmp_path, mini_suite):
    """A listener has nothing to say: past LISTEN_INBOUND_BYTES of what it sends, the socket closes
    with ``too_much_data`` (1008) while the flood is still coming (not read for ever)."""
    async with world_on("sqlite", tmp_path, mini_suite) as w:
        run = create_run(w.db, team="alpha", model="nobody", suite_path=str(w.suite), clock="lockstep", limit=1,
                         conditions=["explicit"])
        with w.db.session() as s:
            ep_id = s.scalars(select(Episode).where(Episode.run_id == run)).one().id
        piece, sent, said = b"\0" * 16384, 0, []
        async with websockets.connect(f"{w.ws}/v1/episodes/{ep_id}/listen?token={w.tokens['alpha']}") as ws:
            said.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
            with pytest.raises(websockets.ConnectionClosed):
                while sent < 64 * LISTEN_INBOUND_BYTES:
                    await ws.send(piece)
                    sent += len(piece)
                    await asyncio.sleep(0)
                pytest.fail(f"{sent} bytes sent and the socket is still open")
            with contextlib.suppress(websockets.ConnectionClosed):
                while True:
                    said.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
        assert said[0]["type"] == "waiting", said
        assert said[-1]["type"] == "error" and said[-1]["code"] == "too_much_data", said
        assert ws.close_code == 1008 and sent < 16 * LISTEN_INBOUND_BYTES
