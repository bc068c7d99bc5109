"""A report as data: typed tables (columns with units, rows, the chosen row) and the lines around
them, which :func:`commgraph.render.render` writes as text, JSON, CSV or Markdown.

A cell holds the raw value in its column's base unit (seconds, bytes, GB/s, a fraction for ``%``);
CSV and JSON carry it as is, text and Markdown scale it (:mod:`commgraph.render.units`). A
:class:`Shown` cell carries a raw value and the words a person reads in its place (``slower``
where a share would be negative, ``none`` where a time of zero would read as the fastest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from commgraph.render import units

UNITS = ("s", "B", "GB/s", "Gbit/s", "x", "%", "", "text")


@dataclass(frozen=True)
class Shown:
    """A cell whose ``text`` replaces its ``value`` in text and Markdown (CSV keeps ``value``)."""

    value: Any
    text: str


@dataclass(frozen=True)
class Column:
    """A column of a :class:`Table`.

    Args:
        key: the field of each row the column shows.
        title: the header a person reads.
        unit: ``s`` (scaled to s/ms/us/ns), ``B`` (scaled to B/KB/MB/GB, decimal), ``GB/s`` and
            ``Gbit/s`` (four significant figures, as link speeds are given), ``x`` (a ratio), ``%``
            (a fraction shown as a percentage, ``94.5%``), ``""`` (a plain number, four
            significant figures) or ``text``.
    """

    key: str
    title: str
    unit: str = ""

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"column {self.key!r}: unit {self.unit!r} is not one of {UNITS}")

    @property
    def numeric(self) -> bool:
        return self.unit != "text"

    def header(self) -> str:
        """The CSV header: the title with the base unit of the raw values (``modeled (s)``)."""
        base = {"%": "fraction", "": "", "text": ""}.get(self.unit, self.unit)
        return f"{self.title} ({base})" if base else self.title

    def show(self, value: Any) -> str:
        """``value`` as a person reads it: scaled, with its unit; ``-`` for a missing value."""
        if isinstance(value, Shown):
            return value.text
        if value is None:
            return "" if self.unit == "text" else "-"
        if self.unit == "text" or isinstance(value, str):
            return str(value)
        if isinstance(value, float) and not math.isfinite(value):
            return "unbounded" if value > 0 else str(value)
        if self.unit == "s":
            return units.seconds(value)
        if self.unit == "B":
            return units.nbytes(value)
        if self.unit == "%":
            return f"{value:.1%}" if value != 0 else "0%"
        if self.unit == "x":
            return f"{value:.3f}x"
        if isinstance(value, int):
            return f"{value:,}"
        return f"{value:.4g} {self.unit}".rstrip()  # a plain number or a rate: four significant figures


def raw(value: Any) -> Any:
    """A cell's raw value (a :class:`Shown` cell's ``value``)."""
    return value.value if isinstance(value, Shown) else value


@dataclass(frozen=True)
class Table:
    """Rows under typed columns, one of them perhaps chosen.

    Args:
        columns: the columns, the first naming the row (a planner, a scheduler, a part).
        rows: one mapping per row from each column's ``key`` to its cell.
        chosen: the index of the chosen row, or None.
        chosen_by: what chose it, for the footnote (``--plan auto``).
        title: a line above the table (text and Markdown).
    """

    columns: tuple[Column, ...]
    rows: tuple[dict, ...]
    chosen: int | None = None
    chosen_by: str = ""
    title: str = ""

    def cells(self, row: dict) -> list[Any]:
        """A row's cells in column order (None where the row has none)."""
        return [row.get(column.key) for column in self.columns]


@dataclass(frozen=True)
class Report:
    """What a command prints: ``data`` (its JSON object, or a list of them written as JSON Lines),
    its tables, and lines before and after them (text and Markdown only)."""

    data: dict | list
    tables: tuple[Table, ...] = ()
    before: tuple[str, ...] = field(default_factory=tuple)
    after: tuple[str, ...] = field(default_factory=tuple)
