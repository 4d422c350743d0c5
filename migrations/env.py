"""Alembic environment: the URL comes from the caller (server.db.upgrade) or DATABASE_URL."""

from alembic import context
from sqlalchemy import engine_from_config, pool

from server.db import Base
from server.settings import Settings

config = context.config
url = config.get_main_option("sqlalchemy.url") or Settings().db_url
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = engine_from_config({"sqlalchemy.url": url}, prefix="sqlalchemy.", poolclass=pool.NullPool)
    with connectable.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
