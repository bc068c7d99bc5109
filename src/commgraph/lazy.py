"""Packages whose names load on first use (PEP 562), so that importing a package for one light
name (a tuple of choices, a dataclass of options) does not import torch with the rest: a command's
parser is built, and ``--dry-run`` answers, without loading what only its workers need."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def exports(package: str, names: dict[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: each exported name loads from its submodule
    (``names``: exported name -> submodule, relative to the package) when first asked for.

    Raises (from the returned function):
        AttributeError: a name the package does not export.
    """

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{names[name]}")
        # every name of that submodule kept on the package: importing a submodule sets it as the
        # package's attribute, which would hide an exported name of the same spelling afterwards
        # (``commgraph.pyg.full_graph``, the function, after ``commgraph.pyg.FullGraph`` loaded it)
        for exported, source in names.items():
            if source == names[name]:
                setattr(sys.modules[package], exported, getattr(module, exported))
        return getattr(module, name)

    return __getattr__
