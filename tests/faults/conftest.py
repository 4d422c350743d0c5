"""The fault tests' shared fixture: a PostgreSQL cluster of the test's own (tests/support/faults.py)."""

from tests.support.faults import own_postgres  # noqa: F401 (a fixture)
