"""How a generated Duplex-MPE suite reads: sentences that vary, side questions and facts
bound to the scene, the implicit cue in T (the wording figures of ``mpe dataset stats``)."""

from __future__ import annotations

import pytest

from server.benchmarks.mpe.dataset import inventory as inv
from server.benchmarks.mpe.dataset.build import build_text_suite
from server.benchmarks.mpe.dataset.procedural import ProceduralGenerator
from server.benchmarks.mpe.dataset.stats import realism, wording
from server.benchmarks.mpe.suite import Suite


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Suite:
    """200 pairs as text, the benchmark's default shape."""
    root = tmp_path_factory.mktemp("w") / "s"
    s, _ = build_text_suite(root, name="s", pairs=200, seed=11, generator=ProceduralGenerator(11))
    return s


def test_sentences_vary_and_none_is_everywhere(suite):
    w = wording(suite)
    assert w["sentence_distinct_share"] >= 0.5
    # on 200 scenes a sentence in 2 % of them is in 4; allow sampling noise, not stock filler
    assert w["top_sentences"][0]["share"] <= 0.05, w["top_sentences"][0]


def test_side_questions_are_spread_over_the_scenes(suite):
    w = wording(suite)
    assert w["side_questions"] > 150
    # 2,000 pairs: at most 10 %; on 200 pairs the commonest five are a few events each
    assert w["top_side_questions_share"] <= 0.15, w["top_side_questions"]
    assert max(q["count"] for q in w["top_side_questions"]) <= 0.04 * w["side_questions"]


def test_the_implicit_cue_is_in_t_and_its_forms_vary(suite):
    w = wording(suite)
    assert w["cue_in_t_share"] >= 0.95
    assert w["top_cue_form_share"] <= 0.05, w["top_cue_form"]


def test_the_lengths_stay_on_the_paper(suite):
    r = realism(suite)
    assert abs(r["conversation_mean_s"] - 97.7) <= 0.03 * 97.7  # 97.7 s on 2,000 pairs before the rewording
    assert abs(r["t_mean_s"] - 8.2) <= 0.05 * 8.2


def test_settings_say_nothing_that_contradicts_them(suite):
    for p in suite.pairs().values():
        sc = p["explicit"]
        setting = inv.setting(sc.attributes["setting"])
        text = " ".join(t.text for t in sc.turns).lower()
        assert "sign when i walked past" not in text
        assert "pharmacy" not in text  # a side question from nowhere
        if "car" in setting.kinds:  # already driving: nobody plans when to leave
            assert "when do we need to leave" not in text and "leave straight after breakfast" not in text
            assert not any(f in text for f in ("before we set off", "before we go", "i'll bring snacks"))
        if "outdoor" in setting.kinds:
            assert "smart TV" not in sc.attributes["device_context"]
    for s in inv.SETTINGS:
        assert s.value in inv.SIDE_QUESTIONS
        if "outdoor" in s.kinds:
            assert all("TV" not in d.value for d in inv.devices_for(s))


def test_a_gold_answer_agrees_in_number(tmp_path):
    # two exams one day apart: "There is one day between them", never "There are one days" (seed 11 has both)
    s, _ = build_text_suite(tmp_path / "s", name="s", pairs=2000, seed=11, generator=ProceduralGenerator(11))
    golds = {sc.gold_answer for sc in s.scenarios}
    assert "There is one day between them." in golds and not [g for g in golds if g.startswith("There are one ")]
