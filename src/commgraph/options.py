"""Options as dataclass fields: each field is one command-line flag, with its help, type and
choices, so the parser's flags (:meth:`Options.add_arguments`) and the options built from parsed
arguments (:meth:`Options.from_args`) come from one definition (a worker process gets its options
as data, not flags). A field whose flag is text to be read
(``--fanout 10,5``) names its ``parse``, which :meth:`Options.values` applies once, so the field
holds the parsed value (``(10, 5)``). Checks belong in ``__post_init__``, so options are validated
once, when they are made; a float option that is not finite (``inf``, ``nan``) is refused for
every field. Errors name the fields (``batch_size must be >= 1``, :attr:`CommgraphError.parameters
<commgraph.errors.CommgraphError>`); the CLI spells them as its flags.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import MISSING, field, fields
from pathlib import Path

# our launcher hands its workers their options as data (the job's store) and sets this variable to
# 1 in their environment: a worker's command line is the command and its partition set alone, so
# its parser requires no option
DATA_ENV = "COMMGRAPH_JOB_DATA"


def option(
    help: str,
    *,
    type=None,
    choices=None,
    metavar=None,
    cli: bool = True,
    parse=None,
    name: str | None = None,
    **default,
):
    """A dataclass field with its flag ``--name-with-dashes`` (``name``: the flag's name where it
    is not the field's; ``cli=False``: no flag); a field without a default is a required flag.
    ``parse`` turns the flag's text into the field's value."""
    meta = {"help": help, "type": type, "choices": choices, "metavar": metavar, "cli": cli, "parse": parse}
    return field(**default, metadata={**meta, "flag": flag(name) if name else None})


def flag(name: str) -> str:
    """The command-line flag of field ``name``, without its dashes."""
    return name.replace("_", "-")


def field_flag(f) -> str:
    """Dataclass field ``f``'s flag, with its dashes."""
    return "--" + (f.metadata.get("flag") or flag(f.name))


class Options:
    """Mixin for a dataclass whose fields are made with :func:`option`; a value outside a field's
    choices is refused when the options are made (``error``: the exception to raise)."""

    error: type[Exception] = ValueError

    def __post_init__(self) -> None:
        for f in self.flags():
            choices, value = f.metadata["choices"], getattr(self, f.name)
            if choices and value is not None and value not in choices:
                self.refuse(f"unknown {f.name} {value!r}; choose one of {', '.join(choices)}", f.name)
            if isinstance(value, float) and not math.isfinite(value):
                self.refuse(f"{f.name} must be a finite number; got {value}", f.name)

    def refuse(self, message: str, *names: str) -> None:
        """Raise this class's error, ``message`` naming the fields ``names``."""
        raise self.error(message, parameters=names)

    @classmethod
    def flags(cls) -> list:
        return [f for f in fields(cls) if f.metadata.get("cli")]

    @classmethod
    def add_arguments(
        cls, parser: argparse.ArgumentParser | argparse._ArgumentGroup, skip: tuple[str, ...] = ()
    ) -> None:
        """One flag per field, its default shown in its help (not for the fields in ``skip``,
        which keep their defaults). A worker our launcher started (:data:`DATA_ENV`) requires none."""
        worker = os.environ.get(DATA_ENV) == "1"
        for f in cls.flags():
            if f.name in skip:
                continue
            meta = f.metadata
            default = None if f.default is MISSING else f.default
            if meta["type"] is bool:
                parser.add_argument(field_flag(f), dest=f.name, action="store_true", help=meta["help"])
                continue
            shown = "" if default is None else f" (default {default})"
            parser.add_argument(
                field_flag(f),
                dest=f.name,
                type=meta["type"] or str,
                choices=meta["choices"],
                metavar=meta["metavar"],
                default=default,
                help=meta["help"] + shown,
                required=f.default is MISSING and not worker,
            )

    @classmethod
    def values(cls, args: argparse.Namespace) -> dict:
        """This class's fields as parsed into ``args`` (paths as strings, text a field parses parsed)."""
        values = {f.name: getattr(args, f.name) for f in cls.flags() if hasattr(args, f.name)}
        parses = {f.name: f.metadata["parse"] for f in cls.flags() if f.metadata["parse"]}
        return {
            k: str(v) if isinstance(v, Path) else parses[k](v) if k in parses and isinstance(v, str) else v
            for k, v in values.items()
        }

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides):
        return cls(**{**cls.values(args), **overrides})
