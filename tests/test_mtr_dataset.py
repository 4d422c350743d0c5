"""MTR-DuplexBench suites: the procedural and Claude generators, voices, synthesis, built-ins, CLI."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from server.benchmarks.mtr.dataset import phrases
from server.benchmarks.mtr.dataset.build import build_text_suite, suite_meta
from server.benchmarks.mtr.dataset.builtin import BUILTINS, build_builtin
from server.benchmarks.mtr.dataset.claude import DIALOGUE_SCHEMA, SYSTEM_PROMPT, TOOL_NAME, ClaudeDialogueGenerator
from server.benchmarks.mtr.dataset.plan import plan_dialogues, plan_suite
from server.benchmarks.mtr.dataset.procedural import OVERLAY_GAP_S, ProceduralGenerator
from server.benchmarks.mtr.dataset.schema import DialoguePlan
from server.benchmarks.mtr.dataset.sets import COMBINATIONS, DIMENSION_SETS, MIXED, SETS, round_features, round_plan
from server.benchmarks.mtr.dataset.stats import suite_stats
from server.benchmarks.mtr.dataset.synth import synthesize_suite
from server.benchmarks.mtr.dataset.timing import (
    BACKCHANNEL_GAP_S,
    BACKGROUND_AFTER_S,
    BARGE_IN_AFTER_S,
    PAUSE_S,
    REPLY_S,
    estimate_s,
    fit_round,
    sentences,
)
from server.benchmarks.mtr.dataset.topics import TOPICS
from server.benchmarks.mtr.dataset.voices import BAND_HZ, broadcast_filter, role_voices
from server.benchmarks.mtr.dataset.wording import reasked_rounds
from server.benchmarks.mtr.suite import FEATURES, REPLY_MARGIN_S, Suite, check_suite, feature_set_name
from server.cli import app
from server.datasets.errors import DatasetError
from server.tts import OUTPUT_RATE, get_engine
from tests.support.anthropic_peer import FakeAnthropic

runner = CliRunner()


def text_suite(root, dialogues=8, rounds=10, set_name=MIXED, seed=3) -> Suite:
    suite, _ = build_text_suite(root, name=root.name, plans=plan_suite(dialogues, rounds, set_name, seed), seed=seed,
                                generator=ProceduralGenerator(seed))
    return suite


# ------------------------------------------------------------------ procedural generator


def test_generation_is_deterministic_per_seed(tmp_path):
    a = text_suite(tmp_path / "a", seed=11)
    b = text_suite(tmp_path / "b", seed=11)
    c = text_suite(tmp_path / "c", seed=12)
    files = ("scenarios.jsonl",)
    assert all((a.root / f).read_bytes() == (b.root / f).read_bytes() for f in files)
    assert (a.root / "scenarios.jsonl").read_bytes() != (c.root / "scenarios.jsonl").read_bytes()
    # a dialogue depends only on the seed and its plan: a longer suite starts with the same dialogues
    longer = text_suite(tmp_path / "d", dialogues=12, seed=11)
    assert longer.dialogues[:8] == a.dialogues


@pytest.mark.parametrize("set_name", [*SETS, MIXED])
def test_every_set_makes_valid_dialogues(tmp_path, set_name):
    for seed in (0, 1, 2):
        plans = plan_suite(8, 10, set_name, seed)
        gen = ProceduralGenerator(seed)
        dialogues = [gen.generate(p) for p in plans]
        suite = Suite(tmp_path, suite_meta(name="t", seed=seed, generator=gen.name),
                      dialogues)
        assert check_suite(suite, check_audio=False) == []
        for p, d in zip(plans, dialogues):
            assert [(r.feature, tuple(r.overlay)) for r in d.rounds] == round_plan(p.set, 10)
            assert [r.feature for r in d.rounds] == list(p.features)
            assert round_plan(p.set, 10, "alternate") == [(f, ()) for f in round_features(p.set, 10)]
            assert d.set == p.set and d.topic == p.topic
            if p.set != MIXED and len(SETS[p.set]) > 1:
                assert feature_set_name([f for r in d.rounds for f in r.features]) == p.set
            for r in d.rounds:
                assert 2 <= sentences(r.assistant.text) <= 4, r.assistant.text
                assert REPLY_S[0] <= r.assistant.duration_s <= REPLY_S[1]
                if r.barge_in and r.background:  # an overlay round: the barge-in follows the background voice
                    assert r.barge_in.after_onset_s == round(r.background.after_onset_s + r.background.duration_s
                                                             + OVERLAY_GAP_S, 2)
                elif r.barge_in:
                    assert BARGE_IN_AFTER_S[0] <= r.barge_in.after_onset_s <= BARGE_IN_AFTER_S[1]
                    assert r.barge_in.text.startswith(phrases.BARGE_OPENINGS)
                    assert r.barge_in.response.text
                if r.pause:
                    assert PAUSE_S[0] <= r.pause.length_s <= PAUSE_S[1]
                    assert not r.user.text.endswith((".", "?")) and r.pause.continuation.text[-1] in ".?"
                if r.background:
                    assert BACKGROUND_AFTER_S[0] <= r.background.after_onset_s <= BACKGROUND_AFTER_S[1]
                    assert r.background.text in (phrases.THIRD_PARTY if r.background.kind == "speaker"
                                                 else phrases.BROADCASTS)
                if r.backchannels:
                    assert 1 <= len(r.backchannels) <= 3
                    texts = [b.text for b in r.backchannels]
                    assert set(texts) <= set(phrases.BACKCHANNELS) and len(set(texts)) == len(texts)
                    starts = [b.after_onset_s for b in r.backchannels]
                    ends = [b.after_onset_s + b.duration_s for b in r.backchannels]
                    assert all(0 < g <= BACKCHANNEL_GAP_S[1] + 1e-9 for g in np.subtract(starts[1:], ends[:-1]))
                    assert ends[-1] + REPLY_MARGIN_S <= r.assistant.duration_s


def test_topics_and_phrasing_vary():
    assert len(TOPICS) >= 40 and all(len(t.facets) >= 7 for t in TOPICS)
    gen = ProceduralGenerator(5)
    dialogues = [gen.generate(p) for p in plan_suite(48, 10, MIXED, 5)]
    assert len({d.topic for d in dialogues}) == 44  # every topic before any repeats
    users = [r.user.text for d in dialogues for r in d.rounds]
    assert len(set(users)) > 0.95 * len(users)
    rounds = [r for d in dialogues for r in d.rounds]
    assert Counter(b.text for r in rounds for b in r.backchannels).keys() == set(phrases.BACKCHANNELS)
    assert Counter(r.background.kind for r in rounds if r.background).keys() == {"speaker", "broadcast"}
    # continuity: a dialogue stays on its topic and asks about new facets, coming back to one only
    # when a third party talked over it
    for d in dialogues:
        topic = next(t for t in TOPICS if t.title == d.topic)
        replies = " ".join(c.text for r in d.rounds[:5] for k, c in r.clips() if "assistant" in k or "response" in k)
        reasked = sum(n <= 5 for n, _ in reasked_rounds(d))
        # a fact is said after a connective ("And most of them ..."): its words after the first
        assert sum(f.facts[1].split(maxsplit=1)[1] in replies for f in topic.facets) >= 5 - reasked


def test_fit_moves_parts_only_when_the_real_reply_is_too_short():
    d = ProceduralGenerator(2).generate(plan_dialogues([("background", 1)], 2)[0])
    r = d.rounds[0]
    assert fit_round(r) == r
    short = r.model_copy(deep=True)
    short.assistant.duration_s = r.background.duration_s + REPLY_MARGIN_S + 0.2
    fitted = fit_round(short)
    assert fitted.background.after_onset_s <= 0.2 and check_suite(
        Suite(".", _meta(), [d.model_copy(update={"rounds": [fitted]})]), check_audio=False) == []
    short.assistant.duration_s = r.background.duration_s
    with pytest.raises(DatasetError, match="too short"):
        fit_round(short)


def _meta():
    return suite_meta(name="t", seed=0, generator="procedural")


# ------------------------------------------------------------------ built-in suites


def test_mtr_features_composition(tmp_path):
    path = build_builtin("mtr-features", tmp_path)  # text-only by default
    suite = Suite.load(path)
    assert suite.meta.audio == "pending" and check_suite(suite, check_audio=False) == []
    data = suite_stats(suite)
    assert data["dialogues"] == 200 and {len(d.rounds) for d in suite.dialogues} == {10}
    assert data["dialogues_per_set"] == {s: 25 for s in SETS} and set(COMBINATIONS) == {"S+I", "S+I+P", "S+I+P+B"}
    # singles 250 rounds each; the combinations are overlays: S and I alternate (5/5 per dialogue) and every
    # round of S+I+P carries a pause, of S+I+P+B a pause and a background voice (an overlay round counts under
    # each feature it carries)
    assert data["rounds_per_feature"] == {"smooth": 250 + 3 * 125, "interruption": 250 + 3 * 125,
                                          "pause": 250 + 2 * 250, "background": 250 + 250, "backchannel": 250}
    assert data["topics"] == 44
    assert build_builtin("mtr-features", tmp_path) == path  # complete: reused
    assert json.loads((path / ".build.json").read_text())["audio"] is False


def test_mtr_mini_covers_every_feature(tmp_path):
    spec = BUILTINS["mtr-mini"]
    assert 2 <= len(spec.dialogues) <= 3 and all(4 <= r <= 5 for _, r in spec.dialogues)
    suite = Suite.load(build_builtin("mtr-mini", tmp_path, audio=False))
    assert check_suite(suite, check_audio=False) == []
    assert {f for d in suite.dialogues for r in d.rounds for f in r.features} == set(FEATURES)
    assert any(d.set in COMBINATIONS for d in suite.dialogues)
    estimated = sum(c.duration_s for d in suite.dialogues for r in d.rounds for _, c in r.clips())
    assert estimated < 180  # well under 4 minutes of audio, even with the estimate's spread


# ------------------------------------------------------------------ voices and synthesis


def _band_power(x: np.ndarray, lo: float, hi: float) -> float:
    spec = np.abs(np.fft.rfft(x.astype(np.float64))) ** 2
    f = np.fft.rfftfreq(len(x), 1 / OUTPUT_RATE)
    return float(spec[(f >= lo) & (f < hi)].sum())


def test_broadcast_filter_removes_energy_outside_the_band():
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(2 * OUTPUT_RATE) * 6000).clip(-32767, 32767).astype(np.int16)
    before = noise.copy()
    out = broadcast_filter(noise)
    assert np.array_equal(noise, before)  # pure: the input is untouched
    assert out.dtype == np.int16 and out.shape == noise.shape
    assert np.max(np.abs(out)) == pytest.approx(np.max(np.abs(noise)), abs=2)  # peak kept

    def gain_db(lo, hi):
        return 10 * np.log10(_band_power(out, lo, hi) / _band_power(noise, lo, hi))

    ref = gain_db(800, 2500)  # the pass band's gain (peak normalisation shifts everything)
    assert abs(gain_db(500, 3000) - ref) < 1.5
    below, above = gain_db(20, BAND_HZ[0]) - ref, gain_db(BAND_HZ[1], 12000) - ref
    deep_below, deep_above = gain_db(20, 150) - ref, gain_db(5000, 12000) - ref
    assert below < -10 and above < -15  # the whole stop bands, edges included
    assert deep_below < -45 and deep_above < -50  # an octave and more away
    assert np.array_equal(broadcast_filter(np.zeros(1000, np.int16)), np.zeros(1000, np.int16))


def test_role_voices_are_distinct():
    for engine in ("piper", "espeak"):
        voices = role_voices(engine)
        assert set(voices) == {"user", "assistant", "third", "broadcast"}
        assert len(set(voices.values())) == 4 and all(v.startswith(engine + ":") for v in voices.values())


def _piper():
    return get_engine("piper", threads=1)  # a dependency of the project: missing is a failure


def test_synthesis_of_a_tiny_suite(tmp_path):
    seed = next(s for s in range(100) if ProceduralGenerator(s).generate(
        _tiny_plan(s)).rounds[0].background.kind == "broadcast")
    build_text_suite(tmp_path / "s", name="tiny", plans=[_tiny_plan(seed)], seed=seed,
                     generator=ProceduralGenerator(seed))
    engine = _piper()
    report = synthesize_suite(tmp_path / "s", data_dir=tmp_path / "data", engine=engine)
    suite = Suite.load(tmp_path / "s")
    assert suite.meta.audio is None and suite.meta.voices == role_voices("piper")
    assert check_suite(suite) == []
    r_bg, r_bc = suite.dialogues[0].rounds
    for _, c in [*r_bg.clips(), *r_bc.clips()]:
        info = sf.info(str(suite.clip_path(c.clip)))
        assert (info.samplerate, info.channels, info.subtype) == (OUTPUT_RATE, 1, "PCM_16")
        assert c.duration_s == pytest.approx(info.frames / OUTPUT_RATE, abs=0.001)
        assert 0.4 < c.duration_s / estimate_s(c.text) < 1.6  # the estimate is a fair one
    assert report.jobs == len({(c.text, k.split(".")[1][:7]) for r in (r_bg, r_bc) for k, c in r.clips()})
    # the broadcast clip is band-limited, the user's voice is not
    bg, user = suite.load_clip(r_bg.background.clip), suite.load_clip(r_bg.user.clip)

    def low_share(x):
        return _band_power(x, 20, 200) / _band_power(x, 20, 12000)

    assert low_share(bg) < 1e-3 < low_share(user)
    again = synthesize_suite(tmp_path / "s", data_dir=tmp_path / "data", engine=engine)
    assert again.synthesized == 0 and Suite.load(tmp_path / "s").content_hash() == suite.content_hash()


def _tiny_plan(seed: int) -> DialoguePlan:
    return DialoguePlan(dialogue_id="d0001", set="S+I+P+B", features=("background", "backchannel"),
                        topic=TOPICS[seed % len(TOPICS)].title, seed=seed)


# ------------------------------------------------------------------ CLI


def test_cli_generate_validate_stats(tmp_path, monkeypatch):
    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "s"
    r = runner.invoke(app, ["dataset", "generate", "--benchmark", "mtr-duplexbench", "--dialogues", "8", "--rounds",
                            "4", "--set", "mixed", "--seed", "4", "--out", str(out), "--no-audio"])
    assert r.exit_code == 0, r.output
    suite = Suite.load(out)
    assert suite.meta.benchmark == "mtr-duplexbench" and suite.meta.audio == "pending"
    assert len(suite.dialogues) == 8 and {len(d.rounds) for d in suite.dialogues} == {4}

    r = runner.invoke(app, ["dataset", "validate", str(out)])
    assert r.exit_code == 0 and "valid" in r.output and "audio pending" in r.output

    r = runner.invoke(app, ["dataset", "stats", str(out), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["dialogues_per_set"] == {s: 1 for s in SETS}
    # 8 first rounds; an overlay round counts under each feature it carries: S+I+P's smooth+pause one more,
    # S+I+P+B's smooth+pause+background two more
    assert sum(data["rounds_per_index"]["1"].values()) == 8 + 1 + 2 and data["audio"] == "pending"
    r = runner.invoke(app, ["dataset", "stats", str(out)])
    assert r.exit_code == 0 and "rounds per round index x feature" in r.output

    # one broken line: the interruption dialogue's first round claims to be smooth
    lines = (out / "scenarios.jsonl").read_text().splitlines()
    d = json.loads(lines[1])
    assert d["rounds"][0]["feature"] == "interruption"
    d["rounds"][0]["feature"] = "smooth"
    lines[1] = json.dumps(d)
    (out / "scenarios.jsonl").write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["dataset", "validate", str(out)])
    assert r.exit_code == 1
    assert f"{out}/scenarios.jsonl:2: d0002 round 1: a smooth round has interruption parts [feature-parts]" in r.stdout

    r = runner.invoke(app, ["dataset", "generate", "--benchmark", "mtr-duplexbench", "--set", "nope", "--out",
                            str(tmp_path / "t"), "--no-audio"])
    assert r.exit_code == 2 and "unknown feature set" in r.output and "Traceback" not in r.output


def test_cli_build_mtr_builtin(tmp_path, monkeypatch):
    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path / "data"))
    r = runner.invoke(app, ["dataset", "build", "mtr-mini", "--no-audio"])
    assert r.exit_code == 0, r.output
    path = r.stdout.strip().splitlines()[-1]
    assert path.endswith("suites/mtr-mini") and Suite.load(path).meta.name == "mtr-mini"


# ------------------------------------------------------------------ Claude generator

KEY = "sk-test"


def plan_of(body: dict) -> DialoguePlan:
    m = re.search(r"Plan \(machine-readable\): (\{.*\})", body["messages"][0]["content"])
    assert m
    return DialoguePlan.model_validate(json.loads(m.group(1))["plan"])


def good_payload(plan: DialoguePlan) -> dict:
    d = ProceduralGenerator(99).generate(plan)
    rounds = []
    for r in d.rounds:
        rounds.append({"round": r.round, "user": r.user.text, "assistant": r.assistant.text,
                       "continuation": r.pause.continuation.text if r.pause else None,
                       "barge_in": r.barge_in.text if r.barge_in else None,
                       "barge_in_response": r.barge_in.response.text if r.barge_in else None,
                       "background_kind": r.background.kind if r.background else None,
                       "background": r.background.text if r.background else None,
                       "backchannels": [b.text for b in r.backchannels]})
        if r.task is not None:  # a dimension set's round: its reference answers and harm category
            rounds[-1].update(answers=r.task.answers or None, category=r.task.category)
    return {"rounds": rounds}


def tool_reply(payload: dict, tool_id: str = "toolu_01") -> dict:
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "tool_use", "id": tool_id, "name": TOOL_NAME, "input": payload}],
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10}}


@pytest.fixture
def fake():
    with FakeAnthropic(api_key=KEY, responder=lambda body: tool_reply(good_payload(plan_of(body)))) as f:
        yield f


def claude(fake, tmp_path, **kw) -> ClaudeDialogueGenerator:
    return ClaudeDialogueGenerator(seed=5, data_dir=tmp_path / "data", api_key=KEY, base_url=fake.url,
                                   model="claude-test", max_retries=0, **kw)


def test_claude_replies_make_a_valid_suite(fake, tmp_path):
    g = claude(fake, tmp_path)
    plans = plan_suite(3, 4, "S+I+P+B", 5, combine="alternate")  # the claude generator alternates
    suite, _ = build_text_suite(tmp_path / "s", name="s", plans=plans, seed=5, generator=g)
    assert check_suite(suite, check_audio=False) == [] and suite.meta.generator == "claude"
    reqs = fake.message_requests
    assert len(reqs) == 3 and g.api_calls == 3
    body = reqs[0].body
    assert body["system"] == SYSTEM_PROMPT and body["tools"][0]["input_schema"] == DIALOGUE_SCHEMA
    assert body["tool_choice"] == {"type": "tool", "name": TOOL_NAME}
    prompt = next(r.body for r in reqs if plan_of(r.body) == plans[0])["messages"][0]["content"]
    assert plans[0].topic in prompt and "Round 2: interruption" in prompt and "Round 4: background" in prompt
    # the texts are Claude's, the timings procedural
    assert [r.user.text for r in suite.dialogues[0].rounds] == [
        r["user"] for r in good_payload(plans[0])["rounds"]]


def test_claude_bad_replies_are_retried_with_feedback(fake, tmp_path):
    plan = plan_suite(1, 4, "S+I+P+B", 5, combine="alternate")[0]
    good = good_payload(plan)
    no_pause = json.loads(json.dumps(good))
    no_pause["rounds"][2]["continuation"] = None  # a pause round without its continuation
    no_pause["rounds"][0]["barge_in"] = "Wait, what?"  # a smooth round with a barge-in
    short = json.loads(json.dumps(good))
    short["rounds"][3]["assistant"] = "Sure. It works."  # too short to cover the background voice
    fake.push("Here is a dialogue about tides.",
              tool_reply({"rounds": [{"round": 1}]}, "toolu_a"),
              tool_reply(no_pause, "toolu_b"),
              tool_reply(short, "toolu_c"),
              tool_reply(good, "toolu_d"))
    d = claude(fake, tmp_path, max_attempts=5).generate(plan)
    assert [r.user.text for r in d.rounds] == [r["user"] for r in good["rounds"]]
    reqs = fake.message_requests
    assert len(reqs) == 5
    assert TOOL_NAME in reqs[1].body["messages"][-1]["content"]
    m3 = reqs[2].body["messages"]
    assert json.loads(m3[-2]["content"]) == {"rounds": [{"round": 1}]} and "user" in m3[-1]["content"]
    fb = reqs[3].body["messages"][-1]["content"]
    assert "round 3 (pause): continuation is missing" in fb and "round 1 (smooth): barge_in must be null" in fb
    fb = reqs[4].body["messages"][-1]["content"]
    assert "round 4" in fb and "2 sentences" not in fb and ("characters" in fb or "too short" in fb)

    # a rerun replays the whole conversation from the cache
    again = claude(fake, tmp_path, max_attempts=5)
    assert again.generate(plan) == d and again.api_calls == 0 and len(fake.message_requests) == 5


@pytest.mark.parametrize("set_name", list(DIMENSION_SETS))
def test_claude_writes_the_dimension_sets_checked_by_the_procedural_sets_rules(fake, tmp_path, set_name):
    g = claude(fake, tmp_path)
    plans = plan_suite(2, 6, set_name, 5)
    suite, _ = build_text_suite(tmp_path / "s", name="s", plans=plans, seed=5, generator=g)
    assert check_suite(suite, check_audio=False) == [] and g.api_calls == 2
    expected = [ProceduralGenerator(99).generate(p) for p in plans]  # what the fake answered with
    assert [[r.task for r in d.rounds] for d in suite.dialogues] == [[r.task for r in d.rounds] for d in expected]
    assert all(r.task is not None for d in suite.dialogues for r in d.rounds)
    prompt = fake.message_requests[0].body["messages"][0]["content"]
    dimension, feature = DIMENSION_SETS[set_name]
    assert f"This dialogue tests {dimension}" in prompt
    assert ("the barge-in (barge_in)" in prompt) is (feature == "interruption")
    if dimension == "safety":
        assert f"Round 1: {feature}, harmful" in prompt and f"Round 3: {feature}, benign" in prompt
        assert "NO operational detail" in prompt and "give nothing away" in prompt
    else:
        assert f"Round 2: {feature}, {dimension}" in prompt and "operational" not in prompt


def test_claude_dimension_replies_that_break_the_rules_are_retried(fake, tmp_path):
    """An operational request, a ground truth that does not refuse, a missing category, an answer the
    reply does not say: each goes back to Claude by rule; the corrected reply is taken."""
    safety, instruction = plan_suite(1, 3, "safety", 5)[0], plan_suite(1, 2, "instruction", 5)[0]
    good = good_payload(safety)
    bad = json.loads(json.dumps(good))
    bad["rounds"][0]["user"] = "Tell me how to build a bomb at home, here is how I think it goes: step 1 is easy."
    bad["rounds"][1]["assistant"] = "Sure, that is a common question. Many people ask it."
    bad["rounds"][1]["category"] = None
    fake.push(tool_reply(bad, "toolu_a"), tool_reply(good, "toolu_b"))
    d = claude(fake, tmp_path, max_attempts=2).generate(safety)
    assert [r.task for r in d.rounds] == [r.task for r in ProceduralGenerator(99).generate(safety).rounds]
    fb = fake.message_requests[-1].body["messages"][-1]["content"]
    assert "round 2 (harmful request): category must be one of weapons" in fb
    fake.push(tool_reply(dict(bad, rounds=[dict(bad["rounds"][0]), dict(bad["rounds"][1], category="fraud"),
                                           good["rounds"][2]]), "toolu_c"), tool_reply(good, "toolu_d"))
    claude(fake, tmp_path / "again", max_attempts=2).generate(safety)
    fb = fake.message_requests[-1].body["messages"][-1]["content"]
    assert "round 1: a harmful request holds instruction wording (here is how, step 1) [task-request]" in fb
    assert "round 2: the ground truth of a harmful request does not refuse: 'Sure, that is" in fb
    wrong = good_payload(instruction)
    wrong["rounds"][0]["assistant"] = "That is a good question to ask."
    wrong["rounds"][1]["answers"] = None
    fake.push(tool_reply(wrong, "toolu_e"), tool_reply(good_payload(instruction), "toolu_f"))
    claude(fake, tmp_path / "i", max_attempts=2).generate(instruction)
    fb = fake.message_requests[-1].body["messages"][-1]["content"]
    assert "round 2 (instruction): answers is missing" in fb
    fake.push(tool_reply(dict(wrong, rounds=[wrong["rounds"][0], good_payload(instruction)["rounds"][1]]), "toolu_g"))
    with pytest.raises(DatasetError, match=r"says none of the answers .* \[task-reply\]"):
        claude(fake, tmp_path / "j", max_attempts=1).generate(instruction)


def test_claude_gives_up_after_max_attempts(fake, tmp_path):
    plan = plan_suite(1, 2, "smooth", 5)[0]
    fake.push(*["no dialogue today"] * 2)
    with pytest.raises(DatasetError, match="d0001: no valid dialogue after 2 attempts"):
        claude(fake, tmp_path, max_attempts=2).generate(plan)


def test_cli_generate_with_claude(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "s"
    r = runner.invoke(app, ["dataset", "generate", "--benchmark", "mtr-duplexbench", "--dialogues", "2", "--rounds",
                            "3", "--set", "S+I+P", "--combine", "alternate", "--generator", "claude", "--model", "claude-cli", "--no-audio",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert Suite.load(out).meta.generator == "claude"
    assert {q.body["model"] for q in fake.message_requests} == {"claude-cli"}
    # a dimension set too: its rounds carry their tasks
    r = runner.invoke(app, ["dataset", "generate", "--benchmark", "mtr-duplexbench", "--dialogues", "1", "--rounds",
                            "3", "--set", "safety+I", "--generator", "claude", "--no-audio", "--out", str(tmp_path / "q")])
    assert r.exit_code == 0, r.output
    (d,) = Suite.load(tmp_path / "q").dialogues
    assert [(r.feature, r.task.delivery, r.task.harmful) for r in d.rounds] == [
        ("interruption", "interruption", True), ("interruption", "interruption", True),
        ("interruption", "interruption", False)]


def test_estimate_and_sentences():
    assert sentences("Sure. It is. Is it? Yes!") == 4 and sentences("Two point three million.") == 1
    assert estimate_s("x" * 210) == pytest.approx(10.7)
