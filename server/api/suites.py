"""Suites: those registered to the caller's team, one in detail, its scenarios, and the
suite directories a run may name below the server's suites root."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import func, select

from server.api.deps import Caller, Paging, State, team_filter, visible_suite
from server.api.schemas import ERRORS, Condition, PageOf, ScenarioItem, SuiteDetail, SuiteDir, SuiteOut
from server.benchmarks.mpe.suite import SCENARIOS_FILE, SUITE_FILE, Suite, SuiteError, SuiteMeta
from server.db import Suite as SuiteRow

router = APIRouter(prefix="/v1", tags=["suites"], responses=ERRORS)
MAX_DIRS = 200


def _out(row: SuiteRow) -> dict[str, Any]:
    return dict(id=row.id, team=row.team, name=row.name, version=row.version, generator=(row.meta or {}).get("generator"),
                n_scenarios=row.n_scenarios, content_hash=row.content_hash, created_at=row.created_at)


def _load(row: SuiteRow) -> Suite | None:
    try:
        suite = Suite.load(row.path)
    except SuiteError:
        return None
    return suite if suite.content_hash() == row.content_hash else None  # changed on disk: not this suite


@router.get("/suites", response_model=PageOf[SuiteOut], summary="Suites registered to your team")
def list_suites(p: Caller, state: State, paging: Paging,
                team: Annotated[str | None, Query(max_length=64, description="admin only: one team")] = None
                ) -> PageOf[SuiteOut]:
    """The suites registered to your team, newest first (admin: every team's, or one team's)."""
    where = [c for c in (team_filter(p, SuiteRow.team, team),) if c is not None]
    with state.db.session() as s:
        total = s.scalar(select(func.count()).select_from(SuiteRow).where(*where))
        rows = s.scalars(select(SuiteRow).where(*where).order_by(SuiteRow.created_at.desc(), SuiteRow.id)
                         .limit(paging.limit).offset(paging.offset)).all()
    return PageOf[SuiteOut](items=[SuiteOut(**_out(r)) for r in rows], total=total, limit=paging.limit,
                            offset=paging.offset)


@router.get("/suites/available", response_model=list[SuiteDir],
            summary="Suite directories below the suites root (for creating runs)")
def available(p: Caller, state: State) -> list[SuiteDir]:
    """The readable suite directories up to two levels below the server's suites root (at most 200),
    with name, version and scenario count; empty when the server has no suites root."""
    root = state.settings.suites_root
    if root is None or not root.is_dir():
        return []
    base = root.resolve()
    found: list[SuiteDir] = []
    candidates = sorted([base / SUITE_FILE] + list(base.glob(f"*/{SUITE_FILE}")) + list(base.glob(f"*/*/{SUITE_FILE}")))
    for f in candidates:
        if len(found) >= MAX_DIRS:
            break
        d = f.parent.resolve()
        if not d.is_relative_to(base):  # a symlink pointing out of the root
            continue
        try:
            meta = SuiteMeta.model_validate_json(f.read_bytes())
            n = sum(1 for line in (d / SCENARIOS_FILE).read_text().splitlines() if line.strip())
        except (OSError, ValueError):
            continue
        rel = d.relative_to(base).as_posix()
        found.append(SuiteDir(path=rel or ".", name=meta.name, version=meta.version, n_scenarios=n))
    return found


@router.get("/suites/{suite_id}", response_model=SuiteDetail, summary="One suite")
def get_suite(suite_id: str, p: Caller, state: State) -> SuiteDetail:
    """One suite: its metadata and scenario counts by condition and turn label (no counts, and
    `available` false, when its files are missing or changed on disk). 404 when the suite is
    not visible to you."""
    with state.db.session() as s:
        row = visible_suite(s, p, suite_id)
    suite = _load(row)
    conds: Counter = Counter()
    labels: Counter = Counter()
    for sc in suite.scenarios if suite else ():
        conds[sc.condition] += 1
        labels.update(t.label for t in sc.turns)
    return SuiteDetail(**_out(row), meta=row.meta or {}, available=suite is not None, conditions=dict(conds),
                       labels=dict(labels))


@router.get("/suites/{suite_id}/scenarios", response_model=PageOf[ScenarioItem], summary="Scenarios of a suite")
def scenarios(suite_id: str, p: Caller, state: State, paging: Paging,
              condition: Annotated[Condition | None, Query()] = None) -> PageOf[ScenarioItem]:
    """A suite's scenarios, optionally of one condition (none when its files are missing or changed
    on disk). 404 when the suite is not visible to you."""
    with state.db.session() as s:
        row = visible_suite(s, p, suite_id)
    suite = _load(row)
    items = [sc for sc in (suite.scenarios if suite else ()) if condition is None or sc.condition == condition]
    page = items[paging.offset:paging.offset + paging.limit]
    return PageOf[ScenarioItem](
        items=[ScenarioItem(scenario_id=sc.scenario_id, pair_id=sc.pair_id, condition=sc.condition,
                            n_speakers=sc.n_speakers, t_bucket=sc.t_bucket, labels=sc.labels,
                            duration_s=round(sum(t.duration_s for t in sc.turns), 2)) for sc in page],
        total=len(items), limit=paging.limit, offset=paging.offset)
