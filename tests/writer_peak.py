"""The memory a chunked graph writer adds to its process, measured in a fresh interpreter (its
``VmHWM`` over its ``VmRSS`` before the call), and the size of the file it wrote."""

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
{function}(sys.argv[1], int(sys.argv[2]){arguments})
print(json.dumps({{"peak_added": status_bytes("VmHWM") - before, "file": Path(sys.argv[1]).stat().st_size}}))
"""


def writer_peak(module: str, function: str, path: Path, nodes: int, arguments: str = "") -> dict:
    """``module.function(path, nodes, *arguments)`` run in a child: ``peak_added`` and ``file`` bytes."""
    code = CHILD.format(module=module, function=function, arguments=arguments)
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), str(nodes)], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])
