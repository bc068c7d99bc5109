"""The ``commgraph`` shim of :mod:`warm` (standard library only; run with ``python -S``):
``warm_client.py NAME ARGV...`` asks the warm server listening on the abstract socket ``NAME`` to
run ``commgraph ARGV...`` with this process's folder, environment and standard streams, and exits
with the command's exit code."""

import json
import os
import socket
import struct
import sys


def main(name: str, argv: list[str]) -> int:
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect("\0" + name)
        socket.send_fds(connection, [struct.pack("!Q", len(request)) + request], [0, 1, 2])
        reply = b""
        while len(reply) < 4:
            more = connection.recv(4 - len(reply))
            if not more:
                print(f"commgraph {' '.join(argv)}: the warm command died without an exit code", file=sys.stderr)
                return 1
            reply += more
    return struct.unpack("!i", reply)[0]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
