"""bridges record whether they accept assistant-context frames (hello.accepts_context)

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-10 12:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Bridges connected before this revision announced no context support (docs/protocol.md §5.1).
    with op.batch_alter_table('bridges', schema=None) as batch_op:
        batch_op.add_column(sa.Column('accepts_context', sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table('bridges', schema=None) as batch_op:
        batch_op.drop_column('accepts_context')
