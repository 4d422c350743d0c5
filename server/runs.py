"""Runs, episodes and leases (DESIGN §10).

A run = model name × suite × conditions × clock (× limit): one episode per scenario version.
Bridges lease episodes with an expiry (``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL, a
conditional UPDATE everywhere), renew the lease while they run, and give the episode back
on failure so that the next free bridge retries it from fresh model state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select, update

from clients.errors import MPEError
from .db import Attempt, Database, Episode, Run, Suite as SuiteRow, new_id, now, utcnow
from .suite import Suite, validate_suite

CLOCKS = ("lockstep", "realtime")
CONDITIONS = ("explicit", "implicit")
ACTIVE_RUN = ("queued", "running")
DONE_EPISODE = ("completed", "failed", "cancelled")


class NotFound(MPEError):
    code = "not_found"


class BadRequest(MPEError):
    code = "bad_request"


@dataclass
class Lease:
    episode_id: str
    attempt_id: str
    attempt_number: int
    run_id: str
    clock: str
    max_inflight: int
    scenario: dict[str, Any]
    suite_path: str


def register_suite(db: Database, suite: Suite, team: str) -> str:
    h = suite.content_hash()
    with db.session() as s:
        row = s.scalar(select(SuiteRow).where(SuiteRow.team == team, SuiteRow.content_hash == h))
        if row is None:
            row = SuiteRow(
                team=team,
                name=suite.meta.name,
                version=suite.meta.version,
                path=str(suite.root.resolve()),
                content_hash=h,
                meta=suite.meta.model_dump(mode="json"),
                n_scenarios=len(suite.scenarios),
            )
            s.add(row)
        else:
            row.path = str(suite.root.resolve())
        s.flush()
        return row.id


def create_run(
    db: Database,
    *,
    team: str,
    model: str,
    suite_path: str,
    clock: str,
    conditions: list[str] | None = None,
    limit: int | None = None,
    max_attempts: int = 3,
    max_inflight: int = 1,
) -> str:
    """Queue one episode per scenario version; ``limit`` counts pairs (both conditions stay paired)."""
    if clock not in CLOCKS:
        raise BadRequest(f"clock must be one of {', '.join(CLOCKS)}")
    conditions = conditions or list(CONDITIONS)
    if not conditions or any(c not in CONDITIONS for c in conditions):
        raise BadRequest(f"conditions must be a subset of {', '.join(CONDITIONS)}")
    if limit is not None and limit < 1:
        raise BadRequest("limit must be at least 1")
    if not 1 <= max_inflight <= 64:
        raise BadRequest("max_inflight must be between 1 and 64")
    suite = Suite.load(suite_path)
    problems = validate_suite(suite)
    if problems:
        raise BadRequest(f"suite {suite_path} is invalid: " + "; ".join(problems[:5]))
    pairs: list[str] = []
    for sc in suite.scenarios:
        if sc.pair_id not in pairs:
            pairs.append(sc.pair_id)
    keep = set(pairs[:limit] if limit else pairs)
    chosen = [sc for sc in suite.scenarios if sc.pair_id in keep and sc.condition in conditions]
    if not chosen:
        raise BadRequest("the suite has no scenario versions for these conditions")
    suite_id = register_suite(db, suite, team)
    run_id = new_id()
    with db.session() as s:
        s.add(
            Run(
                id=run_id,
                team=team,
                model_name=model,
                suite_id=suite_id,
                conditions=conditions,
                clock=clock,
                limit_n=limit,
                max_attempts=max_attempts,
                max_inflight=max_inflight,
            )
        )
        s.flush()
        for i, sc in enumerate(chosen):
            s.add(
                Episode(
                    run_id=run_id,
                    ordinal=i,
                    scenario_id=sc.scenario_id,
                    pair_id=sc.pair_id,
                    condition=sc.condition,
                    scenario=sc.model_dump(mode="json"),
                )
            )
    return run_id


def lease_episode(
    db: Database,
    *,
    team: str,
    admin: bool,
    model: str,
    clocks: list[str],
    owner: str,
    bridge_id: str,
    bridge_rate: int,
    model_revision: str,
    lease_s: float,
) -> Lease | None:
    """Lease the next runnable episode for this bridge, or None."""
    t = now()
    runnable = or_(Episode.status == "queued", and_(Episode.status == "running", Episode.lease_expires < t))
    q = (
        select(Episode, Run)
        .join(Run, Run.id == Episode.run_id)
        .where(Run.model_name == model, Run.status.in_(ACTIVE_RUN), Run.clock.in_(clocks), runnable)
        .order_by(Run.created_at, Episode.ordinal)
        .limit(1)
        .with_for_update(of=Episode, skip_locked=True)
    )
    if not admin:
        q = q.where(Run.team == team)
    for _ in range(20):  # skip episodes whose retries are exhausted, or that another server won
        with db.session() as s:
            row = s.execute(q).first()
            if row is None:
                return None
            ep, run = row
            stale_attempt = ep.current_attempt_id if ep.status == "running" else None
            if stale_attempt:  # §10: a dead server or bridge costs one attempt
                s.execute(update(Attempt).where(Attempt.id == stale_attempt).values(
                    status="abandoned", error_code="lease_expired", ended_at=utcnow()))
            if ep.attempts >= run.max_attempts:
                ep.status, ep.lease_owner, ep.lease_expires = "failed", None, None
                s.flush()
                _maybe_finish_run(s, run.id)
                continue
            attempt_id, number = new_id(), ep.attempts + 1
            won = s.execute(
                update(Episode)
                .where(Episode.id == ep.id, Episode.attempts == ep.attempts, runnable)
                .values(
                    status="running",
                    attempts=number,
                    lease_owner=owner,
                    lease_expires=t + lease_s,
                    current_attempt_id=attempt_id,
                )
            ).rowcount
            if not won:
                s.rollback()
                continue
            s.add(
                Attempt(
                    id=attempt_id,
                    episode_id=ep.id,
                    number=number,
                    bridge_id=bridge_id,
                    server_id=owner,
                    model_revision=model_revision,
                    clock=run.clock,
                    bridge_rate=bridge_rate,
                    settings={"max_inflight": run.max_inflight},
                )
            )
            if run.status == "queued":
                run.status = "running"
            suite_path = s.scalar(select(SuiteRow.path).where(SuiteRow.id == run.suite_id))
            return Lease(ep.id, attempt_id, number, run.id, run.clock, run.max_inflight, ep.scenario, suite_path)
    return None


def renew_lease(db: Database, lease: Lease, owner: str, lease_s: float) -> bool:
    """Extend the lease; False if it was lost (taken over, or the run was cancelled)."""
    with db.session() as s:
        n = s.execute(
            update(Episode)
            .where(Episode.id == lease.episode_id, Episode.current_attempt_id == lease.attempt_id,
                   Episode.lease_owner == owner, Episode.status == "running")
            .values(lease_expires=now() + lease_s)
        ).rowcount
        if n and s.scalar(select(Run.status).where(Run.id == lease.run_id)) == "cancelled":
            return False
        return bool(n)


def finish_attempt(
    db: Database,
    lease: Lease,
    *,
    ok: bool,
    end_sample: int | None = None,
    n_frames: int = 0,
    error_code: str | None = None,
    error_message: str | None = None,
    stats: dict[str, Any] | None = None,
    answered: bool = True,
) -> None:
    """Close an attempt. A failed attempt is kept (never scored) and its episode requeued.

    An attempt that failed before the bridge answered anything (it left between episodes)
    is recorded as ``unstarted`` and does not use up one of the episode's attempts, up to
    ``max_attempts`` such attempts (a bridge that always dies at once still ends the episode).
    """
    with db.session() as s:
        att = s.get(Attempt, lease.attempt_id)
        unstarted = not ok and not answered
        att.status = "completed" if ok else ("unstarted" if unstarted else "failed")
        att.end_sample, att.n_frames, att.ended_at = end_sample, n_frames, utcnow()
        att.error_code, att.error_message = error_code, (error_message or None) and error_message[:2000]
        if stats:
            att.stats = stats
        ep = s.get(Episode, lease.episode_id, with_for_update=True)
        if ep.current_attempt_id == lease.attempt_id and ep.status == "running":
            run = s.get(Run, ep.run_id)
            if ok:
                ep.status, ep.completed_attempt_id = "completed", lease.attempt_id
            elif run.status == "cancelled":
                ep.status = "cancelled"
            else:
                if unstarted and s.scalar(select(func.count()).select_from(Attempt).where(
                        Attempt.episode_id == ep.id, Attempt.status == "unstarted")) <= run.max_attempts:
                    ep.attempts -= 1
                ep.status = "failed" if ep.attempts >= run.max_attempts else "queued"
            ep.lease_owner, ep.lease_expires = None, None
            s.flush()
            _maybe_finish_run(s, ep.run_id)


def _maybe_finish_run(s, run_id: str) -> None:
    # Lock the run first: two last episodes finishing at once must not both see the other open.
    run = s.execute(select(Run).where(Run.id == run_id).with_for_update()
                    .execution_options(populate_existing=True)).scalar_one()
    open_ = s.scalar(
        select(func.count()).select_from(Episode).where(Episode.run_id == run_id, Episode.status.not_in(DONE_EPISODE))
    )
    if open_ == 0:
        if run.status in ACTIVE_RUN:
            run.status, run.finished_at = "finished", utcnow()


def cancel_run(db: Database, run_id: str) -> None:
    with db.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise NotFound("no such run")
        if run.status in ACTIVE_RUN:
            run.status, run.finished_at = "cancelled", utcnow()
            s.execute(update(Episode).where(Episode.run_id == run_id, Episode.status == "queued").values(status="cancelled"))


def run_progress(db: Database, run_id: str) -> dict[str, Any]:
    with db.session() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise NotFound("no such run")
        counts = dict(
            s.execute(select(Episode.status, func.count()).where(Episode.run_id == run_id).group_by(Episode.status)).all()
        )
        retries = s.scalar(select(func.count()).select_from(Attempt).join(Episode).where(
            Episode.run_id == run_id, Attempt.status != "completed", Attempt.status != "running"))
    total = sum(counts.values())
    return {
        "run_id": run.id,
        "team": run.team,
        "model": run.model_name,
        "clock": run.clock,
        "conditions": run.conditions,
        "status": run.status,
        "total": total,
        **{k: counts.get(k, 0) for k in ("queued", "running", "completed", "failed", "cancelled")},
        "failed_attempts": retries,
    }
