"""runs record the network impairment applied to their assistant stream (mpe run create --impair)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-22 12:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing runs were not impaired (null).
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('impair', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('impair')
