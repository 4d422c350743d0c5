"""Runs, episodes and leases (DESIGN §10).

A run = model name × suite × conditions × clock (× limit): one episode per scenario version.
Bridges lease episodes with an expiry (``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL, a
conditional UPDATE everywhere), renew the lease while they run, and give the episode back
on failure so that the next free bridge retries it from fresh model state.

One lock order everywhere (PostgreSQL): a unit of work that changes a run or its episodes locks
the run row first (:func:`_lock_run`), then the run's episodes, then their attempts, and decides
on what it reads under those locks; several episodes at once in the order of their ids (the one
exception to the run first, the lease renewals of one server's attempts, locks only running
episodes, in the same order). Two of them never wait on each other in a cycle, and a cancel
sees every episode as the last unit of work left it. SQLite has no row locks; there
:func:`_lock_run` takes the database's one write lock first, for the same effect.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import ColumnElement, and_, exists, false, func, not_, or_, select, update
from sqlalchemy.orm import Session

from clients.errors import MPEError, RetryLater
from clients.messages import CLOCKS
from server.core.benchmark import BadSnapshot, EpisodeSpec
from server.core.impairment import Impairment
from server.core.states import advance, sources
from server.core.status import (
    ACTIVE_RUN,
    ATTEMPT_TRANSITIONS,
    DONE_EPISODE,
    EPISODE_TRANSITIONS,
    RUN_TRANSITIONS,
    AttemptStatus,
    EpisodeStatus,
    RunStatus,
)
from server.db import Attempt, Database, Episode, Run, advisory_xact_lock, new_id, now, utcnow
from server.db import Suite as SuiteRow
from server.engine.clips import episode_audio, load_suite
from server.engine.registry import all_benchmarks, get_benchmark
from server.engine.worksignal import WorkKey, announce
from server.settings import MAX_INFLIGHT, Settings

TEXT_CLOCK = "text"  # a run decided on its suite's text (mpe reference): no bridge, no stream clock
_DEFAULT = Settings.model_fields  # a new run's max_attempts and max_inflight default to the settings' defaults


class NotFound(MPEError):
    """Nothing has the id asked for (a run, episode, attempt, suite or token)."""

    code = "not_found"


class BadRequest(MPEError):
    """The request cannot be carried out as given (bad run settings, a suite that cannot be used)."""

    code = "bad_request"


@dataclass
class Lease:
    """An episode leased to a bridge (§10): the attempt it runs, its run's clock and settings, its
    scenario (the snapshot the episode stored, as its benchmark's ``scenario_model``), and the
    hashes that pin its suite and audio (§8)."""

    episode_id: str
    attempt_id: str
    attempt_number: int
    run_id: str
    clock: str
    max_inflight: int
    scenario_id: str
    condition: str
    scenario: BaseModel
    suite_path: str
    suite_hash: str  # the suite and the episode's audio as the run was created (§8: runs are pinned)
    audio_hash: str | None
    instructions: str | None = None  # §4: the benchmark's duty text, only for runs with a text prompt
    impair: Impairment | None = None  # realtime: the network the assistant stream goes through


def register_suite(db: Database, suite, team: str, benchmark: str) -> str:
    """The id of the team's suite row with ``suite``'s content hash, created if new (an existing
    row takes the suite's current path)."""
    h = suite.content_hash()
    with db.session() as s:
        row = s.scalar(select(SuiteRow).where(SuiteRow.team == team, SuiteRow.content_hash == h))
        if row is None:
            row = SuiteRow(
                team=team,
                benchmark=benchmark,
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
    max_attempts: int = _DEFAULT["max_attempts"].default,
    max_inflight: int = _DEFAULT["max_inflight"].default,
    text_prompt: bool = False,
    max_queued: int | None = None,
    impair: Impairment | None = None,
    check: bool = False,
) -> str:
    """Queue the suite's episodes (one per scenario version for Duplex-MPE; ``limit`` as the
    benchmark defines it: pairs for Duplex-MPE, so both conditions stay paired). With
    ``text_prompt`` every ``episode.start`` of the run carries the benchmark's duty text (§4).
    With ``max_queued`` the team may have at most that many episodes queued, this run's included
    (RetryLater ``too_many_queued`` otherwise; docs/api.md "Limits"). ``impair``: a realtime run's
    assistant stream goes through that network (server.core.impairment). ``check``: a bridge
    check's run, served only to bridges that announce ``hello.check`` (:func:`bridge_runs`)."""
    if clock not in CLOCKS:
        raise BadRequest(f"clock must be one of {', '.join(CLOCKS)}")
    if limit is not None and limit < 1:
        raise BadRequest("limit must be at least 1")
    if max_attempts < 1:
        raise BadRequest("max_attempts must be at least 1")
    if not 1 <= max_inflight <= MAX_INFLIGHT:
        raise BadRequest(f"max_inflight must be between 1 and {MAX_INFLIGHT}")
    impair = impair if impair is not None and impair.active else None
    if impair is not None and clock != "realtime":
        raise BadRequest("impair applies to realtime runs only (in lockstep the clock waits for the bridge, "
                         "so a delay changes nothing)")
    loaded = load_suite(suite_path)
    bench, suite = loaded.benchmark, loaded.suite
    conditions = conditions or list(bench.conditions)
    if not conditions or any(c not in bench.conditions for c in conditions):
        raise BadRequest(f"conditions must be a subset of {', '.join(bench.conditions)}")
    if text_prompt and bench.duty_text is None:
        raise BadRequest(f"the {bench.name} benchmark has no text prompt to send")
    problems = bench.problems(suite)
    if problems:
        raise BadRequest(f"suite {suite_path} is invalid: " + "; ".join(problems[:5]))
    chosen = bench.episodes(suite, conditions, limit)
    if not chosen:
        raise BadRequest("the suite has no scenario versions for these conditions")
    audio = [episode_audio(loaded, spec.scenario)[1] for spec in chosen]  # §8: pin what each episode plays
    suite_id = register_suite(db, suite, team, bench.name)
    with db.session() as s:
        if max_queued is not None:
            _check_queue(s, team, len(chosen), max_queued)
        run = _add_run(s, team=team, model=model, benchmark=bench.name, suite_id=suite_id, conditions=conditions,
                       clock=clock, limit=limit, max_attempts=max_attempts, max_inflight=max_inflight,
                       text_prompt=text_prompt, impair=None if impair is None else impair.model_dump(),
                       is_check=check)
        for i, (spec, audio_hash, rank) in enumerate(zip(chosen, audio, lease_ranks(len(chosen), check))):
            _add_episode(s, run.id, i, spec, audio_hash, lease_rank=rank)
        announce(s)  # idle bridges of this model look at once
    return run.id


def _add_run(s: Session, **fields: Any) -> Run:
    run = Run(id=new_id(), limit_n=fields.pop("limit"), model_name=fields.pop("model"), **fields)
    s.add(run)
    s.flush()
    return run


def lease_ranks(n: int, check: bool = False) -> list[int]:
    """The order a run's ``n`` episodes are leased in (each episode's rank, by ordinal). A real run's
    is a shuffle drawn from the operating system's randomness and stored, never served: the ordinal
    is the suite's order, so leasing by it would let a bridge (which sees episode ids and the order
    they come in) join its episodes to the suite's scenarios, which the disclosure rule forbids
    during the run (server.engine.disclosure). Nothing the team knows (its run id, the suite)
    predicts it. A bridge check's run keeps the probe's order (its own known suite; no secret)."""
    ranks = list(range(n))
    if not check:
        secrets.SystemRandom().shuffle(ranks)
    return ranks


def _add_episode(s: Session, run_id: str, ordinal: int, spec: EpisodeSpec, audio_hash: str | None, **fields: Any
                 ) -> Episode:
    ep = Episode(id=new_id(), run_id=run_id, ordinal=ordinal, scenario_id=spec.scenario_id, pair_id=spec.pair_id,
                 condition=spec.condition, scenario=spec.scenario.model_dump(mode="json"), audio_hash=audio_hash,
                 **fields)
    s.add(ep)
    return ep


@dataclass(frozen=True)
class DecidedEpisode:
    """One episode of a run decided without a bridge: its scenario version and what its one completed
    attempt records (``stats``: the decisions)."""

    spec: EpisodeSpec
    stats: dict[str, Any]


def record_decided_run(db: Database, *, team: str, model: str, benchmark: str, suite, conditions: list[str],
                       limit: int | None, revision: str, episodes: list[DecidedEpisode],
                       clock: str = TEXT_CLOCK, text_prompt: bool = True, source: str = "text-reference") -> str:
    """Store a run whose episodes were decided offline (the text reference of ``mpe reference``) the
    way runs are stored, so that the pages, ``mpe run list`` and ``mpe score`` treat it like any run:
    pinned to its suite's content, ``finished``, every episode ``completed`` by one attempt whose
    ``stats`` hold its decisions (``revision``: who made them; ``source`` stands for the bridge). The
    rows are created in their final states: nothing was leased, so no transition is taken. No audio
    is pinned (the episodes play none)."""
    if not episodes:
        raise BadRequest("the suite has no scenario versions for these conditions")
    suite_id = register_suite(db, suite, team, benchmark)
    at = utcnow()
    with db.session() as s:
        run = _add_run(s, team=team, model=model, benchmark=benchmark, suite_id=suite_id, conditions=conditions,
                       clock=clock, limit=limit, max_attempts=1, max_inflight=1, text_prompt=text_prompt,
                       status=RunStatus.finished, created_at=at, finished_at=at)
        for i, done in enumerate(episodes):
            attempt_id = new_id()
            ep = _add_episode(s, run.id, i, done.spec, None, status=EpisodeStatus.completed, attempts=1,
                              current_attempt_id=attempt_id, completed_attempt_id=attempt_id)
            s.flush()
            s.add(Attempt(id=attempt_id, episode_id=ep.id, number=1, bridge_id=source[:32], server_id=source[:100],
                          model_revision=revision[:200], clock=clock, bridge_rate=0, status=AttemptStatus.completed,
                          stats=done.stats, started_at=at, ended_at=at))
    return run.id


def queued_episodes(s: Session, team: str) -> int:
    """How many episodes of ``team``'s runs are queued (waiting for a bridge, a retry included)."""
    return s.scalar(select(func.count()).select_from(Episode).join(Run, Run.id == Episode.run_id)
                    .where(Run.team == team, Episode.status == EpisodeStatus.queued))


def _check_queue(s: Session, team: str, adding: int, limit: int) -> None:
    """RetryLater ``too_many_queued`` unless ``team`` stays within ``limit`` queued episodes with
    ``adding`` more. Serialised per team until ``s`` commits (PostgreSQL: an advisory lock on the
    team; SQLite: its one write lock), so two runs created at once cannot both slip under it."""
    if s.get_bind().dialect.name == "sqlite":
        s.execute(update(Run).where(false()).values(status=Run.status).execution_options(synchronize_session=False))
    else:
        advisory_xact_lock(s, "mpe-queue:" + team)
    queued = queued_episodes(s, team)
    if queued + adding > limit:
        raise RetryLater(f"team {team} has {queued} episodes queued and this run would add {adding}: over the "
                         f"limit of {limit} queued episodes per team (MPE_MAX_QUEUED_EPISODES_PER_TEAM); "
                         "wait for some to run, or cancel a run", code="too_many_queued")


def bridge_runs(*, team: str, admin: bool, model: str, check: bool = False) -> list:
    """The WHERE clauses that select the runs a bridge may serve, whatever their status and clock
    (docs/protocol.md §2): runs for the model name it announces, of its token's team (admin: any).

    A bridge that announces ``hello.check`` serves bridge checks' runs only, any other bridge real
    runs only: a check never takes a real run's episode (nor uses up its attempts), and a real run's
    bridge never plays the probe suite."""
    mine = [Run.model_name == model, Run.is_check.is_(check)]
    return mine if admin else [*mine, Run.team == team]


def context_episodes() -> ColumnElement[bool]:
    """SQL condition on an episode joined with its run: it starts with assistant-context frames
    (docs/protocol.md §5.1), i.e. its run's benchmark lists its condition in ``context_conditions``."""
    parts = [and_(Run.benchmark == b.name, Episode.condition.in_(sorted(conds)))
             for b in all_benchmarks() if (conds := b.context_conditions)]
    return or_(*parts) if parts else false()


def _runnable(t: float) -> ColumnElement[bool]:
    """§10: an episode that may become running and is not held by a live lease (a running one whose
    lease expired is taken over)."""
    return and_(Episode.status.in_(sources(EPISODE_TRANSITIONS, EpisodeStatus.running)),
                or_(Episode.status != EpisodeStatus.running, Episode.lease_expires < t))


def _offered(key: WorkKey) -> list[ColumnElement[bool]]:
    """The WHERE clauses (an episode joined with its run) of the episodes a bridge of ``key`` may be
    leased, leases aside: its runs that are active and use one of its clocks; a bridge that does
    not accept assistant-context frames is never given an episode that starts with them (§5.1)."""
    mine = [*bridge_runs(team=key.team, admin=key.admin, model=key.model, check=key.check), Run.status.in_(ACTIVE_RUN),
            Run.clock.in_(key.clocks)]
    return mine if key.accepts_context else [*mine, not_(context_episodes())]


def leasable_groups(db: Database, keys: list[WorkKey]) -> set[WorkKey]:
    """Which of these groups of bridges could be leased an episode now: one query for all of them
    (the work signal's fallback poll, server.engine.worksignal)."""
    t = now()
    checks = [exists(select(Episode.id).join(Run, Run.id == Episode.run_id).where(*_offered(k), _runnable(t)))
              for k in keys]
    with db.session() as s:
        found = s.execute(select(*checks)).one()
    return {k for k, yes in zip(keys, found) if yes}


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
    accepts_context: bool = False,
    check: bool = False,
) -> Lease | None:
    """Lease the next runnable episode for this bridge, or None. A bridge that does not accept
    assistant-context frames is never leased an episode that starts with them (§5.1). An episode
    whose stored scenario snapshot its benchmark cannot read fails its run, as a changed suite does
    (:func:`fail_run`, code ``bad_snapshot``, the reason naming the episode), and the next is looked at.
    ``check``: the bridge announced ``hello.check`` (:func:`bridge_runs`)."""
    for _ in range(20):
        granted = _grant(db, team=team, admin=admin, model=model, clocks=clocks, owner=owner, bridge_id=bridge_id,
                         bridge_rate=bridge_rate, model_revision=model_revision, lease_s=lease_s,
                         accepts_context=accepts_context, check=check)
        if granted is None:
            return None
        stored, benchmark, fields = granted
        try:
            scenario = get_benchmark(benchmark).snapshot(stored, fields["episode_id"])
        except BadSnapshot as exc:
            _fail_run(db, fields["run_id"], fields["attempt_id"], exc.code, str(exc))
            continue
        return Lease(scenario=scenario, **fields)
    return None


def _grant(
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
    accepts_context: bool,
    check: bool,
) -> tuple[dict[str, Any], str, dict[str, Any]] | None:
    """Start an attempt at the next runnable episode for this bridge: (its stored scenario snapshot,
    its run's benchmark, the other fields of its :class:`Lease`), or None."""
    t = now()
    runnable = _runnable(t)
    offered = _offered(WorkKey(team, admin, model, tuple(clocks), accepts_context, check))
    # which run to serve (unlocked: the run is locked before any of its episodes, then looked at again)
    pick = (select(Episode.run_id).join(Run, Run.id == Episode.run_id).where(*offered, runnable)
            .order_by(Run.created_at, Episode.lease_rank, Episode.ordinal).limit(1))
    for _ in range(20):  # skip episodes whose retries are exhausted, or that another server won
        with db.session() as s:
            run_id = s.scalar(pick)
            if run_id is None:
                return None
            run = _lock_run(s, run_id)
            if run is None or run.status not in ACTIVE_RUN:
                continue  # cancelled or failed meanwhile
            ep = s.scalar(select(Episode).join(Run, Run.id == Episode.run_id)
                          .where(Episode.run_id == run.id, *offered, runnable)
                          .order_by(Episode.lease_rank, Episode.ordinal).limit(1)
                          .with_for_update(of=Episode, skip_locked=True))
            if ep is None:
                continue  # taken meanwhile
            stale_attempt = ep.current_attempt_id if ep.status == EpisodeStatus.running else None
            if stale_attempt:  # §10: a dead server or bridge costs one attempt
                s.execute(update(Attempt).where(
                    Attempt.id == stale_attempt,
                    Attempt.status.in_(sources(ATTEMPT_TRANSITIONS, AttemptStatus.abandoned))).values(
                    status=AttemptStatus.abandoned, error_code="lease_expired", ended_at=utcnow()))
            if ep.attempts >= run.max_attempts:
                ep.status = advance(EPISODE_TRANSITIONS, ep.status, EpisodeStatus.failed)
                ep.lease_owner, ep.lease_expires = None, None
                s.flush()
                _maybe_finish_run(s, run.id)
                continue
            attempt_id, number = new_id(), ep.attempts + 1
            won = s.execute(
                update(Episode)
                .where(Episode.id == ep.id, Episode.attempts == ep.attempts, runnable)
                .values(
                    status=EpisodeStatus.running,
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
                    settings={"max_inflight": run.max_inflight} | ({"impair": run.impair} if run.impair else {}),
                )
            )
            if run.status == RunStatus.queued:  # its first lease starts the run (read under the run's lock)
                run.status = advance(RUN_TRANSITIONS, run.status, RunStatus.running)
            suite_path, suite_hash = s.execute(select(SuiteRow.path, SuiteRow.content_hash)
                                               .where(SuiteRow.id == run.suite_id)).one()
            instructions = get_benchmark(run.benchmark).duty_text if run.text_prompt else None
            return ep.scenario, run.benchmark, dict(
                episode_id=ep.id, attempt_id=attempt_id, attempt_number=number, run_id=run.id, clock=run.clock,
                max_inflight=run.max_inflight, scenario_id=ep.scenario_id, condition=ep.condition,
                suite_path=suite_path, suite_hash=suite_hash, audio_hash=ep.audio_hash, instructions=instructions,
                impair=Impairment.model_validate(run.impair) if run.impair else None)
    return None


def renew_leases(s: Session, leases: Sequence[Lease], owner: str, lease_s: float) -> set[str]:
    """Extend ``leases`` (all held by this server, ``owner``) in the caller's transaction (the flush
    group's: one commit for the recordings of all its attempts and their renewals); the attempt ids
    whose lease still holds: not those lost (taken over) nor those whose run was cancelled or failed.

    The one unit of work that does not lock a run first: it locks the rows of its own running
    episodes, in the order of their ids, and waits for nothing after them (the runs' status is
    read, not locked). The only other unit of work that locks several running episodes,
    :func:`fail_run`, locks them in the same order, so the two cannot wait on each other in a
    cycle."""
    if not leases:
        return set()
    mine = (Episode.id.in_([x.episode_id for x in leases]),
            Episode.current_attempt_id.in_([x.attempt_id for x in leases]),
            Episode.lease_owner == owner, Episode.status == EpisodeStatus.running)
    s.execute(select(Episode.id).where(*mine).order_by(Episode.id).with_for_update())
    held = {(episode, attempt) for episode, attempt in s.execute(
        update(Episode)
        .where(*mine)
        .values(lease_expires=now() + lease_s)
        .returning(Episode.id, Episode.current_attempt_id)
    )}
    active = set(s.scalars(select(Run.id).where(Run.id.in_({x.run_id for x in leases}), Run.status.in_(ACTIVE_RUN))))
    return {x.attempt_id for x in leases if (x.episode_id, x.attempt_id) in held and x.run_id in active}


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

    An attempt that failed before the bridge answered anything or heard the episode past its
    first stretch of sound (``answered`` False: it left between episodes) is recorded as
    ``unstarted`` and does not use up one of the episode's attempts, up to
    ``max_attempts`` such attempts (a bridge that always dies at once still ends the episode).
    """
    with db.session() as s:
        run = _lock_run(s, lease.run_id)  # the run, then the episode, then the attempt (see the module)
        ep = s.scalar(select(Episode).where(Episode.id == lease.episode_id).with_for_update()
                      .execution_options(populate_existing=True))
        att = s.get(Attempt, lease.attempt_id)
        unstarted = not ok and not answered
        att.end_sample, att.n_frames = end_sample, n_frames
        if stats:
            att.stats = stats
        if att.status != AttemptStatus.abandoned:  # §10: one whose lease was taken over keeps that verdict
            att.status = advance(ATTEMPT_TRANSITIONS, att.status, AttemptStatus.completed if ok else
                                 AttemptStatus.unstarted if unstarted else AttemptStatus.failed)
            att.ended_at = utcnow()
            att.error_code, att.error_message = error_code, (error_message or None) and error_message[:2000]
        if ep.current_attempt_id == lease.attempt_id and ep.status == EpisodeStatus.running:
            if ok:
                new, ep.completed_attempt_id = EpisodeStatus.completed, lease.attempt_id
            elif run.status not in ACTIVE_RUN:  # cancelled (or failed) before this attempt ended: not retried
                new = EpisodeStatus.cancelled
            else:
                if unstarted and s.scalar(select(func.count()).select_from(Attempt).where(
                        Attempt.episode_id == ep.id, Attempt.status == AttemptStatus.unstarted)) <= run.max_attempts:
                    ep.attempts -= 1
                new = EpisodeStatus.failed if ep.attempts >= run.max_attempts else EpisodeStatus.queued
            ep.status = advance(EPISODE_TRANSITIONS, ep.status, new)
            ep.lease_owner, ep.lease_expires = None, None
            if new == EpisodeStatus.queued:
                announce(s)  # retried by the next free bridge
            s.flush()
            _maybe_finish_run(s, ep.run_id)


def _lock_run(s: Session, run_id: str) -> Run | None:
    """The run, locked until ``s`` ends and read afresh, or None: the first lock of every unit of
    work here (the module's lock order). PostgreSQL: ``SELECT … FOR UPDATE`` of its row. SQLite has
    no row locks and serialises writers: a no-op UPDATE takes the write lock now, so what ``s``
    reads next is not changed by anyone else before it commits."""
    if s.get_bind().dialect.name == "sqlite":
        s.execute(update(Run).where(Run.id == run_id).values(status=Run.status)
                  .execution_options(synchronize_session=False))
    return s.scalar(select(Run).where(Run.id == run_id).with_for_update()
                    .execution_options(populate_existing=True))


def _maybe_finish_run(s, run_id: str) -> None:
    # The caller holds the run's lock already: two last episodes finishing at once must not both see the other open.
    run = _lock_run(s, run_id)
    open_ = s.scalar(
        select(func.count()).select_from(Episode).where(Episode.run_id == run_id, Episode.status.not_in(DONE_EPISODE))
    )
    if open_ == 0 and run.status in ACTIVE_RUN:
        run.status, run.finished_at = advance(RUN_TRANSITIONS, run.status, RunStatus.finished), utcnow()
        announce(s)  # its idle bridges are told (docs/protocol.md §4.5)


def fail_run(db: Database, lease: Lease, code: str, message: str) -> None:
    """End a run that cannot go on (e.g. its suite changed on disk): the leased attempt fails
    with ``code``, every open episode is cancelled, the run is ``failed`` with ``message``."""
    _fail_run(db, lease.run_id, lease.attempt_id, code, message)


def _fail_run(db: Database, run_id: str, attempt_id: str, code: str, message: str) -> None:
    with db.session() as s:
        run = _lock_run(s, run_id)  # the run, then its episodes, then the attempt (see the module)
        open_ = (Episode.run_id == run.id, Episode.status.in_(sources(EPISODE_TRANSITIONS, EpisodeStatus.cancelled)))
        # in the order of their ids, as the lease renewals lock running episodes (renew_leases)
        s.execute(select(Episode.id).where(*open_).order_by(Episode.id).with_for_update())
        s.execute(update(Episode).where(*open_).values(status=EpisodeStatus.cancelled, lease_owner=None,
                                                       lease_expires=None))
        s.execute(update(Attempt).where(
            Attempt.id == attempt_id, Attempt.status.in_(sources(ATTEMPT_TRANSITIONS, AttemptStatus.failed)))
            .values(status=AttemptStatus.failed, error_code=code, error_message=message[:2000], ended_at=utcnow()))
        if run.status in ACTIVE_RUN:
            run.status = advance(RUN_TRANSITIONS, run.status, RunStatus.failed)
            run.error, run.finished_at = message, utcnow()
            announce(s)


def cancel_run(db: Database, run_id: str) -> None:
    """Cancel a run that can still move on: queued episodes at once, running ones when their session
    next flushes; a run that has ended is left as it is. Raises :class:`NotFound` for an unknown run."""
    with db.session() as s:
        run = _lock_run(s, run_id)  # the run, then its episodes (see the module): its status is read under the lock
        if run is None:
            raise NotFound("no such run")
        if run.status in ACTIVE_RUN:
            run.status, run.finished_at = advance(RUN_TRANSITIONS, run.status, RunStatus.cancelled), utcnow()
            # queued episodes now; running ones when their session sees the run cancelled (next flush)
            cancel_now = sources(EPISODE_TRANSITIONS, EpisodeStatus.cancelled) - {EpisodeStatus.running}
            s.execute(update(Episode).where(Episode.run_id == run_id, Episode.status.in_(cancel_now))
                      .values(status=EpisodeStatus.cancelled))
            announce(s)

