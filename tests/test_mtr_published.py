"""The published MTR-DuplexBench data, live and offline: a small dataset written here in the
published layout (``Scenarios_encoding/`` with combination labels, ``Conversational_Features/
{original,woPAUSE}/`` stereo audio at 22,050 Hz, left = user, right = the ground-truth model),
imported without re-voicing, run live through the server by the MTR oracle over a real WebSocket
in both history modes, and its published stereo recordings scored offline, unchanged."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from typer.testing import CliRunner

from clients.pcm import float_to_pcm16, pcm16_to_float
from server.benchmarks.mtr.dataset.importers import import_set
from server.benchmarks.mtr.dataset.schema import ImportProblems
from server.benchmarks.mtr.metrics import compute_metrics
from server.benchmarks.mtr.oracle import MTROracle
from server.benchmarks.mtr.segmentation.inputs import to_stream_rate
from server.benchmarks.mtr.suite import Suite, check_suite
from server.engine.leasing import create_run
from server.scoring.runner import ScoreOptions, score_run
from tests.support.world import bridge, wait_run, world_on

RATE = 22_050  # the published companion generator's rate (notes §1); any rate is resampled


class Track:
    """A stereo timeline being written: speech placed on the left (user side) or the right (model)."""

    def __init__(self) -> None:
        self.left = np.zeros(0, np.int16)
        self.right = np.zeros(0, np.int16)

    def put(self, side: str, at: float, pcm24: np.ndarray) -> tuple[float, float]:
        pcm = float_to_pcm16(soxr.resample(pcm16_to_float(pcm24), 24_000, RATE, quality="HQ"))
        a = round(at * RATE)
        b = a + len(pcm)
        for name in ("left", "right"):
            cur = getattr(self, name)
            if len(cur) < b:
                setattr(self, name, np.pad(cur, (0, b - len(cur))))
        getattr(self, side)[a:b] = pcm
        return round(at, 3), round(b / RATE, 3)

    def end(self) -> float:
        return len(self.left) / RATE

    def stereo(self, upto: float | None = None) -> np.ndarray:
        n = len(self.left) if upto is None else round(upto * RATE)
        return np.stack([self.left[:n], self.right[:n]], axis=1)


REPLY = ("Tides come from the pull of the Moon on the oceans. The water bulges toward the Moon and away from it, "
         "and the Earth turns under both bulges every day.")
SPRING = ("Spring tides happen when the Sun and the Moon line up, at new and at full moon. Their pulls add up, so the "
          "high tides are higher than usual.")


def _dialogue_multi(say) -> tuple[Track, list[dict]]:
    """Two overlay rounds of set 4: smooth + pause + background, interruption + pause + background."""
    t = Track()
    entries = []
    at = 0.5
    for n, (first, rest, reply, voice, barge) in enumerate((
            ("I was wondering", "how tides work.", REPLY, "Did you remember to lock the car?", None),
            ("And what about", "spring tides?", SPRING, "The next train leaves from platform two.",
             ("Wait, is that dangerous?", "Not usually, though floods are more likely then."))), start=1):
        u0, p0 = t.put("left", at, say(first))
        p1, u1 = t.put("left", p0 + 2.0, say(rest))
        m0 = u1 + 0.6
        g0, g1 = t.put("left", m0 + 0.5, say(voice, length_scale=1.15))
        ts = {"user_start": u0, "user_end": u1, "pause_start": p0, "pause_end": p1, "model_start": m0,
              "background_start": g0, "background_end": g1}
        if barge is None:
            _, m1 = t.put("right", m0, say(reply, length_scale=0.9))
            label = "smooth-turntaking_background_pause-handling"
        else:
            b0, b1 = t.put("left", g1 + 1.0, say(barge[0]))
            full = say(reply, length_scale=0.9)
            t.put("right", m0, full[:round((b0 + 0.4 - m0) * 24_000)])  # the ground truth stops for the barge-in
            _, m1 = t.put("right", b1 + 0.5, say(barge[1], length_scale=0.9))
            ts.update(interruption_start=b0, interruption_end=b1)
            label = "smooth-turntaking_background_pause-handling_interruption"
        ts["model_end"] = m1
        entries.append({"dialogue_id": 0, "round_num": n, "scenario": label, "timestamp": ts,
                        "audio": "multi4_0.wav"})
        at = m1 + 1.5
    t.put("left", at, np.zeros(24_000, np.int16))  # a second of silence at the end
    return t, entries


def _dialogue_smooth(say) -> tuple[Track, list[dict]]:
    t = Track()
    u0, u1 = t.put("left", 0.5, say("Tell me how tides work."))
    m0, m1 = t.put("right", u1 + 0.5, say(REPLY, length_scale=0.9))
    t.put("left", m1 + 1.0, np.zeros(2_400, np.int16))
    return t, [{"dialogue_id": 0, "round_num": 1, "scenario": "smooth-turntaking", "audio": "smooth_0.wav",
                "user_text": "Tell me how tides work.",
                "timestamp": {"user_start": u0, "user_end": u1, "model_start": m0, "model_end": m1}}]


def _without_pauses(t: Track, entries: list[dict]) -> np.ndarray:
    """The woPAUSE variant of a dialogue's file: the original with its pauses cut out."""
    keep = np.ones(len(t.left), bool)
    for e in entries:
        keep[round(e["timestamp"]["pause_start"] * RATE):round(e["timestamp"]["pause_end"] * RATE)] = False
    return t.stereo()[keep]


@pytest.fixture(scope="module")
def published(tmp_path_factory, say) -> dict:
    root = tmp_path_factory.mktemp("published") / "MTR-DuplexBench" / "data"
    multi, multi_entries = _dialogue_multi(say)
    single, single_entries = _dialogue_smooth(say)
    enc = root / "Scenarios_encoding"
    for rel, entries in (("multi_scenarios/scenario_encoding_4.json", multi_entries),
                         ("single_scenario/scenario_encoding_smooth.json", single_entries)):
        (enc / rel).parent.mkdir(parents=True, exist_ok=True)
        (enc / rel).write_text(json.dumps(entries, indent=1), encoding="utf-8")
    audio = root / "Conversational_Features"
    for variant in ("original", "woPAUSE"):
        (audio / variant).mkdir(parents=True)
    sf.write(str(audio / "original" / "multi4_0.wav"), multi.stereo(), RATE, subtype="PCM_16")
    sf.write(str(audio / "original" / "smooth_0.wav"), single.stereo(), RATE, subtype="PCM_16")
    sf.write(str(audio / "woPAUSE" / "multi4_0.wav"), _without_pauses(multi, multi_entries), RATE, subtype="PCM_16")
    sf.write(str(audio / "woPAUSE" / "smooth_0.wav"), single.stereo(), RATE, subtype="PCM_16")
    return {"root": root.parent, "multi": multi, "entries": multi_entries}


def _sha(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_published_layout_imports_without_revoicing(published, tmp_path):
    before = _sha(published["root"])
    suite = import_set(published["root"], tmp_path / "orig", "published")
    assert check_suite(suite) == [] and _sha(published["root"]) == before  # the dataset is only read
    assert suite.meta.generator == "import:published/original" and suite.meta.audio is None
    multi, single = suite.dialogues
    assert (multi.dialogue_id, multi.set, single.dialogue_id, single.set) == ("4-0", "S+I+P+B", "smooth-0", "smooth")
    r1, r2 = multi.rounds
    assert (r1.feature, r1.overlay) == ("smooth", ["pause", "background"])
    assert (r2.feature, r2.overlay) == ("interruption", ["smooth", "pause", "background"])
    assert r1.pause.length_s == pytest.approx(2.0, abs=1e-3) and r1.user.text == ""  # texts optional
    assert single.rounds[0].user.text == "Tell me how tides work."
    # the clips are the published audio: the user's turn is the left channel over its published times
    ts = published["entries"][0]["timestamp"]
    left = to_stream_rate(published["multi"].left, RATE)
    a = round(ts["user_start"] * 24_000)
    clip = suite.load_clip(r1.user.clip)
    assert np.array_equal(clip, left[a:a + len(clip)])
    assert r2.barge_in.after_onset_s == pytest.approx(published["entries"][1]["timestamp"]["interruption_start"]
                                                      - published["entries"][1]["timestamp"]["model_start"], abs=1e-3)
    # woPAUSE: the same dialogue without its pauses; the user's turn is one clip, the rounds carry no pause
    wo = import_set(published["root"], tmp_path / "wo", "published", audio="woPAUSE")
    w1, w2 = wo.dialogues[0].rounds
    assert check_suite(wo) == [] and wo.dialogues[0].set == "S+I+B"
    assert (w1.feature, w1.overlay, w1.pause, w2.overlay) == ("smooth", ["background"], None, ["smooth", "background"])
    whole = wo.load_clip(w1.user.clip)
    parts = np.concatenate([clip, suite.load_clip(r1.pause.continuation.clip)])
    assert abs(len(whole) - len(parts)) <= 2 and np.corrcoef(whole[:len(parts)].astype(float),
                                                            parts[:len(whole)].astype(float))[0, 1] > 0.99
    assert w2.source.user_start == pytest.approx(r2.source.user_start - r1.pause.length_s, abs=2e-3)


def test_bad_published_data_is_named_and_nothing_is_written(published, tmp_path):
    root = tmp_path / "bad"
    enc = root / "Scenarios_encoding"
    for d in ("multi_scenarios", "single_scenario"):
        (enc / d).mkdir(parents=True)
    (root / "Conversational_Features" / "original").mkdir(parents=True)
    multi, single = enc / "multi_scenarios" / "scenario_encoding_4.json", enc / "single_scenario" / "s.json"
    multi.write_text(json.dumps([{**published["entries"][1], "round_num": 1, "scenario": "background_pause-handling"}]),
                     encoding="utf-8")
    single.write_text(json.dumps([{**published["entries"][0], "audio": "missing.wav"}]), encoding="utf-8")
    with pytest.raises(ImportProblems) as e:
        import_set(root, tmp_path / "out", "published")
    assert len(e.value.lines) == 2
    assert e.value.lines[0].startswith(f"{multi}: entry 1: scenario 'background_pause-handling' is not a feature")
    assert e.value.lines[1] == (f"{single}: entry 1: dialogue 0: no audio "
                                f"{root / 'Conversational_Features' / 'original' / 'missing.wav'}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["sqlite"])
def test_the_published_data_runs_live_in_both_history_modes(kind, published, tmp_path):
    suite_root = tmp_path / "pub"
    import_set(published["root"], suite_root, "published")

    async def main():
        async with world_on(kind, tmp_path, suite_root) as w:
            run_id = await asyncio.to_thread(create_run, w.db, team="ops", model="mtr-oracle", suite_path=str(w.suite),
                                             clock="lockstep", conditions=["gt", "free"])
            async with bridge(w, MTROracle(w.settings.data_dir, str(w.suite))) as t:
                p = await wait_run(w.db, run_id, [t], timeout=600)
                assert p.done == p.total == 3 + 2, p  # three gt rounds, two free dialogues
            return await asyncio.to_thread(score_run, w.db, run_id, ScoreOptions(asr="none", workers=1))

    res = asyncio.run(main())
    rounds = [(e.mode, e.dialogue_id, r) for e in res.episodes for r in e.rounds]
    assert len(rounds) == 6 and all(r.ok for _, _, r in rounds), [(m, d, r.round, r.failure) for m, d, r in rounds]
    overlay = [r for m, d, r in rounds if d == "4-0" and r.round == 2]
    assert all(r.verdicts == {"interruption": None, "smooth": None, "pause": None, "background": None}
               and r.interrupted for r in overlay)
    metrics = compute_metrics(res.episodes)["mtr-oracle"]
    for mode in ("gt", "free"):
        assert {f: metrics[mode][f]["value"] for f in ("smooth", "interruption", "pause", "background")} == {
            "smooth": 1.0, "interruption": 1.0, "pause": 1.0, "background": 1.0}
        assert metrics[mode]["set:S+I+P+B"]["den"] == 2


def test_published_stereo_recordings_score_offline_unchanged(published, tmp_path, db, settings, monkeypatch):
    """Recordings as the published protocol makes them: one stereo file per (dialogue, round), the source
    audio on the left and, on the right, the ground truth before the round and the model from its start."""
    monkeypatch.setenv("DATABASE_URL", settings.db_url)
    monkeypatch.setenv("MPE_DATA_DIR", str(settings.data_dir))
    from server.cli import app

    suite = tmp_path / "pub4"
    import_set(published["root"], suite, "published", encodings=["multi_scenarios/scenario_encoding_4.json"])
    t, entries = published["multi"], published["entries"]
    folder = tmp_path / "recordings"
    folder.mkdir()
    for e in entries:
        k, label = e["round_num"], e["scenario"]
        good = t.stereo()  # the model said what the ground truth says
        sf.write(str(folder / f"dialogue_1_round_{k}_{label}.wav"), good, RATE, subtype="PCM_16")
        mute = good.copy()
        mute[round(e["timestamp"]["user_start"] * RATE):, 1] = 0  # a model that never speaks in its round
        (tmp_path / "silent").mkdir(exist_ok=True)
        sf.write(str(tmp_path / "silent" / f"dialogue_1_round_{k}_{label}.wav"), mute, RATE, subtype="PCM_16")
    got = {}
    for name, where in (("gt-audio", folder), ("silent", tmp_path / "silent")):
        before = _sha(where)
        r = CliRunner().invoke(app, ["score", str(where), "--suite", str(suite), "--model", name, "--asr", "none",
                                     "--json", "--workers", "1"])
        assert r.exit_code == 0, r.output
        assert _sha(where) == before  # the files are read, never changed
        got[name] = json.loads(r.stdout)
    ok = [(e["live_round"], r["ok"], r["failure"], r["verdicts"]) for e in got["gt-audio"]["episodes"]
          for r in e["rounds"]]
    assert sorted(ok, key=lambda x: x[0]) == [
        (1, True, None, {"smooth": None, "pause": None, "background": None}),
        (2, True, None, {"interruption": None, "smooth": None, "pause": None, "background": None})]
    assert {r["failure"] for e in got["silent"]["episodes"] for r in e["rounds"]} == {"no_response"}


def test_the_cli_imports_one_encoding_in_the_wopause_variant(published, tmp_path):
    from server.cli import app

    out = tmp_path / "wo4"
    r = CliRunner().invoke(app, ["dataset", "import", str(published["root"]), "--out", str(out), "--format",
                                 "published", "--audio", "woPAUSE", "--encoding",
                                 "multi_scenarios/scenario_encoding_4.json"])
    assert r.exit_code == 0, r.output
    assert "not re-voiced" in r.output
    (d,) = Suite.load(out).dialogues
    assert (d.dialogue_id, d.set, [r.source.audio for r in d.rounds]) == ("0", "S+I+B", ["woPAUSE/multi4_0.wav"] * 2)
    bad = CliRunner().invoke(app, ["dataset", "import", str(published["root"]), "--out", str(tmp_path / "x"),
                                   "--format", "published", "--audio", "noPAUSE"])
    assert bad.exit_code != 0 and "unknown audio variant 'noPAUSE' (original, woPAUSE)" in bad.output
