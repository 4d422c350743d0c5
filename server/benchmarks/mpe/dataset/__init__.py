"""Scenario construction: plans, generators, suites, voices, checks and reports.

* :mod:`.compose` -- composition controls and per-pair plans (speakers, T bucket, N4, attributes)
* :mod:`.procedural` / :mod:`.anthropic_gen` -- two generators behind :class:`.schema.ScenarioGenerator`
* :mod:`.rules` -- every rule a generated script must pass
* :mod:`.build` -- scripts to a (text-only) suite directory
* :mod:`.synth` -- parallel, cached, resumable synthesis of a suite's clips
* :mod:`.stats`, :mod:`.textexport` -- reports and text-only export
* :mod:`.importer` -- an external manifest (JSONL or CSV, mapped fields) to a suite
* :mod:`.builtin` -- the ``mini`` and ``full`` suites; :mod:`.commands` -- its side of ``mpe dataset``
"""
