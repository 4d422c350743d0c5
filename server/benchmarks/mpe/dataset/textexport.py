"""Export a suite as plain JSONL transcripts for text-only evaluation.

One line per scenario version, in suite order::

    {"scenario_id": "s0007", "pair_id": "p0007", "condition": "explicit", "n_speakers": 3,
     "t_bucket": "middle", "attributes": {...}, "gold_answer": "...", "answer_keys": [...],
     "t_index": 5, "transcript": "A: ...\\nB: ...",
     "turns": [{"idx": 0, "speaker": "A", "text": "...", "label": "N2", "addressee": "group"}]}

``transcript`` is what a text model would read (speaker letters and text only);
``turns`` keeps the labels and addressees for scoring. With ``labels=False`` both labels
and addressees are dropped from ``turns`` (and ``t_index`` from the record).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from server.benchmarks.mpe.suite import CONDITIONS, Suite
from server.datasets.errors import DatasetError
from server.files import atomic_write_bytes


def transcript_records(suite: Suite, *, conditions: tuple[str, ...] = CONDITIONS,
                       labels: bool = True) -> Iterator[dict[str, Any]]:
    for sc in suite.scenarios:
        if sc.condition not in conditions:
            continue
        rec: dict[str, Any] = {
            "scenario_id": sc.scenario_id, "pair_id": sc.pair_id, "condition": sc.condition,
            "n_speakers": sc.n_speakers, "t_bucket": sc.t_bucket, "attributes": dict(sc.attributes),
            "gold_answer": sc.gold_answer, "answer_keys": sc.answer_keys,
        }
        if labels:
            rec["t_index"] = sc.t_index
        rec["transcript"] = "\n".join(f"{t.speaker}: {t.text}" for t in sc.turns)
        rec["turns"] = [
            {"idx": t.idx, "speaker": t.speaker, "text": t.text,
             **({"label": t.label, "addressee": t.addressee} if labels else {})}
            for t in sc.turns
        ]
        yield rec


def export_text(suite: Suite, out: Path | str, *, conditions: tuple[str, ...] = CONDITIONS,
                labels: bool = True) -> int:
    """Write the JSONL file atomically; returns the number of records."""
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad or not conditions:
        raise DatasetError(f"conditions must be a non-empty subset of {', '.join(CONDITIONS)}")
    lines = [json.dumps(r, ensure_ascii=False, sort_keys=False) for r in
             transcript_records(suite, conditions=conditions, labels=labels)]
    atomic_write_bytes(Path(out), "".join(line + "\n" for line in lines).encode("utf-8"))
    return len(lines)
