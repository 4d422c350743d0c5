"""Turn segmentation (``mpe segment``, docs/segmentation.md): the pure voting and clustering on literal
inputs, the offline rules, windows and continuations, the evaluation's matching, the offline backend
on a stereo recording made of real clips (real detector), the Claude backend against the local fake
of the Messages API, the input readers and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from server.benchmarks.mtr.segmentation.claude import ClaudeProposer, parse_turns
from server.benchmarks.mtr.segmentation.evaluation import audible_extent, score_turns
from server.benchmarks.mtr.segmentation.inputs import read_recording, recording_input
from server.benchmarks.mtr.segmentation.offline import OfflineProposer, offline_turns
from server.benchmarks.mtr.segmentation.schema import Proposal, ProposedTurn, SegmentInput, Span, Turn, Votes
from server.benchmarks.mtr.segmentation.segment import segment
from server.benchmarks.mtr.segmentation.voting import cluster, iou, median_sample, pool, vote
from server.benchmarks.mtr.segmentation.windows import continuations, response_windows
from server.benchmarks.mtr.suite import Suite
from server.core.timebase import STREAM_RATE
from server.scoring.errors import BadRecording, ScoringError
from tests.support.anthropic_peer import FakeAnthropic, Reply

S = STREAM_RATE


def sp(a: float, b: float) -> Span:
    return Span(start=round(a * S), end=round(b * S))


def prop(run: int, *turns: tuple[float, float], usable: bool = True) -> Proposal:
    return Proposal(run=run, usable=usable, turns=[ProposedTurn(start=round(a * S), end=round(b * S))
                                                   for a, b in turns])


def spans(turns) -> list[tuple[int, int]]:
    return [(t.start, t.end) for t in turns]


# --------------------------------------------------------------------------- voting (pure)


def test_iou_and_median_exact():
    assert iou(Span(start=0, end=10), Span(start=5, end=15)) == pytest.approx(1 / 3)
    assert iou(Span(start=0, end=10), Span(start=10, end=20)) == 0
    assert iou(Span(start=3, end=3), Span(start=3, end=3)) == 1
    # 30 % exactly joins: [0, 10) and [7, 10) -> 3/10
    assert len(cluster(pool([Proposal(run=0, turns=[ProposedTurn(start=0, end=10)]),
                             Proposal(run=1, turns=[ProposedTurn(start=7, end=10)])]))) == 1
    assert len(cluster(pool([Proposal(run=0, turns=[ProposedTurn(start=0, end=10)]),
                             Proposal(run=1, turns=[ProposedTurn(start=8, end=10)])]))) == 2  # 20 %: apart
    assert median_sample([5, 1, 3]) == 3
    assert median_sample([1, 2, 4, 10]) == 3  # (2 + 4) // 2
    assert median_sample([1, 2]) == 1  # 1.5 rounded down to a whole sample


def test_odd_n_majority_and_median_boundaries():
    props = [prop(0, (1.0, 3.0), (10.0, 12.0)), prop(1, (1.2, 3.2), (10.0, 12.4)),
             prop(2, (0.8, 2.8)), prop(3, (1.1, 3.1), (20.0, 21.0)), prop(4, (1.0, 3.0))]
    r = vote(props)
    assert r.min_support == 3 and r.usable == 5
    assert spans(r.turns) == [(round(1.0 * S), round(3.0 * S))]  # medians of 0.8,1,1,1.1,1.2 / 2.8,3,3,3.1,3.2
    assert r.turns[0].votes.support == 5 and r.turns[0].votes.runs == [0, 1, 2, 3, 4]
    # 2 of 5 and 1 of 5: minorities, dropped but reported with their votes
    assert sorted((t.votes.support, t.votes.runs) for t in r.dropped) == [(1, [3]), (2, [0, 1])]
    dropped = next(t for t in r.dropped if t.votes.support == 2)
    assert (dropped.start, dropped.end) == (10 * S, round(12.2 * S))  # even count: mean of the two


def test_even_n_tie_is_dropped_and_companion_rule_keeps_it():
    props = [prop(0, (1.0, 3.0)), prop(1, (1.0, 3.0)), prop(2, (1.0, 3.0)), prop(3), prop(4), prop(5)]
    assert vote(props).turns == []  # 3 of 6 is no strict majority
    assert [t.votes.support for t in vote(props).dropped] == [3]
    assert len(vote(props, min_support=2).turns) == 1  # the companion code's ">= 2 members"
    props[3] = prop(3, (1.1, 3.0))
    kept = vote(props).turns
    assert [t.votes.support for t in kept] == [4]  # 4 of 6
    with pytest.raises(ValueError):
        vote(props, min_support=0)


def test_unusable_runs_cast_no_votes():
    props = [prop(0, (1.0, 3.0)), prop(1, (1.0, 3.0)), prop(2, usable=False), prop(3, usable=False)]
    r = vote(props)
    assert r.usable == 2 and r.min_support == 2 and len(r.turns) == 1


def test_candidate_fitting_two_clusters_joins_the_best_then_the_earlier():
    # run 0 makes clusters A = [0, 10) and B = [2, 12) (one vote per run keeps them apart); run 1's
    # [3, 13) fits both: A by 7/13, B by 9/11 -> B
    props = [Proposal(run=0, turns=[ProposedTurn(start=0, end=10), ProposedTurn(start=2, end=12)]),
             Proposal(run=1, turns=[ProposedTurn(start=3, end=13)])]
    cl = cluster(pool(props))
    assert [sorted((m.run, m.turn.start) for m in c.members) for c in cl] == [[(0, 0)], [(0, 2), (1, 3)]]
    # an equal IoU with both: the earlier cluster. A = [0, 2), B = [0, 6); [1, 3) overlaps each by 1/3
    props = [Proposal(run=0, turns=[ProposedTurn(start=0, end=2), ProposedTurn(start=0, end=6)]),
             Proposal(run=1, turns=[ProposedTurn(start=1, end=3)])]
    cl = cluster(pool(props))
    assert [sorted((m.run, m.turn.end) for m in c.members) for c in cl] == [[(0, 2), (1, 3)], [(0, 6)]]


def test_one_vote_per_run_and_order_independence():
    # run 0 splits a turn in two halves that both overlap the cluster: one vote, the other half its own
    props = [prop(0, (1.0, 2.0), (2.0, 3.0)), prop(1, (1.0, 3.0)), prop(2, (1.0, 3.0))]
    r = vote(props)
    assert [t.votes.runs for t in r.turns] == [[0, 1, 2]] and [t.votes.runs for t in r.dropped] == [[0]]
    shuffled = [props[2], props[0], props[1]]
    assert vote(shuffled) == r


def test_windows_and_continuations():
    turns = [Turn(index=i, start=a, end=b, votes=Votes(runs=[0, 1, 2], starts=[a] * 3, ends=[b] * 3, support=3,
                                                         continuation_votes=c))
             for i, (a, b, c) in enumerate([(1 * S, 3 * S, 2), (8 * S, 9 * S, 1), (20 * S, 22 * S, 0)])]
    w = response_windows(turns, 30 * S)
    assert [(x.start, x.end) for x in w] == [(1 * S, 9 * S), (8 * S, 22 * S), (20 * S, 30 * S)]
    model = [sp(3.4, 8.4), sp(9.3, 21.0)]  # the reply to turn 0 runs 0.4 s into turn 1
    c = continuations(turns, model)
    assert [(x.turn, x.next_turn_start, x.response_end, x.votes) for x in c] == [(0, 8 * S, round(8.4 * S), 2)]
    # turn 1's reply also runs on, but 1 of 3 runs flagged it: no majority, no continuation


def test_offline_rules_on_literal_segments():
    user = [sp(0.5, 3.0),            # turn 1
            sp(5.0, 5.5),            # a backchannel inside the reply
            sp(6.0, 8.0),            # a background voice the model talks through
            sp(15.0, 17.0), sp(19.5, 21.0),  # turn 2 with a 2.5 s pause, the model silent
            sp(30.0, 32.0), sp(34.5, 36.5)]  # turn 3, then a barge-in: the model stops within 1 s
    model = [sp(3.3, 13.0), sp(21.4, 28.0), sp(32.3, 35.0), sp(37.0, 40.0)]
    assert offline_turns(user, model) == [sp(0.5, 3.0), sp(15.0, 21.0), sp(30.0, 32.0), sp(34.5, 36.5)]
    # a model that talks all along: it replies to nothing, so a voice it talks through is a turn
    assert offline_turns([sp(1.0, 3.0), sp(9.0, 11.0)], [sp(0.0, 30.0)]) == [sp(1.0, 3.0), sp(9.0, 11.0)]
    p = OfflineProposer().propose(SegmentInput(n_samples=41 * S, user=user, model=model), 0)
    assert [t.continuation for t in p.turns] == [False, False, True, False]


def test_matching_is_one_to_one_and_maximal():
    true = [sp(1.0, 3.0), sp(3.3, 5.0)]
    # found[0] fits both true turns, found[1] only the first: greedy on the first would lose one
    found = [sp(1.2, 3.2), sp(1.0, 3.4)]
    s = score_turns(true, found, S // 2)
    assert s.matched == 1
    found = [sp(1.2, 3.45), sp(3.0, 4.6)]
    s = score_turns(true, found, S // 2)
    assert s.matched == 2 and s.f1 == 1.0 and s.mae_s == pytest.approx((0.2 + 0.45 + 0.3 + 0.4) / 4)
    assert score_turns(true, [sp(1.0, 3.51)], S // 2).matched == 0  # an end 0.51 s off: no match
    assert score_turns(true, [], S // 2).f1 == 0 and score_turns([], [], S // 2).f1 == 1.0


def test_claude_reply_parsing():
    assert parse_turns('Here: {"turns": [{"start": 1.5, "end": 2, "continuation": true}]} done', 3 * S) == [
        ProposedTurn(start=round(1.5 * S), end=2 * S, continuation=True)]
    for bad in ("no json at all", '{"turns": "x"}', '{"turns": [{"start": 2, "end": 1}]}',
                '{"turns": [{"start": "a", "end": 1}]}', '{"turns": [{"start": 1, "end": 99}]}'):
        with pytest.raises(ValueError):
            parse_turns(bad, 3 * S)


# --------------------------------------------------------------------------- real clips


@pytest.fixture(scope="module")
def recording(mtr_mini, tmp_path_factory):
    """A stereo recording of real mtr-mini clips with known turns: a turn the model answers while the
    user backchannels, a turn with a 2.5 s pause and a background voice during its reply, a turn whose
    reply the user interrupts (a barge-in the model yields to, 0.4 s in), and the answer to it."""
    suite = Suite.load(mtr_mini)

    def clip(name: str) -> np.ndarray:
        return suite.load_clip(f"clips/{name}.wav")

    user, model, truth = [], [], []

    def place(track, t: float, pcm):
        track.append((round(t * S), pcm))
        return t + len(pcm) / S

    def turn(t0: float, first: str, *rest: tuple[float, str]) -> float:
        pcm = clip(first)
        lead = audible_extent(pcm)[0]
        t = place(user, t0, pcm)
        for gap, name in rest:
            pcm = clip(name)
            t = place(user, t + gap, pcm)
        truth.append(Span(start=round(t0 * S) + lead, end=round(t * S) - audible_extent(pcm)[1]))
        return t

    t = turn(0.5, "d0001/r01_user")
    r = place(model, t + 0.4, clip("d0001/r01_assistant"))
    place(user, t + 2.0, clip("d0002/r01_backchannel0"))
    t = turn(r + 1.0, "d0001/r03_user", (2.5, "d0001/r03_continuation"))
    r = place(model, t + 0.4, clip("d0001/r03_assistant"))
    place(user, t + 1.4, clip("d0001/r04_background"))
    t = turn(r + 1.0, "d0001/r02_user")
    reply = clip("d0001/r02_assistant")[: round(2.4 * S)]  # cut 0.4 s into the barge-in
    place(model, t + 0.4, reply)
    t = turn(t + 2.4, "d0001/r02_barge_in")
    end = place(model, t + 0.4, clip("d0001/r02_barge_in_response")) + 1.0
    n = round(end * S)

    def mix(items):
        out = np.zeros(n, dtype=np.int32)
        for at, pcm in items:
            out[at:at + len(pcm)] += pcm
        return np.clip(out, -32768, 32767).astype(np.int16)

    u, m = mix(user), mix(model)
    d = tmp_path_factory.mktemp("segment-rec")
    sf.write(str(d / "stereo.wav"), np.stack([u, m], axis=1), S, subtype="PCM_16")
    sf.write(str(d / "swapped.wav"), np.stack([m, u], axis=1), S, subtype="PCM_16")
    for name, x in (("user16k.wav", u), ("model16k.wav", m)):  # two mono files at 16 kHz
        y = soxr.resample(x.astype(np.float32) / 32768, S, 16000)
        sf.write(str(d / name), np.clip(y * 32768, -32768, 32767).astype(np.int16), 16000, subtype="PCM_16")
    sf.write(str(d / "mono.wav"), u, S, subtype="PCM_16")
    return {"dir": d, "truth": truth, "user": u, "model": m, "cut_at": round((truth[3].start / S + 0.4) * S)}


def test_offline_backend_on_real_clips(recording):
    inp = recording_input(read_recording([recording["dir"] / "stereo.wav"]))
    assert len(inp.user) >= 6  # the backchannel, the pause and the background voice were all heard
    res = segment(inp, OfflineProposer(), n=6)
    found = [Span(start=t.start, end=t.end) for t in res.turns]
    s = score_turns(recording["truth"], found)
    assert s.f1 == 1.0, (recording["truth"], found)
    assert s.mae_s < 0.15
    assert all(t.votes.support == 6 and len(set(t.votes.starts)) == 1 for t in res.turns)  # n identical runs
    assert [(w.start, w.end) for w in res.windows] == [(a.start, b.end) for a, b in zip(res.turns, res.turns[1:])] \
        + [(res.turns[-1].start, res.n_samples)]
    assert [c.turn for c in res.continuations] == [2]  # the reply the barge-in cut into
    assert abs(res.continuations[0].response_end - recording["cut_at"]) < S // 4


def test_bundle_input_takes_its_model_segments(recording, tmp_path):
    sf.write(str(tmp_path / "room.wav"), recording["user"], S, subtype="PCM_16")
    sf.write(str(tmp_path / "assistant.wav"), recording["model"], S, subtype="PCM_16")
    (tmp_path / "episode.json").write_text(json.dumps({"episode_id": "e1", "events": [], "turns": []}))
    given = [[S, 2 * S], [5 * S, 9 * S]]
    (tmp_path / "segments.json").write_text(json.dumps(given))
    rec = read_recording([tmp_path])
    assert [[s.start, s.end] for s in rec.model_segments] == given
    assert np.array_equal(rec.user, recording["user"])
    with pytest.raises(BadRecording, match="--swap"):
        read_recording([tmp_path], swap=True)


# --------------------------------------------------------------------------- Claude against the fake


def _reply(turns, cont=()) -> str:
    return json.dumps({"turns": [{"start": a, "end": b, "continuation": i in cont} for i, (a, b) in enumerate(turns)]})


LITERAL = SegmentInput(n_samples=30 * S, user=[sp(1.0, 3.0), sp(5.0, 5.4), sp(10.0, 12.0)],
                       model=[sp(3.3, 9.0), sp(12.4, 20.0)], source="literal")


def test_claude_backend_votes_retries_and_caches(tmp_path):
    good = [(1.0, 3.0), (10.0, 12.0)]
    with FakeAnthropic(api_key="k") as fake:
        fake.push("I'd rather not segment this.",  # run 0, attempt 0: unreadable -> asked again
                  _reply([(1.02, 3.0), (10.0, 12.1)]),
                  Reply(status=529, headers={"retry-after-ms": "10"}),  # overloaded: the SDK retries
                  _reply(good), _reply([(0.98, 3.04), (10.0, 12.0)], cont=(0,)),
                  _reply(good + [(5.0, 5.4)]), _reply(good + [(5.0, 5.4)]), _reply([(1.0, 12.0)]))
        p = ClaudeProposer("claude-x", api_key="k", base_url=fake.url, cache_dir=tmp_path, max_retries=2)
        res = segment(LITERAL, p, n=6)
        bodies = [r.body for r in fake.message_requests if r.body]
        assert len(bodies) == 8  # 7 replies and the 529 the SDK retried
        assert {b["temperature"] for b in bodies} == {1.0} and {b["model"] for b in bodies} == {"claude-x"}
        assert "USER: (speech)" in bodies[0]["messages"][0]["content"]
        assert "backchannels" in bodies[0]["system"]
        assert res.proposals[0].raw[0].startswith("I'd rather") and len(res.proposals[0].raw) == 2
        # the backchannel "turn" (2 of 6) and the merged one (1 of 6) are dropped; both real turns kept
        assert [(t.start_s, t.end_s) for t in res.turns] == [(1.0, 3.0), (10.0, 12.0)]
        assert [t.votes.support for t in res.turns] == [5, 5] and res.min_support == 4  # run 5 supports neither
        assert sorted(t.votes.support for t in res.dropped) == [1, 2]
        assert res.continuations == []  # 1 of 6 flagged it
        assert res.backend.name == "claude" and res.backend.temperature == 1.0 and not res.backend.deterministic
        # the same request again: every reply from the cache, no call
        again = segment(LITERAL, ClaudeProposer("claude-x", api_key="k", base_url=fake.url, cache_dir=tmp_path), n=6)
        assert len(fake.message_requests) == 8
        assert again.turns == res.turns and all(pr.cached for pr in again.proposals)


def test_openai_backend_six_proposals_vote_as_the_paper(tmp_path, monkeypatch):
    """``--backend openai:gpt-4o`` (the paper's): six proposals over the Chat Completions peer, a 429 then
    200 retried, clustered and kept by strict majority; a rerun asks nothing."""
    from server.benchmarks.mtr.segmentation.backends import make_proposer
    from tests.support.llm_peers import FakeOpenAI
    from tests.support.llm_peers import Reply as OReply

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    good = [(1.0, 3.0), (10.0, 12.0)]
    with FakeOpenAI(api_key="k") as peer:
        peer.push(OReply(status=429, text="Rate limit reached", headers={"retry-after": "0"}),
                  *[_reply(good)] * 4, _reply(good + [(5.0, 5.4)]), _reply([(1.0, 12.0)]))
        p = make_proposer(f"openai:gpt-4o@{peer.url}", cache_dir=tmp_path, max_retries=2)
        res = segment(LITERAL, p, n=6)
        assert peer.calls == 7 and {r.body["model"] for r in peer.requests} == {"gpt-4o"}
        assert {r.body["temperature"] for r in peer.requests} == {1.0}
        assert [(t.start_s, t.end_s) for t in res.turns] == good and res.min_support == 4
        assert (res.backend.name, res.backend.model) == ("openai", "gpt-4o")
        again = segment(LITERAL, make_proposer(f"openai:gpt-4o@{peer.url}", cache_dir=tmp_path), n=6)
        assert peer.calls == 7 and again.turns == res.turns


def test_claude_backend_unusable_replies_fail_clearly(tmp_path):
    with FakeAnthropic(api_key="k") as fake:
        fake.push(*["no turns here"] * 6)
        p = ClaudeProposer("claude-x", api_key="k", base_url=fake.url, cache_dir=None, max_attempts=3)
        with pytest.raises(ScoringError, match="none of the 2 proposals.*unreadable reply"):
            segment(LITERAL, p, n=2)
        p = ClaudeProposer("claude-x", api_key="wrong", base_url=fake.url, max_retries=0)
        with pytest.raises(ScoringError, match="HTTP 401"):
            segment(LITERAL, p, n=1)


# --------------------------------------------------------------------------- the CLI


def mpe_segment(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``mpe segment ARGS`` in its own process."""
    env = dict(os.environ, MPE_DATA_DIR=str(tmp_path / "data"))
    env.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "server.cli", "segment", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def mpe_segment_here(monkeypatch, capsys, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """``mpe segment ARGS`` through the same entry point, in this process: (exit code, stdout, stderr)."""
    from server.cli import main

    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(sys, "argv", ["mpe", "segment", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main()
    out, err = capsys.readouterr()
    return exit_.value.code or 0, out, " ".join(err.split())  # the console wraps long lines


def test_cli_stereo_and_two_mono_files(recording, tmp_path, monkeypatch, capsys):
    d = recording["dir"]
    before = (d / "stereo.wav").read_bytes()
    p = mpe_segment(tmp_path, str(d / "stereo.wav"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    stereo = [Span(start=t["start"], end=t["end"]) for t in doc["turns"]]
    assert score_turns(recording["truth"], stereo).f1 == 1.0
    assert doc["n"] == 6 and doc["backend"]["name"] == "offline" and len(doc["windows"]) == 4
    out = tmp_path / "seg.json"
    code, _, err = mpe_segment_here(monkeypatch, capsys, tmp_path, str(d / "user16k.wav"), str(d / "model16k.wav"),
                                    "--n", "3", "--out", str(out))
    assert code == 0, err
    mono = json.loads(out.read_text())
    assert mono["n"] == 3 and mono["min_support"] == 2
    assert score_turns(stereo, [Span(start=t["start"], end=t["end"]) for t in mono["turns"]], S // 10).f1 == 1.0
    code, printed, err = mpe_segment_here(monkeypatch, capsys, tmp_path, str(d / "swapped.wav"), "--swap")
    assert code == 0, err
    assert [(t["start"], t["end"]) for t in json.loads(printed)["turns"]] == [(t.start, t.end) for t in stereo]
    assert (d / "stereo.wav").read_bytes() == before


def test_cli_bad_input_errors(recording, tmp_path, monkeypatch, capsys):
    d = recording["dir"]
    p = mpe_segment(tmp_path, str(d / "mono.wav"))  # one real process: exit code and message
    assert p.returncode == 2 and "has 1 channel, expected stereo" in " ".join(p.stderr.split())
    assert "Traceback" not in p.stderr
    cases = [((str(d / "stereo.wav"), str(d / "user16k.wav")), "has 2 channels, expected a mono file"),
             ((str(tmp_path / "missing.wav"),), "no such file"),
             ((str(d / "a.wav"), str(d / "b.wav"), str(d / "c.wav")), "give one or two inputs, got 3"),
             ((str(d / "stereo.wav"), "--out", str(d / "stereo.wav")), "inputs are never written"),
             ((str(d / "stereo.wav"), "--backend", "gpt"), "unknown segmentation backend 'gpt'")]
    for args, message in cases:
        code, _, err = mpe_segment_here(monkeypatch, capsys, tmp_path, *args)
        assert code == 2 and message in err, (args, err)


def test_asr_transcripts_reach_the_claude_prompt(recording):
    """Optional ASR (faster-whisper, the scoring's default backend): each speech segment's words go
    into the prompt on its line; without them the line says (speech)."""
    pytest.importorskip("faster_whisper")
    from server.benchmarks.mtr.segmentation.claude import transcript_lines
    from server.benchmarks.mtr.segmentation.inputs import Recording
    from server.scoring.asr import FasterWhisperASR

    n = round(recording["truth"][0].end + 2.5 * S)  # the first turn and the start of its reply
    rec = Recording(recording["user"][:n], recording["model"][:n], "cut")
    inp = recording_input(rec, asr=FasterWhisperASR())
    assert inp.utterances[0].channel == "user" and any(u.channel == "model" for u in inp.utterances)
    assert "stalemate" in inp.utterances[0].text.lower()  # "... tell me what a stalemate is?"
    lines = transcript_lines(inp)
    assert lines[0].startswith(f"[{inp.user[0].start / S:.2f}-") and "USER: " in lines[0] and "stalemate" in lines[0]
    assert "MODEL: " in lines[1] and "(speech)" not in lines[1]
    assert transcript_lines(inp.model_copy(update={"utterances": []}))[0].endswith("USER: (speech)")
