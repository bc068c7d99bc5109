"""The ``commgraph`` command line: one module per subcommand, wired together in :mod:`.main`."""
