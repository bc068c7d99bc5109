"""``python fanout_count_driver.py LOG ARGV...``: ``commgraph ARGV...`` with every call of
:func:`~commgraph.sample.options.parse_fanouts` and :func:`~commgraph.sample.options.check_fanouts`
counted, in this process and in every rank forked from it (the ranks of a machine without CUDA are
forked, so they run these functions as changed here): one line ``NAME PID`` appended to LOG per
call. Each function's code is replaced in place, so every name bound to it counts, including the
``--fanout`` option's ``parse``."""

from __future__ import annotations

import os
import sys
import types

from commgraph.sample import options

LOG = sys.argv[1]


def _parse_fanouts(text, layers=None, parameter="fanouts"):  # runs with options' globals: the hook below is one of them
    return _counted_parse_fanouts(text, layers, parameter)  # noqa: F821


def _check_fanouts(fanouts, layers=None, parameter="fanouts"):
    return _counted_check_fanouts(fanouts, layers, parameter)  # noqa: F821


def count(function: types.FunctionType, replacement: types.FunctionType) -> None:
    """Make ``function`` append its name and this process's id to LOG, then do what it did."""
    name = function.__name__
    original = types.FunctionType(function.__code__, function.__globals__, name, function.__defaults__)

    def counted(*args):
        with open(LOG, "a") as log:
            log.write(f"{name} {os.getpid()}\n")
        return original(*args)

    setattr(options, f"_counted_{name}", counted)
    function.__code__ = replacement.__code__


if __name__ == "__main__":
    count(options.parse_fanouts, _parse_fanouts)
    count(options.check_fanouts, _check_fanouts)
    from commgraph.cli.main import main

    code = main(sys.argv[2:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
