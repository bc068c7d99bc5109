"""Test jobs launched the way ``commgraph``'s commands launch theirs: the ranks are forked by a zygote
forked from this (pytest's) process (:meth:`ForkedZygote.fork`), which has imported torch, PyG and
commgraph once for the whole session, instead of by a fresh ``python -m commgraph.runtime.zygote``
that imports them again for every job (about 7 s of CPU a launch on a 2-core machine). The ranks run
the same module with the same arguments and environment either way; ``tests/test_zygote.py`` covers
the fresh zygote itself."""

from __future__ import annotations

import importlib
import warnings

from commgraph.runtime import launch_local
from commgraph.runtime.zygote import WARM, ForkedZygote


def launch_forked(argv: list[str], workers: int, *, module: str, **options) -> int:
    """``launch_local(argv, workers, module=module, **options)`` with its ranks forked from this
    process (from a fresh zygote where forking here is not safe, see :meth:`ForkedZygote.fork`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in WARM:  # here, so that no forked zygote imports them again
            importlib.import_module(name)
    return launch_local(argv, workers, module=module, zygote=ForkedZygote.fork(), **options)
