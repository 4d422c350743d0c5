"""The cascade bridge end to end through the real server: tiny suites of real piper speech built
here, the real server and database, the cascade (``llm=rule``, the offline decider: not a language
model) connected over a real WebSocket in process, lockstep. The Duplex-MPE episode checks whom it
answers and its barge-in stop, measured on the recorded assistant track with the real detector; the
MTR-DuplexBench dialogue (two-party mode, ``gt`` history) checks a pause and backchannels with the
§12.4 rules. Bridge-level cases without the server are in test_cascade_bridge.py."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from server.benchmarks.mpe.rules import episode_windows, parse_timeline
from server.benchmarks.mpe.suite import Preamble, Scenario, SuiteMeta, Turn, write_suite
from server.benchmarks.mtr.suite import Dialogue, MTRMeta, Suite, check_suite
from server.cascade.bridge import Cascade
from server.cli.bridges import create_bridge
from server.core.detector import SpeechDetector
from server.core.events import Event
from server.db import Episode
from server.engine.leasing import create_run
from server.scoring.loading import load_db_episode
from server.scoring.runner import ScoreOptions, score_run
from tests.support.world import bridge, wait_run, world_on

RATE, F = 24_000, 1920
LONG = "Ben, the weather report says rain all afternoon, and then a dry and clear evening by the lake."
SCRIPT = [("A", "N2", LONG), ("B", "T", "{aria}what does the weather report say?"),
          ("C", "N2", "Ben, can you pass the salt?"), ("A", "N4Q", "Aria, what will the weather be this evening?"),
          ("B", "N4R", "It will be dry, I checked."), ("C", "N3", "Hmm, I wonder about tomorrow.")]
LOCKSTEP_TIMEOUT_S = 30.0  # the server default: the cascade transcribes and speaks inside a frame
CLIP_EOU_MS = 400  # below the scheduler's 0.5 s between clips: each clip is an utterance of its own
PAUSE_HOLD_MS, BACKCHANNEL_PASS_MS = 4000, 1200  # longer than this dialogue's pause and backchannels
STATED_STOP_MS = 500 + 64 + 80  # docs/bridges.md: barge_in_ms + the detector's look-ahead + one frame


def _writer(root: Path, say):
    def clip(rel: str, text: str) -> tuple[str, float]:
        pcm = say(text)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(root / rel), pcm, RATE, subtype="PCM_16")
        return rel, len(pcm) / RATE
    return clip


def build_room_suite(root: Path, say) -> Path:
    """One Duplex-MPE pair: a long line the extractive answers repeat, the request to Aria (T), a turn
    to someone else, a question to Aria (N4Q) that a person resolves while she answers (N4R)."""
    clip = _writer(root, say)
    pre, pre_d = clip("clips/preamble.wav", "This is a kitchen with Aria in it.")
    scenarios = []
    for cond in ("explicit", "implicit"):
        turns = []
        for i, (spk, label, text) in enumerate(SCRIPT):
            text = text.replace("{aria}", "Aria, " if cond == "explicit" else "")
            rel, d = clip(f"clips/{cond}/{i:03d}.wav", text[0].upper() + text[1:])
            turns.append(Turn(idx=i, speaker=spk, label=label, text=text, clip=rel, duration_s=d))
        scenarios.append(Scenario(scenario_id="s1", pair_id="p1", condition=cond, n_speakers=3, t_bucket="early",
                                  attributes={"setting": "kitchen"}, gold_answer="rain, then a dry evening",
                                  turns=turns))
    meta = SuiteMeta(name="cascade-room", version="1", generator="scripted", seed=0,
                     voices={s: "piper:joe@1.0" for s in "ABC"},
                     preamble=Preamble(text="This is a kitchen with Aria in it.", clip=pre, duration_s=pre_d))
    write_suite(root, meta, scenarios)
    return root


def build_dialogue_suite(root: Path, say) -> Path:
    """One MTR-DuplexBench dialogue of two rounds: a pause mid-question, then backchannels."""
    clip = _writer(root, say)

    def part(name: str, text: str, **kw) -> dict:
        rel, d = clip(f"clips/{name}.wav", text)
        return {"text": text, "clip": rel, "duration_s": d, **kw}

    reply = "Sure. The ferry leaves every hour from the north pier, and the crossing takes about twenty minutes in calm weather."
    rounds = [
        {"round": 1, "feature": "pause", "user": part("r1_user", "I was wondering if you could"),
         "assistant": part("r1_reply", reply),
         "pause": {"length_s": 2.5, "continuation": part("r1_more", "tell me about the ferry.")}},
        {"round": 2, "feature": "backchannel", "user": part("r2_user", "How long is the walk to the pier?"),
         "assistant": part("r2_reply", reply),
         "backchannels": [part("r2_bc0", "Mm-hmm.", after_onset_s=1.2), part("r2_bc1", "Right.", after_onset_s=3.0)]},
    ]
    meta = MTRMeta(benchmark="mtr-duplexbench", name="cascade-dialogue", version="1", generator="scripted", seed=0,
                   voices={"user": "piper:joe@1.0", "assistant": "piper:joe@1.0"})
    Suite(root, meta, [Dialogue(dialogue_id="d1", set="mixed", topic="a ferry", rounds=rounds)]).write()
    assert [str(p) for p in check_suite(Suite.load(root))] == []
    return root


def speech_spans(pcm: np.ndarray) -> list[tuple[int, int]]:
    """The real detector over a whole track (offline), as [start, end) samples."""
    det = SpeechDetector()
    for i in range(0, len(pcm), F):
        det.push(np.pad(pcm[i:i + F], (0, max(0, F - len(pcm[i:i + F])))))
    det.finish()
    return [(s.start, s.end) for s in det.segments]


@pytest.fixture(scope="module")
def suites(tmp_path_factory, say):
    root = tmp_path_factory.mktemp("cascade-suites")
    return build_room_suite(root / "room", say), build_dialogue_suite(root / "dialogue", say)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_cascade_through_the_server(kind, tmp_path, suites, say):
    room, dialogue = suites

    async def main():
        async with world_on(kind, tmp_path, room, lockstep_timeout_s=LOCKSTEP_TIMEOUT_S) as w:
            dia = w.settings.suites_root / dialogue.name
            shutil.copytree(dialogue, dia)
            mpe = await asyncio.to_thread(create_run, w.db, team="alpha", model="cascade", suite_path=str(w.suite),
                                          clock="lockstep", conditions=["explicit"])
            rooms = await asyncio.to_thread(create_bridge, "cascade", data_dir=str(w.settings.data_dir), llm="rule",
                                            eou_ms=CLIP_EOU_MS)
            async with bridge(w, rooms, w.tokens["alpha"]) as t:
                p = await wait_run(w.db, mpe, [t], timeout=300)
                assert p.done == p.total == 1, p
            mtr = await asyncio.to_thread(create_run, w.db, team="alpha", model="cascade", suite_path=str(dia),
                                          clock="lockstep", conditions=["gt"])
            # the hold and the barge-in threshold as options set past this dialogue's pause and
            # backchannels: the mechanisms under test, not the published defaults (docs/mtr.md)
            two = await asyncio.to_thread(Cascade, w.settings.data_dir, llm="rule", mode="two-party",
                                          hold_ms=PAUSE_HOLD_MS, barge_in_ms=BACKCHANNEL_PASS_MS,
                                          recognizer=rooms.recognizer)  # tiny.en loaded once
            async with bridge(w, two, w.tokens["alpha"]) as t:
                p = await wait_run(w.db, mtr, [t], timeout=300)
                assert p.done == p.total == 2, p  # a gt episode per round
            with w.db.session() as s:
                ep = s.query(Episode).filter(Episode.run_id == mpe).one()
                ep_id, att = ep.id, ep.completed_attempt_id
            recorded = await asyncio.to_thread(load_db_episode, w.db, ep_id, att)
            scored = await asyncio.to_thread(score_run, w.db, mtr, ScoreOptions(asr="none", workers=1))
            return recorded, scored, rooms, two

    recorded, scored, rooms, two = asyncio.run(main())
    doc = recorded.doc
    events = [Event.from_json(e) for e in doc["events"]]
    spans = speech_spans(recorded.assistant)
    w = episode_windows(parse_timeline(events, len(recorded.assistant), len(recorded.assistant)), spans)
    # (a) the request to Aria: a fresh answer within a second of its end, in its window
    assert w.t.fresh and w.t.onset is not None and 0 < w.t.onset - w.t.e_t < RATE
    # (b) the turns to someone else, and the thinking aloud: not one sample of speech in their windows
    clips = {(e.data["label"], e.type): e.t for e in events if e.type in ("clip.start", "clip.end")}
    quiet = [(clips[("N2", "clip.start")], clips[("N4Q", "clip.start")]), (clips[("N3", "clip.start")], len(recorded.assistant))]
    assert all(s >= b or e <= a for a, b in quiet for s, e in spans), (spans, quiet)
    # (c) the resolution (N4R) over her answer to N4Q stops her: measured on the recorded track
    n4r = clips[("N4R", "clip.start")]
    answering = [(s, e) for s, e in spans if s < n4r < e]
    assert answering, "she was not speaking when the resolution began"
    lead = speech_spans(say("It will be dry, I checked."))[0][0]  # where the speech begins in the clip
    stop_ms = (answering[0][1] - (n4r + lead)) * 1000 // RATE
    assert 0 < stop_ms <= STATED_STOP_MS, stop_ms
    assert not [s for s, _ in spans if s > n4r]  # and she does not answer the resolution
    assert [b["onset_s"] for b in rooms.barge_ins] and rooms.records[-1].decision == "SILENT"
    # MTR two-party, gt history: no reply inside the pause; the backchannels do not stop her
    rounds = {r.round: r for e in scored.episodes for r in e.rounds}
    assert sorted(rounds) == [1, 2]
    assert rounds[1].feature == "pause" and rounds[1].ok, rounds[1]
    assert rounds[2].feature == "backchannel" and rounds[2].ok, rounds[2]
    # round 1, heard again in round 2's history, is not answered: she speaks once, her round-2 reply (the
    # history utterance is recorded as "history", or, where its end is seen only after the history slots on a
    # loaded machine, dropped while the user talks)
    outcomes = [r.outcome for r in two.records]
    assert outcomes.count("spoken") == 1 and ("history" in outcomes or "dropped (human talking)" in outcomes), outcomes
    assert two.revision.endswith("/two-party") and two.decider.describe()["language_model"] is False


FERRY = "The ferry leaves every hour. The crossing takes twenty minutes."


def ferry_peer(body: dict) -> str:
    return json.dumps({"decision": "RESPOND", "answer": FERRY})


def test_with_a_chat_server_the_cascade_holds_an_mtr_conversation_and_a_refusal_fails_the_attempt(
        tmp_path, suites, say):
    """Two-party, ``free`` history (one episode, both rounds), lockstep, the decider a local
    OpenAI-compatible chat server (streamed): a reply in each round, the server's words in her
    recorded speech, the second request carrying the first round's transcript; then the same server
    refusing the key: the attempt fails with its reason stored."""
    from server.cascade.deciders import LLMDecider
    from server.db import Attempt
    from tests.support.llm_peers import FakeOpenAI

    _, dialogue = suites

    async def main():
        async with world_on("sqlite", tmp_path, dialogue, lockstep_timeout_s=LOCKSTEP_TIMEOUT_S) as w:
            with FakeOpenAI(api_key="right", responder=ferry_peer) as peer:
                run = await asyncio.to_thread(create_run, w.db, team="alpha", model="cascade-2p",
                                              suite_path=str(w.suite), clock="lockstep", conditions=["free"])
                two = await asyncio.to_thread(
                    Cascade, w.settings.data_dir, mode="two-party", model_name="cascade-2p", eou_ms=CLIP_EOU_MS,
                    hold_ms=PAUSE_HOLD_MS, barge_in_ms=BACKCHANNEL_PASS_MS,
                    decider=LLMDecider(f"openai:tiny-chat@{peer.url}", api_key="right"))
                async with bridge(w, two, w.tokens["alpha"]) as t:
                    p = await wait_run(w.db, run, [t], timeout=300)
                    assert p.done == p.total == 1, p
                with w.db.session() as s:
                    ep = s.query(Episode).filter(Episode.run_id == run).one()
                    ep_id, att = ep.id, ep.completed_attempt_id
                recorded = await asyncio.to_thread(load_db_episode, w.db, ep_id, att)
                requests = [r.body for r in peer.requests]
                await asyncio.to_thread(create_run, w.db, team="alpha", model="cascade-2p",
                                        suite_path=str(w.suite), clock="lockstep", conditions=["free"])
                wrong = await asyncio.to_thread(
                    Cascade, w.settings.data_dir, mode="two-party", model_name="cascade-2p",
                    decider=LLMDecider(f"openai:tiny-chat@{peer.url}", api_key="wrong", max_retries=0),
                    recognizer=two.recognizer)
                async with bridge(w, wrong, w.tokens["alpha"]) as t:
                    deadline = asyncio.get_running_loop().time() + 240
                    while True:
                        with w.db.session() as s:
                            failed = [a.error_message for a in s.query(Attempt).all()
                                      if a.error_code == "bridge_error"]
                        if failed or asyncio.get_running_loop().time() > deadline:
                            break
                        await asyncio.sleep(0.5)
            return recorded, requests, two, failed

    recorded, requests, two, failed = asyncio.run(main())
    spoken = [r for r in two.records if r.outcome == "spoken"]
    assert len(spoken) >= 2 and all(r.answer == FERRY and r.sentences == 2 for r in spoken), two.records
    assert len(requests) >= 2 and all(b["stream"] is True for b in requests)
    first_line = requests[0]["messages"][-1]["content"].splitlines()[-1]
    assert first_line in requests[-1]["messages"][-1]["content"]  # the conversation so far
    s, e = speech_spans(recorded.assistant)[0]
    assert "ferry" in two.recognizer.transcribe(recorded.assistant[s:e]).text.lower()
    assert failed and "HTTP 401" in failed[0] and "openai" in failed[0], failed
