"""scoring claims: one row per episode of a scoring, leased to one scorer at a time

Revision ID: 0007
Revises: 0006
Create Date: 2027-02-15 12:00:00

Several ``mpe score`` processes (on any machines sharing the database) split one scoring: each
claims pending episodes with ``SELECT … FOR UPDATE SKIP LOCKED`` and a lease expiry, and stores
an episode's entry in the transaction that marks its claim done (server/scoring/claims.py).
Scorings made before this revision get their claims when they are next resumed.
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'scoring_claims',
        sa.Column('scoring_id', sa.String(length=32), nullable=False),
        sa.Column('episode_id', sa.String(length=100), nullable=False),
        sa.Column('ordinal', sa.Integer(), nullable=False),
        sa.Column('attempt_id', sa.String(length=32), nullable=True),
        sa.Column('path', sa.Text(), nullable=True),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('owner', sa.String(length=100), nullable=True),
        sa.Column('lease_expires', sa.Float(), nullable=True),
        sa.Column('claims', sa.Integer(), nullable=False),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['scoring_id'], ['scorings.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('scoring_id', 'episode_id'),
    )
    with op.batch_alter_table('scoring_claims', schema=None) as batch_op:
        batch_op.create_index('ix_scoring_claims_work', ['scoring_id', 'status', 'ordinal'], unique=False)


def downgrade() -> None:
    op.drop_table('scoring_claims')
