"""Importer of Candor-style two-party recordings with transcripts (``mpe dataset import DIR --format
candor``; docs/mtr.md "Importers"): a quality suite whose rounds are the conversation's turns,
with the real audio cut from the recording.

Accepted layout, one conversation per transcript::

    DIR/<id>.csv                               speaker,start,end,text (a header line, then one line per utterance)
    DIR/<id>.wav                               stereo: left = the user, right = the other party
    (or DIR/<id>.user.wav + DIR/<id>.assistant.wav, two mono files)

``speaker`` is ``user`` or ``assistant`` (the other party, who plays the model's part; the
ground-truth replies are theirs); ``start`` and ``end`` are seconds from the recording's start,
``start < end``, within the recording, lines in order of ``start``; ``text`` is not empty. Every
bad line is named (``FILE:LINE: message``) and nothing is written.

Turns: consecutive lines of one speaker make one turn. A **round** is a user turn and the
assistant turn after it (a leading assistant turn and a last unanswered user turn are left out):
feature ``smooth``, task ``quality``; its ``user`` clip is the user's channel over the user turn,
its ``assistant`` clip the other channel over the reply, resampled to 24 kHz mono. A conversation
of more than ``rounds`` rounds becomes several dialogues (``<id>-1``, ``<id>-2``, …). The
suite is voiced (its clips are the recordings'); ``suite.json`` ``voices`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from server.benchmarks.mtr.dataset.assemble import clip_rel
from server.benchmarks.mtr.dataset.build import suite_meta, write_voiced_suite
from server.benchmarks.mtr.dataset.schema import END_TOLERANCE_S, ImportProblems, csv_rows
from server.benchmarks.mtr.segmentation.inputs import Recording, read_recording
from server.benchmarks.mtr.suite import Clip, Dialogue, Round, Suite, Task
from server.core.timebase import STREAM_RATE
from server.datasets.errors import DatasetError
from server.scoring.errors import BadRecording

COLUMNS = ("speaker", "start", "end", "text")
SPEAKERS = ("user", "assistant")
VOICES = {"user": "recording:user", "assistant": "recording:assistant"}


@dataclass(frozen=True)
class Utterance:
    speaker: str
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Conversation:
    conversation_id: str
    recording: Recording
    lines: list[Utterance]


def _audio(folder: Path, cid: str) -> Recording:
    stereo, user, other = folder / f"{cid}.wav", folder / f"{cid}.user.wav", folder / f"{cid}.assistant.wav"
    if stereo.is_file():
        return read_recording([stereo])
    if user.is_file() and other.is_file():
        return read_recording([user, other])
    raise BadRecording(f"{folder / (cid + '.csv')}: no recording for it ({stereo.name}, or {user.name} and "
                       f"{other.name})")


def read_conversation(transcript: Path) -> Conversation:
    """One transcript and its recording, checked line by line (module docstring)."""
    cid = transcript.stem
    rec = _audio(transcript.parent, cid)
    length = len(rec.user) / STREAM_RATE
    bad: list[str] = []
    lines: list[Utterance] = []
    last = 0.0
    for line, row in csv_rows(transcript, COLUMNS):
        where = f"{transcript}:{line}"
        speaker = (row.get("speaker") or "").strip().lower()
        text = (row.get("text") or "").strip()
        try:
            start, end = float(row.get("start") or ""), float(row.get("end") or "")
        except ValueError:
            bad.append(f"{where}: start and end must be seconds ({row.get('start')!r}, {row.get('end')!r})")
            continue
        if speaker not in SPEAKERS:
            bad.append(f"{where}: speaker {row.get('speaker')!r} is not user or assistant")
        elif not text:
            bad.append(f"{where}: no text")
        elif not 0 <= start < end:
            bad.append(f"{where}: start {start} is not before end {end} (or negative)")
        elif end > length + END_TOLERANCE_S:
            bad.append(f"{where}: ends at {end} s, after the recording ({length:.2f} s)")
        elif start < last:
            bad.append(f"{where}: starts at {start} s, before the line above ({last} s): lines go in order of start")
        else:
            lines.append(Utterance(speaker, start, end, text))
            last = start
    if bad:
        raise ImportProblems(bad)
    return Conversation(cid, rec, lines)


def turns(lines: list[Utterance]) -> list[Utterance]:
    """Consecutive lines of one speaker joined into one turn."""
    out: list[Utterance] = []
    for u in lines:
        if out and out[-1].speaker == u.speaker:
            p = out[-1]
            out[-1] = Utterance(p.speaker, p.start, max(p.end, u.end), f"{p.text} {u.text}")
        else:
            out.append(u)
    return out


def _cut(track: np.ndarray, u: Utterance) -> np.ndarray:
    return track[int(round(u.start * STREAM_RATE)):int(round(u.end * STREAM_RATE))]


def conversation_dialogues(c: Conversation, rounds: int) -> list[tuple[Dialogue, dict[str, np.ndarray]]]:
    """The dialogues of one conversation, each with its clips (relative path -> 24 kHz audio)."""
    ts = turns(c.lines)
    pairs = [(a, b) for a, b in zip(ts, ts[1:]) if a.speaker == "user" and b.speaker == "assistant"]
    chunks = [pairs[i:i + rounds] for i in range(0, len(pairs), rounds)]
    out = []
    for n, chunk in enumerate(chunks, start=1):
        did = c.conversation_id if len(chunks) == 1 else f"{c.conversation_id}-{n}"
        clips: dict[str, np.ndarray] = {}
        rs = []
        for k, (u, a) in enumerate(chunk, start=1):
            parts = []
            for part, turn, track in (("user", u, c.recording.user), ("assistant", a, c.recording.model)):
                rel = clip_rel(did, k, part)
                clips[rel] = _cut(track, turn)
                parts.append(Clip(text=turn.text, clip=rel, duration_s=len(clips[rel]) / STREAM_RATE))
            rs.append(Round(round=k, feature="smooth", task=Task(dimension="quality"), user=parts[0],
                            assistant=parts[1]))
        out.append((Dialogue(dialogue_id=did, set="quality", topic=f"candor {c.conversation_id}", rounds=rs), clips))
    return out


def import_candor(folder: Path, out: Path, *, rounds: int = 10, name: str | None = None,
                  force: bool = False) -> Suite:
    """Read every conversation of ``folder`` and write a voiced quality suite to ``out``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{folder}: the candor format takes a folder of <id>.csv transcripts and recordings")
    transcripts = sorted(folder.glob("*.csv"))
    if not transcripts:
        raise ImportProblems([f"{folder}: no <id>.csv transcripts"])
    bad: list[str] = []
    convs = []
    for t in transcripts:
        try:
            convs.append(read_conversation(t))
        except ImportProblems as exc:
            bad += exc.lines
        except BadRecording as exc:
            bad.append(str(exc))
    if bad:
        raise ImportProblems(bad)
    made = [x for c in convs for x in conversation_dialogues(c, rounds)]
    if not made:
        raise ImportProblems([f"{folder}: no user turn is answered by the assistant in any transcript"])
    meta = suite_meta(name=name or Path(out).resolve().name, seed=0, generator="import:candor").model_copy(
        update={"voices": VOICES, "audio": None})
    return write_voiced_suite(out, meta, made, force=force)
