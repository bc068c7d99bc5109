"""Topology YAML files, and resolving what a user names (a preset or a file) to a Topology."""

from __future__ import annotations

from pathlib import Path

import yaml

from commgraph.atomic import atomic_write
from commgraph.errors import TopologyError
from commgraph.topology.model import Topology
from commgraph.topology.presets import load_preset


def to_yaml(topology: Topology) -> str:
    """``topology`` as YAML text (:meth:`Topology.to_dict`'s fields, in order)."""
    return yaml.safe_dump(topology.to_dict(), sort_keys=False, default_flow_style=None, width=120)


def write_yaml(topology: Topology, path: str | Path) -> None:
    """Write ``topology`` to ``path`` as YAML, atomically; :func:`read_yaml` reads it back exactly."""
    with atomic_write(path) as handle:
        handle.write(to_yaml(topology).encode())


def load_yaml(path: str | Path, error: type[Exception] = TopologyError):
    """A YAML file's data; a missing or malformed file raises ``error`` naming it."""
    path = Path(path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}); save the YAML file as UTF-8") from None
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML{_where(exc)}") from None


def _where(exc: yaml.YAMLError) -> str:
    """Where PyYAML found the fault and what it is, on one line (its message spans several)."""
    mark = getattr(exc, "problem_mark", None)
    problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
    return f" at line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else f": {problem}"


def read_yaml(path: str | Path) -> Topology:
    """The topology a YAML file describes; errors name the file and the entry at fault."""
    return Topology.from_dict(load_yaml(path), source=str(path))


def is_topology_file(spec: str | Path) -> bool:
    """Whether ``spec`` names a YAML file (by its suffix, or an existing file), not a preset."""
    text = str(spec)
    return text.endswith((".yaml", ".yml")) or Path(text).is_file()


def load_topology(spec: str | Path, speeds: dict[str, float] | None = None) -> Topology:
    """A preset name (``dgx1-v100``, ``2xdgx1-v100-ib``, ``localhost-cpu:4``, ...) or a YAML file."""
    text = str(spec)
    if is_topology_file(text):
        if speeds:
            raise TopologyError("speed overrides apply to presets; edit the YAML file instead")
        return read_yaml(text)
    return load_preset(text, speeds)
