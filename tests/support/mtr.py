"""MTR episodes run in lockstep on the engine's pure core, no server: the episode core (scheduler,
causal detector, room mixer, teacher forcing) that the live session drives, fed by a real bridge's
``force``/``step``, recorded as scoring loads an episode; and a small MTR suite of real speech, one
dialogue with a round of each feature (:func:`build_mtr_suite`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from clients.messages import EpisodeStart, Reference
from clients.sdk import Bridge
from server.benchmarks.mtr import BENCHMARK
from server.benchmarks.mtr.suite import Dialogue, MTRMeta, MTRScenario, Suite
from server.engine.clips import open_episode
from server.scoring.loading import LoadedEpisode


def run_lockstep(suite_path: str, bridge: Bridge, scenario: MTRScenario, *, model: str | None = None) -> LoadedEpisode:
    return record_lockstep(suite_path, bridge, scenario, model=model)[0]


def record_lockstep(suite_path: str, bridge: Bridge, scenario: MTRScenario, *,
                    model: str | None = None) -> tuple[LoadedEpisode, np.ndarray]:
    """:func:`run_lockstep`, and the room track (what the user side played: a recording's left channel)."""
    core = open_episode(suite_path, scenario, suite_hash=None, audio_hash=None)
    n = core.frame
    sid = scenario.scenario_id
    bridge.reset(EpisodeStart(episode_id=f"e-{sid}", clock="lockstep", sample_rate=24000, frame_samples=n,
                              context_frames=core.context_frames, context_turns=list(core.context_turns),
                              reference=Reference(scenario_id=sid, condition=scenario.condition)))
    events, track, room = [], [], []
    while (item := core.next_room()) is not None:
        events += [e.to_json() for e in item.events]
        if item.context is not None:
            bridge.force(item.seq, item.context)
        out = bridge.step(item.seq, item.pcm)
        fed = core.feed_assistant(np.zeros(n, np.int16) if out is None else out)
        track.append(fed.pcm)
        room.append(item.pcm)
    core.finish()
    doc = {"episode_id": f"{model or bridge.name}-{sid}", "attempt_id": None, "run_id": None, "scenario_id": sid,
           "pair_id": scenario.pair_id, "condition": scenario.condition, "round": scenario.round,
           "dialogue": scenario.dialogue.model_dump(mode="json"), "model": {"name": model or bridge.name, "revision": ""},
           "events": events}
    return (LoadedEpisode(doc=doc, assistant=np.concatenate(track), segments=None, source="test"),
            np.concatenate(room))


def run_suite(suite_path: str, bridge: Bridge, modes: tuple[str, ...] = ("gt", "free"),
              model: str | None = None) -> list[LoadedEpisode]:
    suite = Suite.load(suite_path)
    return [run_lockstep(suite_path, bridge, spec.scenario, model=model)
            for spec in BENCHMARK.episodes(suite, list(modes), None)]


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
