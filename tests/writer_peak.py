"""The memory a chunked graph writer adds to its process, measured in a fresh interpreter (its
``VmHWM`` over its ``VmRSS`` before the call), and the bytes it wrote (a file, or a folder's
files)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys
from pathlib import Path
from commgraph.runtime.table_memory import status_bytes
from {module} import {function}
Path("/proc/self/clear_refs").write_text("5")
before = status_bytes("VmRSS")
{call}
out = Path(sys.argv[1])
written = sum(p.stat().st_size for p in out.rglob("*")) if out.is_dir() else out.stat().st_size
print(json.dumps({{"peak_added": status_bytes("VmHWM") - before, "file": written}}))
"""


def writer_peak(module: str, function: str, path: Path, nodes: int, arguments: str = "", call: str = "") -> dict:
    """``module.function(path, nodes, *arguments)`` (or the statement ``call``, which reads
    ``sys.argv[1]`` and ``sys.argv[2]``) run in a child: ``peak_added`` and ``file`` bytes."""
    call = call or f"{function}(sys.argv[1], int(sys.argv[2]){arguments})"
    code = CHILD.format(module=module, function=function, call=call)
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), str(nodes)], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])
