"""benchmarks as plug-ins: suites and runs name their benchmark; runs keep a failure reason;
episodes are pinned to the audio they were created with

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 12:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing suites and runs are Duplex-MPE (the only benchmark before this revision).
    with op.batch_alter_table('suites', schema=None) as batch_op:
        batch_op.add_column(sa.Column('benchmark', sa.String(length=40), nullable=False, server_default='duplex-mpe'))
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('benchmark', sa.String(length=40), nullable=False, server_default='duplex-mpe'))
        batch_op.add_column(sa.Column('error', sa.Text(), nullable=True))
    with op.batch_alter_table('episodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('audio_hash', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('episodes', schema=None) as batch_op:
        batch_op.drop_column('audio_hash')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('error')
        batch_op.drop_column('benchmark')
    with op.batch_alter_table('suites', schema=None) as batch_op:
        batch_op.drop_column('benchmark')
