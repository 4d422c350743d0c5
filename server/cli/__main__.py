"""``python -m server.cli``: the ``mpe`` command."""

from server.cli.main import main

main()
