"""``cascade``: a complete voice assistant in one bridge — the cascaded baseline.

Per room frame (80 ms): the echo guard (:mod:`.echo`) takes Aria's own voice out of the room
audio; the room detector (the §5 Silero detector, its merge pause set to the end-of-utterance
threshold ``eou_ms``) hears the rest; the turn taker (:mod:`.turns`) decides when an utterance has
ended, when Aria starts and when she stops (barge-in). Each ended utterance is transcribed (ASR,
:mod:`server.scoring.asr`: faster-whisper with the packaged tiny.en by default), appended to the
running transcript (speaker-agnostic), and decided on (:mod:`.deciders`: the duty instruction
verbatim as the prompt). The decider's reply is streamed (:meth:`.deciders.Decider.stream`) and read
sentence by sentence (:mod:`.sentences`): each sentence is synthesised (piper, :mod:`server.tts`) as
soon as it is complete, Aria starts speaking on the first, and the later ones follow it; the
audio is streamed back frame by frame. Her latency is the first sentence's, not the whole reply's.

Clocks: in ``lockstep`` the work of an utterance runs inside the frame that ended it (the server's
clock waits for it), so Aria starts speaking in the very next frame and the run is deterministic;
in ``realtime`` it runs on a worker thread while frames keep flowing, and Aria starts in the first
frame after it is done — her latency is what the machine makes it, and each reply's is reported in
the attempt's stats (``cascade.turns[].latency_ms``). With a hosted chat API (``llm=claude``,
``openai`` or ``google`` with no base URL) the bridge offers ``realtime`` only (DESIGN §4: a closed
API runs on the realtime clock); a chat server at a URL (``llm=openai:URL``) runs on both clocks.
A decider that fails (:class:`server.llm.LLMError`: a bad URL, a refused request, a timeout) fails
the episode's attempt with its message, on either clock (realtime: at the next frame).

Duty: the run's text prompt (``episode.start`` ``instructions``) when it sends one, else the
Duplex-MPE duty instruction (:data:`server.benchmarks.mpe.duty.DUTY_TEXT`), the very text the
built-in suites' preamble speaks. The rule decider reads no duty at all.

Modes (``mode=``, :class:`server.cascade.prompt.Party`; ``episode.start`` does not say which
benchmark is playing, so the bridge is told): ``multi-party`` (the default: Duplex-MPE's room) and
``two-party`` (MTR-DuplexBench: one user, every turn addressed to the assistant). Two-party mode
changes the prompt and duty (:data:`server.cascade.prompt.TWO_PARTY_DUTY`; that benchmark sends
none) and the rule decider's reply; the timing is the same in both modes. The end-of-utterance
silence ``eou_ms``, the **hold** ``hold_ms`` (from the end of an utterance's speech until a reply may
start) and the barge-in threshold ``barge_in_ms`` default to a published voice-agent framework's
settings (:mod:`.defaults`, with file and line), not to anything in the suites. The **broadcast
guard** (:mod:`.broadcast`, ``broadcast_guard=on``; off by default): a band-limited voice neither
interrupts her nor is transcribed. The mode is in the model revision (``…/two-party``) and the
stats.

Teacher forcing (``accepts_context``, the MTR ``gt`` history): a context frame is taken as her own
output (the echo guard's reference); utterances that end in history slots are transcribed into the
running transcript but not answered (the server ignores the bridge's output there).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from clients.messages import EpisodeStart
from clients.sdk import Bridge
from server.benchmarks.mpe.duty import DUTY_TEXT
from server.cascade.broadcast import JUDGE_S, band_limited
from server.cascade.deciders import Decider, Decision, LLMDecider, make_decider
from server.cascade.defaults import BARGE_IN_MS, BROADCAST_GUARD, END_OF_UTTERANCE_MS, HOLD_MS
from server.cascade.echo import ECHO_TAIL_MS, EchoGuard
from server.cascade.prompt import TWO_PARTY_DUTY, Party
from server.cascade.sentences import ReplyReader
from server.cascade.turns import (
    Action,
    Dropped,
    Ignored,
    Reply,
    StartSpeaking,
    StopSpeaking,
    Think,
    TurnConfig,
    TurnTaker,
    Utterance,
)
from server.core.detector import DetectorConfig, SpeechDetector
from server.core.timebase import STREAM_RATE
from server.scoring.asr import FRAGMENT_PAD, ASRBackend, make_asr

VOICE = "piper:joe@1.0"
TAPE_S = 120  # room audio kept for transcription (longer utterances are cut to their last TAPE_S)
MAX_TURN_RECORDS = 300  # per episode, in the stats
Speaker = Callable[[str], np.ndarray]  # text -> int16 audio at 24 kHz


def piper_speaker(voice: str, data_dir: Path) -> Speaker:
    """The offline TTS with its clip cache, one engine kept loaded."""
    from server.tts import ClipCache, get_engine, voice_engine

    engine, cache = get_engine(voice_engine(voice)), ClipCache(data_dir)
    return lambda text: cache.synthesize(engine, text, voice)


class RoomTape:
    """The last ``TAPE_S`` of the (echo-cleaned) room audio, addressable by stream sample."""

    def __init__(self, keep: int = TAPE_S * STREAM_RATE) -> None:
        self.keep = keep
        self.reset()

    def reset(self) -> None:
        self._chunks: list[np.ndarray] = []
        self._start = 0  # stream sample of the first kept sample
        self._n = 0

    def append(self, pcm: np.ndarray) -> None:
        self._chunks.append(pcm)
        self._n += len(pcm)
        while self._chunks and self._n - len(self._chunks[0]) >= self.keep:
            self._n -= len(self._chunks[0])
            self._start += len(self._chunks.pop(0))

    def cut(self, start: int, end: int) -> np.ndarray:
        data = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
        a, b = max(start - self._start, 0), max(min(end - self._start, self._n), 0)
        return data[a:b]


@dataclass
class TurnRecord:
    """One utterance as the cascade handled it (stored in the attempt's stats)."""

    start_s: float
    end_s: float
    text: str
    decision: str | None  # RESPOND / SILENT / null (unparseable: silent) / "ignored" / "history"
    answer: str
    asr_ms: int
    decide_ms: int
    tts_ms: int
    outcome: str = ""  # spoken / silent / dropped (stale or human talking) / ignored (short or background) / history
    latency_ms: int | None = None  # end of the human's speech -> Aria's first sample
    sentences: int = 0  # the answer's sentences synthesised (streamed: the first starts her speech)


@dataclass(frozen=True)
class Thought:
    """The work on one utterance, up to the first sentence of its answer (``final=False``: more follow).
    ``decide_ms``/``tts_ms``: the decider's time to that sentence, and its synthesis."""

    utterance: Utterance
    text: str
    decision: Decision | None
    audio: np.ndarray | None
    asr_ms: int
    decide_ms: int
    tts_ms: int
    history: bool = False
    final: bool = True


@dataclass(frozen=True)
class Failed:
    """The worker's work on an utterance raised (realtime): the frame loop raises it."""

    error: BaseException


@dataclass(frozen=True)
class More:
    """A streamed answer's next sentence (``audio`` may be empty on the ``final`` one)."""

    uid: int
    sentence: str
    audio: np.ndarray
    final: bool
    decision: Decision | None = None  # on the final one: the whole reply, parsed


Work = Thought | More | Failed


def _ms(t0: float) -> int:
    return round((time.perf_counter() - t0) * 1000)


class Cascade(Bridge):
    """Options: llm=auto|rule|claude[:MODEL]|local[:PATH], asr=faster-whisper[:DIR], voice, mode=multi-party|two-party,
    eou_ms, barge_in_ms, hold_ms, broadcast_guard=on|off, echo_tail_ms (defaults: :mod:`.defaults`)."""

    name = "cascade"
    blocking = True
    accepts_context = True

    def __init__(self, data_dir: Path, llm: str = "auto", asr: str = "faster-whisper", voice: str = VOICE,
                 eou_ms: str | int = END_OF_UTTERANCE_MS, barge_in_ms: str | int = BARGE_IN_MS,
                 echo_tail_ms: str | int = ECHO_TAIL_MS, model_name: str = "cascade", mode: str = Party.multi,
                 hold_ms: str | int = HOLD_MS, broadcast_guard: str | bool = BROADCAST_GUARD, *,
                 decider: Decider | None = None, recognizer: ASRBackend | None = None,
                 speaker: Speaker | None = None) -> None:
        super().__init__()
        self.name = model_name
        try:
            self.party = Party(mode)
        except ValueError:
            raise ValueError(f"mode must be one of {', '.join(p.value for p in Party)}, not {mode!r}") from None
        two = self.party is Party.two
        self.decider = decider or make_decider(llm, self.party)
        self.recognizer = recognizer or make_asr(asr, cpu_threads=2)
        self.speaker = speaker or piper_speaker(voice, Path(data_dir))
        self.revision = f"{self.decider.name}/{self.recognizer.name}" + (f"/{self.party}" if two else "")
        self.broadcast_guard = str(broadcast_guard).lower() in ("on", "true", "1")
        # load the models now, not in the first utterance's frame (the lockstep clock waits, but not forever)
        self.recognizer.transcribe(np.zeros(STREAM_RATE // 10, np.int16))
        if isinstance(self.decider, LLMDecider) and self.decider.base_url is None:
            self.clocks = ("realtime",)  # a hosted API: DESIGN §4
        self.detector_config = DetectorConfig(merge_pause_ms=int(eou_ms))
        self.turns = TurnTaker(TurnConfig(barge_in_ms=int(barge_in_ms), hold_ms=int(hold_ms)))
        self.echo = EchoGuard(self.frame_samples, int(echo_tail_ms))
        self.detector = SpeechDetector(self.detector_config)
        self.tape = RoomTape()
        self.transcript: list[str] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._done: queue.SimpleQueue[Work] = queue.SimpleQueue()  # realtime: the worker's results, in order
        self._in_flight = 0  # realtime: utterances submitted to the worker and not finished
        self._generation = 0
        self._latest_uid = 0
        self.records: list[TurnRecord] = []
        self.barge_ins: list[dict[str, float]] = []
        self.inline = True
        self._by_uid: dict[int, TurnRecord] = {}
        self._audio: dict[int, np.ndarray] = {}
        self._built_in_duty = TWO_PARTY_DUTY if two else DUTY_TEXT
        self.duty = self._built_in_duty
        self.duty_source = "built-in"
        self._forced: int | None = None  # the seq of the latest context frame (teacher forcing)
        self._context: np.ndarray | None = None

    # -- episode

    def reset(self, episode: EpisodeStart) -> None:
        if episode.sample_rate != STREAM_RATE:
            raise ValueError(f"the cascade speaks at {STREAM_RATE} Hz")
        with self._lock:
            self._generation += 1
            self.transcript = []
        self._done = queue.SimpleQueue()
        self.turns.reset()
        self.echo.reset()
        self.detector.reset()
        self.tape.reset()
        self.records, self._by_uid, self._audio, self.barge_ins = [], {}, {}, []
        self._latest_uid = 0
        self.duty, self.duty_source = ((episode.instructions, "episode.start") if episode.instructions
                                       else (self._built_in_duty, "built-in"))
        self._forced, self._context = None, None
        self.inline = episode.clock == "lockstep"
        if not self.inline and self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cascade")
        self._stats()

    # -- one frame

    def force(self, seq: int, pcm: np.ndarray) -> None:
        """A history slot: ``pcm`` is what she said there (module docstring)."""
        self._forced, self._context = seq, pcm

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        frame_start = seq * self.frame_samples
        now = frame_start + self.frame_samples
        clean = self.echo.clean(room)
        self.tape.append(clean)
        events = self.detector.push(clean)
        self._act(now, self.turns.hear(now, events, self.detector.speech_end, foreground=self._foreground(now)))
        while not self._done.empty():  # every utterance is recorded, a stale one too
            self._deliver(now, self._done.get())
        if self._forced == seq:  # the server takes the context frame as her output here
            self.echo.played(self._context)
            return None
        out = self._frame(frame_start)
        self.echo.played(out)
        return out

    def _foreground(self, now: int) -> bool:
        """The broadcast guard on the open utterance's first second (:mod:`.broadcast`)."""
        since = self.turns.open_since
        if not self.broadcast_guard or since is None or now - since > JUDGE_S * STREAM_RATE + self.frame_samples:
            return True
        return not band_limited(self.tape.cut(since, min(now, since + int(JUDGE_S * STREAM_RATE))))

    def _frame(self, frame_start: int) -> np.ndarray | None:
        at = self.turns.playing(frame_start)
        if at is None:
            return None
        uid, pos = at
        chunk = self._audio[uid][pos:pos + self.frame_samples]
        if len(chunk) < self.frame_samples:
            chunk = np.pad(chunk, (0, self.frame_samples - len(chunk)))
        return chunk

    def _act(self, now: int, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Think):
                u = a.utterance
                self._latest_uid = u.uid
                pcm = self.tape.cut(u.start - FRAGMENT_PAD, u.end + FRAGMENT_PAD)  # all heard: end + pad <= seen_at
                history = self._forced == now // self.frame_samples - 1  # heard in a history slot: not answered
                if self.inline:
                    self._think(u, pcm, self._generation, history, lambda w, now=now: self._deliver(now, w))
                else:
                    assert self._pool is not None
                    with self._lock:
                        self._in_flight += 1
                    self._pool.submit(self._work, u, pcm, self._generation, history, self._queued(self._generation))
            elif isinstance(a, StartSpeaking):
                rec = self._by_uid[a.uid]
                rec.outcome, rec.latency_ms = "spoken", (a.at - round(rec.end_s * STREAM_RATE)) * 1000 // STREAM_RATE
                self.emit_text(a.at // self.frame_samples, rec.answer)
                self._stats()
            elif isinstance(a, StopSpeaking):
                self._audio.clear()
                if a.reason == "barge-in" and a.onset is not None:
                    self.barge_ins.append({"onset_s": round(a.onset / STREAM_RATE, 3),
                                           "stopped_s": round(a.at / STREAM_RATE, 3)})
                    self._stats()
            elif isinstance(a, Ignored):
                u = a.utterance
                self._record(TurnRecord(u.start / STREAM_RATE, u.end / STREAM_RATE, "", "ignored", "", 0, 0, 0,
                                        outcome=f"ignored ({a.why})"), u.uid)
                self._stats()
            elif isinstance(a, Dropped) and a.uid in self._by_uid:
                self._by_uid[a.uid].outcome = f"dropped ({a.why})"
                self._audio.pop(a.uid, None)

    # -- the work of one utterance (inline in lockstep, on the worker thread in realtime)

    def _queued(self, generation: int) -> Callable[[Work], None]:
        """Realtime: hand the worker's results to the frame loop, unless the episode has moved on."""
        def put(w: Work) -> None:
            if generation == self._generation:
                self._done.put(w)
        return put

    def _work(self, utt: Utterance, pcm: np.ndarray, generation: int, history: bool,
              emit: Callable[[Work], None]) -> None:
        """The worker thread's job (realtime): :meth:`_think`, its failure handed to the frame loop."""
        try:
            self._think(utt, pcm, generation, history, emit)
        except Exception as exc:
            emit(Failed(exc))
        finally:
            with self._lock:
                self._in_flight -= 1

    @property
    def working(self) -> bool:
        """Realtime: is the worker still on an utterance (its results not all handed over yet)?"""
        return self._in_flight > 0

    def _think(self, utt: Utterance, pcm: np.ndarray, generation: int, history: bool,
               emit: Callable[[Work], None]) -> None:
        """Transcribe, decide (streamed) and synthesise sentence by sentence; ``emit`` the results."""
        t0 = time.perf_counter()
        text = self.recognizer.transcribe(pcm).text.strip()
        asr_ms = _ms(t0)
        with self._lock:
            if generation != self._generation:
                return
            if text:
                self.transcript.append(text)
            transcript = list(self.transcript)
        if not text or utt.uid != self._latest_uid or history:  # nothing heard, a newer one waits, or history
            emit(Thought(utt, text, None, None, asr_ms, 0, 0, history))
            return
        reader, first = ReplyReader(), True
        t1 = time.perf_counter()

        def say(sentence: str) -> None:
            nonlocal first
            t2 = time.perf_counter()
            audio = self.speaker(sentence)
            if first:
                partial = Decision(label=reader.decision, answer=sentence, raw=reader.raw)
                emit(Thought(utt, text, partial, audio, asr_ms, round((t2 - t1) * 1000), _ms(t2), final=False))
                first = False
            else:
                emit(More(utt.uid, sentence, audio, final=False))

        for delta in self.decider.stream(transcript, self.duty):
            for sentence in reader.feed(delta):
                say(sentence)
            if utt.uid != self._latest_uid or generation != self._generation:  # a newer utterance: stop here
                break
        for sentence in reader.finish():
            say(sentence)
        decision = Decider._parsed(reader.raw)
        if first:  # nothing to say
            emit(Thought(utt, text, decision, None, asr_ms, _ms(t1), 0))
        else:
            emit(More(utt.uid, "", np.zeros(0, np.int16), final=True, decision=decision))

    def _deliver(self, now: int, w: Work) -> None:
        if isinstance(w, Failed):
            raise RuntimeError(f"the cascade's {self.decider.name} decider failed: {w.error}") from w.error
        if isinstance(w, Thought):
            self._thought(now, w)
            return
        rec = self._by_uid.get(w.uid)
        if rec is not None:
            if w.sentence:
                rec.answer, rec.sentences = f"{rec.answer} {w.sentence}".strip(), rec.sentences + 1
            if w.decision is not None:
                rec.decision = w.decision.label
        if w.uid in self._audio and len(w.audio):
            self._audio[w.uid] = np.concatenate([self._audio[w.uid], w.audio])
            if self.turns.playing(now) is not None and w.sentence:
                self.emit_text(now // self.frame_samples, w.sentence)
        self._act(now, self.turns.more(now, w.uid, len(w.audio) if w.uid in self._audio else 0, w.final))
        if w.final:
            self._stats()

    def _thought(self, now: int, th: Thought) -> None:
        u, d = th.utterance, th.decision
        rec = TurnRecord(round(u.start / STREAM_RATE, 3), round(u.end / STREAM_RATE, 3), th.text,
                         d.label if d else None, d.answer if d and d.respond else "", th.asr_ms, th.decide_ms,
                         th.tts_ms, outcome="history" if th.history else "silent",
                         sentences=int(th.audio is not None))
        self._record(rec, u.uid)
        n = 0
        if th.audio is not None and len(th.audio):
            self._audio[u.uid] = th.audio
            n = len(th.audio)
        self._act(now, self.turns.replied(now, Reply(u.uid, n, final=th.final)))
        self._stats()

    def _record(self, rec: TurnRecord, uid: int) -> None:
        self._by_uid[uid] = rec
        if len(self.records) < MAX_TURN_RECORDS:
            self.records.append(rec)

    def _stats(self) -> None:
        self.emit_stats(cascade={
            "decider": self.decider.describe(), "asr": self.recognizer.describe(),
            "party": str(self.party), "eou_ms": self.detector_config.merge_pause_ms,
            "barge_in_ms": self.turns.config.barge_in_ms, "hold_ms": self.turns.config.hold_ms,
            "broadcast_guard": self.broadcast_guard,
            "duty_source": self.duty_source, "turns": [asdict(r) for r in self.records],
            "barge_ins": self.barge_ins[:MAX_TURN_RECORDS]})
