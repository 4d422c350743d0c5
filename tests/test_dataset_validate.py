"""Every validation rule has a failing fixture; problems name file, line, scenario, turn, rule;
``mpe dataset validate`` exits non-zero listing them, never with a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from server.benchmarks.mpe.suite import (
    CONSTRUCTION_RULES,
    RULES,
    Scenario,
    Suite,
    SuiteMeta,
    check_suite,
    write_suite,
)
from server.cli import app
from tests.support.dataset import text_suite, voiced_suite

runner = CliRunner()


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Suite:
    """A valid voiced suite (tone clips): 6 pairs, at least one with four speakers and one N4 event."""
    root = tmp_path_factory.mktemp("v") / "base"
    suite = voiced_suite(root, root.parent / "data", pairs=6, seed=11, four_speaker_share=0.5, n4_share=0.5)
    assert check_suite(suite, strict=True) == []
    return suite


def _copy(base: Suite, tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(base.root, root)
    return root


def _n4(scs: list[Scenario]) -> Scenario:
    return next(s for s in scs if s.condition == "explicit" and "N4Q" in s.labels)


def _ex(scs: list[Scenario], i: int = 0) -> Scenario:
    return [s for s in scs if s.condition == "explicit"][i]


def _im(scs: list[Scenario], pair_id: str) -> Scenario:
    return next(s for s in scs if s.pair_id == pair_id and s.condition == "implicit")


def _where(sc: Scenario, turn: int | None = None) -> dict:
    return {"scenario": f"{sc.scenario_id}/{sc.condition}", "turn": turn}


# Each case: mutate(scenarios, meta, root) -> the expected location of the problem
# ({"scenario": ..., "turn": ...}, {"pair": ...}, or {"file": ...}).
Mutation = Callable[[list[Scenario], SuiteMeta, Path], dict]


def m_suite_empty(scs, meta, root):
    scs.clear()
    return {"file": "scenarios.jsonl"}


def m_voice_map(scs, meta, root):
    meta.voices.pop("A")
    sc = _ex(scs)
    return _where(sc)


def m_unique_version(scs, meta, root):
    scs.append(_ex(scs).model_copy(deep=True))
    return _where(scs[-1])


def m_turns_present(scs, meta, root):
    sc = _ex(scs)
    sc.turns.clear()
    return _where(sc)


def m_turn_idx(scs, meta, root):
    sc = _ex(scs)
    sc.turns[2].idx = 7
    return _where(sc, 2)


def m_label_known(scs, meta, root):
    sc = _ex(scs)
    sc.turns[1].label = "N5"
    return _where(sc, 1)


def m_utterance_type(scs, meta, root):
    sc = _ex(scs)
    sc.turns[1].utterance_type = "gossip"
    return _where(sc, 1)


def m_speaker_known(scs, meta, root):
    sc = _ex(scs)
    sc.turns[1].speaker = "E"
    return _where(sc, 1)


def m_text_present(scs, meta, root):
    sc = _ex(scs)
    sc.turns[1].text = "  "
    return _where(sc, 1)


def m_one_t(scs, meta, root):
    sc = _ex(scs)
    sc.turns[sc.t_index].label = "N2"
    return _where(sc)


def m_t_not_first(scs, meta, root):
    sc = _ex(scs)
    t = sc.t_index
    sc.turns[t].label, sc.turns[0].label = "N2", "T"
    return _where(sc, 0)


def m_t_not_last(scs, meta, root):
    sc = _ex(scs)
    t, last = sc.t_index, len(sc.turns) - 1
    sc.turns[t].label, sc.turns[last].label = "N2", "T"
    return _where(sc, last)


def m_n4q_then_n4r(scs, meta, root):
    sc = _n4(scs)
    q = sc.labels.index("N4Q")
    sc.turns[q + 1].label = "N2"
    return _where(sc, q)


def m_n4r_after_n4q(scs, meta, root):
    sc = _n4(scs)
    q = sc.labels.index("N4Q")
    sc.turns[q].label = "N2"
    return _where(sc, q + 1)


def m_n4_after_t(scs, meta, root):
    sc = _n4(scs)
    q, t = sc.labels.index("N4Q"), sc.t_index
    sc.turns[q].label, sc.turns[q + 1].label = "N2", "N2"
    sc.turns[t - 2].label, sc.turns[t - 1].label = "N4Q", "N4R"
    return _where(sc, t - 2)


def m_n_speakers(scs, meta, root):
    sc = _ex(scs)
    sc.n_speakers = 5
    return _where(sc)


def m_gold_answer(scs, meta, root):
    sc = _ex(scs)
    sc.gold_answer = ""
    return _where(sc)


def m_answer_keys(scs, meta, root):
    sc = _ex(scs)
    sc.answer_keys = [["ok"], []]
    return _where(sc)


def m_pair_complete(scs, meta, root):
    sc = _ex(scs)
    scs.remove(_im(scs, sc.pair_id))
    return {"pair": sc.pair_id}


def m_pair_turns(scs, meta, root):
    sc = _ex(scs)
    _im(scs, sc.pair_id).turns.pop()
    return {"pair": sc.pair_id}


def m_pair_labels(scs, meta, root):
    sc = _ex(scs)
    im = _im(scs, sc.pair_id)
    i = next(i for i, t in enumerate(im.turns) if t.label == "N2")
    im.turns[i].label = "N3"
    return {"pair": sc.pair_id}


def m_pair_n4(scs, meta, root):
    sc = _n4(scs)
    im = _im(scs, sc.pair_id)
    q = im.labels.index("N4Q")
    im.turns[q].label = im.turns[q + 1].label = "N2"  # the implicit version lost its N4 event
    return {"pair": sc.pair_id}


def m_pair_gold(scs, meta, root):
    sc = _ex(scs)
    _im(scs, sc.pair_id).gold_answer = "Something else."
    return {"pair": sc.pair_id}


def m_audio_pending(scs, meta, root):
    extra = meta.model_extra
    extra["audio"] = "pending"
    return {"file": "suite.json"}


def m_clip_path(scs, meta, root):
    sc = _ex(scs)
    sc.turns[1].clip = "../outside.wav"
    return _where(sc, 1)


def m_clip_exists(scs, meta, root):
    sc = _ex(scs)
    (root / sc.turns[1].clip).unlink()
    return _where(sc, 1)


def m_clip_format(scs, meta, root):
    sc = _ex(scs)
    p = root / sc.turns[1].clip
    sf.write(str(p), np.zeros(16000, dtype=np.int16), 16_000, subtype="PCM_16")
    return _where(sc, 1)


def m_clip_duration(scs, meta, root):
    sc = _ex(scs)
    sc.turns[1].duration_s += 0.05
    return _where(sc, 1)


def m_attributes(scs, meta, root):
    sc = _ex(scs)
    del sc.attributes["register"]
    return _where(sc)


def m_t_bucket(scs, meta, root):
    sc = _ex(scs)
    sc.t_bucket = {"early-middle": "late-middle", "middle": "early-middle", "late-middle": "middle"}[sc.t_bucket]
    return _where(sc, sc.t_index)


def m_speakers_contiguous(scs, meta, root):
    sc = next(s for s in scs if s.condition == "explicit" and s.n_speakers == 3)
    for t in sc.turns:
        if t.speaker == "C":
            t.speaker = "D"
    return _where(sc)


def m_explicit_names_aria(scs, meta, root):
    sc = _ex(scs)
    sc.turns[sc.t_index].text = _im(scs, sc.pair_id).turns[sc.t_index].text
    return _where(sc, sc.t_index)


def m_implicit_unnamed(scs, meta, root):
    sc = _ex(scs)
    im = _im(scs, sc.pair_id)
    im.turns[sc.t_index].text = "Aria, " + im.turns[sc.t_index].text
    return _where(im, sc.t_index)


def m_n1_mentions_aria(scs, meta, root):
    sc = next(s for s in scs if s.condition == "explicit" and "N1" in s.labels)
    i = sc.labels.index("N1")
    sc.turns[i].text = "I think it might rain later."
    return _where(sc, i)


def m_mention_label(scs, meta, root):
    sc = _ex(scs)
    i = sc.labels.index("N2")
    for s in (sc, _im(scs, sc.pair_id)):  # both conditions: the pair stays minimal
        s.turns[i].text = "Aria is on the shelf, by the way."
    return _where(sc, i)


def m_addressee(scs, meta, root):
    sc = _ex(scs)
    sc.turns[sc.t_index].addressee = "B"
    return _where(sc, sc.t_index)


def m_pair_speakers(scs, meta, root):
    sc = _ex(scs)
    im = _im(scs, sc.pair_id)
    last = im.turns[-1]
    last.speaker = next(x for x in "ABC" if x not in (last.speaker, im.turns[-2].speaker))
    return {"pair": sc.pair_id}


def m_pair_minimal(scs, meta, root):
    sc = _ex(scs)
    _im(scs, sc.pair_id).turns[-1].text = "Something else entirely."
    return {"pair": sc.pair_id}


def m_pair_difference(scs, meta, root):
    # declared reworded, but no turn besides T (and the one before it) is said otherwise
    sc = _ex(scs)
    sc.version_difference = _im(scs, sc.pair_id).version_difference = "reworded"
    return {"pair": sc.pair_id}


CASES: dict[str, Mutation] = {
    rule: globals()["m_" + rule.replace("-", "_")] for rule in RULES
}


def test_every_rule_has_a_failing_fixture():
    assert set(CASES) == set(RULES)


@pytest.mark.parametrize("rule", list(RULES))
def test_rule_fails_its_fixture(rule, base, tmp_path):
    root = _copy(base, tmp_path)
    scenarios = [sc.model_copy(deep=True) for sc in base.scenarios]
    meta = base.meta.model_copy(deep=True)
    where = CASES[rule](scenarios, meta, root)
    write_suite(root, meta, scenarios)
    suite = Suite.load(root)
    problems = check_suite(suite, strict=True)
    hits = [p for p in problems if p.rule == rule]
    assert hits, [str(p) for p in problems]
    p = hits[0]
    # the problem names its file (and line), scenario or pair, and turn
    if "file" in where:
        assert p.file == where["file"]
    elif "pair" in where:
        assert p.pair == where["pair"] and p.file == "scenarios.jsonl" and p.line is not None
    else:
        assert p.scenario == where["scenario"], str(p)
        assert p.turn == where["turn"], str(p)
        sid, cond = where["scenario"].split("/")
        lines = [i for i, sc in enumerate(suite.scenarios, 1) if (sc.scenario_id, sc.condition) == (sid, cond)]
        assert p.file == "scenarios.jsonl" and p.line in lines, str(p)
    text = str(p)
    assert text.endswith(f"[{rule}]") and p.message in text


def test_construction_rules_only_when_strict(base, tmp_path):
    root = _copy(base, tmp_path)
    scenarios = [sc.model_copy(deep=True) for sc in base.scenarios]
    m_mention_label(scenarios, base.meta, root)
    write_suite(root, base.meta, scenarios)
    suite = Suite.load(root)
    assert check_suite(suite) == []
    assert {p.rule for p in check_suite(suite, strict=True)} == {"mention-label"}


def _longer_implicit(base: Suite, tmp_path: Path) -> tuple[Suite, str]:
    """The base suite with one more turn after T in an implicit version (its N4 event moves by
    one): the paper's final versions may differ beyond T, turn counts included."""
    root = _copy(base, tmp_path)
    scenarios = [sc.model_copy(deep=True) for sc in base.scenarios]
    ex = _n4(scenarios)
    im = _im(scenarios, ex.pair_id)
    t = im.t_index
    im.turns.insert(t + 1, im.turns[0].model_copy(deep=True))  # a voiced clip, so the audio stays valid
    for i, turn in enumerate(im.turns):
        turn.idx = i
    write_suite(root, base.meta, scenarios)
    return Suite.load(root), ex.pair_id


def test_pairs_may_differ_beyond_t(base, tmp_path):
    suite, pair = _longer_implicit(base, tmp_path)
    ex, im = suite.pairs()[pair]["explicit"], suite.pairs()[pair]["implicit"]
    assert len(im.turns) == len(ex.turns) + 1 and im.t_index == ex.t_index
    assert ex.labels.index("N4Q") + 1 == im.labels.index("N4Q")  # N4 paired by label, not by position
    assert check_suite(suite) == []  # §2: accepted
    # equal versions stay a construction rule of the generators (strict)
    strict = check_suite(suite, strict=True)
    assert "pair-turns" in {p.rule for p in strict} and all(p.construction for p in strict)
    assert next(p for p in strict if p.rule == "pair-turns").pair == pair
    r = _validate(str(suite.root))
    assert r.exit_code == 0 and "warning" in r.output and "[pair-turns]" in r.output
    assert _validate(str(suite.root), "--strict").exit_code == 1


def test_t_as_the_last_turn_is_an_error_not_a_warning(base, tmp_path):
    """§2: T must be followed by further conversation; without --strict too."""
    root = _copy(base, tmp_path)
    scenarios = [sc.model_copy(deep=True) for sc in base.scenarios]
    where = m_t_not_last(scenarios, base.meta, root)
    write_suite(root, base.meta, scenarios)
    suite = Suite.load(root)
    assert "t-not-last" not in CONSTRUCTION_RULES
    assert [p.rule for p in check_suite(suite)] == ["t-not-last"]
    r = _validate(str(root))
    line = next(x for x in r.output.splitlines() if "[t-not-last]" in x)
    assert r.exit_code == 1 and f"{where['scenario']} turn {where['turn']}: T is the last turn" in line
    assert not line.startswith("warning")
    data = json.loads(_validate(str(root), "--json").stdout)
    assert [e["rule"] for e in data["errors"]] == ["t-not-last"]
    assert "t-not-last" not in {w["rule"] for w in data["warnings"]}
    # a run refuses it
    from server.benchmarks.mpe import BENCHMARK

    assert any("[t-not-last]" in p for p in BENCHMARK.problems(suite))


# ------------------------------------------------------------------------------ CLI


def _validate(*args: str):
    return runner.invoke(app, ["dataset", "validate", *args])


def test_cli_valid_suite_exits_zero(base):
    r = _validate(str(base.root), "--strict")
    assert r.exit_code == 0, r.output
    assert "valid" in r.output and "audio checked" in r.output


def test_cli_lists_each_violation_and_exits_one(base, tmp_path):
    root = _copy(base, tmp_path)
    scenarios = [sc.model_copy(deep=True) for sc in base.scenarios]
    w1 = m_t_not_first(scenarios, base.meta, root)
    w2 = m_clip_duration(scenarios, base.meta, root)
    write_suite(root, base.meta, scenarios)
    r = _validate(str(root))
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "Traceback" not in r.output
    assert f"scenarios.jsonl:1: {w1['scenario']} turn 0: T is the first turn" in r.output
    assert f"{w2['scenario']} turn 1: duration_s" in r.output and "[clip-duration]" in r.output
    assert "[t-not-first]" in r.output and "problem(s)" in r.output

    js = runner.invoke(app, ["dataset", "validate", str(root), "--json"])
    assert js.exit_code == 1
    data = json.loads(js.stdout)
    assert data["valid"] is False
    rules = {e["rule"] for e in data["errors"]}
    assert {"t-not-first", "clip-duration"} <= rules
    e = next(e for e in data["errors"] if e["rule"] == "t-not-first")
    assert (e["file"], e["line"], e["scenario"], e["turn"]) == ("scenarios.jsonl", 1, w1["scenario"], 0)


def test_cli_construction_problems_are_warnings_unless_strict(base, tmp_path):
    root = _copy(base, tmp_path)
    scenarios = [sc.model_copy(deep=True) for sc in base.scenarios]
    m_mention_label(scenarios, base.meta, root)
    write_suite(root, base.meta, scenarios)
    r = _validate(str(root))
    assert r.exit_code == 0 and "warning" in r.output and "[mention-label]" in r.output
    r = _validate(str(root), "--strict")
    assert r.exit_code == 1 and "[mention-label]" in r.output


@pytest.mark.parametrize("damage, expected", [
    ("missing", "not found"),
    ("bad-json", "invalid JSON"),
    ("schema", "schema error"),
])
def test_cli_unreadable_suite_is_one_line_error(base, tmp_path, damage, expected):
    root = _copy(base, tmp_path)
    if damage == "missing":
        root = tmp_path / "nowhere"
    elif damage == "bad-json":
        (root / "scenarios.jsonl").write_text('{"scenario_id": \n')
    else:
        (root / "suite.json").write_text('{"name": "x"}')
    r = _validate(str(root))
    assert r.exit_code == 2
    assert "error (bad_suite)" in r.output and expected in r.output
    assert "Traceback" not in r.output


def test_cli_text_only_suite_validates_without_audio(tmp_path):
    text_suite(tmp_path / "t", pairs=5, seed=2)
    r = _validate(str(tmp_path / "t"), "--strict")
    assert r.exit_code == 0, r.output
    assert "audio pending" in r.output
    # the audio rule still applies wherever audio is required (e.g. queuing a run)
    assert [p.rule for p in check_suite(Suite.load(tmp_path / "t"))] == ["audio-pending"]


def test_rules_command_lists_every_rule():
    r = runner.invoke(app, ["dataset", "rules"])
    assert r.exit_code == 0
    for rule in RULES:
        assert rule in r.output


def test_pairs_with_unequal_n4_counts_and_n4_before_t_are_accepted(base, tmp_path):
    """§2, the paper's final versions: a pair's versions may hold different numbers of N4 events
    and N4 events before T; equal structure and N4 after T stay construction rules (strict)."""
    root = _copy(base, tmp_path)
    scenarios = [sc.model_copy(deep=True) for sc in base.scenarios]
    ex = _n4(scenarios)
    im = _im(scenarios, ex.pair_id)
    q = ex.labels.index("N4Q")
    pair = [ex.turns[q].model_copy(deep=True), ex.turns[q + 1].model_copy(deep=True)]  # voiced clips
    t = im.t_index
    im.turns[t - 1:t - 1] = pair  # one more N4 event in the implicit version, before its T
    for i, turn in enumerate(im.turns):
        turn.idx = i
    write_suite(root, base.meta, scenarios)
    suite = Suite.load(root)
    ex, im = suite.pairs()[ex.pair_id]["explicit"], suite.pairs()[ex.pair_id]["implicit"]
    assert im.labels.count("N4Q") == ex.labels.count("N4Q") + 1 and im.labels.index("N4Q") < im.t_index
    assert check_suite(suite) == []
    strict = check_suite(suite, strict=True)
    assert {"pair-n4", "n4-after-t"} <= {p.rule for p in strict} and all(p.construction for p in strict)
    assert _validate(str(suite.root)).exit_code == 0
    assert _validate(str(suite.root), "--strict").exit_code == 1


def test_declared_version_differences_are_checked_as_declared(base, tmp_path):
    """A pair whose versions differ on purpose (the paper's final versions) passes strict
    validation only when it differs exactly as it declares."""
    def check(mutate) -> list[str]:
        scs = [sc.model_copy(deep=True) for sc in base.scenarios]
        ex = _n4(scs)
        im = _im(scs, ex.pair_id)
        mutate(ex, im)
        root = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
        shutil.copytree(base.root, root)
        write_suite(root, base.meta, scs)
        return sorted({p.rule for p in check_suite(Suite.load(root), strict=True)})

    def drop_n4(ex, im, declare="n4_dropped"):
        q = im.labels.index("N4Q")
        im.turns = [t.model_copy(update={"idx": i}) for i, t in enumerate(x for j, x in enumerate(im.turns)
                                                                         if j not in (q, q + 1))]
        ex.version_difference = im.version_difference = declare

    def reword(ex, im, declare="reworded"):
        i = next(i for i, t in enumerate(im.turns) if t.label == "N2" and i not in (im.t_index, im.t_index - 1))
        im.turns[i].text = "Honestly, I'd have said it differently."
        ex.version_difference = im.version_difference = declare

    assert check(lambda ex, im: drop_n4(ex, im)) in ([], ["t-bucket"])  # the bucket may move with two turns fewer
    assert "pair-difference" not in check(lambda ex, im: drop_n4(ex, im))
    assert "pair-difference" in check(lambda ex, im: drop_n4(ex, im, "extra_turn"))
    assert "pair-n4" in check(lambda ex, im: drop_n4(ex, im, None))  # undeclared: the equal-structure rules
    assert check(lambda ex, im: reword(ex, im)) == []
    assert check(lambda ex, im: reword(ex, im, None)) == ["pair-minimal"]
