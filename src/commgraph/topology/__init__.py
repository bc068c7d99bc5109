"""Hardware topology: devices, links and routes as plain data; presets, YAML files and detection.

Depends on nothing of ours but :mod:`commgraph.errors` (numpy/yaml only).
"""

from commgraph.topology.files import load_topology, read_yaml, write_yaml
from commgraph.topology.model import DEVICE_KINDS, LINK_KINDS, Calibration, Device, Hop, Link, Topology
from commgraph.topology.presets import (
    DEFAULT_SPEEDS,
    PresetSpeeds,
    join_hosts,
    load_preset,
    preset_names,
    preset_speeds,
)
from commgraph.topology.resolve import DETECT, SPEED_KEYS, parse_speeds, resolve_topology, speeds_of, speeds_rule

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
    "PresetSpeeds",
    "Topology",
    "join_hosts",
    "load_preset",
    "load_topology",
    "parse_speeds",
    "preset_names",
    "preset_speeds",
    "read_yaml",
    "resolve_topology",
    "speeds_of",
    "speeds_rule",
    "write_yaml",
]
