"""runs record whether their bridges are given the benchmark's duty as a text prompt

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-15 12:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing runs sent no text prompt from the server (§4: episode.start carried no instructions).
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('text_prompt', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('text_prompt')
