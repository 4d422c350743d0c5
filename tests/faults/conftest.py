"""The fault tests' shared fixture: a PostgreSQL cluster of the test's own (tests/faults/test_faults_storage.py)."""

from tests.faults.test_faults_storage import own_postgres  # noqa: F401 (a fixture)
