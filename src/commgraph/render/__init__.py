"""One renderer for every report a command prints: typed tables (:mod:`~commgraph.render.table`)
written as text, JSON, CSV or Markdown (:mod:`~commgraph.render.formats`), quantities scaled for a
reader (:mod:`~commgraph.render.units`), and the pictures of reports
(:mod:`~commgraph.render.pictures`). It imports nothing of the house but :mod:`commgraph.plotting`,
so every room can hand it a report."""

from commgraph.render.formats import FORMAT_HELP, FORMATS, render
from commgraph.render.table import Column, Report, Shown, Table

__all__ = ["FORMAT_HELP", "FORMATS", "Column", "Report", "Shown", "Table", "render"]
