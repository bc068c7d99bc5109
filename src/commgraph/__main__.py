"""``python -m commgraph`` is the ``commgraph`` command."""

from commgraph.cli.main import entry

entry()
