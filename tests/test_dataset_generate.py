"""Scenario generation: exact composition, determinism by seed, the rules, variety, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from server.benchmarks.mpe.dataset import inventory as inv
from server.benchmarks.mpe.dataset.build import build_text_suite, make_generator
from server.benchmarks.mpe.dataset.builtin import BUILTINS, build_builtin
from server.benchmarks.mpe.dataset.compose import Composition, apportion, plan_pairs
from server.benchmarks.mpe.dataset.procedural import ProceduralGenerator
from server.benchmarks.mpe.dataset.rules import check_script
from server.benchmarks.mpe.dataset.stats import PAPER_CONVERSATION_S, PAPER_T_S, implicit_cue, realism
from server.benchmarks.mpe.suite import Suite, bucket_of, check_suite, mentions_aria
from server.cli import app
from server.datasets.errors import DatasetError
from server.engine.suitedir import SuiteError

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Suite:
    """2,000 pairs as text, the benchmark's default shape."""
    root = tmp_path_factory.mktemp("g") / "full"
    suite, what = build_text_suite(root, name="full", pairs=2000, seed=20260902,
                                   generator=ProceduralGenerator(20260902))
    assert what == "written"
    return suite


def _per_pair(suite: Suite):
    return [p["explicit"] for p in suite.pairs().values()]


# ---------------------------------------------------------------------------- composition


def test_default_composition_matches_the_benchmark():
    c = Composition.from_shares(2000)
    assert (c.pairs, c.four_speaker, c.n4) == (2000, 500, 968)
    assert (c.n4_double, c.n4_events) == (943, 1911)  # the paper's 1,911 N4 events per condition
    assert c.buckets == {"early-middle": 667, "middle": 667, "late-middle": 666}


def test_2000_pairs_hit_the_composition_exactly_and_pass_validation(full):
    pairs = _per_pair(full)
    assert len(pairs) == 2000 and len(full.scenarios) == 4000
    assert Counter(sc.n_speakers for sc in pairs) == {3: 1500, 4: 500}
    assert Counter(sc.t_bucket for sc in pairs) == {"early-middle": 667, "middle": 667, "late-middle": 666}
    assert sum("N4Q" in sc.labels for sc in pairs) == 968
    for cond in ("explicit", "implicit"):
        assert sum(sc.labels.count("N4Q") for sc in full.scenarios if sc.condition == cond) == 1911
    # every rule of §2 and every construction rule
    assert check_suite(full, check_audio=False, strict=True) == []
    for sc in full.scenarios:
        assert bucket_of(sc.t_index, len(sc.turns)) == sc.t_bucket
        assert {t.speaker for t in sc.turns} == set("ABCD"[: sc.n_speakers])


def test_scenarios_have_every_kind_of_turn_and_the_right_addressing(full):
    pairs = full.pairs()
    for p in pairs.values():
        ex, im = p["explicit"], p["implicit"]
        t = ex.t_index
        assert mentions_aria(ex.turns[t].text) and not mentions_aria(im.turns[t].text)
        assert ex.turns[t].addressee == "Aria"
        assert {"N1", "N2", "N3"} <= set(ex.labels)
        if "N4Q" in ex.labels:
            q = ex.labels.index("N4Q")
            assert q > t and ex.labels[q + 1] == "N4R" and ex.turns[q].addressee == "Aria"
            # asked by name, or pointed at the device ("while your light's on: ...")
            assert mentions_aria(ex.turns[q].text) or implicit_cue("", ex.turns[q].text) is not None
        # the implicit version stays inferable: the revised turn just before T hands the
        # question over (an N1 naming Aria), or T itself carries a cue spoken to the device
        if ex.turns[t - 1].text != im.turns[t - 1].text:
            assert im.turns[t - 1].label == "N1" and mentions_aria(im.turns[t - 1].text)
        else:
            assert implicit_cue(ex.turns[t].text, im.turns[t].text) is not None, ex.scenario_id
    strategies = Counter(
        "revised" if p["explicit"].turns[p["explicit"].t_index - 1].text
        != p["implicit"].turns[p["implicit"].t_index - 1].text else "cue-in-t"
        for p in pairs.values())
    assert 0 < strategies["revised"] <= 0.05 * 2000  # the paper revised the turn before T in 42 of 2,000
    assert strategies["cue-in-t"] >= 0.95 * 2000  # and put the cue in T in the other 1,958


def test_every_turn_but_t_carries_its_utterance_type(full):
    kinds = Counter()
    for sc in full.scenarios:
        for t in sc.turns:
            kinds[(t.label, t.utterance_type)] += 1
            if t.label == "T":
                assert t.utterance_type is None
            elif t.label == "N3":
                assert t.utterance_type == "self_talk"
            elif t.label == "N4Q" or t.addressee == "device":
                assert t.utterance_type == "device_request"
            else:
                assert t.utterance_type in ("human_request", "statement")
                if t.label == "N4R":
                    assert t.utterance_type == "statement"
    # all four types occur among the silence windows, requests between the humans among them
    assert {k for (lab, k) in kinds if lab in ("N1", "N2", "N3")} == {"device_request", "human_request",
                                                                       "statement", "self_talk"}
    assert kinds[("N2", "human_request")] > 0.05 * sum(v for (lab, _), v in kinds.items() if lab == "N2")


def _mean_words(suite: Suite, cond: str) -> float:
    turns = [t for sc in suite.scenarios if sc.condition == cond for t in sc.turns]
    return sum(len(t.text.split()) for t in turns) / len(turns)


def test_version_differences_at_the_papers_rates(full, tmp_path):
    """The paper's final versions: 339 of 2,000 pairs differ beyond T and the turn before it, 16 of
    them in their turn counts, and the implicit versions have 1,910 N4 events to the explicit 1,911."""
    from server.benchmarks.mpe.dataset.compose import plan_pairs

    c = Composition.from_shares(2000, version_differences=True)
    assert (c.reworded, c.extra_turn, c.n4_dropped) == (323, 15, 1)
    varied, _ = build_text_suite(tmp_path / "v", name="v", pairs=2000, seed=20260902,
                                 generator=ProceduralGenerator(20260902), composition=c)
    further = unequal = 0
    for p in varied.pairs().values():
        ex, im = p["explicit"], p["implicit"]
        if len(ex.turns) != len(im.turns):
            unequal += 1
        if len(ex.turns) != len(im.turns) or any(
                a.text != b.text for i, (a, b) in enumerate(zip(ex.turns, im.turns))
                if i not in (ex.t_index, ex.t_index - 1)):
            further += 1
    assert (further, unequal) == (339, 16)
    assert [sum(sc.labels.count("N4Q") for sc in varied.scenarios if sc.condition == cond)
            for cond in ("explicit", "implicit")] == [1911, 1910]
    assert check_suite(varied, check_audio=False, strict=True) == []  # each pair differs as it declares
    # the same composition, and turn lengths within 2 % of the equal-version suite of the same seed
    ex_pairs, v_pairs = _per_pair(full), _per_pair(varied)
    for key in (lambda sc: sc.n_speakers, lambda sc: sc.t_bucket, lambda sc: "N4Q" in sc.labels):
        assert Counter(map(key, ex_pairs)) == Counter(map(key, v_pairs))
    for cond in ("explicit", "implicit"):
        assert _mean_words(varied, cond) == pytest.approx(_mean_words(full, cond), rel=0.02)
    # pairs without a difference are the same scripts with the option on or off
    plans = plan_pairs(c, 20260902)
    same = [p.pair_id for p in plans if p.difference == "none"]
    assert len(same) == 1661
    assert all(varied.scenario(full.pairs()[pid]["explicit"].scenario_id, cond).turns
               == full.pairs()[pid][cond].turns for pid in same[:200] for cond in ("explicit", "implicit"))
    assert [p.model_copy(update={"difference": "none"}) for p in plans] == plan_pairs(Composition.from_shares(2000),
                                                                                      20260902)


def test_a_script_without_the_planned_difference_is_refused():
    from server.benchmarks.mpe.dataset.compose import plan_pairs

    c = Composition.from_shares(40, version_differences=True)
    plan = next(p for p in plan_pairs(c, 5) if p.difference == "reworded")
    script = ProceduralGenerator(5).generate(plan)
    assert script.version_difference == "reworded" and check_script(script, plan) == []
    undone = script.model_copy(update={"version_difference": None,
                                       "turns": [t.model_copy(update={"implicit_text": None}) if t.label != "T"
                                                 and i != script.labels.index("T") - 1 else t
                                                 for i, t in enumerate(script.turns)]})
    assert "plan-difference" in {p.rule for p in check_script(undone, plan)}


CHOICE_TASKS = {"finding a day for a get-together", "booking a weekend away", "packing for a camping weekend",
                "playing a board game", "booking flights for a holiday", "shopping for a new laptop"}


def test_choice_answers_were_said_before_t(full):
    """For tasks whose answer is one of the options, the answer was mentioned earlier."""
    checked = 0
    for sc in _per_pair(full):
        if sc.attributes["activity"] not in CHOICE_TASKS:
            continue
        before = " ".join(t.text for t in sc.turns[: sc.t_index]).lower()
        assert any(k.lower() in before for k in sc.answer_keys[0]), (sc.scenario_id, sc.answer_keys)
        checked += 1
    assert checked > 500


def test_attributes_are_spread_evenly_and_compatible(full):
    pairs = _per_pair(full)
    acts = Counter(sc.attributes["activity"] for sc in pairs)
    assert set(acts) == {a.value for a in inv.ACTIVITIES}
    assert max(acts.values()) - min(acts.values()) <= 1
    for sc in pairs:
        a = inv.activity(sc.attributes["activity"])
        s = inv.setting(sc.attributes["setting"])
        assert a.kinds is None or a.kinds & s.kinds
        assert inv.device_context(sc.attributes["device_context"]) in inv.devices_for(s)
        assert inv.relationship(sc.attributes["relationship"]) in inv.relationships_for(s, a)
    assert len(Counter(sc.attributes["register"] for sc in pairs)) == len(inv.REGISTERS)


def test_conversations_are_varied(full):
    scripts = {tuple(t.text for t in sc.turns) for sc in full.scenarios if sc.condition == "explicit"}
    assert len(scripts) == 2000  # no conversation is repeated
    t_texts = {sc.turns[sc.t_index].text for sc in full.scenarios if sc.condition == "explicit"}
    assert len(t_texts) > 500
    lines = Counter(t.text for sc in full.scenarios for t in sc.turns)
    assert len(lines) > 5000


def _meets_the_paper_targets(r: dict) -> None:
    assert r["distinct_share"] >= 0.60
    assert abs(r["conversation_mean_s"] - PAPER_CONVERSATION_S) <= 0.2 * PAPER_CONVERSATION_S
    assert abs(r["t_mean_s"] - PAPER_T_S) <= 0.2 * PAPER_T_S
    assert r["preceding_revised_share"] <= 0.05


def test_the_full_suite_resembles_the_paper(full):
    """Distinct turn texts, conversation and T durations, preceding-turn revisions."""
    r = realism(full)
    assert r["durations_from"] == "words" and r["turn_texts"] > 24_000
    _meets_the_paper_targets(r)
    assert set(r["turn_mean_s_by_label"]) == {"N1", "N2", "N3", "N4Q", "N4R", "T"}


def test_turn_length_paper_meets_the_targets_and_short_keeps_the_conversations(tmp_path):
    """300 pairs of each length from one seed: the same conversations (plans, answers, T's
    request), paper-length turns on target, short ones far below it."""
    paper, _ = build_text_suite(tmp_path / "p", name="p", pairs=300, seed=11, generator=ProceduralGenerator(11))
    short, _ = build_text_suite(tmp_path / "s", name="s", pairs=300, seed=11,
                                generator=make_generator("procedural", 11, turn_length="short"))
    assert (paper.meta.generator_version, short.meta.generator_version) == ("4/paper", "4/short")
    rp, rs = realism(paper), realism(short)
    _meets_the_paper_targets(rp)
    # short T keeps its implicit cue ("You've been listening on the counter the whole time, so ...")
    assert rs["conversation_mean_s"] < 0.6 * PAPER_CONVERSATION_S and rs["t_mean_s"] < 0.7 * PAPER_T_S
    for a, b in zip(paper.scenarios, short.scenarios):
        assert (a.gold_answer, a.labels, [t.speaker for t in a.turns]) == (b.gold_answer, b.labels,
                                                                             [t.speaker for t in b.turns])
        assert b.turns[b.t_index].text.rstrip("?").split(", ")[-1] in a.turns[a.t_index].text
    assert check_suite(paper, check_audio=False, strict=True) == []


@pytest.mark.parametrize("pairs, four, n4, buckets", [
    (9, 1 / 3, 0.0, (1.0, 1.0, 1.0)),
    (10, 0.25, 0.484, (1.0, 1.0, 1.0)),
    (12, 1.0, 1.0, (2.0, 1.0, 1.0)),
    (7, 0.0, 0.5, (0.0, 1.0, 0.0)),
])
def test_composition_is_configurable_and_exact(pairs, four, n4, buckets):
    c = Composition.from_shares(pairs, four_speaker_share=four, n4_share=n4, bucket_shares=buckets)
    plans = plan_pairs(c, seed=5)
    assert sum(p.n_speakers == 4 for p in plans) == c.four_speaker
    assert sum(p.has_n4 for p in plans) == c.n4
    assert sum(p.n4_events for p in plans) == c.n4_events and max(p.n4_events for p in plans) <= 2
    assert Counter(p.t_bucket for p in plans) == {b: n for b, n in c.buckets.items() if n}
    assert sum(c.buckets.values()) == pairs
    gen = ProceduralGenerator(5)
    for p in plans:
        assert check_script(gen.generate(p), p) == []


def test_apportion_is_exact_with_ties_to_earlier_parts():
    assert apportion(2000, (1.0, 1.0, 1.0)) == [667, 667, 666]
    assert apportion(10, (1.0, 1.0, 1.0)) == [4, 3, 3]
    assert apportion(5, (3.0, 1.0)) == [4, 1]
    assert sum(apportion(997, (0.2, 0.3, 0.5))) == 997


def test_bad_composition_is_a_clear_error():
    with pytest.raises(DatasetError, match="share"):
        Composition.from_shares(10, n4_share=1.5)
    with pytest.raises(DatasetError, match="at least one pair"):
        Composition.from_shares(0)
    with pytest.raises(ValueError, match="sum"):
        Composition(pairs=3, four_speaker=0, buckets={"early-middle": 1, "middle": 1, "late-middle": 0}, n4=0)
    with pytest.raises(ValueError, match="n4_double"):
        Composition(pairs=3, four_speaker=0, buckets={"early-middle": 1, "middle": 1, "late-middle": 1}, n4=1,
                    n4_double=2)


# ---------------------------------------------------------------------------- determinism


def _bytes(root: Path) -> tuple[bytes, bytes]:
    return (root / "suite.json").read_bytes(), (root / "scenarios.jsonl").read_bytes()


def test_same_seed_same_suite_byte_for_byte(tmp_path):
    a, _ = build_text_suite(tmp_path / "a", name="s", pairs=60, seed=42, generator=ProceduralGenerator(42))
    b, _ = build_text_suite(tmp_path / "b", name="s", pairs=60, seed=42, generator=ProceduralGenerator(42))
    c, _ = build_text_suite(tmp_path / "c", name="s", pairs=60, seed=43, generator=ProceduralGenerator(43))
    assert _bytes(tmp_path / "a") == _bytes(tmp_path / "b")
    assert _bytes(tmp_path / "a")[1] != _bytes(tmp_path / "c")[1]
    assert a.content_hash() == b.content_hash() != c.content_hash()


def test_same_seed_same_suite_in_fresh_processes(tmp_path):
    """Nothing depends on hash randomisation or process state."""
    code = ("import sys; from pathlib import Path; from server.benchmarks.mpe.dataset.build import build_text_suite;"
            "from server.benchmarks.mpe.dataset.procedural import ProceduralGenerator;"
            "build_text_suite(Path(sys.argv[1]), name='s', pairs=40, seed=9, generator=ProceduralGenerator(9))")
    for i, hashseed in enumerate(("1", "2")):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        subprocess.run([sys.executable, "-c", code, str(tmp_path / f"p{i}")], check=True, env=env, cwd=REPO)
    build_text_suite(tmp_path / "here", name="s", pairs=40, seed=9, generator=ProceduralGenerator(9))
    assert _bytes(tmp_path / "p0") == _bytes(tmp_path / "p1") == _bytes(tmp_path / "here")


def test_regenerating_into_the_same_dir_keeps_it_and_a_different_suite_is_refused(tmp_path):
    root = tmp_path / "s"
    build_text_suite(root, name="s", pairs=5, seed=1, generator=ProceduralGenerator(1))
    _, what = build_text_suite(root, name="s", pairs=5, seed=1, generator=ProceduralGenerator(1))
    assert what == "kept"
    with pytest.raises(SuiteError, match="--force"):  # the suite directory's writer refuses
        build_text_suite(root, name="s", pairs=5, seed=2, generator=ProceduralGenerator(2))
    _, what = build_text_suite(root, name="s", pairs=5, seed=2, generator=ProceduralGenerator(2), force=True)
    assert what == "written" and Suite.load(root).meta.seed == 2


# ---------------------------------------------------------------------------- built-in suites


def test_builtin_definitions():
    assert (BUILTINS["mini"].pairs, BUILTINS["full"].pairs) == (10, 2000)
    # the demo and the tests voice mini: one-line turns; the benchmark's suite has the paper's lengths
    assert (BUILTINS["mini"].turn_length, BUILTINS["full"].turn_length) == ("short", "paper")
    assert BUILTINS["full"].composition() == Composition.from_shares(2000)
    with pytest.raises(DatasetError, match="mini"):
        build_builtin("nope", "/tmp")


def test_builtin_mini_text_only(tmp_path):
    path = build_builtin("mini", tmp_path, audio=False)
    suite = Suite.load(path)
    assert path == tmp_path / "suites" / "mini"
    assert suite.meta.name == "mini" and len(suite.pairs()) == 10
    assert check_suite(suite, check_audio=False, strict=True) == []
    stamp = (path / ".build.json").stat().st_mtime_ns
    assert build_builtin("mini", tmp_path, audio=False) == path  # complete: reused
    assert (path / ".build.json").stat().st_mtime_ns == stamp


# ---------------------------------------------------------------------------- CLI


def test_cli_generate_stats_export(tmp_path):
    out = tmp_path / "suite"
    r = runner.invoke(app, ["dataset", "generate", "--out", str(out), "--pairs", "40", "--seed", "3", "--no-audio"])
    assert r.exit_code == 0, r.output
    assert "30 three-human, 10 four-human" in r.output and "audio pending" in r.output
    assert "19 with N4 events, 38 in all" in r.output

    r = runner.invoke(app, ["dataset", "stats", str(out), "--json"])
    assert r.exit_code == 0, r.output
    stats = json.loads(r.stdout)
    comp = stats["composition"]
    assert comp["pairs"] == 40 and comp["speakers"] == {"3": 30, "4": 10}
    assert comp["t_buckets"] == {"early-middle": 14, "middle": 13, "late-middle": 13}
    assert comp["n4_pairs"] == 19 and stats["audio"] == "pending" and "durations" not in stats
    assert comp["n4_events"] == {"explicit": 38, "implicit": 38}  # 19 pairs, two events each (round(18.5))
    assert comp["labels"]["explicit"]["T"] == 40 == comp["labels"]["implicit"]["T"]
    real = stats["realism"]
    assert real["paper"] == {"conversation_mean_s": 99.8, "t_mean_s": 8.0, "preceding_revised_pairs": 42,
                             "pairs": 2000, "preceding_revised_share": 0.021,
                             "cue_in_t_pairs": 1958, "cue_in_t_share": 0.979}
    assert real["durations_from"] == "words" and real["distinct_share"] > 0.6
    assert 0 <= real["preceding_revised_pairs"] == comp["implicit_cue"]["revised_turn_before_t"] <= 2
    assert 60 < real["conversation_mean_s"] < 140 and set(real["turn_mean_s_by_label"]) >= {"T", "N2"}

    r = runner.invoke(app, ["dataset", "stats", str(out)])
    assert r.exit_code == 0 and "Composition" in r.output and "audio pending" in r.output
    assert "Realism against the paper" in r.output and "distinct turn texts" in r.output
    for figure in (f"{real['conversation_mean_s']:.1f}", "99.8", f"{real['t_mean_s']:.2f}", "42 of 2000",
                   f"{real['distinct_turn_texts']} of {real['turn_texts']}", "N4Q turn mean"):
        assert figure in r.output, figure

    short = tmp_path / "short"
    r = runner.invoke(app, ["dataset", "generate", "--out", str(short), "--pairs", "40", "--seed", "3", "--no-audio",
                            "--turn-length", "short"])
    assert r.exit_code == 0, r.output
    assert Suite.load(short).meta.generator_version == "4/short"
    assert json.loads(runner.invoke(app, ["dataset", "stats", str(short), "--json"]).stdout)["realism"][
        "conversation_mean_s"] < 0.6 * real["conversation_mean_s"]

    jl = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["dataset", "export-text", str(out), "--out", str(jl)])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in jl.read_text().splitlines()]
    suite = Suite.load(out)
    assert len(recs) == 80
    for rec, sc in zip(recs, suite.scenarios):
        assert rec["scenario_id"] == sc.scenario_id and rec["condition"] == sc.condition
        assert rec["transcript"].splitlines() == [f"{t.speaker}: {t.text}" for t in sc.turns]
        assert rec["turns"][rec["t_index"]]["label"] == "T" and rec["gold_answer"] == sc.gold_answer

    r = runner.invoke(app, ["dataset", "export-text", str(out), "--out", str(jl), "--condition", "implicit",
                            "--no-labels"])
    recs = [json.loads(line) for line in jl.read_text().splitlines()]
    assert len(recs) == 40 and all(r["condition"] == "implicit" and "label" not in r["turns"][0] for r in recs)


def test_cli_generate_refuses_to_overwrite_a_different_suite(tmp_path):
    out = tmp_path / "s"
    assert runner.invoke(app, ["dataset", "generate", "--out", str(out), "--pairs", "3", "--no-audio"]).exit_code == 0
    r = runner.invoke(app, ["dataset", "generate", "--out", str(out), "--pairs", "4", "--no-audio"])
    assert r.exit_code == 2 and "--force" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["dataset", "generate", "--out", str(out), "--pairs", "4", "--no-audio", "--force"])
    assert r.exit_code == 0 and len(Suite.load(out).pairs()) == 4


def test_unknown_generator_and_bad_options():
    with pytest.raises(DatasetError, match="unknown generator"):
        make_generator("gpt", 1)
    r = runner.invoke(app, ["dataset", "generate", "--out", "/tmp/x", "--n4-share", "2", "--no-audio"])
    assert r.exit_code == 2 and "share" in r.output
