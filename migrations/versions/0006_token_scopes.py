"""token scopes and expiry; the server secret that signs URLs

Revision ID: 0006
Revises: 0005
Create Date: 2027-02-01 12:00:00

Tokens get ``scopes`` (comma-separated ``bridge``, ``read``, ``admin``: server/auth.py) in place
of the ``admin`` flag, and an optional ``expires_at``. Tokens made before this revision could do
what a ``bridge,read`` token does (admin tokens: ``admin``). ``server_secrets`` holds the keys
that sign short-lived URLs (server/api/signed.py): the newest one signs and verifies.
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('scopes', sa.String(length=40), nullable=False,
                                      server_default='bridge,read'))
        batch_op.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE tokens SET scopes = 'admin' WHERE admin")
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.drop_column('admin')
    op.create_table(
        'server_secrets',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('secret', sa.String(length=128), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('server_secrets')
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('admin', sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute("UPDATE tokens SET admin = (scopes LIKE '%admin%')")
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.drop_column('expires_at')
        batch_op.drop_column('scopes')
