"""``python received_driver.py LOG ARGV...``: ``commgraph ARGV...`` with what each rank forked from
this process receives from its launcher (:func:`~commgraph.runtime.launch.job_data`, the JSON the
job's store holds) appended to LOG, one line per rank."""

from __future__ import annotations

import os
import sys

from commgraph.runtime import launch

LOG = sys.argv[1]
_job_data = launch.job_data


def _recorded() -> str:
    text = _job_data()
    with open(LOG, "a") as log:
        log.write(" ".join(text.split()) + "\n")
    return text


if __name__ == "__main__":
    launch.job_data = _recorded
    from commgraph.cli.main import main

    code = main(sys.argv[2:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
