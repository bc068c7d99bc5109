"""commgraph's diagnostics, through :mod:`logging`: the runtime, the launcher and the trainers log
to children of the ``commgraph`` logger (``commgraph.runtime.launch``, ``commgraph.train.trainer``,
...), never with ``print``. What a command prints as its result, and progress bars, are not logged.

The ``commgraph`` logger writes its records to the process's stderr as they are, one line each
(the text carries its own ``commgraph:`` prefix), from level INFO (DEBUG: what a job set up), and
does not hand them to the root logger. A library user silences all but errors with::

    import logging

    logging.getLogger("commgraph").setLevel(logging.ERROR)

or sends them to the application's own handlers with ``logger.handlers.clear()`` and
``logger.propagate = True``.
"""

from __future__ import annotations

import logging
import sys

ROOT = "commgraph"


class _Stderr(logging.StreamHandler):
    """A handler writing to ``sys.stderr`` as it is when a record comes (a test's capture, a
    worker's redirected stream), not as it was when the handler was made."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _configure(root: logging.Logger) -> None:
    root.addHandler(_Stderr())
    root.propagate = False
    if root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


def get_logger(name: str) -> logging.Logger:
    """The logger ``name``: a child of ``commgraph``, such as a module's ``__name__``."""
    return logging.getLogger(name)


_configure(logging.getLogger(ROOT))
