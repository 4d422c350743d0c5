"""The duty of §3 step 1 in the paper's own words (Duplex-MPE, App. A3.1): its one text.

The built-in suites speak it as their preamble (:mod:`server.benchmarks.mpe.dataset.build`),
a run created with a text prompt sends it to its bridges in ``episode.start`` (§4:
``instructions``; :attr:`server.core.benchmark.Benchmark.duty_text`), and the text reference
opens its prompt with it (:mod:`server.benchmarks.mpe.textref.prompt`). Every speech system
gets the same input: no text prompt unless the run asks for one.
"""

from __future__ import annotations

DUTY_TEXT = (
    "You are the voice assistant Aria, that is A R I A, Aria. You are in a room with several "
    "people. Only respond when someone speaks directly to you, Aria, and asks something you can "
    "answer. When people are talking to each other or to another device, or thinking out loud, "
    "or when the question they asked you has already been answered by someone else, stay "
    "silent and do not speak."
)
