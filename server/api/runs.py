"""Runs: create, list (live progress), get, cancel, metrics; the caller's identity."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import func, select

from server.api.deps import Caller, Paging, State, team_filter, visible_run, visible_suite
from server.api.errors import BadRequest, Conflict, Forbidden
from server.api.schemas import ERRORS, Metrics, PageOf, Principal, Progress, RunCreate, RunOut, SuiteRef
from server.core.status import ACTIVE_RUN, RunStatus
from server.db import Run
from server.db import Suite as SuiteRow
from server.engine.leasing import cancel_run, create_run
from server.engine.matching import context_note
from server.engine.progress import RunProgress, run_label, runs_progress
from server.engine.registry import get_benchmark
from server.engine.suitedir import SUITE_FILE, SuiteError, suite_inside
from server.scoring.results import latest_scoring, load_run_metrics

router = APIRouter(prefix="/v1", responses=ERRORS)


@router.get("/me", response_model=Principal, tags=["auth"], summary="Who this token is")
def me(p: Caller) -> Principal:
    """The team of the calling token, its scopes and whether it is an admin token."""
    return Principal(team=p.team, admin=p.admin, scopes=sorted(p.scopes))


def resolve_suite_dir(root: Path | None, rel: str) -> Path:
    """A suite directory named by a request: relative, below the suites root, holding suite.json."""
    if root is None:
        raise BadRequest("this server takes suite paths only when MPE_SUITES_ROOT is set; pass suite_id instead")
    if "\x00" in rel or "\\" in rel:
        raise BadRequest("suite must be a relative path inside the suites root")
    p = PurePosixPath(rel)
    if p.is_absolute() or any(part in ("..", "") for part in p.parts) or not p.parts:
        raise BadRequest("suite must be a relative path inside the suites root")
    base = root.resolve()
    target = (base / p).resolve()  # symlinks resolved before the containment check
    if not target.is_relative_to(base) or not (target / SUITE_FILE).is_file():
        raise BadRequest(f"no suite {rel!r} under the suites root")
    if not suite_inside(target, base):
        raise BadRequest(f"suite {rel!r} has files outside the suites root (symlinks are followed)")
    return target


def _clean(message: str, path: Path, shown: str) -> str:
    """Error text without server paths (§11: no internal details)."""
    for p in sorted({str(path), str(path.resolve())}, key=len, reverse=True):
        message = message.replace(p, shown)
    return message


def _or(given: int | None, default: int) -> int:
    return default if given is None else given


def progress_out(p: RunProgress) -> Progress:
    """A run's progress as the API returns it."""
    return Progress.model_validate(p, from_attributes=True)


def run_out(run: Run, suite: SuiteRow, progress: Progress, state: Any, scored: bool | None = None) -> RunOut:
    """A run as the API returns it: its suite, settings, status, progress and the episodes streaming
    live on this server."""
    live = [ch.episode_id for ch in list(state.live.channels.values()) if ch.run_id == run.id]
    return RunOut(id=run.id, label=run_label(run.model_name, run.clock, suite.name, suite.version, run.id),
                  team=run.team, model=run.model_name, benchmark=run.benchmark,
                  suite=SuiteRef(id=suite.id, name=suite.name, version=suite.version), clock=run.clock,
                  conditions=list(run.conditions), limit=run.limit_n, max_attempts=run.max_attempts,
                  max_inflight=run.max_inflight, text_prompt=run.text_prompt, impair=run.impair, status=run.status,
                  created_at=run.created_at,
                  finished_at=run.finished_at, error=run.error, progress=progress, live_episodes=live, scored=scored)


def _get(state: Any, p, run_id: str, *, with_scored: bool = False) -> RunOut:
    with state.db.session() as s:
        run = visible_run(s, p, run_id)
        suite = s.get(SuiteRow, run.suite_id)
    prog = progress_out(runs_progress(state.db, [run.id])[run.id])
    scored = latest_scoring(state.db, run.id) is not None if with_scored else None
    return run_out(run, suite, prog, state, scored)


@router.post("/runs", status_code=201, response_model=RunOut, tags=["runs"], summary="Queue a run")
def create(body: RunCreate, p: Caller, state: State) -> RunOut:
    """One episode per scenario version of the suite (both conditions of a pair stay together).

    The suite is either one registered to your team (`suite_id`) or a directory below the
    server's suites root (`suite`); no other path from a request reaches the filesystem.
    """
    team = body.team or p.team
    if team != p.team and not p.admin:
        raise Forbidden("only an admin token may create runs for another team")
    if body.suite_id is not None:
        with state.db.session() as s:
            row = visible_suite(s, p, body.suite_id)
        path, shown = Path(row.path), f"suite {row.name} {row.version}"
    else:
        path, shown = resolve_suite_dir(state.settings.suites_root, body.suite), f"suite {body.suite!r}"
    try:
        run_id = create_run(state.db, team=team, model=body.model, suite_path=str(path), clock=body.clock,
                            conditions=list(body.conditions) if body.conditions else None, limit=body.limit,
                            max_attempts=_or(body.max_attempts, state.settings.max_attempts),
                            max_inflight=_or(body.max_inflight, state.settings.max_inflight),
                            text_prompt=body.text_prompt, max_queued=state.settings.queue_limit(), impair=body.impair)
    except SuiteError as exc:
        raise BadRequest(_clean(f"{shown} cannot be loaded: {exc}", path, shown)) from None
    except BadRequest as exc:
        raise BadRequest(_clean(str(exc), path, shown)) from None
    out = _get(state, p, run_id)
    note = context_note(state.db, run_id)  # episodes that no connected bridge can take yet (§5.1)
    return out if note is None else out.model_copy(update={"notes": [note]})


@router.get("/runs", response_model=PageOf[RunOut], tags=["runs"], summary="List runs with their progress")
def list_runs(p: Caller, state: State, paging: Paging,
              status: Annotated[RunStatus | None, Query(description="only runs in this state")] = None,
              model: Annotated[str | None, Query(max_length=100)] = None,
              team: Annotated[str | None, Query(max_length=64, description="admin only: one team")] = None
              ) -> PageOf[RunOut]:
    """Your team's runs, newest first, each with its progress. Filters: status, model, and (admin
    only) team."""
    where = [c for c in (team_filter(p, Run.team, team),
                         Run.status == status if status else None,
                         Run.model_name == model if model else None) if c is not None]
    with state.db.session() as s:
        total = s.scalar(select(func.count()).select_from(Run).where(*where))
        runs = s.scalars(select(Run).where(*where).order_by(Run.created_at.desc(), Run.id)
                         .limit(paging.limit).offset(paging.offset)).all()
        suites = {r.id: r for r in s.scalars(select(SuiteRow).where(SuiteRow.id.in_({r.suite_id for r in runs})))}
    prog = runs_progress(state.db, [r.id for r in runs])
    items = [run_out(r, suites[r.suite_id], progress_out(prog[r.id]), state) for r in runs]
    return PageOf[RunOut](items=items, total=total, limit=paging.limit, offset=paging.offset)


@router.get("/runs/{run_id}", response_model=RunOut, tags=["runs"], summary="One run with live progress")
def get_run(run_id: str, p: Caller, state: State) -> RunOut:
    """One run with its progress and whether it has been scored. 404 when the run is not visible to you."""
    return _get(state, p, run_id, with_scored=True)


@router.post("/runs/{run_id}/cancel", response_model=RunOut, tags=["runs"], summary="Cancel a run",
             responses={409: {"model": ERRORS[400]["model"]}})
def cancel(run_id: str, p: Caller, state: State) -> RunOut:
    """Queued episodes are dropped; running ones stop at their next flush (about a second)."""
    with state.db.session() as s:
        run = visible_run(s, p, run_id)
        if run.status not in ACTIVE_RUN and run.status != RunStatus.cancelled:
            raise Conflict(f"the run is already {run.status}")
    cancel_run(state.db, run_id)
    return _get(state, p, run_id)


@router.get("/runs/{run_id}/metrics", response_model=Metrics, tags=["runs"], summary="Scored metrics of a run")
def metrics(run_id: str, p: Caller, state: State) -> Metrics:
    """The run's latest complete scoring (metrics per model, condition and quantity, and analyses);
    `scored` false and `results` null until it is scored; `notes`: what the run's benchmark says of
    its analyses, per model. 404 when the run is not visible to you."""
    with state.db.session() as s:
        run_benchmark = visible_run(s, p, run_id).benchmark
    results = load_run_metrics(state.db, run_id)
    notes: dict[str, list[str]] = {}
    if results is not None:
        bench = get_benchmark(run_benchmark)
        analyses = results.get("analyses") or {}
        notes = {m: n for m in results.get("metrics") or {} if (n := bench.metric_notes(analyses, m))}
    return Metrics(run_id=run_id, scored=results is not None, results=results, notes=notes)
