"""runs and bridges know whether they are a bridge check's: check runs are leased only to bridges that announce
``hello.check``, real runs only to bridges that do not (server/engine/leasing.py, bridge_runs)

Revision ID: 0010
Revises: 0009
Create Date: 2027-03-10 12:00:00

Existing runs are real runs (false), the probe suite's included: a check started before this
revision is served as a real run until it ends.
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('is_check', sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table('bridges', schema=None) as batch_op:
        batch_op.add_column(sa.Column('is_check', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('bridges', schema=None) as batch_op:
        batch_op.drop_column('is_check')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('is_check')
