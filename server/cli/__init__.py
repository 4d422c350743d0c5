"""The ``mpe`` command: the entry points on top of every other layer (DESIGN "Map").

``main`` (the Typer app and the server, token, run and bridge commands), ``scoring`` (``mpe score``,
``report``, ``audit``, ``reference``, ``segment``), ``check`` (``mpe bridge check``), ``dataset``
(``mpe dataset``: each benchmark's tools behind one group), ``demo``, ``supervisor`` (the processes of
``mpe serve --workers N``) and ``bridges`` (the bridges ``mpe bridge`` can start).
"""

from server.cli.main import app, main

__all__ = ["app", "main"]
