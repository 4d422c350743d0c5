"""Importer of the published MTR-DuplexBench dataset layout (``mpe dataset import ROOT --format
published``; docs/mtr.md "The published data"): the scenario encodings and their audio become a
voiced suite whose clips are the published user-channel audio, cut, never re-voiced.

The layout, as the published README shows it (notes §1; the dataset's ``data/`` folder, or its
parent)::

    ROOT/Scenarios_encoding/single_scenario/scenario_encoding_{smooth,interruption,pause,background}.json
    ROOT/Scenarios_encoding/multi_scenarios/scenario_encoding_{1,2,3,4}.json
    ROOT/Conversational_Features/original/*.wav     the source audio
    ROOT/Conversational_Features/woPAUSE/*.wav      the same without the pauses

**Entries** are read as :mod:`.encoding` reads them (``dialogue_id``, ``round_num``, ``scenario``
with the published labels, combinations included, and the ``timestamp`` keys), except that texts
are optional: where given they are kept, where not the clip has none (the suite is voiced; what is
said matters only to a task round's judge). Every round needs ``user_start/end`` and
``model_start/end``, and each feature its own times.

**Audio.** Which file belongs to a dialogue is not stated by the dataset's README; the importer
takes the file an entry names (``audio``, ``audio_path`` or ``wav``: its base name, looked up in
the variant's folder), else ``<dialogue_id>.wav``. Any sample rate (resampled to 24 kHz); stereo
files are left = user, right = model (the published channel order, notes §1), mono files are the
user's side alone. The times are seconds from the file's start, the whole dialogue on one timeline.

**Clips** (24 kHz mono, from the file): ``user`` is the left channel over ``user_start``–
``user_end`` (a pause round: up to ``pause_start``, and the ``continuation`` from ``pause_end``);
a ``barge_in`` over ``interruption_start``–``interruption_end``, a ``background`` voice over
``background_start``–``background_end``; the ground-truth ``assistant`` reply is the right channel
from ``model_start`` (to ``model_end``; an interruption round: to ``interruption_end``, and the
answer to the barge-in from there to ``model_end``). A mono source has no ground truth: those clips
are silence of the same length (``gt`` history then gives the model silence for its earlier
replies; ``suite.json`` ``voices`` says so). Placements are the published ones: a barge-in
``interruption_start − model_start`` after the model's onset, a background voice
``background_start − model_start``, a pause ``pause_end − pause_start``.

**woPAUSE.** The README does not say how these files are cut; they are taken as the original
files with every pause (``pause_start``–``pause_end`` of the dialogue's rounds) removed, so each
time moves earlier by the pauses removed before it, and the rounds carry no pause (a pause round
becomes a smooth one). The round's :class:`~.suite.SourceTimes` are the variant's own timeline.

Every round keeps its times (:class:`~.suite.SourceTimes`): a recording of the round made in the
published way (the source audio on the left, the model on the right) is scored offline on them
(``mpe score DIR --suite``, :mod:`..recordings`). Every bad entry or file is named and nothing is
written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import soundfile as sf

from server.benchmarks.mtr.dataset.assemble import clip_rel
from server.benchmarks.mtr.dataset.build import suite_meta, write_voiced_suite
from server.benchmarks.mtr.dataset.encoding import TIME_KEYS, Entry, read_dialogue_entries, set_name_of
from server.benchmarks.mtr.dataset.schema import END_TOLERANCE_S, ImportProblems
from server.benchmarks.mtr.segmentation.inputs import to_stream_rate
from server.benchmarks.mtr.suite import Background, BargeIn, Clip, Dialogue, Pause, Round, SourceTimes, Suite
from server.core.timebase import STREAM_RATE
from server.datasets.errors import DatasetError

ENCODINGS_DIR = "Scenarios_encoding"
#: the encoding folders of the conversational-feature sets (the others are the dimension sets')
FEATURE_ENCODINGS = ("single_scenario", "multi_scenarios")
AUDIO_DIR = "Conversational_Features"
AUDIO_VARIANTS = ("original", "woPAUSE")
#: the entry keys that may name a dialogue's audio file
AUDIO_KEYS = ("audio", "audio_path", "wav")


def dataset_root(path: Path) -> Path:
    """The folder holding ``Scenarios_encoding/``: ``path`` or its ``data/``."""
    for root in (Path(path), Path(path) / "data"):
        if (root / ENCODINGS_DIR).is_dir():
            return root
    raise DatasetError(f"{path}: not the published layout (no {ENCODINGS_DIR}/ in it or in its data/)")


def encoding_files(root: Path, only: list[str] | None = None) -> list[Path]:
    """The encodings to import: ``only`` (paths under ``Scenarios_encoding/``), or every feature set's."""
    base = root / ENCODINGS_DIR
    if only:
        files = [base / o for o in only]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise DatasetError(f"no such encoding file: {', '.join(missing)}")
        return files
    files = sorted(f for d in FEATURE_ENCODINGS for f in (base / d).glob("*.json"))
    if not files:
        raise DatasetError(f"{base}: no encodings under {' or '.join(FEATURE_ENCODINGS)}/")
    return files


@dataclass(frozen=True)
class Source:
    """A dialogue's audio at 24 kHz: the user's side, and the model's (None: a mono file)."""

    rel: str  # relative to the audio folder: <variant>/<name>
    user: np.ndarray
    model: np.ndarray | None

    @property
    def seconds(self) -> float:
        return len(self.user) / STREAM_RATE


def _source(folder: Path, variant: str, entries: list[Entry]) -> Source | str:
    named = next((str(en.raw[k]) for en in entries for k in AUDIO_KEYS if isinstance(en.raw.get(k), str)), None)
    name = Path(named).name if named else f"{entries[0].dialogue_id}.wav"
    path = folder / variant / name
    if not path.is_file():
        return f"{entries[0].where}: dialogue {entries[0].dialogue_id}: no audio {path}"
    try:
        pcm, rate = sf.read(str(path), dtype="int16", always_2d=True)
    except (OSError, RuntimeError) as exc:
        return f"{path}: cannot read ({exc})"
    if pcm.shape[1] > 2:
        return f"{path}: {pcm.shape[1]} channels; expected mono (the user) or stereo (left = user, right = model)"
    user = to_stream_rate(pcm[:, 0], rate)
    model = to_stream_rate(pcm[:, 1], rate) if pcm.shape[1] == 2 else None
    return Source(f"{variant}/{name}", user, model)


def _without_pauses(entries: list[Entry]) -> list[Entry]:
    """The woPAUSE timeline (module docstring): every time moved earlier by the pauses removed before
    it, and the rounds without their pause."""
    pauses = sorted((en.times["pause_start"], en.times["pause_end"]) for en in entries
                    if "pause_start" in en.times and "pause_end" in en.times)

    def shift(t: float) -> float:
        return round(t - sum(min(b, t) - a for a, b in pauses if a < t), 3)

    out = []
    for en in entries:
        times = {k: shift(v) for k, v in en.times.items() if k not in ("pause_start", "pause_end")}
        feature = "smooth" if en.text.feature == "pause" else en.text.feature
        overlay = tuple(f for f in en.text.overlay if f != "pause")
        text = replace(en.text, feature=feature, overlay=overlay, continuation=None,
                       user=" ".join(x for x in (en.text.user, en.text.continuation or "") if x))
        out.append(replace(en, text=text, times=times))
    return out


def _round(en: Entry, src: Source, next_user: float | None) -> tuple[Round, dict[str, np.ndarray]] | list[str]:
    t, text, did, k = en.times, en.text, en.dialogue_id, en.round
    features = (text.feature, *text.overlay)
    p = [f"needs {key}" for key in ("user_start", "user_end", "model_start", "model_end") if key not in t]
    if "backchannel" in features:
        p.append("backchannel rounds have no published times (the published feature sets have none)")
    if p:
        return p
    late = [f"{key} ({v} s)" for key, v in t.items() if v > src.seconds + END_TOLERANCE_S]
    if late:
        return [f"{', '.join(late)} past the end of {src.rel} ({src.seconds:.2f} s)"]
    clips: dict[str, np.ndarray] = {}

    def cut(track: np.ndarray | None, a: float, b: float, part: str, said: str | None) -> Clip:
        lo, hi = round(a * STREAM_RATE), round(b * STREAM_RATE)
        pcm = np.zeros(hi - lo, np.int16) if track is None else np.ascontiguousarray(track[lo:hi])
        rel = clip_rel(did, k, part)
        clips[rel] = pcm
        return Clip(text=said or "", clip=rel, duration_s=len(pcm) / STREAM_RATE)

    m0 = t["model_start"]
    pause = "pause" in features
    user = cut(src.user, t["user_start"], t["pause_start"] if pause else t["user_end"], "user", text.user)
    r = Round(round=k, feature=text.feature, overlay=list(text.overlay), task=None, user=user,
              assistant=cut(src.model, m0, t["interruption_end"] if "interruption" in features else t["model_end"],
                            "assistant", text.assistant))
    if pause:
        r.pause = Pause(length_s=round(t["pause_end"] - t["pause_start"], 3),
                        continuation=cut(src.user, t["pause_end"], t["user_end"], "continuation", text.continuation))
    if "interruption" in features:
        if t["interruption_start"] < m0 or t["model_end"] <= t["interruption_end"]:
            return [f"interruption_start..interruption_end ({t['interruption_start']}..{t['interruption_end']}) must "
                    f"lie inside model_start..model_end ({m0}..{t['model_end']})"]
        b = cut(src.user, t["interruption_start"], t["interruption_end"], "barge_in", text.barge_in)
        resp = cut(src.model, t["interruption_end"], t["model_end"], "barge_in_response", text.barge_in_response)
        r.barge_in = BargeIn(**b.model_dump(), after_onset_s=round(t["interruption_start"] - m0, 3), response=resp)
    if "background" in features:
        if t["background_start"] < m0:
            return [f"background_start ({t['background_start']}) is before model_start ({m0})"]
        g = cut(src.user, t["background_start"], t["background_end"], "background", text.background)
        r.background = Background(**g.model_dump(), kind=text.background_kind or "speaker",  # type: ignore[arg-type]
                                  after_onset_s=round(t["background_start"] - m0, 3))
    r.source = SourceTimes(audio=src.rel, next_user_start=next_user,
                           **{key: t[key] for key in TIME_KEYS if key in t})
    return r, clips


def read_published(root: Path, *, audio: str = "original", encodings: list[str] | None = None,
                   ) -> tuple[list[tuple[Dialogue, dict[str, np.ndarray]]], bool]:
    """The dialogues of the published layout at ``root`` with their clips (module docstring), and
    whether a source was mono (no ground-truth replies)."""
    if audio not in AUDIO_VARIANTS:
        raise DatasetError(f"unknown audio variant {audio!r} ({', '.join(AUDIO_VARIANTS)})")
    root = dataset_root(root)
    files = encoding_files(root, encodings)
    folder = root / AUDIO_DIR
    bad: list[str] = []
    made: list[tuple[Dialogue, dict[str, np.ndarray]]] = []
    mono = False
    for f in files:
        try:
            by_dialogue = read_dialogue_entries(f, texts=False)
        except ImportProblems as exc:
            bad += exc.lines
            continue
        prefix = f"{f.stem.removeprefix('scenario_encoding_')}-" if len(files) > 1 else ""
        for did, entries in by_dialogue.items():
            src = _source(folder, audio, entries)
            if isinstance(src, str):
                bad.append(src)
                continue
            mono = mono or src.model is None
            if audio == "woPAUSE":
                entries = _without_pauses(entries)
            entries = [replace(en, dialogue_id=prefix + did) for en in entries]
            rounds, clips = [], {}
            for i, en in enumerate(entries):
                nxt = entries[i + 1].times.get("user_start") if i + 1 < len(entries) else None
                got = _round(en, src, nxt)
                if isinstance(got, list):
                    bad += [f"{en.where}: {m}" for m in got]
                    continue
                rounds.append(got[0])
                clips.update(got[1])
            if rounds:
                made.append((Dialogue(dialogue_id=prefix + did, set=set_name_of(rounds),
                                      topic=f"{f.parent.name}/{f.name} {did}", rounds=rounds), clips))
    if bad or not made:
        raise ImportProblems(bad or [f"{root}: no dialogues"])
    return made, mono


def import_published(root: Path, out: Path, *, audio: str = "original", encodings: list[str] | None = None,
                     name: str | None = None, force: bool = False) -> Suite:
    """Read the published layout at ``root`` and write a voiced suite to ``out``."""
    made, mono = read_published(root, audio=audio, encodings=encodings)
    voices = {"user": f"published:{audio}", "third": f"published:{audio}", "broadcast": f"published:{audio}",
              "assistant": f"published:{audio}" + (" (mono source: the ground truth is silence)" if mono else "")}
    meta = suite_meta(name=name or Path(out).resolve().name, seed=0, generator=f"import:published/{audio}")
    return write_voiced_suite(out, meta.model_copy(update={"voices": voices, "audio": None}), made, force=force)
