"""The capacity model's arithmetic (bench/capacity_model.py) on literal costs and plans."""

import pytest

from bench.capacity_model import Plan, UnitCosts, capacity

COSTS = UnitCosts(server_cpu_s=0.02, db_bytes=50_000, db_rows=27.5, db_xacts=3.0, pg_write_capacity=200.0,
                  scoring_cpu_s=0.025)
PLAN = Plan(episodes=4000, models=5, mean_episode_s=100.0, gap_s=0.0, gpu_hosts=4, per_host=16,
            process_core_share=0.5, pg_headroom=0.5, scoring_cores=16)


def by_name(c, prefix):
    return next(r for r in c.resources if r.name.startswith(prefix))


def test_totals_of_the_full_evaluation():
    c = capacity(COSTS, PLAN)
    assert c.stream_hours == pytest.approx(20_000 * 100 / 3600)
    assert c.concurrent == 64
    assert c.wall_hours == pytest.approx(20_000 * 100 / 64 / 3600)
    assert c.server_cores == pytest.approx(1.28)
    assert c.server_processes == 3  # 1.28 cores at half a core each
    assert c.storage_bytes == pytest.approx(1e11)
    assert (c.pg_rows_per_s, c.pg_xacts_per_s, c.pg_bytes_per_s) == pytest.approx((1760, 192, 3.2e6))
    assert c.scoring_hours == pytest.approx(2e6 * 0.025 / 16 / 3600)


def test_the_gap_between_episodes_adds_to_the_wall_time_only():
    c = capacity(COSTS, Plan(**{**PLAN.__dict__, "gap_s": 28.0}))
    assert c.wall_hours == pytest.approx(20_000 * 128 / 64 / 3600)
    assert c.stream_hours == pytest.approx(20_000 * 100 / 3600)


def test_postgres_fills_first_when_its_capacity_is_the_smallest():
    c = capacity(COSTS, PLAN)
    pg = by_name(c, "PostgreSQL")
    assert pg.capacity == pytest.approx(100)  # half of 200
    assert pg.utilisation == pytest.approx(0.64)
    assert pg.saturates_at_hosts == pytest.approx(100 / 16)
    assert by_name(c, "scoring").saturates_at_hosts == pytest.approx(640 / 16)
    assert c.bottleneck.startswith("PostgreSQL")


def test_scoring_fills_first_when_postgres_has_room():
    c = capacity(UnitCosts(**{**COSTS.__dict__, "pg_write_capacity": 10_000.0}), PLAN)
    assert c.bottleneck.startswith("scoring")
    assert by_name(c, "scoring").utilisation == pytest.approx(64 / 640)


def test_unmeasured_postgres_is_left_out_not_counted_as_zero():
    c = capacity(UnitCosts(**{**COSTS.__dict__, "pg_write_capacity": None}), PLAN)
    assert not [r for r in c.resources if r.name.startswith("PostgreSQL")]
    assert c.bottleneck.startswith("scoring")


def test_postgres_capacity_is_the_pattern_rate_over_the_larger_ratio():
    """bench/capacity.py's PostgreSQL factor: what a realtime episode-second of the whole server costs
    against the write pattern's, in backend CPU or in WAL flushes, whichever is more."""
    from bench.capacity import pg_capacity

    rt = {"db": "postgres", "pg_cpu_ms_per_episode_s": 2.0, "wal_syncs_per_episode_s": 0.3}
    writes = [{"episode_s_per_s": 400.0, "pg_cpu_ms_per_episode_s": 1.0, "wal_syncs_per_episode_s": 0.1},
              {"episode_s_per_s": 600.0, "pg_cpu_ms_per_episode_s": 1.5, "wal_syncs_per_episode_s": 0.1}]
    cap = pg_capacity({"realtime": [rt], "pgwrite": writes})
    assert (cap["pattern"], cap["cpu_ratio"], cap["sync_ratio"]) == pytest.approx((600, 4 / 3, 3.0))
    assert cap["realtime"] == pytest.approx(200)
    cap = pg_capacity({"realtime": [{**rt, "wal_syncs_per_episode_s": 0.05}], "pgwrite": writes})
    assert cap["realtime"] == pytest.approx(450)  # the CPU ratio is the larger now
    old = pg_capacity({"realtime": [{k: v for k, v in rt.items() if k != "wal_syncs_per_episode_s"}],
                       "pgwrite": writes})  # results of a bench that did not count them
    assert old["sync_ratio"] is None and old["realtime"] == pytest.approx(450)
    assert pg_capacity({"realtime": [{**rt, "db": "sqlite"}], "pgwrite": writes}) is None
