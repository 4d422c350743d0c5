"""Dataset tooling that every benchmark's generators share: the error they raise, the parallel cached
synthesis driver that voices a suite's clips, the Claude script generator's request loop and cache,
the ``mpe dataset`` console helpers and shared option types. Each benchmark's own generators, schemas and validators live
in its package (``server/benchmarks/NAME/dataset/``)."""
