"""Test jobs launched the way ``commgraph``'s commands launch theirs, from this (pytest's) process,
which imports torch, PyG and commgraph once for the whole session: the ranks are forked by a zygote
forked from here (:meth:`ForkedZygote.fork`) instead of by a fresh interpreter that imports them
again for every job (a fresh ``python -m commgraph`` or ``python -m commgraph.runtime.zygote``
spends about 7 s of CPU importing on a 2-core machine). The ranks run the same module with the same
arguments and environment either way; ``tests/test_zygote.py`` covers the fresh zygote, and
``tests/test_docs.py`` and ``tests/test_faults.py`` the ``python -m commgraph`` entry point."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
import tempfile
import warnings

from commgraph.cli.main import main
from commgraph.runtime import launch_local
from commgraph.runtime.zygote import WARM, ForkedZygote


def _warm() -> None:
    """Import here what a zygote would, so that no zygote forked from here imports it again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in WARM:
            importlib.import_module(name)


def launch_forked(argv: list[str], workers: int, *, module: str, **options) -> int:
    """``launch_local(argv, workers, module=module, **options)`` with its ranks forked from this
    process (from a fresh zygote where forking here is not safe, see :meth:`ForkedZygote.fork`)."""
    _warm()
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(sys.path)  # a fresh zygote finds the tests' drivers too
    try:
        return launch_local(argv, workers, module=module, zygote=ForkedZygote.fork(), **options)
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def run_commgraph(argv: list[str]) -> subprocess.CompletedProcess:
    """``commgraph ARGV...`` run in this process, as ``subprocess.run([sys.executable, "-m",
    "commgraph", *argv], capture_output=True, text=True)`` would run it: its exit code, and what it
    and its workers wrote to standard output and standard error."""
    _warm()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        text_out = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), line_buffering=True)
        text_err = io.TextIOWrapper(os.fdopen(os.dup(2), "wb"), line_buffering=True)
        try:
            with contextlib.redirect_stdout(text_out), contextlib.redirect_stderr(text_err):
                code = main(argv)
        except SystemExit as exc:  # what ``python -m commgraph`` exits with: argparse's 2, say
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        finally:
            text_out.close()
            text_err.close()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(["commgraph", *argv], code, out.read().decode(), err.read().decode())
