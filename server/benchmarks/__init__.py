"""Benchmark plug-ins, one package each: ``mpe`` (Duplex-MPE, multi-party). The contract is
:class:`server.core.benchmark.Benchmark`; :mod:`server.engine.registry` finds them by name."""
