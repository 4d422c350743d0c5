#!/usr/bin/env python
"""Offline answer accuracy: how often a correct spoken answer is scored correct.

The oracle's voice (``piper:joe@1.0``, :mod:`server.benchmarks.mpe.oracle`) speaks gold
answers of the built-in suites: all of ``mini``'s answers and a seeded sample of ``full``'s
(text-only suites are generated into a temporary directory; speech comes from the TTS
cache of ``--data-dir``). Each answer is placed in an assistant track as the oracle speaks
it (digital silence around it), the detector finds its segments, and the scorer's own path
turns them into what the judge sees: :func:`~server.scoring.asr.pad_fragments` (per
``--pads``), :func:`~server.scoring.asr.join_fragments`, the ASR (per ``--asr``) and the rule
judge with the scenario's gold answer and answer keys.

Figures per ASR and padding:

* **scored correct**: correct answers judged CORRECT (mini, the full sample, both);
* **word accuracy**: 1 - word error rate of the transcript against the gold answer, both
  normalised as the rule judge does (lower case, numbers as digits);
* **false acceptance**: every transcript judged against the keys of five other answers
  that the first answer's own text does not satisfy: each CORRECT there accepts a wrong
  answer;
* **cost**: model load (seconds and resident memory it adds, on the first call), ASR
  seconds and the real-time factor (ASR seconds per second of audio).

Usage::

    python bench/answer_accuracy.py                          # tiny.en, no padding and 0.2 s
    python bench/answer_accuracy.py --sample 50 --pads 0.3   # quicker
    python bench/answer_accuracy.py --asr faster-whisper:/path/to/ct2-model --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from server.benchmarks.mpe.dataset.builtin import build_builtin  # noqa: E402
from server.benchmarks.mpe.judging import AnswerInput, RuleJudge  # noqa: E402
from server.benchmarks.mpe.oracle import VOICE  # noqa: E402
from server.benchmarks.mpe.suite import Suite  # noqa: E402
from server.core.detector import detect_segments  # noqa: E402
from server.core.timebase import STREAM_RATE  # noqa: E402
from server.scoring.asr import join_fragments, make_asr, pad_fragments  # noqa: E402
from server.scoring.judges import normalize  # noqa: E402
from server.settings import Settings  # noqa: E402
from server.tts import speak  # noqa: E402

SEED = 20260902
LEAD, TAIL = STREAM_RATE, 2 * STREAM_RATE  # silence around the answer in its track
FALSE_KEYS = 5  # other answers' keys each transcript is judged against


@dataclass(frozen=True)
class Item:
    suite: str
    scenario_id: str
    condition: str
    gold: str
    keys: list[list[str]] | None
    track: np.ndarray
    segments: list[tuple[int, int]]


@dataclass
class Row:
    asr: str
    pad_s: float
    mini: tuple[int, int]
    full: tuple[int, int]
    word_accuracy: float
    false_accepted: tuple[int, int]
    load_s: float
    load_mb: float
    asr_s: float
    audio_s: float
    failures: list[tuple[str, str]]

    @property
    def all(self) -> tuple[int, int]:
        return self.mini[0] + self.full[0], self.mini[1] + self.full[1]


def word_errors(ref: list[str], hyp: list[str]) -> int:
    """Word-level Levenshtein distance."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def answers(names: list[str], sample: int, tmp: Path) -> list[tuple[str, object]]:
    """(suite, scenario) of every mini answer and ``sample`` seeded full answers."""
    out: list[tuple[str, object]] = []
    for name in names:
        suite = Suite.load(build_builtin(name, tmp, audio=False))
        scenarios = list(suite.scenarios)
        if name != "mini" and sample < len(scenarios):
            scenarios = random.Random(SEED).sample(scenarios, sample)
        out += [(name, sc) for sc in scenarios]
    return out


def make_items(chosen: list[tuple[str, object]], data_dir: Path, console: Console) -> list[Item]:
    items = []
    for n, (name, sc) in enumerate(chosen, 1):
        speech = speak(sc.gold_answer, VOICE, data_dir)
        track = np.concatenate([np.zeros(LEAD, np.int16), speech, np.zeros(TAIL, np.int16)])
        segs = [(g.start, g.end) for g in detect_segments(track)]
        items.append(Item(name, sc.scenario_id, sc.condition, sc.gold_answer, sc.answer_keys, track, segs))
        if n % 50 == 0:
            console.print(f"voiced and detected {n}/{len(chosen)} answers")
    return items


def false_acceptance(judge: RuleJudge, items: list[Item], texts: list[str]) -> tuple[int, int]:
    """Each transcript against the keys of other answers that its own gold text fails."""
    rng = random.Random(SEED)
    accepted = total = 0
    for it, text in zip(items, texts):
        others = [o for o in items if o.gold != it.gold and judge.judge_answer(
            AnswerInput(gold_answer=o.gold, answer_keys=o.keys, transcript=it.gold)).label == "INCORRECT"]
        for o in rng.sample(others, min(FALSE_KEYS, len(others))):
            total += 1
            accepted += judge.judge_answer(
                AnswerInput(gold_answer=o.gold, answer_keys=o.keys, transcript=text)).label == "CORRECT"
    return accepted, total


def rss_mb() -> float:
    """Resident memory of this process now (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(spec: str, pad_s: float, items: list[Item], console: Console) -> Row:
    asr = make_asr(spec)
    judge = RuleJudge()
    pad = round(pad_s * STREAM_RATE)
    clips = [join_fragments(it.track, pad_fragments(it.segments, it.segments, len(it.track), pad)) for it in items]
    t, mem = time.monotonic(), rss_mb()
    asr.transcribe(clips[0])  # loads the model
    load_s, load_mb = time.monotonic() - t, rss_mb() - mem
    texts, asr_s = [], 0.0
    for clip in clips:
        t = time.monotonic()
        texts.append(asr.transcribe(clip).text)
        asr_s += time.monotonic() - t
    score = {"mini": [0, 0], "full": [0, 0]}
    errors = words = 0
    failures = []
    for it, text in zip(items, texts):
        ok = judge.judge_answer(AnswerInput(gold_answer=it.gold, answer_keys=it.keys, transcript=text)).label
        score[it.suite][0] += ok == "CORRECT"
        score[it.suite][1] += 1
        if ok != "CORRECT":
            failures.append((it.gold, text))
        ref = normalize(it.gold)
        errors += word_errors(ref, normalize(text))
        words += len(ref)
    row = Row(spec, pad_s, tuple(score["mini"]), tuple(score["full"]), 1 - errors / max(words, 1),
              false_acceptance(judge, items, texts), load_s - asr_s / len(clips), load_mb, asr_s,
              sum(len(c) for c in clips) / STREAM_RATE, failures)
    console.print(f"{spec} pad {pad_s:g} s: {row.all[0]}/{row.all[1]} scored correct, "
                  f"word accuracy {100 * row.word_accuracy:.1f}%, {asr_s:.0f} s of ASR")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--asr", default="faster-whisper", help="ASR specs, comma-separated (as for mpe score --asr)")
    ap.add_argument("--pads", default="0,0.2", help="fragment paddings in seconds, comma-separated")
    ap.add_argument("--sample", type=int, default=200, help="answers drawn from the full suite")
    ap.add_argument("--data-dir", type=Path, default=None, help="data dir whose TTS cache to use (default: settings)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    args = ap.parse_args()
    console = Console(stderr=True)
    data_dir = args.data_dir or Settings().data_dir
    with tempfile.TemporaryDirectory(prefix="mpe-bench-answers-") as tmp:
        chosen = answers(["mini", "full"], args.sample, Path(tmp))
    items = make_items(chosen, data_dir, console)
    rows = [measure(spec.strip(), float(p), items, console)
            for spec in args.asr.split(",") for p in args.pads.split(",")]

    table = Table(title=f"Correct spoken answers scored correct ({VOICE}, rule judge)")
    for col in ("ASR", "pad s", "mini", "full sample", "all", "word accuracy", "wrong accepted", "load s",
                "load MB", "ASR s", "real-time factor"):
        table.add_column(col, justify="right")
    for r in rows:
        a = r.all
        table.add_row(r.asr, f"{r.pad_s:g}", f"{r.mini[0]}/{r.mini[1]}", f"{r.full[0]}/{r.full[1]}",
                      f"{a[0]}/{a[1]} ({100 * a[0] / max(a[1], 1):.1f}%)", f"{100 * r.word_accuracy:.1f}%",
                      f"{r.false_accepted[0]}/{r.false_accepted[1]}", f"{r.load_s:.1f}", f"{r.load_mb:.0f}", f"{r.asr_s:.0f}",
                      f"{r.asr_s / max(r.audio_s, 1e-9):.2f}")
    out = Console(width=160)
    out.print(table)
    for r in rows:
        for gold, text in r.failures:
            out.print(f"  {r.asr} pad {r.pad_s:g}: {gold!r} heard as {text!r}", highlight=False)
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows]}, indent=2))


if __name__ == "__main__":
    main()
