"""The cascade bridge (server/cascade/bridge.py) on constructed episodes made of the mini suite's
real clips, through the real detector, the real faster-whisper tiny.en and piper: whom it answers,
barge-in (stop on an interruption, go on over a backchannel), its own voice echoed by the room;
the chat deciders through the LLM layer against local peers of the OpenAI-compatible and Anthropic
wire formats (streamed): the peer's reply reaches her speech on both clocks, and a failing server
fails the attempt with its reason."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clients.messages import EpisodeStart
from server.benchmarks.mpe.duty import DUTY_TEXT
from server.cascade.bridge import VOICE, Cascade
from server.cascade.deciders import LLMDecider, RuleDecider, llm_spec, make_decider
from server.cascade.prompt import system_prompt, user_prompt
from server.core.audio import read_wav
from server.tts import ClipCache
from tests.support.anthropic_peer import FakeAnthropic
from tests.support.llm_peers import FakeOpenAI

F = 1920
RATE = 24_000
GAP = RATE // 2  # the scheduler's 0.5 s between clips
CLIP_EOU_MS = 400


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
        # the clips are 0.5 s apart (the scheduler's gap): an end of utterance shorter than that makes each
        # clip an utterance of its own (the default, 550 ms, joins them: docs/bridges.md "cascade")
        options.setdefault("eou_ms", CLIP_EOU_MS)
        return Cascade(tmp_path, decider=options.pop("decider", RuleDecider()), recognizer=tiny_en,
                       speaker=lambda text: cache.synthesize(piper_engine, text, VOICE), **options)
    return make


def clip(mini, scenario: str, idx: int, condition: str = "explicit") -> np.ndarray:
    path, scenarios = mini
    return read_wav(path / scenarios[(scenario, condition)][idx]["clip"])[0]


def turns_of(mini, scenario: str, *labels: str, condition: str = "explicit") -> list[dict]:
    """The scenario's turns for ``labels`` in that order: each the first of its label not taken yet
    (so a test names the roles it plays, not the generator's turn numbers)."""
    turns = mini[1][(scenario, condition)]
    taken: list[dict] = []
    for label in labels:
        taken.append(next(t for _, t in sorted(turns.items()) if t["label"] == label and t not in taken))
    return taken


def clips_of(mini, scenario: str, *labels: str) -> list[np.ndarray]:
    return [clip(mini, scenario, t["idx"]) for t in turns_of(mini, scenario, *labels)]


#: s0003 of the mini suite as the tests play it: two turns among the people (N2), the request to Aria
#: (T), then a mention of her (N1)
S3 = ("N2", "N2", "T", "N1")


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
    turns = clips_of(mini, "s0003", *S3)
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
    assert "rice" in spoken.answer.lower() and spoken.outcome == "spoken"
    assert 0 < spoken.latency_ms < 1000
    assert e - s >= len(bridge.speaker(spoken.answer)) - F  # what she said is in the track, in full


def test_in_realtime_the_work_runs_beside_the_frames_and_every_utterance_is_recorded(make_cascade, mini):
    """The same episode on the realtime clock: each utterance's ASR, decision and TTS run on the
    worker thread while frames go on (here the frames wait for it only to keep the test exact)."""
    import time

    turns = clips_of(mini, "s0003", *S3)
    room = room_of(*turns, wait_after=2, wait_s=6.0)
    bridge = make_cascade()
    start(bridge, clock="realtime")
    out, ran_ahead = [], 0
    for n in range(len(room) // F):
        o = bridge.step(n, room[n * F:(n + 1) * F])
        out.append(np.zeros(F, np.int16) if o is None else o)
        ran_ahead += bridge.working  # frames that went on while an utterance was being worked on
        while bridge.working:
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
    room = room_of(*clips_of(mini, "s0004", "N2", "N4Q"), tail_s=7.0)  # the overlay ends inside it
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
    (n4r,) = clips_of(mini, "s0004", "N4R")
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
    assert bridge.records[-1].decision == "SILENT" and "tuesday" in bridge.records[-1].text.lower()


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


ANSWER = "Nine onions will do. Add one more for the sauce."


def onion_peer(body: dict) -> str:
    """The chat server's reply: RESPOND with :data:`ANSWER` when the last transcript line asks Aria something."""
    last = body["messages"][-1]["content"].splitlines()[-1].lower()
    asked = "aria" in last and last.rstrip().endswith("?")
    return json.dumps({"decision": "RESPOND", "answer": ANSWER} if asked else {"decision": "SILENT", "answer": ""})


def test_an_openai_compatible_server_gets_the_cascade_prompt_and_streams_the_reply():
    with FakeOpenAI(api_key=None, responder=onion_peer) as peer:
        d = make_decider(f"openai:{peer.url},model=tiny-chat")
        assert isinstance(d, LLMDecider) and d.name == "openai" and d.model == "tiny-chat" and d.base_url == peer.url
        lines = ["Okay, for four people it's six onions.", "Quick, Aria, how many onions for six people?"]
        pieces = list(d.stream(lines, DUTY_TEXT))
        assert len(pieces) > 3 and d._parsed("".join(pieces)).answer == ANSWER  # streamed in pieces
        (req,) = peer.requests
        assert req.body["stream"] is True and req.body["model"] == "tiny-chat"
        assert req.body["messages"] == [{"role": "system", "content": system_prompt(DUTY_TEXT)},
                                        {"role": "user", "content": user_prompt(lines)}]
        assert not d.decide(lines[:1], DUTY_TEXT).respond
        assert make_decider(f"openai:m2@{peer.url}").model == "m2"  # the LLM layer's own spec form


def test_claude_decider_streams_through_the_llm_layer(monkeypatch):
    with FakeAnthropic(api_key="k") as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        fake.push(json.dumps({"decision": "RESPOND", "answer": ANSWER}), "no idea")
        d = make_decider("claude:claude-test-1")
        lines = ["Okay, for four people it's six onions.", "Quick, Aria, how many onions for six people?"]
        got = d.decide(lines, DUTY_TEXT)
        assert got.respond and got.answer == ANSWER and d.name == "claude"
        (req,) = fake.message_requests
        assert req.body["stream"] is True and req.body["system"] == system_prompt(DUTY_TEXT)
        assert req.body["messages"] == [{"role": "user", "content": user_prompt(lines)}]
        assert not d.decide(lines, DUTY_TEXT).respond  # unparseable: silent


def play(bridge: Cascade, room: np.ndarray, clock: str) -> np.ndarray:
    """Play ``room``; realtime: the frames wait for the worker only to keep the test exact."""
    import time

    start(bridge, clock)
    out = []
    for n in range(len(room) // F):
        o = bridge.step(n, room[n * F:(n + 1) * F])
        out.append(np.zeros(F, np.int16) if o is None else o)
        while bridge.working:
            time.sleep(0.01)
    return np.concatenate(out)


@pytest.mark.parametrize("clock", ["lockstep", "realtime"])
def test_with_a_chat_server_the_cascade_speaks_its_streamed_reply(make_cascade, mini, clock):
    turns = clips_of(mini, "s0003", *S3)
    room = room_of(*turns, wait_after=2, wait_s=8.0)
    with FakeOpenAI(api_key=None, responder=onion_peer) as peer:
        bridge = make_cascade(decider=make_decider(f"openai:{peer.url},model=tiny-chat"))
        assert bridge.clocks == ("lockstep", "realtime")  # a server at a URL: both clocks
        track = play(bridge, room, clock)
    spoken = [r for r in bridge.records if r.outcome == "spoken"]
    assert [r.decision for r in bridge.records] == ["SILENT", "SILENT", "RESPOND", "SILENT"]
    assert len(spoken) == 1 and spoken[0].answer == ANSWER and spoken[0].sentences == 2
    (s, e), = speech_spans(track)
    whole = sum(len(bridge.speaker(x)) for x in ("Nine onions will do.", "Add one more for the sauce."))
    assert e - s >= whole - F  # both sentences are in her track
    heard = bridge.recognizer.transcribe(track[s:e]).text.lower()
    assert "onion" in heard and "sauce" in heard  # the server's words reached her speech


def test_the_claude_and_openai_apis_without_a_url_run_on_the_realtime_clock_only(make_cascade, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert make_cascade(decider=make_decider("openai:gpt-4o")).clocks == ("realtime",)


@pytest.mark.parametrize("clock", ["lockstep", "realtime"])
@pytest.mark.parametrize("failure", ["bad url", "refused", "timeout"])
def test_a_failing_chat_server_fails_the_attempt_with_its_reason(make_cascade, mini, clock, failure):
    from tests.support.llm_peers import Reply

    room = room_of(*clips_of(mini, "s0003", "T"), tail_s=4.0)
    with FakeOpenAI(api_key="right") as peer:
        url = "http://127.0.0.1:9/v1" if failure == "bad url" else peer.url
        peer.push(Reply(delay_s=3.0, text="{}") if failure == "timeout" else "{}")
        monkey_key = "wrong" if failure == "refused" else "right"
        decider = LLMDecider(f"openai:m@{url}", api_key=monkey_key, timeout_s=0.5, max_retries=0)
        bridge = make_cascade(decider=decider)
        with pytest.raises(Exception) as err:
            play(bridge, room, clock)
    want = {"bad url": "Connection error", "refused": "HTTP 401", "timeout": "timed out"}[failure]
    assert want in str(err.value), str(err.value)
    assert "openai" in str(err.value)


def test_decider_choice(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert make_decider("auto").name == "rule" and not make_decider("rule").is_llm
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert make_decider("auto").name == "claude"
    assert llm_spec("openai", "http://h:1/v1,model=m") == "openai:m@http://h:1/v1"
    assert llm_spec("openai", "http://h:1/v1") == "openai@http://h:1/v1"
    from server.scoring.errors import BackendUnavailable
    with pytest.raises(BackendUnavailable, match="unknown cascade decider"):
        make_decider("gpt")
    with pytest.raises(BackendUnavailable, match="model=NAME"):
        make_decider("openai:http://h:1/v1,temperature=2")
