"""MTR-DuplexBench end to end (DESIGN §12): a suite of real speech, the real server and detector,
real WebSocket bridges in both history modes, then scoring with the §12.4 rules.

The oracle must pass every feature in both modes; ``silent`` and ``always-talk`` sit at the
obvious extremes (no response / talking over the user)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import soundfile as sf
from rich.console import Console

from model_bridges.reference import Silent
from server.benchmarks.mtr.metrics import compute_metrics
from server.benchmarks.mtr.oracle import MTROracle
from server.benchmarks.mtr.report import print_tables
from server.benchmarks.mtr.suite import FEATURES, Dialogue, MTRMeta, Suite, check_suite
from server.bridges import AlwaysTalk
from server.engine.leasing import create_run
from server.scoring.runner import ScoreOptions, score_run
from tests.api_fixtures import bridge, wait_run, world_on

REPLY = ("Sure. The museum opens at nine in the morning on weekdays. On weekends it opens an hour later, "
         "and the last entry is at five.")


def build_mtr_suite(root: Path, say) -> Path:
    """One dialogue, one round per feature, real speech."""

    def clip(name: str, text: str, **kw) -> dict:
        pcm = say(text)
        rel = f"clips/{name}.wav"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(root / rel), pcm, 24000, subtype="PCM_16")
        return {"text": text, "clip": rel, "duration_s": len(pcm) / 24000, **kw}

    def rnd(n: int, feature: str, question: str, **parts) -> dict:
        return {"round": n, "feature": feature, "user": clip(f"r{n}_user", question),
                "assistant": clip(f"r{n}_reply", REPLY), **parts}

    rounds = [
        rnd(1, "smooth", "When does the city museum open?"),
        rnd(2, "interruption", "Can you tell me about the train to the coast?",
            barge_in=clip("r2_barge", "Actually, wait, what about the bus?", after_onset_s=1.0,
                          response=clip("r2_barge_reply", "The bus leaves every hour from the main square."))),
        rnd(3, "pause", "I was wondering if you could",
            pause={"length_s": 2.0, "continuation": clip("r3_more", "recommend a place for lunch.")}),
        rnd(4, "background", "What should I pack for the hike?",
            background=clip("r4_tv", "And now the evening news with the latest headlines.", kind="broadcast",
                            after_onset_s=0.8)),
        rnd(5, "backchannel", "How do I get a library card?",
            backchannels=[clip("r5_bc0", "Mm-hmm.", after_onset_s=1.0), clip("r5_bc1", "Right.", after_onset_s=2.8)]),
    ]
    meta = MTRMeta(benchmark="mtr-duplexbench", name="mtr-test", version="1", generator="scripted", seed=0,
                   voices={"user": "piper:joe@1.0", "assistant": "piper:joe@1.0", "broadcast": "piper:joe@1.0"})
    suite = Suite(root, meta, [Dialogue(dialogue_id="d1", set="mixed", topic="a city day",
                                        rounds=rounds)])
    suite.write()
    return root


@pytest.fixture(scope="module")
def mtr_suite(tmp_path_factory, say) -> Path:
    root = build_mtr_suite(tmp_path_factory.mktemp("mtr") / "mtr-test", say)
    assert [str(p) for p in check_suite(Suite.load(root))] == []
    return root


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_reference_bridges_hit_their_extremes_in_both_modes(kind, tmp_path, mtr_suite):
    async def main():
        async with world_on(kind, tmp_path, mtr_suite) as w:
            runs = {}
            for name in ("mtr-oracle", "silent", "always-talk"):
                runs[name] = await asyncio.to_thread(
                    create_run, w.db, team="ops" if name == "mtr-oracle" else "alpha", model=name,
                    suite_path=str(w.suite), clock="lockstep", conditions=["gt", "free"])
            oracle = MTROracle(w.settings.data_dir, str(w.suite))
            async with bridge(w, oracle) as t1, bridge(w, Silent(), w.tokens["alpha"]) as t2, \
                    bridge(w, AlwaysTalk(w.settings.data_dir), w.tokens["alpha"]) as t3:
                for name, run_id in runs.items():
                    p = await wait_run(w.db, run_id, [t1, t2, t3], timeout=600)
                    assert p.done == p.total == 6, (name, p)  # five gt rounds + one free dialogue
            return w, {name: await asyncio.to_thread(score_run, w.db, run_id, ScoreOptions(asr="none", workers=1))
                       for name, run_id in runs.items()}

    _, results = asyncio.run(main())
    metrics = {name: compute_metrics(res.episodes) for name, res in results.items()}
    for mode in ("gt", "free"):
        oracle = metrics["mtr-oracle"]["mtr-oracle"][mode]
        assert {f: oracle[f]["value"] for f in FEATURES} == {f: 1.0 for f in FEATURES}, (mode, oracle)
        silent = metrics["silent"]["silent"][mode]
        assert {f: silent[f]["value"] for f in FEATURES} == {f: 0.0 for f in FEATURES}
        talk = metrics["always-talk"]["always-talk"][mode]
        assert {f: talk[f]["value"] for f in FEATURES} == {f: 0.0 for f in FEATURES}
    silent_fail = {r.failure for e in results["silent"].episodes for r in e.rounds}
    assert silent_fail == {"no_response"}
    assert {r.failure for e in results["always-talk"].episodes for r in e.rounds} == {"talked_over"}
    # gt episodes score only their live round; the free episode scores every round
    gt = [e for e in results["mtr-oracle"].episodes if e.mode == "gt"]
    assert sorted((e.live_round, [r.round for r in e.rounds]) for e in gt) == [(k, [k]) for k in range(1, 6)]
    free = [e for e in results["mtr-oracle"].episodes if e.mode == "free"]
    assert [r.round for r in free[0].rounds] == [1, 2, 3, 4, 5]
    interruption = next(r for r in free[0].rounds if r.feature == "interruption")
    assert interruption.interrupted and 0 < interruption.stop_latency_s <= 1.0
    # the published main-table layout: Round 1 -> mean of rounds, per feature and history mode
    console = Console(record=True, width=220)
    print_tables(metrics["mtr-oracle"], console)
    text = console.export_text()
    assert "mtr-oracle · gt" in text and "mtr-oracle · free" in text
    assert text.count("→ 100.0") == 2 * len(FEATURES)  # round 1 is a smooth round here: the others show –
