"""Hardware topology: devices, links and routes as plain data; presets, YAML files and detection.

Depends on nothing of ours but :mod:`commgraph.errors` (numpy/yaml only).
"""

from commgraph.topology.files import load_topology, read_yaml, write_yaml
from commgraph.topology.model import DEVICE_KINDS, LINK_KINDS, Calibration, Device, Hop, Link, Topology
from commgraph.topology.presets import DEFAULT_SPEEDS, join_hosts, load_preset, preset_names
from commgraph.topology.resolve import DETECT, SPEED_KEYS, parse_speeds, resolve_topology

__all__ = [
    "DEFAULT_SPEEDS",
    "DETECT",
    "DEVICE_KINDS",
    "SPEED_KEYS",
    "LINK_KINDS",
    "Calibration",
    "Device",
    "Hop",
    "Link",
    "Topology",
    "join_hosts",
    "load_preset",
    "load_topology",
    "parse_speeds",
    "preset_names",
    "read_yaml",
    "resolve_topology",
    "write_yaml",
]
