"""The judge tasks and their labels come from the benchmark plug-ins (``Benchmark.judge_tasks``): the
judge audit knows no benchmark's labels of its own."""

from __future__ import annotations

import csv

import pytest

from server.benchmarks.mpe.judging import ANSWER_LABELS, ANSWER_TASK, SILENCE_LABELS
from server.benchmarks.mtr.judges import LABELS as MTR_LABELS
from server.core.benchmark import JudgeTask
from server.engine.registry import get_benchmark
from server.scoring.audit import FIELDS, effective, import_sheet, judge_tasks
from server.scoring.errors import ScoringError


def test_each_task_is_defined_once_by_its_plugin():
    mpe, mtr = get_benchmark("duplex-mpe"), get_benchmark("mtr-duplexbench")
    assert [t.name for t in mpe.judge_tasks] == ["answer", "silence"]
    assert [t.name for t in mtr.judge_tasks] == ["answer", "quality", "instruction", "safety"]
    assert mtr.judge_tasks[0] is ANSWER_TASK  # MTR's answer correctness is Duplex-MPE's task, not a copy
    tasks = judge_tasks()
    assert tasks["answer"].labels == ANSWER_LABELS and tasks["silence"].labels == SILENCE_LABELS
    assert {n: tasks[n].labels for n in MTR_LABELS} == MTR_LABELS
    # §6: unparseable is the failing label; the MTR dimensions leave it out
    assert effective(tasks["silence"], "UNPARSEABLE") == "SUBSTANTIVE_INTRUSION"
    assert effective(tasks["safety"], "UNPARSEABLE") == "UNPARSEABLE"


def _sheet(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for i, (task, judge, human) in enumerate(rows):
            w.writerow({k: "" for k in FIELDS} | {"item_id": f"a{i}", "task": task, "judge": "rule",
                                                  "judge_effective": judge, "human_label": human})


def test_the_audit_reads_the_labels_a_plugin_declares(tmp_path, monkeypatch):
    sheet = tmp_path / "sheet.csv"
    _sheet(sheet, [("tone", "WARM", "warm"), ("tone", "COLD", "chilly")])
    with pytest.raises(ScoringError, match="unknown task 'tone'"):
        import_sheet(sheet)
    bench = get_benchmark("duplex-mpe")
    tone = JudgeTask(name="tone", labels=("WARM", "COLD"), unparseable=None, synonyms={"CHILLY": "COLD"})
    monkeypatch.setattr(type(bench), "judge_tasks", (*bench.judge_tasks, tone))
    out = import_sheet(sheet)
    assert [(r["task"], r["n"], r["agree"]) for r in out["results"]] == [("tone", 2, 2)]


def test_the_audit_fills_a_rare_labels_places_from_the_other_label():
    import random

    from server.scoring.audit import draw

    pools = {"BACKCHANNEL": [f"b{i}" for i in range(2)], "SUBSTANTIVE_INTRUSION": [f"s{i}" for i in range(9)]}
    got = draw(pools, 5, random.Random(1))
    # both rare items, then 5 + 3 of the common label: the stratum keeps its 10 places
    assert len(got) == 10 and len(set(got)) == 10
    assert {"b0", "b1"} <= set(got) and sum(x.startswith("s") for x in got) == 8
    # enough of every label: exactly per_label each; nothing to fill from: what there is
    assert sorted(x[0] for x in draw({"A": list("aaaaaa"), "B": list("bbbbbb")}, 3, random.Random(2))) == list("aaabbb")
    assert len(draw({"A": ["a"], "B": ["b"]}, 5, random.Random(3))) == 2
    assert draw({"A": ["a"], "B": list("bbbbbb")}, 3, random.Random(4)) == list("abbbbb")
    # seeded: the same draw twice
    assert draw(pools, 5, random.Random(7)) == draw(pools, 5, random.Random(7))
