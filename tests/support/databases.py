"""A fresh database for a test: a SQLite file, or a schema of its own in the test PostgreSQL
(``MPE_TEST_PG_URL``; tests/conftest.py's ``db_url`` fixture gives every database test both)."""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

PG_URL = os.environ.get("MPE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def database_url(kind: str, tmp: Path):
    """A fresh database: a SQLite file in ``tmp``, or its own schema in the test PostgreSQL."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'mpe.db'}"
        return
    schema = "t_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(PG_URL)
    with admin.begin() as c:
        c.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as c:
            c.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
