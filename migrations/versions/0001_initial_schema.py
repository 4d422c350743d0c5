"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-30 16:25:26.164050
"""
import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('bridges',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('team', sa.String(length=64), nullable=False),
    sa.Column('admin', sa.Boolean(), nullable=False),
    sa.Column('model_name', sa.String(length=100), nullable=False),
    sa.Column('model_revision', sa.String(length=200), nullable=False),
    sa.Column('sample_rate', sa.Integer(), nullable=False),
    sa.Column('clocks', sa.JSON(), nullable=False),
    sa.Column('server_id', sa.String(length=100), nullable=False),
    sa.Column('connected_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('disconnected_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('bridges', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_bridges_team'), ['team'], unique=False)

    op.create_table('suites',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('team', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('meta', sa.JSON(), nullable=False),
    sa.Column('n_scenarios', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('team', 'content_hash')
    )
    with op.batch_alter_table('suites', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_suites_team'), ['team'], unique=False)

    op.create_table('tokens',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('team', sa.String(length=64), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('admin', sa.Boolean(), nullable=False),
    sa.Column('label', sa.String(length=200), nullable=False),
    sa.Column('revoked', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_hash')
    )
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tokens_team'), ['team'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('team', sa.String(length=64), nullable=False),
    sa.Column('model_name', sa.String(length=100), nullable=False),
    sa.Column('suite_id', sa.String(length=32), nullable=False),
    sa.Column('conditions', sa.JSON(), nullable=False),
    sa.Column('clock', sa.String(length=16), nullable=False),
    sa.Column('limit_n', sa.Integer(), nullable=True),
    sa.Column('max_inflight', sa.Integer(), nullable=False),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['suite_id'], ['suites.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_model_name'), ['model_name'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_team'), ['team'], unique=False)

    op.create_table('episodes',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('run_id', sa.String(length=32), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('scenario_id', sa.String(length=100), nullable=False),
    sa.Column('pair_id', sa.String(length=100), nullable=False),
    sa.Column('condition', sa.String(length=16), nullable=False),
    sa.Column('scenario', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('lease_owner', sa.String(length=100), nullable=True),
    sa.Column('lease_expires', sa.Float(), nullable=True),
    sa.Column('current_attempt_id', sa.String(length=32), nullable=True),
    sa.Column('completed_attempt_id', sa.String(length=32), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'ordinal')
    )
    with op.batch_alter_table('episodes', schema=None) as batch_op:
        batch_op.create_index('ix_episodes_lease', ['status', 'lease_expires'], unique=False)
        batch_op.create_index(batch_op.f('ix_episodes_run_id'), ['run_id'], unique=False)

    op.create_table('attempts',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('episode_id', sa.String(length=32), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('bridge_id', sa.String(length=32), nullable=False),
    sa.Column('server_id', sa.String(length=100), nullable=False),
    sa.Column('model_revision', sa.String(length=200), nullable=False),
    sa.Column('clock', sa.String(length=16), nullable=False),
    sa.Column('bridge_rate', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('end_sample', sa.BigInteger(), nullable=True),
    sa.Column('n_frames', sa.Integer(), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('stats', sa.JSON(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['episode_id'], ['episodes.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_attempts_episode_id'), ['episode_id'], unique=False)

    op.create_table('audio_chunks',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('attempt_id', sa.String(length=32), nullable=False),
    sa.Column('track', sa.String(length=10), nullable=False),
    sa.Column('idx', sa.Integer(), nullable=False),
    sa.Column('start_sample', sa.BigInteger(), nullable=False),
    sa.Column('n_samples', sa.Integer(), nullable=False),
    sa.Column('codec', sa.String(length=10), nullable=False),
    sa.Column('data', sa.LargeBinary(), nullable=False),
    sa.ForeignKeyConstraint(['attempt_id'], ['attempts.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('attempt_id', 'track', 'idx')
    )
    with op.batch_alter_table('audio_chunks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audio_chunks_attempt_id'), ['attempt_id'], unique=False)

    op.create_table('events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('attempt_id', sa.String(length=32), nullable=False),
    sa.Column('t', sa.BigInteger(), nullable=False),
    sa.Column('type', sa.String(length=40), nullable=False),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['attempt_id'], ['attempts.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_events_attempt_id'), ['attempt_id'], unique=False)

    op.create_table('frames',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('attempt_id', sa.String(length=32), nullable=False),
    sa.Column('direction', sa.String(length=10), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('slot', sa.BigInteger(), nullable=False),
    sa.Column('sent_us', sa.BigInteger(), nullable=True),
    sa.Column('arrived_us', sa.BigInteger(), nullable=True),
    sa.Column('silent', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['attempt_id'], ['attempts.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('frames', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_frames_attempt_id'), ['attempt_id'], unique=False)

    op.create_table('segments',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('attempt_id', sa.String(length=32), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('start', sa.BigInteger(), nullable=False),
    sa.Column('end', sa.BigInteger(), nullable=False),
    sa.Column('detector', sa.String(length=100), nullable=False),
    sa.ForeignKeyConstraint(['attempt_id'], ['attempts.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('segments', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_segments_attempt_id'), ['attempt_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('segments', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_segments_attempt_id'))

    op.drop_table('segments')
    with op.batch_alter_table('frames', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_frames_attempt_id'))

    op.drop_table('frames')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_events_attempt_id'))

    op.drop_table('events')
    with op.batch_alter_table('audio_chunks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audio_chunks_attempt_id'))

    op.drop_table('audio_chunks')
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_attempts_episode_id'))

    op.drop_table('attempts')
    with op.batch_alter_table('episodes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_episodes_run_id'))
        batch_op.drop_index('ix_episodes_lease')

    op.drop_table('episodes')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_team'))
        batch_op.drop_index(batch_op.f('ix_runs_status'))
        batch_op.drop_index(batch_op.f('ix_runs_model_name'))

    op.drop_table('runs')
    with op.batch_alter_table('tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tokens_team'))

    op.drop_table('tokens')
    with op.batch_alter_table('suites', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_suites_team'))

    op.drop_table('suites')
    with op.batch_alter_table('bridges', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_bridges_team'))

    op.drop_table('bridges')
