"""The procedural MTR dialogues move on (re-asks only after a third party talked over the reply),
their barge-ins open in many ways, their stock wording does not repeat across dialogues, and the
wording block of ``mpe dataset stats`` measures it (server/benchmarks/mtr/dataset/wording.py)."""

from __future__ import annotations

import pytest
from rich.console import Console

from server.benchmarks.mtr.dataset.phrases import PAUSE_RESUMES
from server.benchmarks.mtr.dataset.plan import plan_suite
from server.benchmarks.mtr.dataset.procedural import ProceduralGenerator
from server.benchmarks.mtr.dataset.stats import render_stats, suite_stats
from server.benchmarks.mtr.dataset.topics import TOPICS
from server.benchmarks.mtr.dataset.wording import opening, reasked_rounds, spoken_lines, wording
from server.benchmarks.mtr.suite import Clip, Dialogue, MTRMeta, Round, Suite
from server.datasets.realism import sentence_spread, split_sentences


@pytest.fixture(scope="module")
def dialogues() -> list[Dialogue]:
    gen = ProceduralGenerator(11)
    return [gen.generate(p) for p in plan_suite(40, 10, "mixed", 11)]


def test_rounds_ask_again_only_right_after_a_person_talked_over_the_reply(dialogues):
    w = wording(dialogues)
    assert w.rounds == 400 and w.reask_share <= 0.10, w.as_json()
    for d in dialogues:
        for n, previous in reasked_rounds(d):
            before = d.rounds[n - 2]
            assert previous and before.background is not None and before.background.kind == "speaker", (d.dialogue_id, n)


def test_barge_ins_open_in_many_ways(dialogues):
    w = wording(dialogues)
    assert w.barge_ins >= 100  # interruption rounds of 40 mixed dialogues (alternating and overlay sets)
    assert w.barge_in_max_share <= 0.10, w.barge_in_top


def test_no_stock_sentence_comes_back_across_dialogues(dialogues):
    """Sentences of four words or more (what a template says besides the facts): none in more
    than a fifth of the dialogues; the facts of one topic come back only where the topic does."""
    spread = sentence_spread([spoken_lines(d) for d in dialogues], top=10_000)
    stock = [(c.sentence, c.scenes) for c in spread.top if len(c.sentence.split()) >= 4]
    assert max(n for _, n in stock) <= 0.2 * len(dialogues), stock[:5]


def test_a_pause_breaks_the_question_itself_off(dialogues):
    asks = {f.ask for t in TOPICS for f in t.facets}
    pauses = [r for d in dialogues for r in d.rounds if r.pause is not None]
    assert pauses
    for r in pauses:
        rest = r.pause.continuation.text
        rest = next((rest.removeprefix(h + " ") for h in PAUSE_RESUMES if rest.startswith(h + " ")), rest)
        whole = f"{r.user.text} {rest}".rstrip(".?").removesuffix(" again")
        assert any(whole.endswith(a) for a in asks), whole
        assert not r.user.text.endswith((".", "?", "!"))  # the turn is visibly unfinished


def _round(n: int, user: str, reply: str) -> Round:
    return Round(round=n, feature="smooth", user=Clip(text=user, clip=f"u{n}.wav", duration_s=1.0),
                 assistant=Clip(text=reply, clip=f"a{n}.wav", duration_s=6.0))


def test_the_measures_on_literal_dialogues():
    bees = "Bees make honey from nectar. They fan it with their wings until it thickens."
    d = Dialogue(dialogue_id="d1", set="smooth", topic="honeybees", rounds=[
        _round(1, "How do bees make honey?", f"Sure. {bees} I can go deeper into that if you like."),
        _round(2, "What does the queen do?", "The queen lays eggs all summer long. I can go deeper into that if you like."),
        _round(3, "Sorry, how do bees make honey?", f"Of course. {bees}"),
    ])
    assert reasked_rounds(d) == [(3, False)]  # one stock sentence shared is not a re-ask; two facts are
    w = wording([d])
    assert (w.reasked, w.reask_previous, w.barge_ins) == (1, 0, 0)
    assert opening("Actually, wait — can you tell me?") == "actually wait"


def test_dataset_stats_prints_the_wording_block(dialogues, tmp_path):
    suite = Suite(tmp_path, MTRMeta(benchmark="mtr-duplexbench", name="w", version="1", generator="procedural", seed=11,
                                       voices={}, audio="pending"), dialogues[:8])
    data = suite_stats(suite)
    block = data["wording"]
    assert {"distinct_share", "top_sentences", "reask_share", "barge_in_max_share"} <= block.keys()
    assert 0 < block["distinct_share"] <= 1 and block["rounds"] == 80
    console = Console(record=True, width=140)
    render_stats(data, console)
    out = console.export_text()
    assert "distinct of" in out and "re-asked rounds" in out and "barge-in openings" in out


@pytest.fixture(scope="module")
def suite200() -> list[Dialogue]:
    gen = ProceduralGenerator(0)
    return [gen.generate(p) for p in plan_suite(200, 10, "mixed", 0)]


def test_half_the_sentences_of_a_200_dialogue_suite_are_distinct(suite200):
    spread = sentence_spread([spoken_lines(d) for d in suite200])
    assert spread.distinct_share >= 0.5, (spread.distinct_share, spread.top[:5])


def test_no_sentence_in_more_than_2_percent_of_200_dialogues(suite200):
    """Acknowledgements are said into the sentence they open, a topic's facts are said in a new way
    in each dialogue, broadcasts change their places and figures, a question broken off by a pause
    keeps three of its words before it and picks up after a hesitation: no sentence (nor piece of one
    around a pause) in more than 2 % of the dialogues."""
    spread = sentence_spread([spoken_lines(d) for d in suite200], top=100_000)
    assert spread.max_scene_share <= 0.02, spread.top[:5]


def test_no_one_word_sentence_stands_alone(suite200):
    """"Okay.", "Sure.", "Huh." are said into the next sentence, never as a stock sentence of their own."""
    alone = {s for d in suite200 for line in spoken_lines(d) for s in split_sentences(line) if len(s.split()) == 1}
    assert not alone, sorted(alone)[:10]
