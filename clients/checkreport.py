"""The bridge check's report as the server serves it (``POST``/``GET /v1/checks``): its lines,
verdicts and advice. Shared by the server, which judges (server/bridgecheck/evaluate.py), and the
client-only install, whose ``duplex-mpe-client check`` reads and prints it (clients/check.py)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, computed_field


class Verdict(StrEnum):
    """One line's verdict; the check fails when any line fails."""

    passed = "pass"
    warn = "warn"
    failed = "fail"
    skipped = "skip"


#: the checks in table order, with the title the table shows
CHECKS: dict[str, str] = {
    "bridge": "bridge connected",
    "episodes": "episodes complete",
    "frames": "frame size and format",
    "seq": "seq order",
    "timing": "timing",
    "speech": "output detected as speech",
    "reaction": "reaction to a request",
    "reset": "fresh state per episode",
    "barge_in": "stops when talked over",
    "rate": "audio at the announced rate",
}


class CheckLine(BaseModel):
    """One line of the table: a check, in one clock (None: the whole bridge), its verdict, what was
    observed, and what to do when it did not pass."""

    model_config = ConfigDict(frozen=True)

    check: str = Field(description="one of " + ", ".join(CHECKS))
    clock: str | None = None
    verdict: Verdict
    detail: str
    advice: str = ""

    @property
    def title(self) -> str:
        return CHECKS.get(self.check, self.check)


class RunState(BaseModel):
    """A check run: its clock, status and episodes, and whether a bridge seen announces its clock
    (None: no bridge seen yet)."""

    model_config = ConfigDict(frozen=True)

    clock: str
    run_id: str
    status: str = Field(description="the run's status (queued, running, finished, cancelled, failed)")
    episodes: int
    announced: bool | None


class BridgeOut(BaseModel):
    """A bridge the check saw."""

    model_config = ConfigDict(frozen=True)

    bridge_id: str
    model_revision: str
    sample_rate: int
    clocks: list[str]
    connected: bool
    check: bool = Field(True, description="it announced hello.check (a bridge without it serves real runs only)")


class CheckReport(BaseModel):
    """The check's result (the body of ``/v1/checks`` and ``mpe bridge check --json``)."""

    model_config = ConfigDict(frozen=True)

    model: str
    runs: list[RunState]
    bridges: list[BridgeOut]
    attempts: int = Field(description="attempts that have ended")
    running: int = Field(description="attempts running now")
    done: bool = Field(description="every check run has ended")
    lines: list[CheckLine]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """No line failed."""
        return not any(line.verdict == Verdict.failed for line in self.lines)

    def line(self, check: str, clock: str | None = None) -> CheckLine | None:
        """The line of ``check`` in ``clock``, if the report has one."""
        return next((x for x in self.lines if x.check == check and x.clock == clock), None)


