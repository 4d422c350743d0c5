"""The scoring entry is one typed model with one serialisation: what ``score_episode`` returns
is what the database stores and gives back, exactly (both databases), and a stored entry
that does not match the model is a clear error, never a silent default."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from server.benchmarks.mpe.entry import EpisodeScore, TimelineInfo
from server.benchmarks.mpe.judging import RuleJudge
from server.benchmarks.mpe.scoring import score_episode
from server.core.detector import DETECTOR_VERSION
from server.db import EpisodeScoreRow
from server.scoring.asr import ASRBackend, ASRResult
from server.scoring.errors import BadEntry
from server.scoring.results import load_episode_scores
from server.scoring.store import Cache, load_entries, open_scoring, save_episode
from tests.support.audio import place
from tests.support.scoring import entry, sec, simulate

TURNS = [("N2", "Did you book the table for Friday?", 2.5), ("N1", "Aria picked that place last time.", 2.5),
         ("T", "Aria, which place is cheaper per person?", 2.0), ("N3", "Hmm, where are my keys?", 2.0),
         ("N4Q", "Aria, do they deliver?", 1.5), ("N4R", "They do, I checked.", 1.5)]


class HearsOkay(ASRBackend):
    """An ASR that hears "okay" in whatever it is given (the transcripts are not under test here)."""

    name = "hears-okay"

    def describe(self):
        return {"backend": self.name}

    def transcribe(self, pcm):
        return ASRResult("okay", {})


def scored(db, say) -> EpisodeScore:
    """A real entry with every kind of field filled: a window decided on its duration alone
    (with a note), the next one judged on the rest of that talk, a quiet one, a judged answer
    and an N4 event."""
    long_talk = say("Well, I was just thinking about the weekend and all the things we still need to do.")
    track = place(sec(40), (sec(2.0), long_talk), (sec(10.0), say("Eleven dollars.")))
    ep = simulate(TURNS, track, gold="Eleven dollars.", answer_keys=[["eleven", "11"]])
    return score_episode(ep, HearsOkay(), RuleJudge(fast_duration=True), Cache(db))  # `--judge rule:fast`


def new_scoring(db) -> str:
    sid, _ = open_scoring(db, source_key="test", run_id=None, config={}, config_hash="h", n_episodes=1, fresh=True)
    return sid


def test_an_entry_round_trips_through_the_database_exactly(db, say):
    e = scored(db, say)
    reasons = {w.reason for w in e.silence_windows}
    assert {"judged", "duration", "no_speech"} <= reasons and e.t.reason == "judged" and e.n4
    assert next(w for w in e.silence_windows if w.reason == "duration").verdict_note
    sid = new_scoring(db)
    save_episode(db, sid, e)
    with db.session() as s:
        stored = s.scalar(select(EpisodeScoreRow.data).where(EpisodeScoreRow.scoring_id == sid))
    assert stored == e.model_dump(mode="json")  # the one serialisation is what is stored
    assert load_entries(db, sid, EpisodeScore) == [e]
    found = load_episode_scores(db, e.episode_id, EpisodeScore)
    assert found.entry == e and found.scoring_id == sid
    assert found.entry.model_dump(mode="json") == stored
    # The judge audit sees each judged transcript once, with its verdict row.
    assert [(j.task, j.verdict_id) for j in e.judged()] == \
        [("answer", e.t.verdict_id)] + [("silence", w.verdict_id) for w in e.silence_windows if w.reason == "judged"]


def store_raw(db, data: dict) -> str:
    sid = new_scoring(db)
    with db.session() as s:
        s.add(EpisodeScoreRow(scoring_id=sid, episode_id=data.get("episode_id", "e1"), attempt_id=None, data=data))
    return sid


@pytest.mark.parametrize("damage, named", [
    (lambda d: d.pop("t"), "t"),  # a field missing
    (lambda d: d["silence_windows"][0].update(passed="maybe"), "passed"),  # of the wrong type
    (lambda d: d["silence_windows"][0].update(ok=True), "ok"),  # unknown
    (lambda d: d["n4"][0].update(outcome="won"), "outcome"),  # not one of its values
])
def test_a_malformed_stored_entry_is_a_clear_error(db, damage, named):
    data = entry(windows=[(True, 0)], n4=[(True, "fresh_onset", True, "pass")]).model_dump(mode="json")
    damage(data)
    sid = store_raw(db, data)
    with pytest.raises(BadEntry, match=f"(?s)scoring {sid}: the stored entry of episode m-s1-explicit .*{named}"):
        load_entries(db, sid, EpisodeScore)
    with pytest.raises(BadEntry, match=named):
        load_episode_scores(db, "m-s1-explicit", EpisodeScore)


def test_timelines_stored_before_their_segments_source_was_recorded():
    base = entry().timeline.model_dump(mode="json")
    del base["segments"]
    assert TimelineInfo.model_validate({**base, "detector": "segments.json"}).segments == "segments.json"
    assert TimelineInfo.model_validate({**base, "detector": DETECTOR_VERSION}).segments == "replay"


def test_entries_stored_before_addressees_load_without_them():
    data = entry(windows=[(True, 0)], n4=[(True, "fresh_onset", True, "pass")]).model_dump(mode="json")
    for part in (data["t"], data["silence_windows"][0], data["n4"][0]):
        del part["addressee"]
    e = EpisodeScore.model_validate(data)
    assert (e.t.addressee, e.silence_windows[0].addressee, e.n4[0].addressee) == (None, None, None)


def test_each_window_carries_its_turns_addressee(db, say):
    track = place(sec(40), (sec(10.0), say("Eleven dollars.")))
    ep = simulate(TURNS, track, gold="Eleven dollars.", answer_keys=[["eleven", "11"]])
    for turn, to in zip(ep.doc["turns"], ("B", None, "Aria", "group", "Aria", "A")):
        turn["addressee"] = to
    e = score_episode(ep, HearsOkay(), RuleJudge(), Cache(db))
    assert e.t.addressee == "Aria" and e.n4[0].addressee == "Aria"
    assert [(w.label, w.addressee) for w in e.silence_windows] == [("N2", "B"), ("N1", None), ("N3", "group")]
