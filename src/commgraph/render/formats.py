"""A :class:`~commgraph.render.table.Report` written in one of :data:`FORMATS`:

- ``text``: each table under a header row, numbers right-aligned and scaled to the value, the
  chosen row marked ``*`` with a footnote saying what chose it; an empty line between two tables,
  and the report's lines around them;
- ``json``: the report's data, one object on one line (a list: JSON Lines, one object a line);
- ``csv``: each table with a header row naming the base unit (``modeled (s)``), raw values, and a
  ``chosen`` column where a row is chosen; tables are separated by an empty line;
- ``md``: each table as a Markdown table (header, separator row), the chosen row marked ``\\*``,
  and the lines around them as paragraphs.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable

from commgraph.render.table import Report, Table, raw

FORMATS = ("text", "json", "csv", "md")
FORMAT_HELP = (
    "text: tables with units scaled to the value; json: one object (a list: one a line); csv and md: the tables"
)
MARK = "*"


def render(report: Report, fmt: str = "text") -> str:
    """``report`` in ``fmt`` (one of :data:`FORMATS`), without a final newline."""
    return WRITERS[fmt](report)


def _json(report: Report) -> str:
    if isinstance(report.data, list):
        return "\n".join(json.dumps(item) for item in report.data)
    return json.dumps(report.data)


def _text(report: Report) -> str:
    tables = "\n\n".join(text_table(t) for t in report.tables)  # an empty line between two tables
    return "\n".join([*report.before, *([tables] if tables else []), *report.after])


def _md(report: Report) -> str:
    blocks = [*report.before, *(md_table(t) for t in report.tables), *report.after]
    return "\n\n".join(blocks)


def _csv(report: Report) -> str:
    return "\n".join(csv_table(t) for t in report.tables).rstrip("\n")


def _shown(table: Table) -> list[list[str]]:
    """Each row's cells as a person reads them."""
    return [[c.show(v) for c, v in zip(table.columns, table.cells(row))] for row in table.rows]


def _footnote(table: Table) -> str:
    return f"{MARK} chosen by {table.chosen_by}" if table.chosen is not None else ""


def text_table(table: Table) -> str:
    """``table`` as aligned text: a title line, the header row, the rows (the chosen one marked)."""
    grid = [[c.title for c in table.columns], *_shown(table)]
    widths = [max(len(line[k]) for line in grid) for k in range(len(table.columns))]
    marked = table.chosen is not None

    def line(cells: list[str], mark: str) -> str:
        padded = (
            cell.rjust(width) if column.numeric else cell.ljust(width)
            for k, (cell, width, column) in enumerate(zip(cells, widths, table.columns))
        )
        return ((mark + " ") if marked else "") + "  ".join(padded).rstrip()

    lines = [table.title] if table.title else []
    lines.append(line(grid[0], " "))
    lines += [line(cells, MARK if k == table.chosen else " ") for k, cells in enumerate(grid[1:])]
    return "\n".join([*lines, *filter(None, [_footnote(table)])])


def md_table(table: Table) -> str:
    """``table`` as a Markdown table under its title, the chosen row's first cell marked."""
    rows = _shown(table)
    if table.chosen is not None:
        rows[table.chosen][0] = f"{rows[table.chosen][0]} \\{MARK}"
    align = ["---:" if c.numeric else ":---" for c in table.columns]
    lines = [f"**{table.title}**", ""] if table.title else []
    lines += ["| " + " | ".join(c.title for c in table.columns) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |" for cells in rows]
    footnote = _footnote(table)
    return "\n".join([*lines, *(["", "\\" + footnote] if footnote else [])])


def csv_table(table: Table) -> str:
    """``table`` as CSV: the header row, then raw values (a ``chosen`` column of 0/1 when a row is chosen)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    chosen = table.chosen is not None
    writer.writerow([c.header() for c in table.columns] + (["chosen"] if chosen else []))
    for k, row in enumerate(table.rows):
        cells = ["" if (v := raw(cell)) is None else v for cell in table.cells(row)]
        writer.writerow(cells + ([int(k == table.chosen)] if chosen else []))
    return out.getvalue()


WRITERS: dict[str, Callable[[Report], str]] = {"text": _text, "json": _json, "csv": _csv, "md": _md}
