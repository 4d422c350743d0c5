"""Network impairment of a realtime run's assistant stream (``mpe run create --impair``): the
server delays each assistant frame's arrival as a network path would, so that a team can measure
how its model's timing holds up under latency, jitter and loss.

A WebSocket runs over TCP, so a lost packet is not a missing frame: it is sent again after the
retransmission timeout, and the frames behind it wait (the stream keeps its order). The model:
each frame's arrival is delayed by ``latency_ms`` plus a uniform draw in ``[0, jitter_ms]``, plus
``rto_ms`` with probability ``loss``; no frame arrives before the one ahead of it. The draws
come from a generator seeded by the run's ``seed`` and the episode, so an episode is impaired the
same way in every attempt and every run with the same settings. Pure: the caller passes the real
arrival times (seconds, its own clock).
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field, ValidationError

RTO_MS = 200.0  # Linux's minimum TCP retransmission timeout

SPEC_HELP = ("comma-separated key=value: latency=80ms (one way), jitter=20ms, loss=0.01 (or 1%), "
             "rto=200ms (the retransmission delay of a lost frame), seed=0")


class Impairment(BaseModel):
    """What a run's assistant stream goes through (recorded in the run's configuration)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_ms: float = Field(default=0.0, ge=0, le=5000, description="one-way delay added to every frame")
    jitter_ms: float = Field(default=0.0, ge=0, le=5000, description="uniform extra delay in [0, jitter_ms]")
    loss: float = Field(default=0.0, ge=0, le=0.5, description="probability a frame is lost and sent again")
    rto_ms: float = Field(default=RTO_MS, ge=0, le=5000, description="how much later a lost frame arrives")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="the draws' seed (with the episode)")

    @classmethod
    def parse(cls, spec: str) -> "Impairment":
        """``latency=80ms,jitter=20ms,loss=1%`` → Impairment; ValueError naming the bad part."""
        names = {"latency": "latency_ms", "jitter": "jitter_ms", "loss": "loss", "rto": "rto_ms", "seed": "seed"}
        fields: dict[str, float | int] = {}
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            key, sep, raw = part.partition("=")
            key, raw = key.strip().lower(), raw.strip().lower()
            if not sep or key not in names:
                raise ValueError(f"--impair: {part!r} is not one of {', '.join(names)} as key=value ({SPEC_HELP})")
            if key in fields:
                raise ValueError(f"--impair: {key} given twice")
            try:
                fields[key] = _number(key, raw)
            except ValueError:
                raise ValueError(f"--impair: {part!r}: not a number{' of milliseconds' if key not in ('loss', 'seed') else ''}"
                                 f" ({SPEC_HELP})") from None
        try:
            return cls(**{names[k]: v for k, v in fields.items()})
        except ValidationError as exc:
            err = exc.errors()[0]
            key = next(k for k, v in names.items() if v == err["loc"][0])
            raise ValueError(f"--impair: {key}: {err['msg']}") from None

    @property
    def active(self) -> bool:
        return bool(self.latency_ms or self.jitter_ms or (self.loss and self.rto_ms))


def _number(key: str, raw: str) -> float | int:
    if key == "seed":
        return int(raw)
    if key == "loss":
        return float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    if raw.endswith("ms"):
        return float(raw[:-2])
    if raw.endswith("s"):
        return float(raw[:-1]) * 1000
    return float(raw)


class ImpairedArrivals:
    """The arrival times of one episode's assistant frames under ``imp``, in order."""

    def __init__(self, imp: Impairment, episode_key: str):
        self.imp = imp
        self.rng = random.Random(f"{imp.seed}:{episode_key}")
        self.last = float("-inf")
        self.lost = 0  # frames lost and sent again
        self.max_delay_s = 0.0

    def __call__(self, arrived: float) -> float:
        imp = self.imp
        delay = imp.latency_ms + self.rng.uniform(0.0, imp.jitter_ms)
        if self.rng.random() < imp.loss:
            delay += imp.rto_ms
            self.lost += 1
        t = max(self.last, arrived + delay / 1000)  # TCP keeps order: never before the frame ahead
        self.last = t
        self.max_delay_s = max(self.max_delay_s, t - arrived)
        return t

    def stats(self) -> dict[str, float | int]:
        return {"lost_frames": self.lost, "max_added_delay_ms": round(self.max_delay_s * 1000, 1)}
