"""The shared sentence-level wording measures (server/datasets/realism.py) on literal scenes."""

from __future__ import annotations

from server.datasets.realism import normalise, sentence_spread, split_sentences, top_share


def test_split_sentences_at_end_marks_followed_by_space():
    assert split_sentences("Yes. It's 2.5 km... or so? Fine!") == ["Yes.", "It's 2.5 km...", "or so?", "Fine!"]
    assert split_sentences("  ") == []


def test_normalise_ignores_case_spacing_and_punctuation():
    assert normalise("Okay,  that's   it!") == normalise("okay that's it.") == "okay that's it"


def test_sentence_spread_counts_scenes_not_repeats():
    scenes = [["Hi there. Okay.", "Okay."], ["okay!", "Bye."], ["Something else."]]
    s = sentence_spread(scenes, top=2)
    assert (s.scenes, s.sentences, s.distinct) == (3, 6, 4)
    assert s.distinct_share == 4 / 6
    assert s.top[0].sentence == "Okay." and s.top[0].scenes == 2 and s.max_scene_share == round(2 / 3, 4)
    assert len(s.top) == 2


def test_top_share():
    share, top = top_share(["A?", "a", "b", "c"], 1)
    assert share == 0.5 and top == [("A?", 2)]
    assert top_share([], 3) == (0.0, [])
