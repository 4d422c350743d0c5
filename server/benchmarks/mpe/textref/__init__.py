"""The transcript-conditioned text reference of Duplex-MPE (the paper's App. A5.2): ``mpe reference``.

For every utterance a model may respond to (T, N1-N3, N4Q: :data:`server.benchmarks.mpe.rules.RESPONSE_LABELS`)
of a scenario version, a text model is given the duty instruction verbatim
(:data:`server.benchmarks.mpe.duty.DUTY_TEXT`) and the speaker-attributed script up to and
including that utterance, and chooses RESPOND or SILENT (writing what it would say when it
responds; only T's answer is graded). Each decision is an independent query.

Parts: ``prompt`` (the one versioned prompt, the history it shows, how a reply is read, the
stored decision types), ``backends`` (an LLM: ``claude``, ``google``, ``openai``; and ``rule``: a
name-detection rule baseline, not a language model), ``grading`` (the separate answer-grading call
on T, as the paper grades its reference), ``entry`` (a decided episode as the scoring entry every run has, so the
metrics, statistics and reports are the ones speech models get), ``runs`` (deciding a suite and
storing it as a finished run; run-to-run agreement).
"""
