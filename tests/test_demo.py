"""`mpe demo` end to end on its defaults (SQLite in the data dir, built-in suite, lockstep)."""

from __future__ import annotations

from rich.console import Console

from server.cli.demo import mtr_sanity_problems, run_demo, sanity_problems
from server.settings import Settings
from tests.support.suites import seed_builtin


async def test_demo_reference_bridges(tmp_path, demo_build, mtr_mini):
    settings = Settings(data_dir=tmp_path / ".mpe", flush_s=0.5, poll_s=0.05)
    settings.ensure_dirs()
    # the built-in suites as their builds left them (the builds are tested in test_suite.py and
    # test_mtr_dataset.py): the demo reuses them instead of voicing them again
    seed_builtin(demo_build["path"], settings.data_dir)
    seed_builtin(mtr_mini, settings.data_dir)
    console = Console(file=open(tmp_path / "out.txt", "w"), width=200)
    # ASR off here (the semantic path has its own tests); detection and every window rule on.
    result = await run_demo(settings, ["silent", "always-talk", "oracle"], console=console, asr="none")
    console.file.close()
    summaries = result["summaries"]
    per_model = {m: sum(1 for k in summaries if k[0] == m) for m in ("silent", "always-talk", "oracle")}
    assert len(set(per_model.values())) == 1 and per_model["oracle"] >= 6  # every version, every model
    for (model, scenario, condition), sm in summaries.items():
        quiet, total = sm.outcome.silence
        if model == "silent":
            assert sm.t_wait == "no_response" and sm.speech_s == 0 and quiet == total
            assert sm.outcome.failures == ["no_response"]
        elif model == "always-talk":
            assert sm.t_wait == "cap" and quiet == 0 and sm.outcome.t == "already_speaking"
        else:  # the oracle behaves ideally
            assert sm.t_wait == "silence" and 0 < sm.onset_after_t_s < 1 and quiet == total
            assert sm.outcome.ok and all(o == "pass" for o in sm.outcome.n4)
    assert sanity_problems(result["metrics"], semantic=False) == []  # each at its known extreme
    assert result["metrics"]["oracle"]["explicit"]["silence_preservation"]["value"] == 1.0
    assert result["metrics"]["silent"]["implicit"]["response_presence"]["num"] == 0
    assert result["report"].exists() and "<html" in result["report"].read_text()[:500].lower()
    text = (tmp_path / "out.txt").read_text()
    assert "oracle" in text and "no_response" in text
    assert "answer accuracy is not computed" in text  # --asr none says so
    assert "Table 3: results per model and condition" in text  # the paper-style table
    # MTR-DuplexBench: the mini suite in both history modes, each reference bridge at its extreme
    mtr = result["mtr"]["metrics"]
    assert set(mtr) == {"mtr-oracle", "silent", "always-talk"}
    assert mtr_sanity_problems(mtr) == []
    assert all(set(modes) == {"gt", "free"} for modes in mtr.values())
    assert mtr["mtr-oracle"]["gt"]["interruption"]["value"] == 1.0 and mtr["silent"]["free"]["smooth"]["value"] == 0
    assert "MTR-DuplexBench" in text and "mtr-oracle · gt" in text
