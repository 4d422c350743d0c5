"""Importers of the published dimension sets' request files (DESIGN §12.5): AdvBench-style CSV
(``goal,target``: every round a harmful request, category ``advbench``) and Llama-Questions-style
question/answer files (JSONL objects ``{"question", "answer"}``, the answer a string or a list of
accepted answers, or CSV ``question,answer`` with alternatives separated by ``|``). Each file is
checked whole first; every bad line is named (``FILE:LINE: message``) and nothing is written.
The requests become text-only MTR suites of ``rounds``-round dialogues, delivered in the user's
turn; the ground-truth reply of a harmful request is a refusal, of a question its first answer.
Voice them with ``mpe dataset synthesize``. :func:`import_set` also dispatches the published
scenario encodings (:mod:`.encoding`, a text-only suite), Candor-style recordings
(:mod:`.candor`, a voiced quality suite) and the published dataset layout (:mod:`.published`, a
voiced suite of the published audio).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

from server.benchmarks.mtr.dataset.assemble import RoundText, assemble_round
from server.benchmarks.mtr.dataset.build import suite_meta, write_text_suite
from server.benchmarks.mtr.dataset.plan import dialogue_id
from server.benchmarks.mtr.dataset.requests import HarmfulRequest, Instruction, refusal
from server.benchmarks.mtr.dataset.schema import ImportProblems, csv_rows
from server.benchmarks.mtr.dataset.timing import Draw
from server.benchmarks.mtr.suite import Dialogue, Round, Suite, Task, check_suite
from server.datasets.errors import DatasetError

FORMATS = ("advbench", "llama-questions", "candor", "encoding", "published")
ADVBENCH_CATEGORY = "advbench"


def read_advbench(path: Path) -> list[HarmfulRequest]:
    out, bad = [], []
    for line, row in csv_rows(path, ("goal", "target")):
        goal = (row.get("goal") or "").strip()
        if not goal:
            bad.append(f"{path}:{line}: empty goal")
        else:
            out.append(HarmfulRequest(ADVBENCH_CATEGORY, goal))
    if bad or not out:
        raise ImportProblems(bad or [f"{path}: no requests"])
    return out


def _answers(value, where: str, bad: list[str]) -> tuple[str, ...]:
    answers = [value] if isinstance(value, str) else value if isinstance(value, list) else None
    if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        bad.append(f"{where}: the answer must be a non-empty string or a list of them")
        return ()
    return tuple(a.strip() for a in answers)


def read_llama_questions(path: Path) -> list[Instruction]:
    out, bad = [], []
    if path.suffix.lower() == ".csv":
        items = [(line, row.get("question"), (row.get("answer") or "").split("|")) for line, row in
                 csv_rows(path, ("question", "answer"))]
    else:
        items = []
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{path}: cannot read ({exc})") from None
        for line, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError as exc:
                bad.append(f"{path}:{line}: not JSON ({exc.msg})")
                continue
            if not isinstance(obj, dict):
                bad.append(f"{path}:{line}: not a JSON object")
                continue
            items.append((line, obj.get("question"), obj.get("answer")))
    for line, question, answer in items:
        where = f"{path}:{line}"
        if not isinstance(question, str) or not question.strip():
            bad.append(f"{where}: no question")
            continue
        answers = _answers([a for a in answer if a.strip()] if isinstance(answer, list) else answer, where, bad)
        if answers:
            q = question.strip()
            out.append(Instruction(q, answers[0][:1].upper() + answers[0][1:] + ("" if answers[0].endswith(".")
                                                                                   else "."), answers))
    if bad or not out:
        raise ImportProblems(bad or [f"{path}: no questions"])
    return out


def _rounds(n_items: int, rounds: int) -> list[list[int]]:
    return [list(range(i, min(i + rounds, n_items))) for i in range(0, n_items, rounds)]


def import_set(path: Path, out: Path, fmt: str, *, rounds: int = 10, seed: int = 0, name: str | None = None,
               force: bool = False, audio: str = "original", encodings: list[str] | None = None) -> Suite:
    """Read ``path`` in ``fmt`` (:data:`FORMATS`) and write an MTR suite to ``out`` (text-only; a
    Candor folder or the published layout give a voiced one, its clips cut from the recordings;
    ``audio`` and ``encodings``: the published layout's audio variant and encoding files)."""
    if rounds < 1:
        raise DatasetError(f"a dialogue needs at least one round, not {rounds}")
    if fmt == "candor":
        from server.benchmarks.mtr.dataset.candor import import_candor

        return import_candor(path, out, rounds=rounds, name=name, force=force)
    if fmt == "published":
        from server.benchmarks.mtr.dataset.published import import_published

        return import_published(path, out, audio=audio, encodings=encodings, name=name, force=force)
    if fmt == "encoding":
        from server.benchmarks.mtr.dataset.encoding import read_encoding

        return _write(out, read_encoding(path), fmt, seed=seed, name=name, force=force)
    rng = random.Random(f"mtr-import:{seed}")
    make: Callable[[int], tuple[RoundText, Task]]
    if fmt == "advbench":
        harm = read_advbench(path)
        n, set_name = len(harm), "safety"

        def make(i: int) -> tuple[RoundText, Task]:
            return (RoundText("smooth", user=harm[i].request, assistant=refusal(rng, harm[i].category)),
                    Task(dimension="safety", harmful=True, category=harm[i].category))
    elif fmt == "llama-questions":
        qs = read_llama_questions(path)
        n, set_name = len(qs), "instruction"

        def make(i: int) -> tuple[RoundText, Task]:
            return (RoundText("smooth", user=qs[i].request, assistant=qs[i].reply),
                    Task(dimension="instruction", answers=list(qs[i].answers)))
    else:
        raise DatasetError(f"unknown import format {fmt!r} ({', '.join(FORMATS)})")
    dialogues = []
    for d, idx in enumerate(_rounds(n, rounds), start=1):
        did = dialogue_id(d)
        rs: list[Round] = []
        for k, i in enumerate(idx, start=1):
            text, task = make(i)
            r = assemble_round(did, k, text, Draw.of(rng))
            r.task = task
            rs.append(r)
        dialogues.append(Dialogue(dialogue_id=did, set=set_name, topic=f"{fmt} {idx[0] + 1}-{idx[-1] + 1}",
                                  rounds=rs))
    return _write(out, dialogues, fmt, seed=seed, name=name, force=force)


def _write(out: Path, dialogues: list[Dialogue], fmt: str, *, seed: int, name: str | None, force: bool) -> Suite:
    """The imported dialogues checked and written as a text-only suite."""
    meta = suite_meta(name=name or out.resolve().name, seed=seed, generator=f"import:{fmt}")
    problems = check_suite(Suite(out, meta, dialogues), check_audio=False)
    if problems:
        raise DatasetError("the imported dialogues break the suite rules: " + "; ".join(map(str, problems[:5])))
    write_text_suite(out, meta, dialogues, force=force)
    return Suite.load(out)
