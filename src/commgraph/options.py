"""Options as dataclass fields: each field is one command-line flag, with its help, type and
choices, so the parser's flags (:meth:`Options.add_arguments`), the options built from parsed
arguments (:meth:`Options.from_args`) and the command line handed to a worker process
(:meth:`Options.to_argv`) all come from one definition. Checks belong in ``__post_init__``, so
options are validated once, when they are made; a float option that is not finite (``inf``,
``nan``) is refused for every field.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import MISSING, field, fields
from pathlib import Path


def option(help: str, *, type=None, choices=None, metavar=None, cli: bool = True, **default):
    """A dataclass field with its flag ``--name-with-dashes`` (``cli=False``: no flag); a field
    without a default is a required flag."""
    return field(**default, metadata={"help": help, "type": type, "choices": choices, "metavar": metavar, "cli": cli})


def flag(name: str) -> str:
    """The command-line flag of field ``name``, without its dashes."""
    return name.replace("_", "-")


class Options:
    """Mixin for a dataclass whose fields are made with :func:`option`; a value outside a field's
    choices is refused when the options are made (``error``: the exception to raise)."""

    error: type[Exception] = ValueError

    def __post_init__(self) -> None:
        for f in self.flags():
            choices, value = f.metadata["choices"], getattr(self, f.name)
            if choices and value is not None and value not in choices:
                raise self.error(f"unknown --{flag(f.name)} {value!r}; choose one of {', '.join(choices)}")
            if isinstance(value, float) and not math.isfinite(value):
                raise self.error(f"--{flag(f.name)} must be a finite number; got {value}")

    @classmethod
    def flags(cls) -> list:
        return [f for f in fields(cls) if f.metadata.get("cli")]

    @classmethod
    def add_arguments(
        cls, parser: argparse.ArgumentParser | argparse._ArgumentGroup, skip: tuple[str, ...] = ()
    ) -> None:
        """One flag per field, its default shown in its help (not for the fields in ``skip``,
        which keep their defaults)."""
        for f in cls.flags():
            if f.name in skip:
                continue
            meta = f.metadata
            default = None if f.default is MISSING else f.default
            if meta["type"] is bool:
                parser.add_argument(f"--{flag(f.name)}", action="store_true", help=meta["help"])
                continue
            shown = "" if default is None else f" (default {default})"
            parser.add_argument(
                f"--{flag(f.name)}",
                type=meta["type"] or str,
                choices=meta["choices"],
                metavar=meta["metavar"],
                default=default,
                help=meta["help"] + shown,
                required=f.default is MISSING,
            )

    @classmethod
    def values(cls, args: argparse.Namespace) -> dict:
        """This class's fields as parsed into ``args`` (paths as strings)."""
        values = {f.name: getattr(args, f.name) for f in cls.flags() if hasattr(args, f.name)}
        return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides):
        return cls(**{**cls.values(args), **overrides})

    def to_argv(self) -> list[str]:
        """The flags that give these options (defaults left out)."""
        argv = []
        for f in self.flags():
            value = getattr(self, f.name)
            if value == (None if f.default is MISSING else f.default):
                continue
            argv += [f"--{flag(f.name)}"] if f.metadata["type"] is bool else [f"--{flag(f.name)}", str(value)]
        return argv
