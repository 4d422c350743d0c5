"""Leasing of scoring work (DESIGN §10; docs/scoring.md "Several scorers, one run").

One claim per episode of a scoring. Scorers on any machine sharing the database take pending
claims in order with ``SELECT … FOR UPDATE SKIP LOCKED`` (PostgreSQL: two scorers never wait on
each other's rows) and a conditional UPDATE guarded by the claim's counter, set an owner and a
lease expiry, renew the lease while they work, and store the episode's entry in the same
transaction that marks the claim done, guarded the same way: a scorer whose lease was taken over
stores nothing, so every episode is stored once. A claim whose lease expired (its scorer was
killed) is taken over by the next scorer that looks.

SQLite has no row locks: a scorer takes the database's one write lock before it picks a claim,
so claiming is serialised across processes (correct, one writer at a time; the episodes
themselves are still scored in parallel).

Granularity: the episode. ASR segments and judge calls are not leased: their results are cached
by content hash (server/scoring/store.py), so the scorer of an episode reuses whatever any scorer
transcribed or judged before; two scorers can only meet on the same audio if two episodes hold
identical speech, and then both compute the same result and one row is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, func, or_, select, update

from server.core.benchmark import ScoreEntry
from server.core.states import advance, sources
from server.core.status import CLAIM_TRANSITIONS, ClaimStatus
from server.db import Database, EpisodeScoreRow, ScoringClaim, now
from server.scoring.store import put_entry, serialise, sqlite_write_lock


@dataclass(frozen=True)
class WorkItem:
    """One episode to score: the attempt to score, and its bundle directory (None: from the database)."""

    episode_id: str
    attempt_id: str | None
    path: str | None = None


@dataclass(frozen=True)
class Claim:
    """A claim held by ``owner``; ``number`` (the claim's counter when it was taken) guards every
    later write, so a holder whose lease was taken over changes nothing."""

    scoring_id: str
    episode_id: str
    attempt_id: str | None
    path: str | None
    owner: str
    number: int


@dataclass(frozen=True)
class ClaimCounts:
    """Where a scoring's work stands: claims by status, and how many were claimed more than once
    (taken over after a lease expired, or tried again after a failure)."""

    pending: int = 0
    claimed: int = 0
    done: int = 0
    failed: int = 0
    reclaimed: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.claimed + self.done + self.failed

    @property
    def finished(self) -> int:
        return self.done + self.failed

    @property
    def open(self) -> int:
        return self.pending + self.claimed

    def to_json(self) -> dict[str, int]:
        return {"pending": self.pending, "claimed": self.claimed, "done": self.done, "failed": self.failed,
                "reclaimed": self.reclaimed, "total": self.total}


def seed_claims(db: Database, scoring_id: str, items: list[WorkItem]) -> int:
    """Make sure every item has a claim in the scoring (new ones pending, in the items' order), put
    failed claims back to pending (a new ``mpe score`` tries them again), and score anew an episode
    whose attempt changed. An episode already stored by a scoring made before claims existed counts
    as done. Returns how many items are done already."""
    with db.session() as s:
        serialise(s, "claims:" + scoring_id)  # two scorers starting at once seed once
        have = {c.episode_id: c for c in s.scalars(select(ScoringClaim).where(ScoringClaim.scoring_id == scoring_id))}
        stored = dict(s.execute(select(EpisodeScoreRow.episode_id, EpisodeScoreRow.attempt_id)
                                .where(EpisodeScoreRow.scoring_id == scoring_id)).all())
        ordinal = max((c.ordinal for c in have.values()), default=-1) + 1
        done = 0
        for it in items:
            c = have.get(it.episode_id)
            if c is None:
                status = ClaimStatus.done if it.episode_id in stored and stored[it.episode_id] == it.attempt_id \
                    else ClaimStatus.pending
                s.add(ScoringClaim(scoring_id=scoring_id, episode_id=it.episode_id, ordinal=ordinal,
                                   attempt_id=it.attempt_id, path=it.path, status=status, claims=0))
                ordinal += 1
            elif c.status == ClaimStatus.failed or (c.status == ClaimStatus.done and c.attempt_id != it.attempt_id):
                c.status = advance(CLAIM_TRANSITIONS, c.status, ClaimStatus.pending)
                c.attempt_id, c.path, c.owner, c.lease_expires = it.attempt_id, it.path, None, None
                status = c.status
            else:
                if c.status == ClaimStatus.pending:
                    c.attempt_id, c.path = it.attempt_id, it.path
                status = c.status
            done += status == ClaimStatus.done
        return done


def _claimable(scoring_id: str, t: float):
    # §10: pending work, or work whose holder's lease expired (a killed scorer's is taken over)
    return and_(ScoringClaim.scoring_id == scoring_id,
                ScoringClaim.status.in_(sources(CLAIM_TRANSITIONS, ClaimStatus.claimed)),
                or_(ScoringClaim.status != ClaimStatus.claimed, ScoringClaim.lease_expires < t))


def claim_next(db: Database, scoring_id: str, owner: str, lease_s: float, *, t: float | None = None) -> Claim | None:
    """Claim the scoring's next claimable episode for ``owner`` until ``t + lease_s``, or None."""
    t = now() if t is None else t
    claimable = _claimable(scoring_id, t)
    for _ in range(20):  # a claim another scorer won between the pick and the update: pick again
        with db.session() as s:
            sqlite_write_lock(s)
            row = s.scalar(select(ScoringClaim).where(claimable).order_by(ScoringClaim.ordinal).limit(1)
                           .with_for_update(skip_locked=True))
            if row is None:
                return None
            advance(CLAIM_TRANSITIONS, row.status, ClaimStatus.claimed)
            number = row.claims + 1
            won = s.execute(update(ScoringClaim)
                            .where(ScoringClaim.scoring_id == scoring_id, ScoringClaim.episode_id == row.episode_id,
                                   ScoringClaim.claims == row.claims, claimable)
                            .values(status=ClaimStatus.claimed, owner=owner, lease_expires=t + lease_s, claims=number,
                                    error=None)
                            .execution_options(synchronize_session=False)).rowcount
            if not won:
                s.rollback()
                continue
            return Claim(scoring_id, row.episode_id, row.attempt_id, row.path, owner, number)
    return None


def _held(claim: Claim):
    return and_(ScoringClaim.scoring_id == claim.scoring_id, ScoringClaim.episode_id == claim.episode_id,
                ScoringClaim.owner == claim.owner, ScoringClaim.claims == claim.number,
                ScoringClaim.status == ClaimStatus.claimed)


def _end(db: Database, claim: Claim, new: ClaimStatus, entry: ScoreEntry | None = None, **values) -> bool:
    """Move a held claim to ``new`` (storing ``entry`` in the same transaction); False if it is no
    longer held (taken over after its lease expired): then nothing is written."""
    with db.session() as s:
        n = s.execute(update(ScoringClaim)
                      .where(_held(claim), ScoringClaim.status.in_(sources(CLAIM_TRANSITIONS, new)))
                      .values(status=new, lease_expires=None, **values)
                      .execution_options(synchronize_session=False)).rowcount
        if not n:
            return False
        if entry is not None:
            put_entry(s, claim.scoring_id, entry)
        return True


def complete(db: Database, claim: Claim, entry: ScoreEntry) -> bool:
    """Store the episode's entry and mark the claim done, atomically; False if the claim was lost."""
    return _end(db, claim, ClaimStatus.done, entry)


def fail(db: Database, claim: Claim, error: str) -> bool:
    """Mark the claim failed with ``error``; False if the claim was lost."""
    return _end(db, claim, ClaimStatus.failed, error=error[:2000])


def release(db: Database, claim: Claim) -> bool:
    """Give an unfinished claim back (an interrupted scorer), so nobody waits for its lease to expire."""
    return _end(db, claim, ClaimStatus.pending, owner=None)


def renew(db: Database, claim: Claim, lease_s: float, *, t: float | None = None) -> bool:
    """Extend the lease; False if it was lost."""
    with db.session() as s:
        return bool(s.execute(update(ScoringClaim).where(_held(claim))
                              .values(lease_expires=(now() if t is None else t) + lease_s)
                              .execution_options(synchronize_session=False)).rowcount)


def claim_counts(db: Database, scoring_id: str) -> ClaimCounts:
    with db.session() as s:
        by = dict(s.execute(select(ScoringClaim.status, func.count()).where(ScoringClaim.scoring_id == scoring_id)
                            .group_by(ScoringClaim.status)).all())
        again = s.scalar(select(func.count()).select_from(ScoringClaim)
                         .where(ScoringClaim.scoring_id == scoring_id, ScoringClaim.claims > 1))
    return ClaimCounts(**{str(k): v for k, v in by.items()}, reclaimed=again or 0)


def claim_failures(db: Database, scoring_id: str) -> list[dict[str, str]]:
    """The failed episodes of a scoring and why, in the order they are scored."""
    with db.session() as s:
        rows = s.execute(select(ScoringClaim.episode_id, ScoringClaim.error)
                         .where(ScoringClaim.scoring_id == scoring_id, ScoringClaim.status == ClaimStatus.failed)
                         .order_by(ScoringClaim.ordinal)).all()
    return [{"episode_id": r.episode_id, "error": r.error or ""} for r in rows]
