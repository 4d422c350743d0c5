"""scoring: transcripts, verdicts, scorings, episode scores, metric values

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table('transcripts',
    sa.Column('id', _BIGID, autoincrement=True, nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('audio_hash', sa.String(length=64), nullable=False),
    sa.Column('backend', sa.String(length=40), nullable=False),
    sa.Column('model', sa.String(length=300), nullable=False),
    sa.Column('version', sa.String(length=100), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('n_samples', sa.Integer(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('raw', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('content_hash')
    )
    with op.batch_alter_table('transcripts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_transcripts_audio_hash'), ['audio_hash'], unique=False)

    op.create_table('verdicts',
    sa.Column('id', _BIGID, autoincrement=True, nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('task', sa.String(length=16), nullable=False),
    sa.Column('backend', sa.String(length=40), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('prompt_version', sa.String(length=100), nullable=False),
    sa.Column('label', sa.String(length=40), nullable=True),
    sa.Column('raw_reply', sa.Text(), nullable=False),
    sa.Column('inputs', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('content_hash')
    )

    op.create_table('scorings',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('run_id', sa.String(length=32), nullable=True),
    sa.Column('source_key', sa.String(length=64), nullable=False),
    sa.Column('config_hash', sa.String(length=64), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('n_episodes', sa.Integer(), nullable=False),
    sa.Column('results', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('scorings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_scorings_run_id'), ['run_id'], unique=False)
        batch_op.create_index('ix_scorings_source', ['source_key', 'config_hash'], unique=False)

    op.create_table('episode_scores',
    sa.Column('id', _BIGID, autoincrement=True, nullable=False),
    sa.Column('scoring_id', sa.String(length=32), nullable=False),
    sa.Column('episode_id', sa.String(length=100), nullable=False),
    sa.Column('attempt_id', sa.String(length=32), nullable=True),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['scoring_id'], ['scorings.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('scoring_id', 'episode_id')
    )
    with op.batch_alter_table('episode_scores', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_episode_scores_scoring_id'), ['scoring_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_episode_scores_episode_id'), ['episode_id'], unique=False)

    op.create_table('metric_values',
    sa.Column('id', _BIGID, autoincrement=True, nullable=False),
    sa.Column('scoring_id', sa.String(length=32), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('condition', sa.String(length=16), nullable=False),
    sa.Column('quantity', sa.String(length=40), nullable=False),
    sa.Column('num', sa.Integer(), nullable=False),
    sa.Column('den', sa.Integer(), nullable=False),
    sa.Column('value', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['scoring_id'], ['scorings.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('scoring_id', 'model', 'condition', 'quantity')
    )
    with op.batch_alter_table('metric_values', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_metric_values_scoring_id'), ['scoring_id'], unique=False)


def downgrade() -> None:
    op.drop_table('metric_values')
    op.drop_table('episode_scores')
    op.drop_table('scorings')
    op.drop_table('verdicts')
    op.drop_table('transcripts')
