"""Suites: those registered to the caller's team, one in detail, its scenarios, and the
suite directories a run may name below the server's suites root."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import func, select

from clients.errors import MPEError
from server.api.deps import Caller, Paging, State, team_filter, visible_suite
from server.api.errors import BadRequest
from server.api.schemas import (
    ERRORS,
    BenchmarkOut,
    Condition,
    PageOf,
    ScenarioItem,
    SuiteDetail,
    SuiteDir,
    SuiteOut,
)
from server.core.benchmark import Benchmark, SuiteLike
from server.db import Suite as SuiteRow
from server.engine.disclosure import suite_script_visible
from server.engine.registry import benchmark_name_of_suite, get_benchmark, plugins
from server.engine.suitedir import SCENARIOS_FILE, SUITE_FILE, manifest_lines, parse_json, suite_inside

router = APIRouter(prefix="/v1", tags=["suites"], responses=ERRORS)
MAX_DIRS = 200


def _out(row: SuiteRow) -> dict[str, Any]:
    bench = get_benchmark((row.meta or {}).get("benchmark"))
    return dict(id=row.id, team=row.team, benchmark=bench.name, run_conditions=list(bench.conditions), name=row.name,
                version=row.version, generator=(row.meta or {}).get("generator"), n_scenarios=row.n_scenarios,
                content_hash=row.content_hash, created_at=row.created_at)


def _load(row: SuiteRow) -> tuple[Benchmark, SuiteLike | None]:
    """The registered suite's benchmark, and the suite as it is on disk (None: missing or changed)."""
    bench = get_benchmark((row.meta or {}).get("benchmark"))
    try:
        suite = bench.load_suite(row.path)
    except (MPEError, OSError, ValueError):
        return bench, None
    return bench, suite if suite.content_hash() == row.content_hash else None  # changed on disk: not this suite


@router.get("/benchmarks", response_model=list[BenchmarkOut], tags=["benchmarks"],
            summary="The registered benchmarks and their quantities")
def benchmarks(p: Caller) -> list[BenchmarkOut]:
    """Every registered benchmark (this project's, installed packages' and the environment's), by
    name: its run conditions, failure types (with their titles), the registry of the quantities its metrics report (what the pages title and order them by), its
    labels, and the columns of the run page's outcomes and of the episode page's script."""
    out = []
    for name in sorted(plugins()):
        bench = get_benchmark(name)
        out.append(BenchmarkOut(name=bench.name, conditions=list(bench.conditions),
                                failure_types=list(bench.failure_types), quantities=list(bench.quantities),
                                labels=list(bench.labels),
                                failure_titles={f: bench.failure_titles.get(f, f.replace("_", " "))
                                                for f in bench.failure_types},
                                outcome_columns=list(bench.outcome_columns),
                                script_columns=list(bench.script_columns)))
    return out


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
        if not suite_inside(d, base):  # a symlink pointing out of the root
            continue
        try:
            bench = get_benchmark(benchmark_name_of_suite(d))
            meta = parse_json(f.read_bytes().decode("utf-8"))
            n = sum(1 for _ in manifest_lines((d / SCENARIOS_FILE).read_text("utf-8")))
            name, version = str(meta["name"]), str(meta["version"])
        except (OSError, ValueError, KeyError, TypeError, MPEError):
            continue
        rel = d.relative_to(base).as_posix()
        found.append(SuiteDir(path=rel or ".", benchmark=bench.name, run_conditions=list(bench.conditions), name=name,
                              version=version, n_scenarios=n))
    return found


@router.get("/suites/{suite_id}", response_model=SuiteDetail, summary="One suite")
def get_suite(suite_id: str, p: Caller, state: State) -> SuiteDetail:
    """One suite: its metadata and its items counted by run condition and by label, as its
    benchmark counts them (no counts, and `available` false, when its files are missing or
    changed on disk). 404 when the suite is not visible to you."""
    with state.db.session() as s:
        row = visible_suite(s, p, suite_id)
    bench, suite = _load(row)
    counts = bench.suite_summary(suite) if suite is not None else None
    return SuiteDetail(**_out(row), meta=row.meta or {}, available=suite is not None,
                       conditions=counts.conditions if counts else {}, label_kind=counts.label_kind if counts else "",
                       labels=counts.labels if counts else {}, groups=counts.groups if counts else {})


@router.get("/suites/{suite_id}/scenarios", response_model=PageOf[ScenarioItem], summary="Scenarios of a suite")
def scenarios(suite_id: str, p: Caller, state: State, paging: Paging,
              condition: Annotated[Condition | None, Query()] = None) -> PageOf[ScenarioItem]:
    """A suite's scenarios as its benchmark lists them, optionally of one run condition (an item
    every condition plays is listed for each); none when its files are missing or changed on
    disk. Labels and the benchmark's further script facts are null while your team has a run of
    the suite that has not ended, and always on a held-out suite (admins see them). 404 when the
    suite is not visible to you; 400 for a condition its benchmark does not know."""
    with state.db.session() as s:
        row = visible_suite(s, p, suite_id)
        visible = suite_script_visible(s, p, row)
    bench, suite = _load(row)
    if condition is not None and condition not in bench.conditions:
        raise BadRequest(f"condition must be one of {', '.join(bench.conditions)}")
    items = [sc for sc in (bench.scenario_items(suite) if suite is not None else ())
             if condition is None or sc.condition in (None, condition)]
    page = items[paging.offset:paging.offset + paging.limit]
    return PageOf[ScenarioItem](
        items=[ScenarioItem(**sc.model_dump(exclude={"labels", "facts"}), labels=sc.labels if visible else None,
                            **{k: v if visible else None for k, v in sc.facts.items()}) for sc in page],
        total=len(items), limit=paging.limit, offset=paging.offset)
