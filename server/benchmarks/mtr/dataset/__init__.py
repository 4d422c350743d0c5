"""MTR-DuplexBench suite construction (DESIGN §12.1, docs/mtr.md).

* :mod:`.sets` -- feature sets and per-round features; :mod:`.plan` -- dialogue plans from a seed
* :mod:`.topics`, :mod:`.phrases` -- the procedural generator's topic bank and spoken lines
* :mod:`.procedural` / :mod:`.claude` -- two generators of texts (:mod:`.generators` by name)
* :mod:`.timing`, :mod:`.assemble` -- duration estimates, placement of the feature parts
* :mod:`.build` -- dialogues to a (text-only) suite directory
* :mod:`.voices` -- role voices and the broadcast sound; :mod:`.synth` -- voicing a suite
* :mod:`.stats` -- composition and duration tables; :mod:`.builtin` -- ``mtr-mini``, ``mtr-features``
* :mod:`.commands` -- the MTR side of ``mpe dataset``
"""
