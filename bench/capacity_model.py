"""The capacity model: from measured per-unit costs and a plan, what a full evaluation needs.

Pure arithmetic on two typed inputs (``UnitCosts``: what ``bench/capacity.py`` measures on this
machine; ``Plan``: the evaluation and the hardware, explicit parameters with defaults) and one
typed output. The unit is the **episode-second**: one second of one episode's stream. A realtime
episode produces one episode-second per wall second, so a load in episode-seconds per second is
also a number of concurrent realtime episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class UnitCosts:
    """Measured costs per episode-second (and what one PostgreSQL absorbs)."""

    server_cpu_s: float  # server process CPU seconds per realtime episode-second
    db_bytes: float  # database bytes on disk per episode-second (the database the plan uses)
    db_rows: float  # rows inserted per episode-second
    db_xacts: float  # committed transactions per episode-second
    pg_write_capacity: float | None  # realtime episode-seconds per second one PostgreSQL takes (None: not measured)
    scoring_cpu_s: float  # scoring CPU seconds per episode-second (ASR + detector + rules)


@dataclass(frozen=True)
class Plan:
    """The evaluation and the hardware; every assumption a parameter."""

    episodes: int = 4000  # the full suite: 2,000 pairs x 2 conditions
    models: int = 5
    mean_episode_s: float = 97.2  # docs/scenarios.md: mean conversation of the full suite
    gap_s: float = 2.0  # per episode: lease, reset and start before its first frame
    gpu_hosts: int = 4  # K
    per_host: int = 16  # M: concurrent realtime episodes one GPU host runs
    process_core_share: float = 0.5  # the most of one core a server process should use (one event loop)
    pg_headroom: float = 0.5  # the share of the measured PostgreSQL capacity to plan on
    scoring_cores: int = 16  # C


@dataclass(frozen=True)
class Resource:
    name: str
    load: float  # what the plan asks of it, in its unit
    capacity: float | None  # what there is, same unit (None: scales with what is added)
    unit: str
    saturates_at_hosts: float | None  # K at which it is full, with M per host (None: never, it is added)

    @property
    def utilisation(self) -> float | None:
        return None if not self.capacity else self.load / self.capacity


@dataclass(frozen=True)
class Capacity:
    stream_hours: float
    concurrent: int
    wall_hours: float
    server_cores: float
    server_processes: int
    pg_load_episode_s: float  # episode-seconds per second the database takes
    pg_rows_per_s: float
    pg_xacts_per_s: float
    pg_bytes_per_s: float
    storage_bytes: float
    scoring_hours: float
    resources: list[Resource] = field(default_factory=list)
    bottleneck: str = ""  # the resource that saturates first as hosts are added


def capacity(costs: UnitCosts, plan: Plan) -> Capacity:
    """What ``plan`` needs at ``costs``, and which resource saturates first as GPU hosts are added."""
    n = plan.episodes * plan.models
    stream_s = n * plan.mean_episode_s
    concurrent = plan.gpu_hosts * plan.per_host
    wall_s = n * (plan.mean_episode_s + plan.gap_s) / concurrent
    cores = concurrent * costs.server_cpu_s
    processes = math.ceil(cores / plan.process_core_share)
    scoring_s = stream_s * costs.scoring_cpu_s / plan.scoring_cores
    # Scoring runs beside the streaming: it keeps up while C cores score an episode-second at
    # least as fast as the hosts stream one (C / scoring_cpu_s episode-seconds per second).
    scoring_rate = plan.scoring_cores / costs.scoring_cpu_s
    resources = [
        Resource("GPU hosts (K x M realtime episodes)", concurrent, concurrent, "episodes", None),
        Resource("server processes (cores)", cores, None, "cores", None),
        Resource(f"scoring on {plan.scoring_cores} cores", concurrent, scoring_rate, "episode-s / s",
                 scoring_rate / plan.per_host),
    ]
    if costs.pg_write_capacity:
        pg_cap = costs.pg_write_capacity * plan.pg_headroom
        resources.insert(2, Resource("PostgreSQL writes", concurrent, pg_cap, "episode-s / s", pg_cap / plan.per_host))
    fixed = [r for r in resources if r.saturates_at_hosts is not None]
    first = min(fixed, key=lambda r: r.saturates_at_hosts)
    return Capacity(stream_hours=stream_s / 3600, concurrent=concurrent, wall_hours=wall_s / 3600,
                    server_cores=cores, server_processes=processes, pg_load_episode_s=concurrent,
                    pg_rows_per_s=concurrent * costs.db_rows, pg_xacts_per_s=concurrent * costs.db_xacts,
                    pg_bytes_per_s=concurrent * costs.db_bytes, storage_bytes=stream_s * costs.db_bytes,
                    scoring_hours=scoring_s / 3600, resources=resources, bottleneck=first.name)
