"""The benchmarks' hooks for what the API, the pages and live listeners show (server.core.benchmark,
"shown"): each benchmark's windows computed on the server from its own rules, its suites counted
and listed by the API whatever the benchmark, and its clip texts on the listen socket."""

from __future__ import annotations

import httpx
import pytest

from server.benchmarks.mpe.rules import N4_DEADLINE, N4_GAP, episode_windows, parse_timeline
from server.benchmarks.mpe.suite import Scenario, Turn
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
from tests.support.world import world_on

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
            mpe = bench["duplex-mpe"]
            assert {lb["key"]: lb["title"] for lb in mpe["labels"]}["T"] == "request to Aria"
            assert mpe["failure_titles"]["speech_in_silence"] == "speech in a silence window"
            assert [c["title"] for c in mpe["outcome_columns"]] == ["T response", "Silence windows", "N4"]
            assert [c["title"] for c in mpe["script_columns"]] == ["Speaker", "Label", "Text"]
            assert set(bench[MTR.name]["failure_titles"]) == set(bench[MTR.name]["failure_types"])


# --- what the pages draw: labels, outcome cells, room blocks, script rows, status in words -------

MPE_SCENARIO = Scenario(
    scenario_id="s1", pair_id="p1", condition="explicit", n_speakers=3, t_bucket="middle", attributes={},
    gold_answer="", turns=[Turn(idx=i, label=e.data["label"], speaker=e.data["speaker"], text=f"words {i}",
                                clip=f"clips/{i}.wav", duration_s=1.0)
                           for i, e in enumerate(x for x in MPE_EVENTS if x.type == "clip.start")])


def test_mpe_shown_timeline_has_its_room_blocks_and_script_rows():
    """Each clip is a block labelled by its turn's label, with speaker and words; each turn a row of
    the script table (speaker, label chip, words) with its window's verdict; without the script (no
    scenario) the blocks come from the events alone and there are no rows."""
    tl = MPE.shown_timeline(MPE_EVENTS, MPE_SEGMENTS, head=20 * S, end=20 * S, entry=None, outcome=None,
                            scenario=MPE_SCENARIO)
    assert [(b.idx, b.kind, b.who, b.text, b.start, b.end) for b in tl.blocks] == [
        (0, "N2", "A · N2", "words 0", 0, 2 * S), (1, "T", "B · T", "words 1", 2 * S, 4 * S),
        (2, "N4Q", "C · N4Q", "words 2", 8 * S, 10 * S), (3, "N4R", "A · N4R", "words 3", 13 * S, 15 * S),
        (4, "N1", "B · N1", "words 4", 16 * S, 18 * S)]
    assert tl.blocks[1].title == "B · T (request to Aria): words 1"
    assert [r.key for r in tl.rows] == [f"turn-{i}" for i in range(5)] and [r.start for r in tl.rows][:2] == [0, 2 * S]
    assert [c.text for c in tl.rows[1].cells] == ["B", "T", "words 1"] and tl.rows[1].cells[1].chip == "T"
    assert tl.rows[0].verdict == next(w.verdict for w in tl.windows if w.idx == 0)
    live = MPE.shown_timeline(MPE_EVENTS[:3], [], head=3 * S, end=None, entry=None, outcome=None, scenario=MPE_SCENARIO)
    assert live.blocks[-1].end is None and [r.now for r in live.rows] == [False, True, False, False, False]
    assert live.rows[2].start is None
    public = MPE.shown_timeline([Event(0, "clip.start", {"idx": 0})], [], head=S, end=None, entry=None, outcome=None,
                                scenario=None)
    assert [(b.idx, b.kind) for b in public.blocks] == [(0, "")] and public.rows == []


def test_mpe_outcome_cells_status_and_notes():
    """The run page's cells of an outcome, the scheduler's status in words and the paired
    comparison's sentence come from the benchmark."""
    out = MPE.live_outcome(MPE_EVENTS, MPE_SEGMENTS, 20 * S)
    cells = MPE.outcome_cells(out)
    assert len(cells) == len(MPE.outcome_columns) == 3 and cells[0].text == "fresh onset" and not cells[0].bad
    assert cells[1].text == f"{out.silence[0]}/{out.silence[1]}"
    assert MPE.status_text({"state": "playing", "idx": 1, "label": "T"}, MPE_SCENARIO) == \
        "Playing turn 2: B, T (request to Aria)"
    assert MPE.status_text({"state": "n4_gap", "remaining_s": 1.25}, None) == \
        "N4: 3 s pause before the resolution, 1.2 s left"
    pa = {"paired_addressing": {"m": {"n_pairs": 2, "explicit_rate": 0.0, "explicit_only": 0, "implicit_rate": 0.5,
                                      "diff_pp": -50.0, "p_mcnemar": 1.0}}}
    assert MPE.metric_notes(pa, "m") == ["Explicit vs implicit response presence over 2 pairs: 0.0% vs 50.0% "
                                         "(-50 pp, exact McNemar p = 1)"]
    assert MPE.metric_notes({}, "m") == [] and set(MPE.failure_titles) == set(MPE.failure_types)


def test_mtr_room_blocks_rows_and_cells(tmp_path):
    """MTR's room spans are blocks labelled by kind (the user's turn ends where its pause begins),
    its rounds the script rows (live or history, the feature, the user's words), its outcome the
    live rounds passed."""
    suite = _mtr_suite(tmp_path / "mtr")
    d = suite.dialogues[0]
    sc = scenario_of(d, "gt", 2)
    events = _drive(RoundScheduler(d, "gt", 2, {k: S for r in d.rounds for k, _ in r.clips()}))
    tl = MTR.shown_timeline(events, [], head=max(e.t for e in events), end=None, entry=None, outcome=None, scenario=sc)
    users = [b for b in tl.blocks if b.kind == "U"]
    assert users and users[0].who == "user · U" and users[0].text == d.rounds[0].user.text
    assert {b.kind for b in tl.blocks} <= {lb.key for lb in MTR.labels}
    assert [(r.key, r.cells[0].text) for r in tl.rows] == [("round-1", "history"), ("round-2", "live")]
    assert tl.rows[1].cells[1].text == f"R2 {d.rounds[1].feature}" and tl.rows[1].verdict == tl.windows[1].verdict
    out = MTR.live_outcome(events, [], max(e.t for e in events))
    assert [c.text for c in MTR.outcome_cells(out)] == ["0/1 rounds", f"R2 {d.rounds[1].feature}"]
    assert MTR.status_text({"state": "wait", "round": 2, "feature": "smooth"}, sc) == \
        "Round 2 (smooth): waiting for the model's reply"


def test_a_benchmark_without_shown_hooks_still_renders():
    """The defaults: a verdict cell, no labels, no blocks or rows, the state as its status line."""
    from server.core.benchmark import Outcome

    class Bare(type(MPE)):  # only the defaults of the "shown" section
        pass

    for hook in ("outcome_cells", "status_text", "room_blocks", "script_rows", "script_notes", "metric_notes"):
        setattr(Bare, hook, getattr(type(MPE).__mro__[1], hook))
    bare = Bare()
    assert [c.text for c in bare.outcome_cells(Outcome(source="live", failures=["x"], ok=False))] == ["failed"]
    assert bare.status_text({"state": "gap"}, None) == "gap"
    tl = bare.shown_timeline(MPE_EVENTS, [], head=20 * S, end=20 * S, entry=None, outcome=None, scenario=MPE_SCENARIO)
    assert tl.blocks == [] and tl.rows == [] and tl.windows
