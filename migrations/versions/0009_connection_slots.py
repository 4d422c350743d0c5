"""connection slots: the open bridge and listen sockets of each team, for every server process

Revision ID: 0009
Revises: 0008
Create Date: 2027-03-01 12:00:00

On PostgreSQL every server process (the workers of ``mpe serve --workers N`` and any other
``mpe serve`` on the same database) holds one row per open per-team socket, renewed while it is
open; the per-team limits count the rows that have not expired (server/engine/shared_slots.py).
Nothing to carry over: sockets open before this revision were counted in memory.
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'connection_slots',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('team', sa.String(length=64), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('server_id', sa.String(length=100), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('connection_slots', schema=None) as batch_op:
        batch_op.create_index('ix_connection_slots_team', ['team', 'kind', 'expires_at'], unique=False)


def downgrade() -> None:
    op.drop_table('connection_slots')
