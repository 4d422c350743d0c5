"""Synthesis of a suite: each distinct line once, cached, resumable, parallel; stats on the result."""

from __future__ import annotations

import json

import pytest
import soundfile as sf
from typer.testing import CliRunner

from server.benchmarks.mpe.dataset.stats import suite_stats
from server.benchmarks.mpe.dataset.synth import synthesize_suite
from server.benchmarks.mpe.suite import Suite, audio_pending, check_suite
from server.cli import app
from server.tts import ESPEAK_VOICES, OUTPUT_RATE
from tests.support.audio import needs_espeak
from tests.support.dataset import ToneEngine, text_suite

runner = CliRunner()


def _distinct_lines(suite: Suite) -> set[tuple[str, str]]:
    lines = {(suite.meta.voices[t.speaker], t.text) for sc in suite.scenarios for t in sc.turns}
    return lines | {(suite.meta.voices["B"], suite.meta.preamble.text)}


def test_every_distinct_line_is_synthesised_once(tmp_path):
    suite = text_suite(tmp_path / "s", pairs=6, seed=4)
    engine = ToneEngine()
    seen: list[tuple[int, int]] = []
    report = synthesize_suite(suite.root, data_dir=tmp_path / "data", engine=engine,
                              progress=lambda d, n: seen.append((d, n)))
    lines = _distinct_lines(suite)
    assert len(engine.calls) == len(set(engine.calls)) == len(lines) == report.synthesized == report.jobs
    assert set(engine.calls) == lines
    # clips shared by both conditions: fewer files than turn slots, one per distinct clip path
    slots = sum(len(sc.turns) for sc in suite.scenarios)
    assert report.clips == len({t.clip for sc in suite.scenarios for t in sc.turns}) + 1 < slots
    assert seen[0] == (0, len(lines)) and seen[-1] == (len(lines), len(lines))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)

    done = Suite.load(suite.root)
    assert not audio_pending(done.meta) and done.meta.model_extra["audio"] == {"engine": "tone", "version": "1"}
    assert check_suite(done, strict=True) == []
    for sc in done.scenarios:
        for t in sc.turns:
            info = sf.info(str(done.clip_path(t.clip)))
            assert (info.samplerate, info.channels, info.subtype) == (OUTPUT_RATE, 1, "PCM_16")
            assert t.duration_s == pytest.approx((2400 + 60 * len(t.text)) / OUTPUT_RATE, abs=0.0006)
    assert done.meta.preamble.duration_s > 0

    again = ToneEngine()
    report = synthesize_suite(suite.root, data_dir=tmp_path / "data", engine=again)
    assert again.calls == [] and report.cached == report.jobs
    assert Suite.load(suite.root).content_hash() == done.content_hash()


def test_interrupted_synthesis_resumes_where_it_stopped(tmp_path):
    suite = text_suite(tmp_path / "s", pairs=5, seed=8)
    total = len(_distinct_lines(suite))
    before = (suite.root / "scenarios.jsonl").read_bytes()
    with pytest.raises(KeyboardInterrupt):
        synthesize_suite(suite.root, data_dir=tmp_path / "data", engine=ToneEngine(fail_after=17))
    # the manifest still says what is true: audio pending, nothing claimed
    assert (suite.root / "scenarios.jsonl").read_bytes() == before
    assert [p.rule for p in check_suite(Suite.load(suite.root))] == ["audio-pending"]

    resumed = ToneEngine()
    report = synthesize_suite(suite.root, data_dir=tmp_path / "data", engine=resumed)
    assert len(resumed.calls) == total - 17 == report.synthesized and report.cached == 17
    assert check_suite(Suite.load(suite.root), strict=True) == []


@needs_espeak
def test_parallel_synthesis_with_espeak_by_name(tmp_path):
    suite = text_suite(tmp_path / "s", pairs=2, seed=6)
    seen: list[tuple[int, int]] = []
    report = synthesize_suite(suite.root, data_dir=tmp_path / "data", engine_name="espeak", workers=2,
                              progress=lambda d, n: seen.append((d, n)))
    assert report.workers == 2 and report.synthesized == report.jobs > 10
    assert report.engine == "espeak" and report.audio_s > 20 and report.speed is not None
    print(f"\nespeak, 2 workers: {report.audio_s:.1f} s of audio in {report.synth_wall_s:.2f} s "
          f"({report.speed:.0f} audio s per wall s)")
    done = Suite.load(suite.root)
    assert done.meta.voices == ESPEAK_VOICES  # the voice map follows the engine
    assert done.meta.preamble.model_extra["voice"] == ESPEAK_VOICES["B"]
    assert check_suite(done, strict=True) == []
    assert seen[-1] == (report.jobs, report.jobs)
    again = synthesize_suite(suite.root, data_dir=tmp_path / "data", engine_name="espeak", workers=2)
    assert again.synthesized == 0 and again.cached == report.jobs


@needs_espeak
def test_cli_synthesize_and_stats(tmp_path, monkeypatch):
    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "s"
    r = runner.invoke(app, ["dataset", "generate", "--out", str(out), "--pairs", "2", "--seed", "2", "--tts", "espeak",
                            "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "synthesised" in r.output and "from the cache" in r.output
    assert runner.invoke(app, ["dataset", "validate", str(out), "--strict"]).exit_code == 0
    r = runner.invoke(app, ["dataset", "synthesize", str(out), "--tts", "espeak"])
    assert r.exit_code == 0 and "0 synthesised" in r.output

    r = runner.invoke(app, ["dataset", "stats", str(out), "--json"])
    stats = json.loads(r.stdout)
    suite = Suite.load(out)
    for cond in ("explicit", "implicit"):
        scs = [sc for sc in suite.scenarios if sc.condition == cond]
        d = stats["durations"][cond]
        assert d["scene"]["n"] == 2 and d["t"]["n"] == 2
        assert d["turn"]["n"] == sum(len(sc.turns) for sc in scs)
        total = sum(t.duration_s for sc in scs for t in sc.turns)
        assert d["turn"]["total_h"] == pytest.approx(total / 3600, abs=1e-4)
        assert d["scene"]["total_h"] == pytest.approx(total / 3600, abs=1e-4)
        assert d["turn"]["p5_s"] <= d["turn"]["median_s"] <= d["turn"]["p95_s"]
        assert d["min_episode"]["min_s"] > suite.meta.preamble.duration_s
    c = stats["clips"]
    assert c["played_h"] == pytest.approx(c["distinct_h"] + c["reused_h"], abs=2e-4)
    assert c["shared_by_conditions_h"] > 0 and c["reused_h"] > 0
    r = runner.invoke(app, ["dataset", "stats", str(out)])
    assert r.exit_code == 0 and "Durations, explicit condition" in r.output and "Clip time" in r.output


def test_stats_of_a_voiced_suite_match_its_clips(tmp_path):
    suite = text_suite(tmp_path / "s", pairs=4, seed=12)
    synthesize_suite(suite.root, data_dir=tmp_path / "data", engine=ToneEngine())
    done = Suite.load(suite.root)
    st = suite_stats(done)
    files = {t.clip: t.duration_s for sc in done.scenarios for t in sc.turns}
    assert st["clips"]["files"] == len(files)
    assert st["clips"]["distinct_h"] == pytest.approx(sum(files.values()) / 3600, abs=1e-4)
    t_durs = sorted(sc.turns[sc.t_index].duration_s for sc in done.scenarios if sc.condition == "implicit")
    assert st["durations"]["implicit"]["t"]["max_s"] == pytest.approx(t_durs[-1], abs=1e-3)


def test_missing_engine_is_one_line_error(tmp_path, monkeypatch):
    text_suite(tmp_path / "s", pairs=1, seed=1)
    monkeypatch.setenv("PATH", str(tmp_path))  # no espeak-ng on the PATH
    monkeypatch.setenv("MPE_DATA_DIR", str(tmp_path / "data"))
    r = runner.invoke(app, ["dataset", "synthesize", str(tmp_path / "s"), "--tts", "espeak"])
    assert r.exit_code == 2 and "error (tts_unavailable)" in r.output and "espeak-ng" in r.output


@needs_espeak
def test_generated_suites_read_the_preamble_at_the_papers_length_and_builtins_keep_theirs(tmp_path):
    from server.benchmarks.mpe.dataset.build import PAPER_PREAMBLE_S

    out = tmp_path / "gen"
    r = runner.invoke(app, ["dataset", "generate", "--out", str(out), "--pairs", "1", "--seed", "3", "--no-audio",
                            "--tts", "piper"])
    assert r.exit_code == 0, r.output
    pre = json.loads((out / "suite.json").read_text())["preamble"]
    assert (pre["pace"], pre["voice"]) == ("paper", "piper:joe@1~1.75")
    synthesize_suite(out, data_dir=tmp_path / "data", engine_name="espeak", workers=1)
    done = Suite.load(out).meta.preamble
    assert done.model_extra["voice"] == "espeak:en-us+m5@115"  # the engine's own rate control
    assert done.duration_s == pytest.approx(PAPER_PREAMBLE_S, rel=0.10)
    # the built-in and test suites keep the speaker's own rate (and their bytes)
    plain = text_suite(tmp_path / "plain", pairs=1, seed=3).meta.preamble
    assert "pace" not in plain.model_extra and plain.model_extra["voice"] == "piper:joe@1.0"
