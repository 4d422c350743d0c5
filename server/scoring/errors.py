"""Errors of the scoring subsystem (all in the one hierarchy of ``clients.errors``)."""

from __future__ import annotations

from clients.errors import MPEError


class ScoringError(MPEError):
    """Scoring could not be done."""

    code = "scoring_error"


class BadBundle(ScoringError):
    """An episode bundle or episode document is incomplete or inconsistent (§7)."""

    code = "bad_bundle"


class BadEntry(ScoringError):
    """A stored scoring entry does not match its benchmark's entry model."""

    code = "bad_entry"


class BackendUnavailable(ScoringError):
    """An ASR or judge backend cannot be used (not installed, no weights, no key)."""

    code = "backend_unavailable"


class JudgeError(ScoringError):
    """A judge backend failed to answer (network, authentication, rate limits)."""

    code = "judge_error"


class NotScored(ScoringError):
    """Nothing has been scored for what was asked."""

    code = "not_scored"


class BadRecording(ScoringError):
    """A recording to segment cannot be read as the two channels it must have (``mpe segment``)."""

    code = "bad_recording"


class BadRules(ScoringError):
    """A rule set the benchmark does not have (``mpe score --rules``)."""

    code = "bad_rules"
