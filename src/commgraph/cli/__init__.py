"""The ``commgraph`` command line: one module per subcommand, wired together in :mod:`.main`."""

import argparse


def describe(doc: str | None) -> str:
    """A module docstring as ``--help`` text: reStructuredText literals shown plain."""
    return (doc or "").replace("``", "")


class DefaultsFormatter(argparse.HelpFormatter):
    """Appends ``(default X)`` to every option whose help does not state its default already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text or text == argparse.SUPPRESS:
            return text
        if not action.option_strings and action.nargs not in ("?", "*"):
            return text
        return f"{text} (default %(default)s)"


class Parser(argparse.ArgumentParser):
    """Every commgraph parser and subparser (``add_subparsers`` makes more of the same class)."""

    def __init__(self, *args, formatter_class=DefaultsFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)
