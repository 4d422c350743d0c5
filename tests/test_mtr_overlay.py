"""Overlay rounds (the published multi-scenario sets, ``eval_3_scenarios.py`` / ``eval_4_scenarios.py``):
a round carries several features at once. Literal inputs: the labels, the validator, the scheduler's
sequence for a pause + barge-in + background round, one verdict per feature, and the metrics that
count an overlay round under each feature it carries."""

from __future__ import annotations

from server.benchmarks.mtr.entry import MTREpisodeScore, RoundScore
from server.benchmarks.mtr.metrics import quantities, rounds_of
from server.benchmarks.mtr.rules import judge_episode
from server.benchmarks.mtr.scheduler import FRAME, RoundScheduler
from server.benchmarks.mtr.suite import Dialogue, MTRMeta, Suite, check_suite, features_of, split_features
from server.core.events import Event
from server.core.timebase import SpeechEvent

S = 24_000


def clip(name: str, dur: float, **kw) -> dict:
    return {"text": name, "clip": f"clips/{name}.wav", "duration_s": dur, **kw}


def overlay_round(n: int = 1, **over) -> dict:
    """An interruption round with a pause in the user's turn and a background voice before the barge-in."""
    r = {"round": n, "feature": "interruption", "overlay": ["pause", "background"], "user": clip("u", 2.0),
         "assistant": clip("a", 10.0), "pause": {"length_s": 2.0, "continuation": clip("c", 1.0)},
         "background": clip("g", 1.5, kind="speaker", after_onset_s=0.5),
         "barge_in": clip("b", 1.5, after_onset_s=3.0, response=clip("br", 4.0))}
    return {**r, **over}


def dialogue(*rounds: dict) -> Dialogue:
    return Dialogue.model_validate({"dialogue_id": "d1", "set": "S+I+P+B", "topic": "t", "rounds": list(rounds)})


def problems(d: Dialogue) -> list[str]:
    meta = MTRMeta(benchmark="mtr-duplexbench", name="t", version="1", generator="g", seed=0,
                   voices={"user": "v", "assistant": "v", "third": "v", "broadcast": "v"})
    return [f"{p.rule}: {p.message}" for p in check_suite(Suite(".", meta, [d]), check_audio=False)]


def test_published_labels_name_their_features():
    assert features_of("smooth-turntaking_background_pause-handling_interruption") == (
        "smooth", "interruption", "pause", "background")
    assert split_features(features_of("interruption_pause-handling")) == ("interruption", ["pause"])
    assert split_features(features_of("smooth-turntaking_pause-handling")) == ("smooth", ["pause"])
    assert features_of("pause_handling") == ("pause",) and features_of("smooth_turntaking") == ("smooth",)
    assert split_features(features_of("background_pause-handling")) is None  # no turn to carry them
    assert features_of("smooth_bogus") is None and features_of("pause_pause") is None


def test_the_validator_accepts_overlays_and_names_what_is_wrong():
    assert problems(dialogue(overlay_round())) == []
    assert problems(dialogue(overlay_round(overlay=["pause"]))) == [
        "feature-parts: a interruption+pause round has background parts"]
    assert problems(dialogue(overlay_round(feature="pause", overlay=["background"], barge_in=None,
                                           pause=None))) == [
        "overlay: overlays ['background'] over a pause round (only over smooth or interruption)",
        "feature-parts: a pause+background round lacks pause parts"]
    # the reference stops for the barge-in: a background voice over it could not be talked through
    late = overlay_round(background=clip("g", 1.5, kind="speaker", after_onset_s=2.0))
    assert problems(dialogue(late)) == ["reply-covers: the background voice ends 3.50 s after the onset, after the "
                                        "barge-in starts (3.00 s)"]
    assert problems(dialogue(overlay_round(overlay=["background", "pause"]))) == [
        "overlay: overlays ['background', 'pause'] repeat or are out of order (smooth, interruption, pause, "
        "background, backchannel)"]


def test_the_scheduler_plays_every_part_of_an_overlay_round():
    d = dialogue(overlay_round())
    lengths = {k: round(c.duration_s * S) for r in d.rounds for k, c in r.clips()}
    sched = RoundScheduler(d, "free", None, lengths)
    onset = round(5.8 * S)  # the model answers 0.3 s after the user's turn (0.5 + 2 + 2 + 1 = 5.5 s) ends
    events: list[Event] = []
    while (plan := sched.next_frame()) is not None:
        events += plan.events
        stop = (plan.seq + 1) * FRAME
        if plan.seq * FRAME <= onset + 2 * FRAME < stop:
            sched.observe([SpeechEvent("onset", onset, stop)], stop)
    times = {(e.type): e.t for e in events}
    assert events[0].type == "round.start" and events[0].data["features"] == ["interruption", "pause", "background"]
    assert times["pause.start"] == round(2.5 * S) and times["pause.end"] == round(4.5 * S)
    assert times["background.start"] == onset + round(0.5 * S) and times["barge_in.start"] == onset + round(3.0 * S)
    (r,) = judge_episode(events, [(onset, onset + round(3.2 * S))])  # stops 0.2 s into the barge-in, no answer
    assert r.verdicts == {"interruption": "no_barge_in_response", "pause": None, "background": None}


def ev(t: float, type_: str, **data) -> Event:
    return Event(round(t * S), type_, data)


def test_each_feature_a_round_carries_gets_its_own_verdict():
    """User 1-2 s, pause 2-4 s, continuation 4-5 s; background 6-8 s; barge-in 9-10.5 s."""
    events = sorted([
        ev(1, "round.start", round=1, feature="interruption", features=["interruption", "pause", "background"],
           live=True),
        ev(1, "user.start", round=1, part=1), ev(2, "pause.start", round=1), ev(4, "pause.end", round=1),
        ev(4, "user.start", round=1, part=2), ev(5, "user.end", round=1), ev(6, "background.start", round=1),
        ev(8, "background.end", round=1), ev(9, "barge_in.start", round=1), ev(10.5, "barge_in.end", round=1),
        ev(25, "round.end", round=1)], key=lambda e: e.t)

    def verdicts(*spans):
        (r,) = judge_episode(events, [(round(a * S), round(b * S)) for a, b in spans])
        return r.ok, r.failure, r.verdicts

    reference = ((5.3, 9.3), (10.8, 14))  # answers, talks through the voice, stops for the barge-in, answers it
    assert verdicts(*reference) == (True, None, {"interruption": None, "pause": None, "background": None})
    # speaks 1.5 s in the pause: the pause fails; its turn-taking and barge-in handling are still judged
    assert verdicts((2.5, 4.0), *reference) == (False, "spoke_in_pause", {
        "interruption": None, "pause": "spoke_in_pause", "background": None})
    # yields to the background voice (silent 6.5-9 s): only the background verdict fails
    assert verdicts((5.3, 6.5), (10.8, 14)) == (False, "yielded_to_background", {
        "interruption": None, "pause": None, "background": "yielded_to_background"})
    # never answers: every feature fails on its turn
    assert verdicts() == (False, "no_response", {"interruption": "no_response", "pause": "no_response",
                                                 "background": "no_response"})


def test_metrics_count_an_overlay_round_under_each_feature_with_its_verdict():
    def rs(k: int, verdicts: dict) -> RoundScore:
        ok = all(v is None for v in verdicts.values())
        return RoundScore(round=k, feature="interruption", ok=ok, failure=next((v for v in verdicts.values() if v), None),
                          responded=True, latency_s=0.5, interrupted=True, stop_latency_s=0.2,
                          barge_in_latency_s=0.3, own_backchannels=0, user_speech_s=2.0, verdicts=verdicts)

    e = MTREpisodeScore(episode_id="e", attempt_id=None, run_id=None, scenario_id="d1", condition="free", model="m",
                        source="db", dialogue_id="d1", set="S+I+P+B", mode="free", live_round=None, duration_s=60.0,
                        speech=[], room=[], segments="none",
                        rounds=[rs(1, {"interruption": None, "pause": "spoke_in_pause", "background": None}),
                                rs(2, {"interruption": None, "pause": None, "background": None})])
    q = quantities(rounds_of([e]))
    assert (q["interruption"]["value"], q["pause"]["value"], q["background"]["value"]) == (1.0, 0.5, 1.0)
    assert "smooth" not in q and q["set:S+I+P+B"]["value"] == 0.5  # the set's rate: rounds passing every feature


def test_a_generated_overlay_set_voiced_and_played_by_the_oracle_passes_every_feature(tmp_path, piper_engine):
    """The procedural generator's S+I+P+B overlay rounds, voiced by piper, played in lockstep on the real
    episode core by the oracle in both history modes: every round passes every feature it carries (the
    background voice ends before the barge-in, the reply outlasts both)."""
    from server.benchmarks.mpe.judging import RuleJudge
    from server.benchmarks.mtr.dataset.build import build_text_suite
    from server.benchmarks.mtr.dataset.plan import plan_suite
    from server.benchmarks.mtr.dataset.procedural import ProceduralGenerator
    from server.benchmarks.mtr.dataset.synth import synthesize_suite
    from server.benchmarks.mtr.oracle import MTROracle
    from server.benchmarks.mtr.scoring import score_episode
    from server.db import Database
    from server.scoring.asr import make_asr
    from server.scoring.store import Cache
    from tests.support.databases import database_url
    from tests.support.mtr import run_suite

    plans = plan_suite(1, 2, "S+I+P+B", 7)
    suite, _ = build_text_suite(tmp_path / "s", name="s", plans=plans, seed=7, generator=ProceduralGenerator(7))
    synthesize_suite(suite.root, data_dir=tmp_path / "data", engine=piper_engine, workers=1)
    suite = Suite.load(suite.root)
    assert check_suite(suite) == [] and [r.label() for r in suite.dialogues[0].rounds] == [
        "smooth+pause+background", "interruption+pause+background"]
    episodes = run_suite(str(suite.root), MTROracle(tmp_path, str(suite.root)))
    with database_url("sqlite", tmp_path) as url:  # the scores' cache (the rules need no database)
        db = Database(url)
        scores = [score_episode(e, make_asr("none"), RuleJudge(), Cache(db)) for e in episodes]
        db.dispose()
    got = [(s.mode, r.round, r.ok, r.verdicts) for s in scores for r in s.rounds]
    assert len(got) == 4 and all(ok and set(v.values()) == {None} for _, _, ok, v in got), got
