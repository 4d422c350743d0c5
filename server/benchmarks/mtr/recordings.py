"""Recordings made elsewhere, in the published naming, as MTR episodes (docs/mtr.md, "Scoring
recordings made elsewhere").

A folder holds stereo files named as MTR-DuplexBench publishes them (notes §1), one per
(dialogue, round): ``dialogue_<N>_round_<R>_<scenario>.wav``, and for the dimension sets
``dialogue_instruction_following_<N>_…`` and ``dialogue_safety_<N>_…``; left = user, right =
model. The conversation-quality set is published as MP3 files in one folder per round,
``turn<K>/<id>.mp3`` (notes §1: ``K`` the 1-based round, ``<id>`` the dialogue's id). The
published protocol gives each file one live round with ground-truth history (notes §3), so every
file is a ``gt`` episode of round ``R`` (or ``K``).

**Matching.** ``N`` is the dialogue's position in the suite's ``scenarios.jsonl`` (1-based by
default; ``index_base=0`` for 0-based names); ``R`` must be one of its rounds; ``<scenario>``
must name that round's feature (``smooth``, ``interruption``, ``pause``, ``background``,
``backchannel``, or a published spelling in :data:`~.suite.FEATURE_ALIASES`); an
``instruction_following`` file must be a round with an instruction task, a ``safety`` file one
with a safety task. A ``turn<K>/<id>.mp3`` file is round ``K`` of the dialogue whose
``dialogue_id`` is ``<id>``, which must carry a quality task. Any ``.wav`` or ``.mp3`` that does not
match, or two files for one (dialogue, round), is refused, naming the file.

**The published timeline.** A round imported from the published dataset layout
(:mod:`.dataset.published`) keeps its published times; its recording is the published source
audio on the left and the model on the right, on that timeline. Such a file is scored on those
times as they are (:func:`source_events`): its user turns must be where the times say, and its
barge-in and background voice are where the source audio has them (the published protocol plays
a fixed user side; nothing is "moved").

**Replay.** A file becomes an episode by running the suite's round scheduler on the real episode
core with the file's model channel fed in as the model's output, frame by frame: the events are
the ones a live ``gt`` episode would have logged for that model audio, and the model track is
the core's (the ground-truth replies in the history's teacher-forced frames, the file's right
channel after). The file's left channel is then compared with the replayed room: every user
turn must be there (else the file is not this round's recording, or its channels are
swapped); a barge-in, background voice or backchannel that the live scheduler placed after the
model's onset but that the file has elsewhere is reported (:attr:`Replayed.moved`): the
recording's system did not react as ours does, and that round's verdict is not comparable.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from server.benchmarks.mtr.rules import live_rounds
from server.benchmarks.mtr.scheduler import CONFIRM_SILENCE_S, ROUND_GAP_S
from server.benchmarks.mtr.segmentation.inputs import read_recording
from server.benchmarks.mtr.suite import Dialogue, MTRScenario, Round, SourceTimes, Suite, features_of, scenario_of
from server.core.events import Event
from server.core.spans import Span
from server.core.timebase import STREAM_RATE, samples
from server.engine.clips import open_episode
from server.scoring.errors import BadRecording

#: the published name patterns (notes §1), most specific first: the prefix names the dimension
NAME_PATTERNS: tuple[tuple[str | None, re.Pattern[str]], ...] = (
    ("instruction", re.compile(r"^dialogue_instruction_following_(\d+)_round_(\d+)_([A-Za-z0-9_+\-]+)\.wav$")),
    ("safety", re.compile(r"^dialogue_safety_(\d+)_round_(\d+)_([A-Za-z0-9_+\-]+)\.wav$")),
    (None, re.compile(r"^dialogue_(\d+)_round_(\d+)_([A-Za-z0-9_+\-]+)\.wav$")),
)
#: the published conversation-quality layout (notes §1): a folder per round, a file per dialogue
QUALITY_DIR = re.compile(r"^turn(\d+)$")
QUALITY_SUFFIX = ".mp3"
#: the files a recordings folder is searched for (others are ignored)
SUFFIXES = (".wav", QUALITY_SUFFIX)
NAMING_HINT = ("dialogue_<N>_round_<R>_<scenario>.wav, dialogue_instruction_following_<N>_round_<R>_<scenario>.wav, "
               "dialogue_safety_<N>_round_<R>_<scenario>.wav or turn<K>/<id>.mp3")
#: a file may end this much before the replayed episode does (silence is assumed after its end):
#: the scheduler's confirmed silence after the reply and the round gap
SHORT_SLACK = samples(CONFIRM_SILENCE_S + ROUND_GAP_S)
#: and run on this much after it
LONG_SLACK = samples(5.0)
#: the left channel "holds" a replayed part when their normalised correlation reaches this
HOLDS = 0.8
#: what the model's name gets in every report of recordings scored this way
IMPORTED = "(imported)"


@dataclass(frozen=True)
class RecordingName:
    """One file's name, parsed."""

    path: Path
    dimension: str | None  # "instruction" | "safety" from the prefix, "quality" from turn<K>/; None: plain
    index: int | None  # N as written; None in the quality layout
    round: int
    scenario: str | None  # as written; None in the quality layout (the name says no feature)
    dialogue_id: str | None = None  # the quality layout's <id>

    @property
    def shown(self) -> str:
        """The name as the folder holds it (``turn<K>/<id>.mp3`` keeps its folder)."""
        return self.path.name if self.dialogue_id is None else f"{self.path.parent.name}/{self.path.name}"


@dataclass(frozen=True)
class Matched:
    """A file and the suite round it records."""

    name: RecordingName
    dialogue: Dialogue
    round: int


@dataclass
class Replayed:
    """One file replayed as a ``gt`` episode."""

    matched: Matched
    scenario: MTRScenario
    events: list[dict[str, Any]]
    track: np.ndarray  # the model track (int16, 24 kHz)
    sha256: str  # of the file's bytes
    rate: int  # the file's sample rate
    moved: list[str] = field(default_factory=list)  # parts placed elsewhere in the file than the replay placed them


def parse_name(path: Path) -> RecordingName:
    turn = QUALITY_DIR.match(path.parent.name)
    if turn and path.suffix.lower() == QUALITY_SUFFIX and path.stem:
        return RecordingName(path, "quality", None, int(turn.group(1)), None, dialogue_id=path.stem)
    for dim, pat in NAME_PATTERNS:
        m = pat.match(path.name)
        if m:
            return RecordingName(path, dim, int(m.group(1)), int(m.group(2)), m.group(3))
    raise BadRecording(f"{path}: not a published recording name (expected {NAMING_HINT})")


def label_matches(label: str, spec: Round) -> bool:
    """Whether a file name's scenario label names the round's features: one feature, or a published
    combination (``interruption_pause-handling``); a round imported from the ``woPAUSE`` audio has
    no pause, while its published label still names one."""
    named = features_of(label)
    if named is None:
        return False
    if spec.source is not None and spec.source.audio.startswith("woPAUSE/"):
        named = tuple(f for f in named if f != "pause") or ("smooth",)
    return set(named) == set(spec.features)


def _audio_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES]


def recording_files(folder: Path) -> list[Path]:
    """The ``.wav`` and ``.mp3`` files of ``folder`` and of its ``turn<K>/`` folders (no deeper),
    sorted; other files and folders are ignored."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadRecording(f"{folder}: not a directory")
    files = _audio_files(folder)
    for sub in folder.iterdir():
        if sub.is_dir() and QUALITY_DIR.match(sub.name):
            files += _audio_files(sub)
    if not files:
        raise BadRecording(f"{folder}: no .wav or .mp3 recordings (expected {NAMING_HINT})")
    return sorted(files)


def _dialogue(suite: Suite, n: RecordingName, index_base: int) -> tuple[Dialogue | None, str]:
    """The dialogue a name points at, and how to name it in a message (or None and why not)."""
    if n.dialogue_id is not None:
        by_id = {d.dialogue_id: d for d in suite.dialogues}
        d = by_id.get(n.dialogue_id)
        if d is None:
            return None, (f"{n.path}: the suite has no dialogue {n.dialogue_id!r} (in turn<K>/<id>.mp3, <id> is a "
                          "dialogue_id of scenarios.jsonl)")
        return d, f"dialogue {d.dialogue_id}"
    pos = (n.index or 0) - index_base
    if not 0 <= pos < len(suite.dialogues):
        return None, (f"{n.path}: dialogue {n.index}: the suite has dialogues {index_base}-"
                      f"{len(suite.dialogues) - 1 + index_base} (N is the position in scenarios.jsonl)")
    d = suite.dialogues[pos]
    return d, f"dialogue {n.index} ({d.dialogue_id})"


def match_files(suite: Suite, files: Sequence[Path], *, index_base: int = 1) -> list[Matched]:
    """Every file matched to its dialogue and round (module docstring), or BadRecording naming
    each file that does not match."""
    bad: list[str] = []
    out: list[Matched] = []
    seen: dict[tuple[str, int], RecordingName] = {}
    for path in files:
        try:
            n = parse_name(path)
        except BadRecording as exc:
            bad.append(str(exc))
            continue
        d, which = _dialogue(suite, n, index_base)
        if d is None:
            bad.append(which)
            continue
        spec = next((r for r in d.rounds if r.round == n.round), None)
        if spec is None:
            bad.append(f"{path}: {which} has no round {n.round} (rounds 1-{len(d.rounds)})")
            continue
        if n.scenario is not None and not label_matches(n.scenario, spec):
            bad.append(f"{path}: round {n.round} of {which} is {spec.label()}, the name says {n.scenario!r}")
            continue
        have = spec.task.dimension if spec.task is not None else None
        if n.dimension is not None and have != n.dimension:
            bad.append(f"{path}: the name says a {n.dimension} round, but round {n.round} of {which} "
                       f"has {'no task' if have is None else f'a {have} task'}")
            continue
        other = seen.get((d.dialogue_id, n.round))
        if other is not None:
            bad.append(f"{path}: {which} round {n.round} again (also {other.shown}); one file per round")
            continue
        seen[(d.dialogue_id, n.round)] = n
        out.append(Matched(n, d, n.round))
    if bad:
        raise BadRecording(f"{len(bad)} file(s) do not match the suite {suite.root}:\n" + "\n".join(bad))
    return out


def _holds(recorded: np.ndarray, replayed: np.ndarray, span: Span) -> bool:
    a, b = span
    x = recorded[a:b].astype(np.float64)
    y = replayed[a:b].astype(np.float64)
    if len(x) < len(y):
        x = np.pad(x, (0, len(y) - len(x)))
    ny = float(np.sqrt(np.dot(y, y)))
    if ny == 0.0:  # a silent clip: nothing to find
        return True
    nx = float(np.sqrt(np.dot(x, x)))
    return nx > 0.0 and float(np.dot(x, y)) / (nx * ny) >= HOLDS


def source_events(r: Round, times: SourceTimes, end: int) -> list[dict[str, Any]]:
    """The events of round ``r`` live on its published timeline (``times``, from the published-layout
    import), ending at the next round's user turn or at ``end``: what a published recording of it
    is scored on, the file's own times, nothing moved."""
    at = lambda x: round(x * STREAM_RATE)  # noqa: E731
    n = r.round
    out = [Event(at(times.user_start), "round.start", {"round": n, "feature": r.feature, "live": True,
                                                         **({"features": list(r.features)} if r.overlay else {})}),
           Event(at(times.user_start), "user.start", {"round": n, "part": 1}),
           Event(at(times.user_end), "user.end", {"round": n})]
    if r.pause is not None and times.pause_start is not None and times.pause_end is not None:
        out += [Event(at(times.pause_start), "pause.start", {"round": n}),
                Event(at(times.pause_end), "pause.end", {"round": n}),
                Event(at(times.pause_end), "user.start", {"round": n, "part": 2})]
    for kind, a, b in (("barge_in", times.interruption_start, times.interruption_end),
                       ("background", times.background_start, times.background_end)):
        if getattr(r, kind) is not None and a is not None and b is not None:
            out += [Event(at(a), f"{kind}.start", {"round": n}), Event(at(b), f"{kind}.end", {"round": n})]
    stop = end if times.next_user_start is None else min(end, at(times.next_user_start))
    out.append(Event(max(stop, max(e.t for e in out)), "round.end", {"round": n}))
    return [e.to_json() for e in sorted(out, key=lambda e: e.t)]  # stable: same-time events keep their order


def _replay_source(suite_path: str | Path, m: Matched, spec: Round, times: SourceTimes, *, swap: bool) -> Replayed:
    """A published-layout recording of a round imported with its times: scored on the file's own
    timeline (:func:`source_events`), the right channel as the model's track, unchanged."""
    path = m.name.path
    rec = read_recording([path], swap=swap)
    suite = Suite.load(suite_path)
    events = source_events(spec, times, len(rec.model))
    (live,) = live_rounds(Event.from_json(e) for e in events)
    parts = [spec.user] + ([spec.pause.continuation] if spec.pause else [])
    for i, (u, c) in enumerate(zip(live.user, parts)):
        clip = suite.load_clip(c.clip)
        placed = np.zeros(max(len(rec.user), u[0] + len(clip)), np.int16)
        placed[u[0]:u[0] + len(clip)] = clip
        if u[1] > len(rec.user) or not _holds(rec.user, placed, (u[0], u[0] + len(clip))):
            raise BadRecording(f"{path}: the left channel does not hold the user's turn {i + 1} of round {m.round} "
                               f"at {u[0] / STREAM_RATE:.2f} s (its published time): not this round's recording, "
                               "or the channels are the other way (--swap)")
    return Replayed(matched=m, scenario=scenario_of(m.dialogue, "gt", m.round), events=events, track=rec.model,
                    sha256=hashlib.sha256(path.read_bytes()).hexdigest(), rate=int(sf.info(str(path)).samplerate))


def replay(suite_path: str | Path, m: Matched, *, swap: bool = False) -> Replayed:
    """One matched file as a ``gt`` episode of its round (module docstring); BadRecording (naming
    the file) when it is mono, unreadable, too short or too long, or does not hold the round. A
    round imported from the published layout is scored on its published times instead
    (:func:`source_events`)."""
    path = m.name.path
    spec = next(r for r in m.dialogue.rounds if r.round == m.round)
    if spec.source is not None:
        return _replay_source(suite_path, m, spec, spec.source, swap=swap)
    rec = read_recording([path], swap=swap)  # stereo only; any rate, resampled to 24 kHz
    rate = int(sf.info(str(path)).samplerate)
    scenario = scenario_of(m.dialogue, "gt", m.round)
    core = open_episode(str(suite_path), scenario, suite_hash=None, audio_hash=None)
    n = core.frame
    events: list[dict[str, Any]] = []
    track, room = [], []
    pos = 0
    while (item := core.next_room()) is not None:
        events += [e.to_json() for e in item.events]
        frame = rec.model[pos:pos + n]
        if len(frame) < n:
            frame = np.pad(frame, (0, n - len(frame)))
        track.append(core.feed_assistant(frame).pcm)
        room.append(item.pcm)
        pos += n
    core.finish()
    played = np.concatenate(track)
    expected, got = len(played), len(rec.user)
    mixed = np.concatenate(room)
    (live,) = live_rounds(Event.from_json(e) for e in events)
    for i, u in enumerate(live.user):
        if u[1] <= got and not _holds(rec.user, mixed, u):
            raise BadRecording(f"{path}: the left channel does not hold the user's turn {i + 1} of round {m.round} "
                               f"at {u[0] / STREAM_RATE:.2f}-{u[1] / STREAM_RATE:.2f} s: not this round's "
                               "recording, or the channels are the other way (--swap)")
    if got < expected - SHORT_SLACK:
        raise BadRecording(f"{path}: {got / STREAM_RATE:.2f} s, but round {m.round} with this model channel runs "
                           f"to {expected / STREAM_RATE:.2f} s (a file may end at most "
                           f"{SHORT_SLACK / STREAM_RATE:.1f} s early): cut short, or not this round")
    if got > expected + LONG_SLACK:
        raise BadRecording(f"{path}: {got / STREAM_RATE:.2f} s, but round {m.round} with this model channel ends "
                           f"at {expected / STREAM_RATE:.2f} s (at most {LONG_SLACK / STREAM_RATE:.1f} s more is "
                           "accepted): not a one-round recording of this suite's round")
    parts = [("barge-in", live.barge_in), ("background voice", live.background)]
    parts += [(f"backchannel {i + 1}", b) for i, b in enumerate(live.backchannels)]
    moved = [f"round {m.round} {what} at {s[0] / STREAM_RATE:.2f} s" for what, s in parts
             if s is not None and not _holds(rec.user, mixed, s)]
    return Replayed(matched=m, scenario=scenario, events=events, track=played,
                    sha256=hashlib.sha256(path.read_bytes()).hexdigest(), rate=rate, moved=moved)
