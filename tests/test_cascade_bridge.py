"""The cascade bridge (server/cascade/bridge.py) on constructed episodes made of the mini suite's
real clips, through the real detector, the real faster-whisper tiny.en and piper: whom it answers,
barge-in (stop on an interruption, go on over a backchannel), its own voice echoed by the room;
the Claude decider against the local fake of the Messages API; and one lockstep episode through
the real server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clients.messages import EpisodeStart
from server.benchmarks.mpe.duty import DUTY_TEXT
from server.cascade.bridge import VOICE, Cascade
from server.cascade.deciders import ClaudeDecider, RuleDecider, make_decider
from server.cascade.prompt import system_prompt, user_prompt
from server.core.audio import read_wav
from server.tts import ClipCache
from tests.support.anthropic_peer import FakeAnthropic

F = 1920
RATE = 24_000
GAP = RATE // 2  # the scheduler's 0.5 s between clips


@pytest.fixture(scope="session")
def tiny_en():
    from server.scoring.asr import FasterWhisperASR

    try:
        return FasterWhisperASR()
    except Exception as exc:  # the [asr] extra is missing
        pytest.skip(f"no offline ASR: {exc}")


@pytest.fixture(scope="session")
def mini(demo_build):
    path = demo_build["path"]
    scenarios = {}
    for line in (path / "scenarios.jsonl").read_text().splitlines():
        s = json.loads(line)
        scenarios[(s["scenario_id"], s["condition"])] = {t["idx"]: t for t in s["turns"]}
    return path, scenarios


@pytest.fixture()
def make_cascade(tiny_en, piper_engine, tmp_path):
    cache = ClipCache(tmp_path)

    def make(**options) -> Cascade:
        return Cascade(tmp_path, decider=RuleDecider(), recognizer=tiny_en,
                       speaker=lambda text: cache.synthesize(piper_engine, text, VOICE), **options)
    return make


def clip(mini, scenario: str, idx: int, condition: str = "explicit") -> np.ndarray:
    path, scenarios = mini
    return read_wav(path / scenarios[(scenario, condition)][idx]["clip"])[0]


def room_of(*clips: np.ndarray, tail_s: float = 3.0, wait_after: int | None = None, wait_s: float = 0.0) -> np.ndarray:
    """The clips with the scheduler's gaps; after clip ``wait_after`` ``wait_s`` instead (its wait after T)."""
    parts = []
    for i, c in enumerate(clips):
        parts += [c, np.zeros(int(wait_s * RATE) if i == wait_after else GAP, np.int16)]
    parts.append(np.zeros(int(tail_s * RATE), np.int16))
    return np.concatenate(parts)


def start(bridge: Cascade, clock: str = "lockstep") -> None:
    bridge.reset(EpisodeStart(episode_id="e1", clock=clock, sample_rate=RATE, frame_samples=F))


def run(bridge: Cascade, room: np.ndarray) -> np.ndarray:
    """Play ``room`` frame by frame (lockstep); Aria's track."""
    start(bridge)
    out = []
    for n in range(len(room) // F):
        o = bridge.step(n, room[n * F:(n + 1) * F])
        out.append(np.zeros(F, np.int16) if o is None else o)
    return np.concatenate(out)


def speech_spans(track: np.ndarray) -> list[tuple[int, int]]:
    """Frames of the track that are not silent, as [start, end) sample spans."""
    loud = [n for n in range(len(track) // F) if np.any(track[n * F:(n + 1) * F])]
    spans: list[tuple[int, int]] = []
    for n in loud:
        if spans and spans[-1][1] == n * F:
            spans[-1] = (spans[-1][0], (n + 1) * F)
        else:
            spans.append((n * F, (n + 1) * F))
    return spans


def test_it_answers_aria_and_stays_silent_when_others_are_addressed_or_she_is_merely_mentioned(make_cascade, mini):
    """s0003: two turns among the people (N2), the request to Aria (T), then (once she is done, as
    the scheduler waits for her after T) a mention of her (N1)."""
    turns = [clip(mini, "s0003", i) for i in (0, 1, 5, 6)]
    room = room_of(*turns, wait_after=2, wait_s=6.0)
    bridge = make_cascade()
    track = run(bridge, room)
    t_end = sum(len(c) + GAP for c in turns[:3]) - GAP
    spans = speech_spans(track)
    assert len(spans) == 1, [r.text for r in bridge.records]
    s, e = spans[0]
    assert t_end < s < t_end + RATE  # she starts within a second of the end of the request
    decided = {r.text: r.decision for r in bridge.records}
    assert [d for d in decided.values()] == ["SILENT", "SILENT", "RESPOND", "SILENT"], decided
    spoken = next(r for r in bridge.records if r.decision == "RESPOND")
    assert "onion" in spoken.answer.lower() and spoken.outcome == "spoken"
    assert 0 < spoken.latency_ms < 1000
    assert e - s >= len(bridge.speaker(spoken.answer)) - F  # what she said is in the track, in full


def test_in_realtime_the_work_runs_beside_the_frames_and_every_utterance_is_recorded(make_cascade, mini):
    """The same episode on the realtime clock: each utterance's ASR, decision and TTS run on the
    worker thread while frames go on (here the frames wait for it only to keep the test exact)."""
    import time

    turns = [clip(mini, "s0003", i) for i in (0, 1, 5, 6)]
    room = room_of(*turns, wait_after=2, wait_s=6.0)
    bridge = make_cascade()
    start(bridge, clock="realtime")
    out, ran_ahead = [], 0
    for n in range(len(room) // F):
        o = bridge.step(n, room[n * F:(n + 1) * F])
        out.append(np.zeros(F, np.int16) if o is None else o)
        ran_ahead += bool(bridge._jobs)  # frames that went on while an utterance was being worked on
        while bridge._jobs and not bridge._jobs[0].done():
            time.sleep(0.01)
    assert ran_ahead >= 4  # the work ran on the worker, never inside step()
    assert [r.decision for r in bridge.records] == ["SILENT", "SILENT", "RESPOND", "SILENT"]
    (s, _), = speech_spans(np.concatenate(out))
    spoken = next(r for r in bridge.records if r.outcome == "spoken")
    assert spoken.latency_ms >= 400  # at least the end-of-utterance silence
    assert abs(s - (round(spoken.end_s * RATE) + spoken.latency_ms * RATE // 1000)) <= 2 * RATE // 1000  # as reported


def answer_then(make_cascade, mini, overlay: np.ndarray | None, *, after_s: float = 1.0, echo: float = 0.0,
                **options) -> tuple[Cascade, np.ndarray, int | None]:
    """s0004: a turn, the question to Aria (N4Q); ``after_s`` into her answer a human plays
    ``overlay``; ``echo`` > 0: the room also carries her own output, delayed 0.19 s, at that gain.
    Returns the bridge, her track, and the sample where the overlay began."""
    room = room_of(*(clip(mini, "s0004", i) for i in (1, 7)), tail_s=6.0)
    bridge = make_cascade(**options)
    start(bridge)
    out: list[np.ndarray] = []
    began: int | None = None
    human_at: int | None = None
    delay = 2 * F + 700
    for n in range(len(room) // F):
        frame = room[n * F:(n + 1) * F].astype(np.int32)
        t = n * F
        if began is not None and overlay is not None and human_at is None and t >= began + after_s * RATE:
            human_at = t
        if human_at is not None and t - human_at < len(overlay):
            piece = overlay[t - human_at:t - human_at + F]
            frame[:len(piece)] += piece
        if echo and out:
            mine = np.concatenate(out)
            a, b = t - delay, t + F - delay
            if b > 0:
                seg = mine[max(a, 0):b]
                frame[F - len(seg):] += (seg * echo).astype(np.int32)
        o = bridge.step(n, np.clip(frame, -32768, 32767).astype(np.int16))
        o = np.zeros(F, np.int16) if o is None else o
        if began is None and o.any():
            began = t
        out.append(o)
    return bridge, np.concatenate(out), human_at


def test_a_human_interrupting_her_stops_her_within_the_stated_time(make_cascade, mini):
    """The N4 case: a human resolves the question while she answers it (N4R over her answer)."""
    n4r = clip(mini, "s0004", 8)
    bridge, track, human_at = answer_then(make_cascade, mini, n4r, after_s=0.6)
    assert human_at is not None
    spans = speech_spans(track)
    stop = spans[0][1]
    (barge,) = bridge.barge_ins
    onset = round(barge["onset_s"] * RATE)
    # stated (docs/bridges.md): silent within barge_in_ms of the human's speech, plus the detector's
    # look-ahead (at most 64 ms) and one frame, of its onset
    assert human_at <= onset < stop <= onset + (500 + 64 + 80) * RATE // 1000
    assert stop == round(barge["stopped_s"] * RATE) - F
    assert len(spans) == 1  # and she does not answer the resolution
    assert bridge.records[-1].decision == "SILENT" and "remember" in bridge.records[-1].text.lower()


def test_a_backchannel_lets_her_finish(make_cascade, mini, piper_engine, tmp_path):
    mm = ClipCache(tmp_path).synthesize(piper_engine, "Yeah.", "piper:joe@1.19")
    bridge, track, human_at = answer_then(make_cascade, mini, mm, after_s=0.6)
    assert human_at is not None and bridge.barge_ins == []
    (s, e), = speech_spans(track)
    answer = next(r for r in bridge.records if r.outcome == "spoken")
    assert e - s >= len(bridge.speaker(answer.answer)) - F  # she spoke her answer to its end
    assert e > human_at + len(mm)
    assert [r.outcome for r in bridge.records][-1] == "ignored (short)"  # heard while she spoke: not transcribed


def test_her_own_voice_echoed_by_the_room_neither_stops_her_nor_is_answered(make_cascade, mini):
    bridge, track, _ = answer_then(make_cascade, mini, None, echo=0.5)
    assert bridge.barge_ins == [] and len(speech_spans(track)) == 1
    assert not any(r.outcome.startswith("ignored") for r in bridge.records)  # the guard took the echo out before the detector
    # the control: without the echo guard her own echo interrupts her
    bridge, track, _ = answer_then(make_cascade, mini, None, echo=0.5, echo_tail_ms=0)
    assert len(bridge.barge_ins) >= 1


def test_claude_decider_speaks_the_cascade_prompt_to_the_messages_api():
    with FakeAnthropic(api_key="k") as fake:
        fake.push('{"decision": "RESPOND", "answer": "Nine onions."}', "no idea")
        d = ClaudeDecider("claude-test-1", api_key="k", base_url=fake.url)
        lines = ["Okay, for four people it's six onions.", "Quick, Aria, how many onions for six people?"]
        got = d.decide(lines, DUTY_TEXT)
        assert got.respond and got.answer == "Nine onions." and got.label == "RESPOND"
        (req,) = fake.message_requests
        assert req.body["system"] == system_prompt(DUTY_TEXT) and DUTY_TEXT in req.body["system"]
        assert req.body["messages"] == [{"role": "user", "content": user_prompt(lines)}]
        assert not d.decide(lines, DUTY_TEXT).respond  # unparseable: silent


def test_openai_compatible_decider_and_streaming_through_the_layer():
    """``llm=openai:MODEL@URL`` (a local vLLM / llama.cpp / Ollama server): the cascade prompt as Chat
    Completions; the layer's stream gives the text deltas of the same request."""
    from server.llm import LLMRequest
    from tests.support.llm_peers import FakeOpenAI

    with FakeOpenAI(api_key=None) as peer:  # a local server takes any key
        peer.push('{"decision": "RESPOND", "answer": "Nine onions."}', "Nine onions, I think.")
        d = make_decider(f"openai:qwen2.5-0.5b@{peer.url}")
        lines = ["Okay, for four people it's six onions.", "Quick, Aria, how many onions for six people?"]
        got = d.decide(lines, DUTY_TEXT)
        assert got.respond and got.answer == "Nine onions." and (d.name, d.model) == ("openai", "qwen2.5-0.5b")
        body = peer.requests[0].body
        assert body["messages"] == [{"role": "system", "content": system_prompt(DUTY_TEXT)},
                                    {"role": "user", "content": user_prompt(lines)}]
        pieces = list(d._api.stream(LLMRequest.ask(system_prompt(DUTY_TEXT), user_prompt(lines))))
        assert len(pieces) > 1 and "".join(pieces) == "Nine onions, I think." and peer.requests[1].body["stream"]


def test_decider_choice(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert make_decider("auto").name == "rule" and not make_decider("rule").is_llm
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert make_decider("auto").name == "claude"
    from server.scoring.errors import BackendUnavailable
    with pytest.raises(BackendUnavailable, match="unknown cascade decider"):
        make_decider("gpt")
