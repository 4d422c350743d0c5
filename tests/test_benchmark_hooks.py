"""The benchmarks' hooks for what the API, the pages and live listeners show (server.core.benchmark,
"shown"): each benchmark's windows computed on the server from its own rules, its suites counted
and listed by the API whatever the benchmark, and its clip texts on the listen socket."""

from __future__ import annotations

import httpx
import pytest

from server.benchmarks.mpe.rules import N4_DEADLINE, N4_GAP, episode_windows, parse_timeline
from server.benchmarks.mtr.dataset.build import build_text_suite
from server.benchmarks.mtr.dataset.plan import plan_suite
from server.benchmarks.mtr.dataset.procedural import ProceduralGenerator
from server.benchmarks.mtr.dataset.sets import MIXED
from server.benchmarks.mtr.rules import judge_episode
from server.benchmarks.mtr.scheduler import RoundScheduler
from server.benchmarks.mtr.suite import scenario_of
from server.core.benchmark import Verdict
from server.core.events import Event
from server.engine.leasing import register_suite
from server.engine.live import detector_segments, timeline_message
from server.engine.registry import get_benchmark
from tests.api_fixtures import world_on

MPE, MTR = get_benchmark("duplex-mpe"), get_benchmark("mtr-duplexbench")
S = 24_000

# One Duplex-MPE episode's events: an N2 turn, T (the wait after it), N4Q then its N4R, an N1 turn.
MPE_EVENTS = [
    Event(0, "clip.start", {"idx": 0, "label": "N2", "speaker": "A"}), Event(2 * S, "clip.end", {"idx": 0}),
    Event(2 * S, "clip.start", {"idx": 1, "label": "T", "speaker": "B"}), Event(4 * S, "clip.end", {"idx": 1}),
    Event(4 * S, "t_wait.start", {}), Event(5 * S, "t_wait.onset", {"at": 5 * S}),
    Event(8 * S, "t_wait.end", {"reason": "silence"}),
    Event(8 * S, "clip.start", {"idx": 2, "label": "N4Q", "speaker": "C"}), Event(10 * S, "clip.end", {"idx": 2}),
    Event(13 * S, "clip.start", {"idx": 3, "label": "N4R", "speaker": "A"}), Event(15 * S, "clip.end", {"idx": 3}),
    Event(16 * S, "clip.start", {"idx": 4, "label": "N1", "speaker": "B"}), Event(18 * S, "clip.end", {"idx": 4}),
    Event(20 * S, "episode.end", {}),
]
MPE_SEGMENTS = [(5 * S, 7 * S), (10 * S + S // 2, 11 * S)]


def test_mpe_windows_are_the_rules_windows():
    """Finished: the N1-N3 windows are the rules' silence windows, the N4 window ends 3 s after N4Q
    and marks t_R + 2 s (the rules' N4 event), the T wait is the logged one; verdicts from the
    live detector until scored."""
    tl = MPE.timeline(MPE_EVENTS, MPE_SEGMENTS, head=20 * S, end=20 * S, entry=None, outcome=None)
    w = episode_windows(parse_timeline(MPE_EVENTS, 20 * S), MPE_SEGMENTS)
    silence = [x for x in tl.windows if x.kind == "silence"]
    assert [(x.idx, x.label, x.start, x.end) for x in silence] == [(s.turn_idx, s.label, s.start, s.end)
                                                                   for s in w.silence]
    [n4] = [x for x in tl.windows if x.kind == "n4"]
    [rule] = w.n4
    assert (n4.idx, n4.start, n4.end, n4.deadline) == (rule.q_idx, rule.q_start, rule.q_end + N4_GAP, rule.deadline)
    assert n4.deadline == rule.t_r + N4_DEADLINE and n4.verdict == Verdict(state="none", text="", scored=False)
    [t] = [x for x in tl.windows if x.kind == "t"]
    assert (t.idx, t.start, t.end, t.open) == (1, 4 * S, 8 * S, False)
    assert t.verdict == Verdict(state="quiet", text="answered, ended by silence", scored=False)
    assert all(x.verdict == Verdict(state="quiet", text="silent", scored=False) for x in silence)


def test_mpe_windows_grow_with_a_live_episode():
    """Growing: a window still open runs to the head; N4's window is 3 s past the head while N4Q
    plays, and gets its deadline once N4R starts."""
    upto = MPE_EVENTS[:8]  # N4Q has started, nothing after it
    tl = MPE.timeline(upto, [(5 * S, None)], head=9 * S, end=None, entry=None, outcome=None)
    [n4] = [x for x in tl.windows if x.kind == "n4"]
    assert (n4.open, n4.end, n4.deadline) == (True, 9 * S + N4_GAP, None)
    [n2] = [x for x in tl.windows if x.kind == "silence"]
    assert n2.open is False and n2.end == 2 * S
    with_r = MPE.timeline(MPE_EVENTS[:11], [], head=14 * S, end=None, entry=None, outcome=None)
    [n4] = [x for x in with_r.windows if x.kind == "n4"]
    assert (n4.open, n4.end, n4.deadline) == (False, 10 * S + N4_GAP, 13 * S + N4_DEADLINE)
    # the live listen message carries the same windows, its segments read from the detector's events
    vad = [(5 * S, "vad.onset", {"at": 5 * S, "seen_at": 5 * S}), (7 * S, "vad.offset", {"at": 7 * S, "seen_at": 7 * S})]
    raw = [(e.t, e.type, e.data) for e in MPE_EVENTS[:6]] + vad
    assert detector_segments(raw) == [(5 * S, 7 * S)]
    msg = timeline_message(MPE, raw, 7 * S)
    assert '"type":"timeline"' in msg and '"kind":"t"' in msg and '"answering' in msg


def _mtr_suite(root):
    suite, _ = build_text_suite(root, name=root.name, plans=plan_suite(2, 3, MIXED, 5), seed=5,
                                generator=ProceduralGenerator(5))
    return suite


def test_mtr_windows_are_its_rounds_judged_by_its_rules(tmp_path):
    """One window per round; a live round's verdict is the §12.4 rules' (here: no reply)."""
    suite = _mtr_suite(tmp_path / "mtr")
    d = suite.dialogues[0]
    sc = scenario_of(d, "gt", 2)
    lengths = {k: S for r in d.rounds for k, _ in r.clips()}
    events = _drive(RoundScheduler(d, "gt", 2, lengths))
    out = MTR.live_outcome(events, [], max(e.t for e in events))
    tl = MTR.timeline(events, [], head=max(e.t for e in events), end=None, entry=None, outcome=out)
    assert [w.idx for w in tl.windows] == [1, 2] and all(w.kind == "round" for w in tl.windows)
    assert tl.windows[0].verdict.text == "history (ground truth)"
    [rule] = judge_episode(events, [])
    assert tl.windows[1].verdict == Verdict(state="fail", text=rule.failure.replace("_", " "), scored=False)
    texts = MTR.clip_texts(sc)
    assert texts.text_of("user.start", {"round": 2, "part": 1}) == d.rounds[1].user.text
    assert texts.text_of("user.end", {"round": 2}) is None


def _drive(sched) -> list[Event]:
    """Every event of a scheduler run with a silent model, to its end."""
    events: list[Event] = []
    while (plan := sched.next_frame()) is not None:
        events += plan.events
        sched.observe((), (plan.seq + 1) * sched.frame_samples)
    return events


@pytest.mark.asyncio
async def test_the_api_lists_an_mtr_suite(tmp_path, mini_suite):
    """An MTR-DuplexBench suite registered to a team is counted and listed like a Duplex-MPE one."""
    suite = _mtr_suite(tmp_path / "mtr-api")
    async with world_on("sqlite", tmp_path, mini_suite) as w:
        suite_id = register_suite(w.db, suite, "alpha", MTR.name)
        async with httpx.AsyncClient(base_url=w.http, headers={"Authorization": f"Bearer {w.tokens['alpha']}"}) as a:
            d = (await a.get(f"/v1/suites/{suite_id}")).json()
            assert d["benchmark"] == MTR.name and d["available"] is True
            assert d["conditions"] == {"gt": sum(len(x.rounds) for x in suite.dialogues), "free": len(suite.dialogues)}
            assert sum(d["labels"].values()) == d["conditions"]["gt"] and d["label_kind"] == "rounds by feature"
            assert sum(d["groups"]["sets"].values()) == len(suite.dialogues)
            page = (await a.get(f"/v1/suites/{suite_id}/scenarios", params={"condition": "gt"})).json()
            assert page["total"] == len(suite.dialogues)
            first = page["items"][0]
            assert first["scenario_id"] == suite.dialogues[0].dialogue_id and first["condition"] is None
            assert first["labels"] == [r.feature for r in suite.dialogues[0].rounds]
            assert first["set"] == suite.dialogues[0].set and first["duration_s"] > 0
            r = await a.get(f"/v1/suites/{suite_id}/scenarios", params={"condition": "explicit"})
            assert r.status_code == 400 and "gt, free" in r.json()["error"]["message"]
            r = await a.get(f"/v1/suites/{suite_id}/scenarios", params={"condition": "both"})
            assert r.status_code == 422
            bench = {b["name"]: b for b in (await a.get("/v1/benchmarks")).json()}
            assert [q["key"] for q in bench["duplex-mpe"]["quantities"]][:2] == ["fresh_onset_rate",
                                                                                 "response_presence"]
            latency = next(q for q in bench[MTR.name]["quantities"] if q["key"] == "smooth.latency_s")
            assert latency["direction"] == "lower" and latency["format"] == "seconds"
