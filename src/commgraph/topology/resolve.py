"""The one place that turns what a user names with ``--topology`` and ``--speeds`` into a
:class:`~commgraph.topology.Topology`.

Every command that takes a topology means the same by it:

- ``detect``: this machine. A job on GPUs gets its GPUs as ``nvidia-smi topo -m`` shows them
  (:func:`~commgraph.topology.detect.detect`); a job on CPUs gets ``localhost-cpu:N``, one CPU
  worker per rank (``workers``; without it, one per core). A command that runs no job
  (``plan``, ``topo show``) asks for ``device="auto"``: the GPUs if the machine has any, else
  its CPU cores.
- a preset name (``dgx1-v100``, ``2xdgx-a100-ib``, ``localhost-cpu:4``, ``fattree:...``; see
  ``commgraph topo list``), built with ``speeds`` overriding its link speeds;
- a YAML file (``.yaml``/``.yml``, or any existing file), read exactly.

Detection asks the machine, so it happens here, at the edge, once per command or job; planning
code takes the resolved Topology and never detects.
"""

from __future__ import annotations

import os
from pathlib import Path

from commgraph.errors import TopologyError
from commgraph.topology.files import is_topology_file, load_topology
from commgraph.topology.model import Topology
from commgraph.topology.presets import PresetSpeeds, preset_speeds

DETECT = "detect"
SPEED_KEYS = "nv1 nv2 pcie qpi ib ethernet shm"


def parse_speeds(text: str | None) -> dict[str, float]:
    """``--speeds nv2=40,pcie=24`` as ``{"nv2": 40.0, "pcie": 24.0}`` (GB/s); empty for None."""
    speeds = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        try:
            speeds[key.strip()] = float(value)
        except ValueError:
            raise TopologyError(f"bad --speeds entry {item!r}: expected key=GB/s") from None
        if not sep:
            raise TopologyError(f"bad --speeds entry {item!r}: expected key=GB/s")
    return speeds


def resolve_topology(
    spec: str | Path, *, workers: int | None = None, device: str = "cpu", speeds: dict[str, float] | None = None
) -> Topology:
    """The topology ``spec`` names (see the module docstring).

    Args:
        spec: ``detect``, a preset name or a YAML file.
        workers: the job's processes on this machine; ``detect`` on a CPU gives each its own
            CPU worker device (default: one per core).
        device: ``cpu`` or ``cuda``, where the job computes (``detect`` on ``cuda`` reads the
            GPUs' wiring from ``nvidia-smi``), or ``auto``: whatever this machine has.
        speeds: link speeds in GB/s by link kind (see :func:`parse_speeds`), for presets only.
    """
    if device not in ("cpu", "cuda", "auto"):
        raise TopologyError(f"a topology is resolved for a cpu or cuda job, or auto, not {device!r}")
    if str(spec) != DETECT:
        return load_topology(spec, speeds)
    if device == "cpu":
        return load_topology(f"localhost-cpu:{workers or os.cpu_count() or 1}", speeds)
    if speeds:  # the machine as it is: its GPUs' link kinds come from nvidia-smi
        raise TopologyError(
            "--speeds overrides a preset's link speeds, not a detected topology: write it with "
            "`commgraph topo detect --out FILE.yaml` and edit the file, or name a preset"
        )
    from commgraph.topology.detect import detect

    return detect()


def speeds_of(spec: str | Path, topology: Topology, speeds: dict[str, float] | None = None) -> str:
    """One line naming the rule that set ``topology``'s link speeds and the speeds it set: for a
    preset, each speed key its links use with its GB/s and source
    (:func:`~commgraph.topology.presets.preset_speeds`); for a file or a detected machine, where
    the figures come from."""
    rule = speeds_rule(spec, speeds)
    if rule is not None:
        return rule.describe({link.kind for link in topology.links})
    return "as detected on this machine" if str(spec) == DETECT else f"as {spec} gives them"


def speeds_rule(spec: str | Path, speeds: dict[str, float] | None = None) -> PresetSpeeds | None:
    """The speeds preset ``spec`` is built with and their sources; None for ``detect`` or a file."""
    if str(spec) == DETECT or is_topology_file(spec):
        return None
    return preset_speeds(str(spec), speeds)
