"""The bridge check over HTTP (``mpe bridge check`` calls these): queue the check's runs for a
model, then read their report while the team's bridge plays them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from server.api.deps import Checker, State, visible_run
from server.api.errors import Forbidden
from server.api.schemas import ERRORS, MODEL_RE, TEAM_RE, Clock
from server.bridgecheck.evaluate import CheckReport
from server.bridgecheck.runs import check_report, check_runs, start_check
from server.engine.leasing import CLOCKS, cancel_run

router = APIRouter(prefix="/v1", responses=ERRORS, tags=["checks"])


class CheckCreate(BaseModel):
    """A bridge check: the model name the bridge announces and the clocks to check."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=100, pattern=MODEL_RE,
                       description="the model name the bridge announces in hello.model.name")
    clocks: list[Clock] = Field(default_factory=lambda: list(CLOCKS), min_length=1, max_length=2,
                                description="clocks to check; a clock the bridge does not announce is skipped")
    team: str | None = Field(default=None, pattern=TEAM_RE, description="admin only: check this team's bridge")


@router.post("/checks", status_code=201, response_model=CheckReport, summary="Start a bridge check")
def create(body: CheckCreate, p: Checker, state: State) -> CheckReport:
    """Queue the check's runs (one per clock, two short probe episodes each, one attempt per
    episode) for `model`; your bridge then connects in check mode (`"check": true` in hello) and is
    given their episodes, and nothing of a real run. A token with the bridge scope alone may start
    and follow a check of its own team's bridge. The
    answer is the check's report with its run ids (`runs[].run_id`): read it again with
    `GET /v1/checks?run=...` until `done`. The probe suite is voiced on the server on first use."""
    team = body.team or p.team
    if team != p.team and not p.admin:
        raise Forbidden("only an admin token may check another team's bridge")
    run_ids = start_check(state.db, state.settings.data_dir, team=team, model=body.model, clocks=body.clocks,
                          max_inflight=state.settings.max_inflight, max_queued=state.settings.queue_limit())
    return check_report(state.db, run_ids)


@router.post("/checks/cancel", response_model=CheckReport, summary="Cancel a bridge check")
def cancel(p: Checker, state: State,
           run: Annotated[list[str], Query(min_length=1, max_length=2, description="the check's run ids")]
           ) -> CheckReport:
    """Cancel the check's runs that have not ended (a clock the bridge does not serve, or a check
    given up) and answer its report. 404 when a run is not visible to you; 400 for runs that are
    not a check's."""
    with state.db.session() as s:
        for run_id in run:
            visible_run(s, p, run_id)
    for r in check_runs(state.db, run):
        cancel_run(state.db, r.id)
    return check_report(state.db, run)


@router.get("/checks", response_model=CheckReport, summary="The report of a bridge check")
def report(p: Checker, state: State,
           run: Annotated[list[str], Query(min_length=1, max_length=2, description="the check's run ids")]
           ) -> CheckReport:
    """The check's pass/fail lines as they stand, with advice for every line that did not pass;
    `done` once every run of the check has ended. 404 when a run is not visible to you."""
    with state.db.session() as s:
        for run_id in run:
            visible_run(s, p, run_id)
    return check_report(state.db, run)
