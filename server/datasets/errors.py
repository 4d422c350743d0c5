"""The error every dataset tool raises."""

from __future__ import annotations

from clients.errors import MPEError


class DatasetError(MPEError):
    """Scenario construction failed (bad options, a generator that cannot satisfy the rules)."""

    code = "dataset_error"
