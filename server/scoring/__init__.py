"""Scoring (DESIGN §5-§7): windows, ASR, judges, metrics, statistics and reports.

Modules: :mod:`.windows` (pure §6 window rules), :mod:`.asr` and :mod:`.judges` (semantic
backends), :mod:`.store` (caches and scoring rows), :mod:`.episode` (one episode),
:mod:`.metrics` (the six quantities), :mod:`.stats` (analyses), :mod:`.runner` (parallel,
resumable scoring), :mod:`.report` (terminal and HTML), :mod:`.audit` (judge audit),
:mod:`.results` (read access for the API), :mod:`.cli` (commands).
"""
