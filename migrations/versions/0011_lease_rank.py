"""episodes carry the order they are leased in (lease_rank): a real run's is a secret shuffle of its
ordinals, so that the order a bridge is given its episodes in cannot be joined to the suite's order
(server/engine/leasing.py, lease_ranks)

Revision ID: 0011
Revises: 0010
Create Date: 2027-03-12 12:00:00

Existing episodes get rank 0: a run created before this revision is leased in its ordinal order
(the order before), as it was; only runs created after it are shuffled.
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('episodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lease_rank', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('episodes', schema=None) as batch_op:
        batch_op.drop_column('lease_rank')
