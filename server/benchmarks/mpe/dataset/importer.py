"""``mpe dataset import``: an external manifest (JSONL or CSV) becomes a normal suite (DESIGN §2).

A :class:`ImportMapping` names, for each of our fields, the manifest field that holds it,
maps the manifest's turn labels onto T/N1/N2/N3/N4Q/N4R and its condition values onto
explicit/implicit. Two shapes are read: one row per turn (``shape="turns"``; rows of one
scenario version are grouped by ``scenario_id`` + ``condition`` in manifest order) and one
object per scenario version (``shape="scenarios"``; its ``turns`` field lists the turns).
Clip paths are relative to the manifest; every clip is converted to 24 kHz mono 16-bit WAV
under ``DIR/clips`` and ``duration_s`` is taken from the audio. The written suite is then
checked with :func:`check_suite`, the rules and messages of ``mpe dataset validate``; each
problem is located at the manifest row it comes from.
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import soundfile as sf
import soxr
from pydantic import BaseModel, Field, ValidationError

from server.benchmarks.mpe.dataset.build import PREAMBLE_CLIP, PREAMBLE_TEXT
from server.benchmarks.mpe.suite import (
    LABELS,
    SPEAKERS,
    UTTERANCE_TYPES,
    Preamble,
    Problem,
    Scenario,
    Suite,
    SuiteError,
    SuiteMeta,
    Turn,
    bucket_of,
    check_suite,
    write_suite,
)
from server.engine.suitedir import CLIP_RATE, format_validation_error

#: Our fields a mapping may name (``fields``: ours -> the manifest's).
OUR_FIELDS: tuple[str, ...] = ("scenario_id", "pair_id", "condition", "label", "speaker", "text", "clip",
                               "addressee", "utterance_type", "gold_answer", "turns")
#: Our fields every manifest must provide.
REQUIRED_FIELDS: tuple[str, ...] = ("scenario_id", "condition", "label", "speaker", "text", "clip", "gold_answer")


class ImportMapping(BaseModel):
    """How a manifest's fields and values map onto a suite's (the ``--mapping`` JSON file)."""

    shape: Literal["turns", "scenarios"] = "turns"
    fields: dict[str, str] = Field(default_factory=dict)  # ours -> theirs; unnamed fields keep our name
    labels: dict[str, str] = Field(default_factory=dict)  # theirs -> T/N1/N2/N3/N4Q/N4R
    conditions: dict[str, str] = Field(default_factory=dict)  # theirs -> explicit/implicit
    # theirs -> device_request/human_request/statement/self_talk (the optional utterance_type field)
    utterance_types: dict[str, str] = Field(default_factory=dict)
    speakers: dict[str, str] = Field(default_factory=dict)  # theirs -> A-D; unmapped: A-D by first appearance
    preamble_clip: str | None = None  # relative to the manifest; the spoken duty instruction
    preamble_text: str = PREAMBLE_TEXT
    name: str | None = None

    def column(self, ours: str) -> str:
        return self.fields.get(ours, ours)


@dataclass(frozen=True)
class ImportResult:
    """The imported suite (or None when the manifest could not be turned into one) and every problem."""

    suite: Suite | None
    problems: list[Problem]


@dataclass
class _Row:
    line: int
    data: dict[str, Any]


def _read_rows(manifest: Path) -> list[_Row]:
    text = manifest.read_text(encoding="utf-8")
    if manifest.suffix.lower() == ".csv":
        # Line 1 is the header: data row k sits on line k + 1 (no multi-line cells).
        return [_Row(i + 2, dict(r)) for i, r in enumerate(csv.DictReader(text.splitlines()))]
    rows = []
    for i, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            try:
                rows.append(_Row(i, json.loads(raw)))
            except json.JSONDecodeError as e:
                raise SuiteError(f"{manifest.name}:{i}: not JSON ({e.msg})") from e
    return rows


def _convert_clip(src: Path, dest: Path) -> float:
    """Write ``src`` as 24 kHz mono 16-bit WAV at ``dest`` (soxr resampling); return its duration."""
    audio, rate = sf.read(str(src), dtype="float32", always_2d=True)
    mono = audio.mean(axis=1)
    if rate != CLIP_RATE:
        mono = soxr.resample(mono, rate, CLIP_RATE)
    dest.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(dest), np.clip(mono, -1.0, 1.0), CLIP_RATE, subtype="PCM_16", format="WAV")
    return sf.info(str(dest)).frames / CLIP_RATE


class _Importer:
    def __init__(self, manifest: Path, out: Path, mapping: ImportMapping) -> None:
        self.manifest, self.out, self.m = manifest, out, mapping
        self.base = manifest.parent
        self.problems: list[Problem] = []
        self.turn_lines: dict[tuple[str, str, int], int] = {}  # (scenario_id, condition, idx) -> row line
        self.scenario_lines: dict[tuple[str, str], int] = {}

    def add(self, rule: str, message: str, line: int, **kw: Any) -> None:
        self.problems.append(Problem(rule=rule, message=message, file=self.manifest.name, line=line, **kw))

    def get(self, data: dict[str, Any], ours: str, line: int) -> Any:
        col = self.m.column(ours)
        if col not in data or data[col] in (None, ""):
            if ours in REQUIRED_FIELDS:
                self.add("manifest-field", f"field {col!r} ({ours}) is missing", line)
            return None
        return data[col]

    def turn_records(self, rows: list[_Row]) -> list[tuple[_Row, dict[str, Any]]]:
        """(row of the turn, its data merged with its scenario's fields) for both shapes."""
        if self.m.shape == "turns":
            return [(r, r.data) for r in rows]
        out = []
        for r in rows:
            turns = self.get(r.data, "turns", r.line)
            if not isinstance(turns, list):
                self.add("manifest-field", f"field {self.m.column('turns')!r} (turns) is not a list", r.line)
                continue
            for t in turns:
                out.append((r, {**r.data, **t} if isinstance(t, dict) else r.data))
        return out

    def run(self) -> Suite | None:
        rows = _read_rows(self.manifest)
        groups: dict[tuple[str, str], list[tuple[_Row, dict[str, Any]]]] = defaultdict(list)
        for row, data in self.turn_records(rows):
            sid, cond_raw = self.get(data, "scenario_id", row.line), self.get(data, "condition", row.line)
            if sid is None or cond_raw is None:
                continue
            cond = self.m.conditions.get(str(cond_raw), str(cond_raw))
            if cond not in ("explicit", "implicit"):
                self.add("manifest-condition", f"condition {cond_raw!r} maps to no condition "
                         "(explicit/implicit; see the mapping's conditions)", row.line)
                continue
            groups[(str(sid), cond)].append((row, data))
        scenarios = [sc for key, members in groups.items() if (sc := self.scenario(key, members)) is not None]
        preamble = self.preamble()
        used = sorted({t.speaker for sc in scenarios for t in sc.turns} & SPEAKERS)
        meta = SuiteMeta(name=self.m.name or self.out.resolve().name, version="1", generator="import",
                         seed=0, voices={s: f"imported:{s}" for s in used}, preamble=preamble,
                         source=self.manifest.name)
        if self.problems:
            # Nothing is written; the rules of validate still run on the scenarios as read.
            self.problems += check_suite(Suite(self.out, meta, scenarios), check_audio=False)
            return None
        write_suite(self.out, meta, scenarios)
        return Suite.load(self.out)

    def preamble(self) -> Preamble:
        if self.m.preamble_clip is None:
            self.add("manifest-preamble", "the mapping names no preamble_clip (the spoken duty instruction)", 1,
                     scenario="preamble")
            return Preamble(text=self.m.preamble_text, clip=PREAMBLE_CLIP, duration_s=0.0)
        dur = self.clip(self.m.preamble_clip, PREAMBLE_CLIP, 1, scenario="preamble")
        return Preamble(text=self.m.preamble_text, clip=PREAMBLE_CLIP, duration_s=dur)

    def clip(self, rel: str, dest_rel: str, line: int, **kw: Any) -> float:
        src = self.base / rel
        if not src.is_file():
            self.add("clip-exists", f"clip {rel!r} does not exist (relative to {self.manifest.name})", line, **kw)
            return 0.0
        try:
            return _convert_clip(src, self.out / dest_rel)
        except (sf.LibsndfileError, RuntimeError, OSError) as e:
            self.add("clip-exists", f"clip {rel!r} is not readable audio ({e})", line, **kw)
            return 0.0

    def scenario(self, key: tuple[str, str], members: list[tuple[_Row, dict[str, Any]]]) -> Scenario | None:
        sid, cond = key
        where = f"{sid}/{cond}"
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{sid}_{cond}")
        first = members[0][0].line
        self.scenario_lines[key] = first
        speaker_map = dict(self.m.speakers)
        turns: list[Turn] = []
        for idx, (row, data) in enumerate(members):
            self.turn_lines[(sid, cond, idx)] = row.line
            label_raw = self.get(data, "label", row.line)
            label = self.m.labels.get(str(label_raw), str(label_raw)) if label_raw is not None else None
            spk_raw = self.get(data, "speaker", row.line)
            if spk_raw is not None and str(spk_raw) not in speaker_map:
                free = [s for s in sorted(SPEAKERS) if s not in speaker_map.values()]
                speaker_map[str(spk_raw)] = free[0] if free else str(spk_raw)
            rel = self.get(data, "clip", row.line)
            dur = self.clip(str(rel), f"clips/{stem}_{idx:03d}.wav", row.line, scenario=where,
                            turn=idx) if rel is not None else 0.0
            addressee = self.get(data, "addressee", row.line)
            if addressee is not None:
                addressee = speaker_map.get(str(addressee), str(addressee))
            kind = self.get(data, "utterance_type", row.line)
            if kind is not None:
                kind = self.m.utterance_types.get(str(kind), str(kind))
            turns.append(Turn(idx=idx, speaker=speaker_map.get(str(spk_raw), ""), label=label or "",
                              text=str(self.get(data, "text", row.line) or ""),
                              clip=f"clips/{stem}_{idx:03d}.wav", duration_s=round(dur, 6),
                              addressee=addressee, utterance_type=kind))
        data0 = members[0][1]
        gold = self.get(data0, "gold_answer", first)
        pair = self.get(data0, "pair_id", first) or sid
        t_pos = [i for i, t in enumerate(turns) if t.label == "T"]
        return Scenario(scenario_id=sid, pair_id=str(pair), condition=cond,
                        n_speakers=len({t.speaker for t in turns}),
                        t_bucket=bucket_of(t_pos[0], len(turns)) if len(t_pos) == 1 else "",
                        attributes={}, gold_answer=str(gold or ""), turns=turns)

    def locate(self, p: Problem) -> Problem:
        """A suite problem, moved to the manifest row of its turn (or of its scenario's first turn)."""
        line = None
        if p.scenario and "/" in p.scenario:
            sid, cond = p.scenario.rsplit("/", 1)
            line = (self.turn_lines.get((sid, cond, p.turn)) if p.turn is not None else None) \
                or self.scenario_lines.get((sid, cond))
        elif p.pair is not None:
            line = min((ln for (sid, _), ln in self.scenario_lines.items() if sid == p.pair), default=None)
        return replace(p, file=self.manifest.name, line=line if line is not None else p.line)


def load_mapping(path: Path | None) -> ImportMapping:
    """The ``--mapping`` JSON file (or the identity mapping)."""
    if path is None:
        return ImportMapping()
    try:
        return ImportMapping.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except ValidationError as e:
        raise SuiteError(f"{path}: not a valid mapping ({format_validation_error(e)})") from e


def import_manifest(manifest: Path, out: Path, mapping: ImportMapping) -> ImportResult:
    """Import ``manifest`` into the suite directory ``out`` and check it (§2, the rules of validate).

    Problems of the manifest itself (a missing field or clip, an unmapped label) stop the
    import before anything is written to suite.json; problems of the written suite name the
    manifest row they come from.
    """
    manifest, out = Path(manifest), Path(out)
    unknown = sorted(set(mapping.fields) - set(OUR_FIELDS))
    if unknown:
        raise SuiteError(f"mapping names unknown field(s) {', '.join(unknown)} (ours: {', '.join(OUR_FIELDS)})")
    bad = sorted(v for v in mapping.labels.values() if v not in LABELS)
    if bad:
        raise SuiteError(f"mapping's labels map onto {', '.join(bad)} (allowed: {', '.join(sorted(LABELS))})")
    bad = sorted(v for v in mapping.utterance_types.values() if v not in UTTERANCE_TYPES)
    if bad:
        raise SuiteError(f"mapping's utterance_types map onto {', '.join(bad)} (allowed: {', '.join(UTTERANCE_TYPES)})")
    imp = _Importer(manifest, out, mapping)
    suite = imp.run()
    problems = imp.problems if suite is None else check_suite(suite, check_audio=True)
    return ImportResult(suite, [imp.locate(p) for p in problems])
