"""The ``commgraph`` command line: one module per subcommand, wired together in :mod:`.main`."""


def describe(doc: str | None) -> str:
    """A module docstring as ``--help`` text: reStructuredText literals shown plain."""
    return (doc or "").replace("``", "")
