"""A warm ``commgraph`` for the shell commands a test runs (the docs' runnable blocks).

``commgraph ARGV...`` on ``PATH`` is a shim (``tests/warm_client.py``, a stdlib-only client) that
sends its arguments, working folder and environment, with its standard streams' file descriptors,
to a server forked from this (pytest's) process, which has imported torch, PyG and commgraph once
for the session. The server forks a child that becomes the command: it takes the streams as its
0, 1 and 2, the folder and the environment as its own, and runs
``commgraph.cli.main.main(ARGV)`` as ``python -m commgraph ARGV...`` would; the shim exits with its
exit code. A fresh ``python -m commgraph`` spends 4-8 s of CPU importing on a 2-core machine; a
forked one starts at once, and the job it launches forks its zygote from itself, warm as well.
``tests/test_faults.py`` and ``tests/test_zygote.py`` cover the fresh interpreter's entry point.

Where forking this process is not safe (other threads running, CUDA initialised, no ``fork``) or
torch sees a GPU (a forked child could not use it), :func:`warm_commgraph` gives the installed
console script instead.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import logging
import os
import secrets
import signal
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

from commgraph.lifetime import die_with_parent, name_process
from commgraph.runtime.zygote import exit_code

CLIENT = Path(__file__).with_name("warm_client.py")
LENGTH = struct.Struct("!Q")  # a request's length, before its JSON
CODE = struct.Struct("!i")  # the command's exit code, the child's only reply


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """One request: its JSON (argv, cwd, env) and the three stream descriptors sent with it."""
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while len(data) < LENGTH.size or len(data) < LENGTH.size + LENGTH.unpack_from(data)[0]:
        more = connection.recv(1 << 16)
        if not more:
            raise ConnectionError("the shim closed its connection mid-request")
        data += more
    return json.loads(data[LENGTH.size :]), fds


def _become_the_command(request: dict, fds: list[int]) -> None:
    """In the forked child: take the shim's streams, folder and environment, as a new process would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    paths = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:0] = [entry for entry in paths if entry not in sys.path]
    for number in (signal.SIGALRM, signal.SIGTERM):  # pytest-timeout's alarm is the test's, not ours
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "rb", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "wb", closefd=False), line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "wb", closefd=False), line_buffering=True)
    logging.root.handlers.clear()  # pytest's capturing handlers
    logging.root.setLevel(logging.WARNING)
    sys.argv = ["commgraph", *request["argv"]]
    atexit._clear()  # pytest's exit handlers are not the command's


def _run(connection: socket.socket, request: dict, fds: list[int], server: int) -> None:
    """The forked child: run the command, send its exit code, and exit (never returns)."""
    code = 1
    try:
        die_with_parent(server)
        _become_the_command(request, fds)
        from commgraph.cli.main import main

        try:
            code = exit_code(main(request["argv"], ends_process=True))
        except SystemExit as exc:
            code = exit_code(exc.code)
        except BaseException:  # noqa: BLE001 - what an interpreter does with an uncaught error
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        with contextlib.suppress(OSError):
            connection.sendall(CODE.pack(code))
        os._exit(code & 0xFF)


def _reap() -> None:
    """Collect the commands that have exited (their shims already have their codes)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _serve(listener: socket.socket, parent: int) -> None:
    """The server: fork one child per request, for ever (never returns; killed with its fixture)."""
    try:
        die_with_parent(parent)
        name_process("commgraph-warm")
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server = os.getpid()
        while True:
            connection, _ = listener.accept()
            request, fds = _receive(connection)
            if os.fork() == 0:
                listener.close()
                _run(connection, request, fds, server)
            connection.close()
            for fd in fds:
                os.close(fd)
            _reap()
    except BaseException:  # noqa: BLE001 - the server never returns into pytest's code
        traceback.print_exc()
    finally:
        os._exit(1)


def _forkable() -> bool:
    import torch

    return (
        hasattr(os, "fork")
        and sys.platform.startswith("linux")  # abstract socket names
        and threading.active_count() == 1
        and not torch.cuda.is_initialized()
        and not torch.cuda.is_available()
    )


@contextlib.contextmanager
def warm_commgraph(folder: Path) -> Iterator[Path]:
    """A folder holding a ``commgraph`` served by a warm server forked from this process, for as
    long as the context lasts (the folder holding the installed console script where forking is not
    safe)."""
    from forked import _warm

    _warm()
    if not _forkable():
        yield Path(sys.executable).parent
        return
    name = f"commgraph-warm-{os.getpid()}-{secrets.token_hex(6)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(64)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        _serve(listener, parent)
    listener.close()
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "commgraph"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S -E "{CLIENT}" {name} "$@"\n')
    shim.chmod(0o755)
    try:
        yield folder
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
