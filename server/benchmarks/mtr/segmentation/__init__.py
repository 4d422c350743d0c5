"""Turn segmentation of free-form two-channel recordings (``mpe segment``; docs/segmentation.md).

A recording without turn markers (the user's channel and the model's) becomes user turns, the
response window of each turn and the votes behind every boundary: speech segments per channel
(the speech detector, DESIGN §5) and optional transcripts go to a proposal backend (offline
rules, or an LLM: Claude, GPT-4o as published, Gemini) n times; the candidates are clustered and
voted on (:mod:`.voting`), the
published method of MTR-DuplexBench (arXiv 2511.10262, its conversation-quality evaluation).

Modules, one job each: :mod:`.schema` (the typed inputs and outputs), :mod:`.voting` (the pure
clustering and voting), :mod:`.windows` (response windows and continuations),
:mod:`.proposer` (the backend interface), :mod:`.offline` and :mod:`.claude` (the backends),
:mod:`.backends` (choosing one), :mod:`.segment` (n proposals, voting, the result),
:mod:`.inputs` (reading bundles and WAV files), :mod:`.evaluation` (turn F1 and boundary error
against known turns).
"""
