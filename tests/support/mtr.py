"""MTR episodes run in lockstep on the engine's pure core, no server: the episode core (scheduler,
causal detector, room mixer, teacher forcing) that the live session drives, fed by a real bridge's
``force``/``step``, recorded as scoring loads an episode."""

from __future__ import annotations

import numpy as np

from clients.messages import EpisodeStart, Reference
from clients.sdk import Bridge
from server.benchmarks.mtr import BENCHMARK
from server.benchmarks.mtr.suite import MTRScenario, Suite
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
                              context_frames=core.context_frames,
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
