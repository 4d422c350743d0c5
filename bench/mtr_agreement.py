#!/usr/bin/env python
"""MTR-DuplexBench: how far ``mpe score --rules published`` agrees with the published feature scripts.

The published evaluation scripts (ZhangHe0918/MTR-DuplexBench, ``Eval/``) are library functions
with no runner: the README asks each lab to write one (ASR of the stereo output, the scenario
timestamps, a call per round). This script is that runner, and the comparison:

1. **Recordings.** A suite of ``--dialogues`` dialogues of ``--rounds`` rounds, the single-feature
   sets the published scripts score (smooth, interruption, pause, background, in turn), voiced
   with piper; each dialogue is played by one synthetic model in turn: ``oracle`` (the reference
   behaviour), ``silent``, ``always-talk`` (talks without a stop), ``late`` (replies 3 s after
   the user), ``talks-over`` (starts its reply 1 s into the user's turn) and
   ``ignores-barge-ins`` (the oracle, but it never stops for a barge-in). Every round is a
   ``gt`` episode run in lockstep on the real episode core, written as a published-layout
   stereo file ``dialogue_<N>_round_<R>_<scenario>.wav`` (left = user, right = model).
2. **Transcription.** The model channel of each file is transcribed once with word timestamps
   (the scoring's faster-whisper backend) and written in the published ASR helper's result format
   (``asr_results.json``: ``right_segments`` of ``timestamp``, ``text``, ``words``) with one
   timestamps object per file (``scenario_timestamps.json``: ``user_start``, ``model_start``, …).
3. **The published scripts** (imported from ``--published DIR/Eval``, never copied here) score each
   file: ``eval_1_scenario`` (smooth), ``eval_2_scenarios`` (interruption),
   ``eval_single_scenario_pause`` (pause; its module imports ``calculate_tor``, which
   ``eval_1_scenario.py`` lacks: the runner provides it as E1's "speaking" test, the script's
   intent) and ``eval_single_scenario_background`` (background). None needs a GPT call.
4. **Ours**: each episode scored by ``score_episode(..., rules="published")``, the function
   ``mpe score --rules published`` runs, on the same transcription (cached).

Printed per feature: verdict agreement, the latency difference (ours − published: mean and mean
absolute) and the own-backchannel frequency difference.

Usage (the published repository fetched by the person running it; never committed)::

    git clone https://github.com/ZhangHe0918/MTR-DuplexBench /tmp/mtr-published
    python bench/mtr_agreement.py --published /tmp/mtr-published            # 40 dialogues x 1 round
    python bench/mtr_agreement.py --published /tmp/mtr-published --dialogues 24 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from statistics import mean

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clients.messages import EpisodeStart, Reference  # noqa: E402
from clients.sdk import Bridge  # noqa: E402
from server.benchmarks.mpe.judging import RuleJudge  # noqa: E402
from server.benchmarks.mtr import BENCHMARK, published  # noqa: E402
from server.benchmarks.mtr.dataset.build import build_text_suite  # noqa: E402
from server.benchmarks.mtr.dataset.generators import make_generator  # noqa: E402
from server.benchmarks.mtr.dataset.plan import plan_dialogues  # noqa: E402
from server.benchmarks.mtr.dataset.synth import synthesize_suite  # noqa: E402
from server.benchmarks.mtr.rules import live_rounds  # noqa: E402
from server.benchmarks.mtr.scoring import score_episode  # noqa: E402
from server.benchmarks.mtr.suite import MTRScenario, Suite, scenario_from_id  # noqa: E402
from server.core.audio import mix_placed  # noqa: E402
from server.core.events import Event  # noqa: E402
from server.core.timebase import STREAM_RATE  # noqa: E402
from server.engine.clips import open_episode  # noqa: E402
from server.scoring.asr import make_asr  # noqa: E402
from server.scoring.loading import LoadedEpisode  # noqa: E402
from server.scoring.store import Cache  # noqa: E402

S = STREAM_RATE
FEATURES = ("smooth", "interruption", "pause", "background")
#: our feature -> the published scenario label (the names the published scripts dispatch on)
LABELS = {"smooth": "smooth-turntaking", "interruption": "interruption", "pause": "pause-handling",
          "background": "background"}
PERSONAS = ("oracle", "silent", "always-talk", "late", "talks-over", "ignores-barge-ins")


class Persona(Bridge):
    """A synthetic model that follows the episode through a replica of the engine's episode core
    fed its own output (as the MTR oracle does) and behaves as its persona says."""

    clocks = ("lockstep",)
    accepts_context = True
    wants_reference = True
    blocking = False

    def __init__(self, suite_path: Path, persona: str):
        super().__init__()
        self.suite_path, self.persona, self.name = suite_path, persona, persona

    def reset(self, episode: EpisodeStart) -> None:
        assert episode.reference is not None
        suite = Suite.load(self.suite_path)
        sc = scenario_from_id(suite, episode.reference.scenario_id, episode.reference.condition)
        self.replica = open_episode(str(self.suite_path), sc, suite_hash=None, audio_hash=None)
        rounds = {r.round: r for r in sc.dialogue.rounds}
        self.replies = {(n, "user"): suite.load_clip(r.assistant.clip) for n, r in rounds.items()}
        self.replies.update({(n, "barge_in"): suite.load_clip(r.barge_in.response.clip)
                             for n, r in rounds.items() if r.barge_in})
        self.speech: list[list] = []
        self.live: set[int] = set()
        if self.persona == "always-talk":
            gap = np.zeros(S // 5, np.int16)
            loop = np.concatenate([x for a in self.replies.values() for x in (a, gap)])
            self.speech.append([0, np.tile(loop, 1 + (600 * S) // len(loop))])

    def step(self, seq: int, room: np.ndarray) -> np.ndarray | None:
        n = self.frame_samples
        item = self.replica.next_room()
        p = self.persona
        for ev in item.events if item else ():
            if ev.type == "round.start" and ev.data.get("live"):
                self.live.add(ev.data["round"])
            if p in ("silent", "always-talk") or ev.data.get("round") not in self.live:
                continue  # the history's rounds are ground truth (teacher-forced)
            if ev.type == "user.start" and ev.data.get("part") == 1 and p == "talks-over":
                self.speech.append([ev.t + S, self.replies[(ev.data["round"], "user")]])
            elif ev.type == "wait.start" and not (p == "talks-over" and ev.data["after"] == "user"):
                delay = 3 * S if p == "late" else 3 * S // 10
                self.speech.append([ev.t + delay, self.replies[(ev.data["round"], ev.data["after"])]])
            elif ev.type == "barge_in.start" and "speaking" in ev.data and self.speech and p != "ignores-barge-ins":
                start, audio = self.speech[-1]
                keep = max(0, min(len(audio), ev.t + 2 * S // 5 - start))
                self.speech[-1][1] = audio[:keep]
        frame = mix_placed(self.speech, seq * n, n) if self.speech else np.zeros(n, np.int16)
        self.replica.feed_assistant(frame)
        return frame


def build_suite(root: Path, dialogues: int, rounds: int, cache: Path) -> Path:
    """The single-feature sets in turn, voiced with piper (voices cached in ``cache``)."""
    plans = plan_dialogues([(FEATURES[i % len(FEATURES)], rounds) for i in range(dialogues)], seed=20261205)
    build_text_suite(root, name="mtr-agreement", plans=plans, seed=20261205,
                     generator=make_generator("procedural", 20261205), engine_name="piper", force=True)
    synthesize_suite(root, data_dir=cache, engine_name="piper", workers=2)
    return root


def play(suite_path: Path, bridge: Bridge, sc: MTRScenario) -> tuple[LoadedEpisode, np.ndarray]:
    """One episode in lockstep on the real core: (the episode as scoring loads it, the room track)."""
    core = open_episode(str(suite_path), sc, suite_hash=None, audio_hash=None)
    n = core.frame
    bridge.reset(EpisodeStart(episode_id=sc.scenario_id, clock="lockstep", sample_rate=S, frame_samples=n,
                              context_frames=core.context_frames,
                              reference=Reference(scenario_id=sc.scenario_id, condition=sc.condition)))
    events, track, room = [], [], []
    while (item := core.next_room()) is not None:
        events += [e.to_json() for e in item.events]
        out = bridge.step(item.seq, item.pcm)
        track.append(core.feed_assistant(np.zeros(n, np.int16) if out is None else out).pcm)
        room.append(item.pcm)
    core.finish()
    doc = {"episode_id": f"{bridge.name}-{sc.scenario_id}", "attempt_id": None, "run_id": None,
           "scenario_id": sc.scenario_id, "pair_id": sc.pair_id, "condition": sc.condition, "round": sc.round,
           "dialogue": sc.dialogue.model_dump(mode="json"), "model": {"name": bridge.name, "revision": ""},
           "events": events}
    return LoadedEpisode(doc=doc, assistant=np.concatenate(track), segments=None, source="bench"), np.concatenate(room)


def timestamps(ep: LoadedEpisode, sc: MTRScenario) -> dict[str, float]:
    """The published scenario timestamps of the episode's live round (the keys the scripts read)."""
    (r,) = live_rounds(Event.from_json(e) for e in ep.doc["events"])
    spec = next(x for x in sc.dialogue.rounds if x.round == r.round)
    w = published.windows(r, spec.assistant.duration_s, spec.barge_in.response.duration_s if spec.barge_in else None)
    out = {"user_start": w.user_start, "user_end": w.user_end, "model_start": w.model_start, "model_end": w.model_end}
    for name, span in (("pause", w.pause), ("interruption", w.interruption), ("background", w.background)):
        if span is not None:
            out[f"{name}_start"], out[f"{name}_end"] = span
    return out


def asr_entry(path: Path, segments) -> dict:
    """One file in the published ASR helper's result format (its ``--use_timestamped --save_segments``
    output with the words kept, as the feature scripts need them); the user channel is not transcribed
    (no feature script reads it)."""
    right = [{"timestamp": [s.start, s.end], "text": s.text,
              "words": [{"text": w.text, "start": w.start, "end": w.end} for w in s.words]} for s in segments]
    return {"audio_file": str(path), "user_channel": "left", "user_text": "",
            "model_text": " ".join(s.text.strip() for s in segments), "left_segments": [], "right_segments": right}


class Published:
    """The published feature functions, imported from the fetched repository."""

    def __init__(self, repo: Path):
        eval_dir = repo / "Eval"
        if not (eval_dir / "eval_1_scenario.py").is_file():
            raise SystemExit(f"{repo}: not the MTR-DuplexBench repository (no Eval/eval_1_scenario.py)")
        sys.path.insert(0, str(eval_dir))
        import eval_1_scenario as e1
        import eval_2_scenarios as e2

        # the pause script imports calculate_tor, which eval_1_scenario.py does not define (the import
        # fails); its intended test is E1's "is the model speaking" (the same TOR test, renamed)
        e1.calculate_tor = e1.check_if_speak_at_the_same_time
        import eval_single_scenario_background as bg
        import eval_single_scenario_pause_handling as ph

        self.fns = {"smooth": lambda s, t: e1.eval_1_scenario(s, "smooth-turntaking", t),
                    "interruption": lambda s, t: e2.eval_2_scenarios(s, "interruption", t),
                    "pause": lambda s, t: ph.eval_single_scenario_pause(s, "pause-handling", t),
                    "background": lambda s, t: bg.eval_single_scenario_background(s, "background", t, None)}
        self.e1 = e1

    def __call__(self, feature: str, segments: list, ts: dict[str, float]) -> tuple[int, float, float]:
        if feature == "background" and "background_start" not in ts:
            # the voice never played (the live scheduler places it after the model's onset, and the model never
            # replied): the script would fail on the missing stamp; silence over a background fails (BG line 66).
            # The interruption script returns (0, 0, 0) itself on a missing barge-in (E2 lines 33-34)
            return 0, 0.0, 0.0
        with contextlib.redirect_stdout(io.StringIO()):  # the scripts print every segment they look at
            return self.fns[feature](segments, ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--published", type=Path, required=True, help="the fetched MTR-DuplexBench repository")
    ap.add_argument("--dialogues", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=1, help="rounds per dialogue (one gt episode each; round k "
                                                          "replays rounds 1..k-1 as ground-truth history)")
    ap.add_argument("--work", type=Path, default=None, help="keep the suite, recordings and transcripts here")
    ap.add_argument("--voice-cache", type=Path, default=Path(tempfile.gettempdir()) / "mpe-voice-cache")
    ap.add_argument("--json", action="store_true", help="print the per-round rows as JSON as well")
    a = ap.parse_args()
    pub = Published(a.published)
    work = a.work or Path(tempfile.mkdtemp(prefix="mtr-agreement-"))
    t0 = time.perf_counter()
    suite_path = build_suite(work / "suite", a.dialogues, a.rounds, a.voice_cache)
    t_build = time.perf_counter() - t0
    suite = Suite.load(suite_path)
    out_dir = work / "recordings"
    out_dir.mkdir(parents=True, exist_ok=True)
    asr, cache, judge = make_asr("faster-whisper"), Cache(), RuleJudge()
    asr_results, stamps, rows = [], {}, []
    t_play = t_score = 0.0
    episodes = BENCHMARK.episodes(suite, ["gt"], None)
    for i, d in enumerate(suite.dialogues):
        persona = PERSONAS[(i // len(FEATURES)) % len(PERSONAS)]
        for spec in (x for x in episodes if x.pair_id == d.dialogue_id):
            sc = spec.scenario
            t = time.perf_counter()
            ep, room = play(suite_path, Persona(suite_path, persona), sc)
            t_play += time.perf_counter() - t
            feature = next(r.feature for r in d.rounds if r.round == sc.round)
            path = out_dir / f"dialogue_{i + 1}_round_{sc.round}_{LABELS[feature]}.wav"
            n = max(len(room), len(ep.assistant))
            sf.write(path, np.stack([np.pad(room, (0, n - len(room))), np.pad(ep.assistant, (0, n - len(ep.assistant)))],
                                    axis=1), S, subtype="PCM_16")
            t = time.perf_counter()
            _, segments = cache.transcribe_words(asr, ep.assistant)
            entry = score_episode(ep, asr, judge, cache, rules="published")  # `mpe score --rules published`
            t_score += time.perf_counter() - t
            ts = timestamps(ep, sc)
            asr_results.append(asr_entry(path, segments))
            stamps[path.name] = ts
            (ours,) = entry.rounds
            p_ok, p_lat, p_freq = pub(feature, asr_results[-1]["right_segments"], ts)
            print(f"{path.name} ({persona}): published {bool(p_ok)} {float(p_lat):.2f} s, ours {ours.ok} "
                  f"{ours.latency_s:.2f} s", file=sys.stderr, flush=True)
            rows.append({"file": path.name, "persona": persona, "feature": feature, "published_ok": bool(p_ok),
                         "ours_ok": ours.ok, "published_latency_s": float(p_lat), "ours_latency_s": ours.latency_s,
                         "intended_latency_s": float(pub.e1.calculate_latency(asr_results[-1]["right_segments"], ts)),
                         "published_frequency": float(p_freq), "ours_frequency": ours.own_backchannel_rate,
                         "ours_failure": ours.failure})
    (work / "asr_results.json").write_text(json.dumps(asr_results, indent=1))
    (work / "scenario_timestamps.json").write_text(json.dumps(stamps, indent=1))
    report(rows, a, t_build, t_play, t_score, work)
    if a.json:
        print(json.dumps(rows, indent=1))


def report(rows: list[dict], a, t_build: float, t_play: float, t_score: float, work: Path) -> None:
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[r["feature"]].append(r)
    print(f"{len(rows)} recordings ({a.dialogues} dialogues x {a.rounds} rounds, gt), {len(PERSONAS)} personas; "
          f"suite {t_build:.0f} s, playing {t_play:.0f} s, ASR + scoring {t_score:.0f} s; files in {work}")
    print(f"{'feature':<13}{'n':>4}{'verdicts agree':>16}{'pass (pub/ours)':>17}{'latency diff mean':>19}"
          f"{'|diff| mean':>13}{'freq |diff| max':>17}")
    for f in FEATURES:
        rs = by.get(f, [])
        if not rs:
            continue
        agree = sum(r["published_ok"] == r["ours_ok"] for r in rs) / len(rs)
        diffs = [r["ours_latency_s"] - r["published_latency_s"] for r in rs]
        fdiff = max(abs(r["ours_frequency"] - r["published_frequency"]) for r in rs)
        print(f"{f:<13}{len(rs):>4}{100 * agree:>15.1f}%{sum(r['published_ok'] for r in rs):>9}/"
              f"{sum(r['ours_ok'] for r in rs):<7}{mean(diffs):>+18.3f}s{mean(abs(x) for x in diffs):>12.3f}s"
              f"{fdiff:>17.4f}")
    bg = by.get("background", [])
    if bg:
        d = [r["ours_latency_s"] - r["intended_latency_s"] for r in bg]
        print(f"background latency against E1's (the intended one; the script's own is always 0): mean diff "
              f"{mean(d):+.3f} s")
    for r in rows:
        if r["published_ok"] != r["ours_ok"]:
            print(f"  disagree: {r['file']} ({r['persona']}): published {r['published_ok']}, ours {r['ours_ok']} "
                  f"({r['ours_failure']})")
    per = defaultdict(lambda: [0, 0])
    for r in rows:
        per[r["persona"]][0] += r["ours_ok"]
        per[r["persona"]][1] += 1
    print("pass rate per persona (ours): " + ", ".join(f"{p} {k}/{n}" for p, (k, n) in per.items()))


if __name__ == "__main__":
    main()
