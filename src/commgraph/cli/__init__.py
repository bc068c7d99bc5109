"""The ``commgraph`` command line: one module per subcommand, wired together in :mod:`.main`."""

import argparse
import re


def describe(doc: str | None) -> str:
    """A module docstring as ``--help`` text: reStructuredText literals shown plain."""
    return (doc or "").replace("``", "")


class DefaultsFormatter(argparse.HelpFormatter):
    """Appends ``(default X)`` to every option with a default (not None, False or suppressed)
    whose help does not show it in that form already. An option whose default is computed at run
    time has None here and says ``(default: how)`` in its help."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.default is None
            or action.default is False
            or action.default == argparse.SUPPRESS
            or text == argparse.SUPPRESS
            or f"(default {action.default})" in text
        ):
            return text
        if not action.option_strings and action.nargs not in ("?", "*"):
            return text
        return f"{text} (default %(default)s)"


class Parser(argparse.ArgumentParser):
    """Every commgraph parser and subparser (``add_subparsers`` makes more of the same class)."""

    def __init__(self, *args, formatter_class=DefaultsFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)
        # a value such as ``--fanout -1,-1`` is a list of negative numbers, not an option
        self._negative_number_matcher = re.compile(r"^-\d+(,-?\d+)*$|^-\d*\.\d+$")

    def parse_known_args(self, args=None, namespace=None):
        """As argparse's, except that a command (a parser without subcommands) refuses what it does
        not know itself, so the error names that command, not ``commgraph``."""
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str):
        """A usage error in the one-line form of every other error (exit 2), pointing at the
        command's own ``--help``."""
        self.exit(2, f"commgraph: error: {message} (see {self.prog} --help)\n")


def pick_names(text: str, known, what: str, error: type[Exception]) -> list[str]:
    """``all`` or a comma-separated subset of ``known`` (``what`` names them in the error)."""
    names = list(known) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise error(f"unknown {what}(s) {unknown}; use 'all' or some of {', '.join(known)}")
    return names


def in_flags(error: Exception, parser: argparse.ArgumentParser) -> str:
    """``error``'s message with each parameter it names (its ``parameters``, see
    :class:`~commgraph.errors.CommgraphError`) spelt as ``parser``'s flag for it (``fanouts``:
    ``--fanout``): the one mapping from the library's names to the command line's."""
    text, flags = str(error), option_flags(parser)
    for name in getattr(error, "parameters", ()):
        if name in flags:
            text = re.sub(rf"(?<![\w./\[`-]){re.escape(name)}(?![\w./\]`-])", flags[name], text)  # not in a path
    return text


def option_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The flag of each option of ``parser`` and of its subcommands, by the name it is parsed into."""
    flags = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags.update(option_flags(command))
        elif action.option_strings:
            flags.setdefault(action.dest, max(action.option_strings, key=len))
    return flags


def command_here(argv: list[str]) -> int:
    """The ``commgraph`` command ``argv`` run in this process, its exit code: how the launcher runs
    a job's one rank without forking one (:func:`~commgraph.runtime.launch.run_here`)."""
    from commgraph.cli.main import main

    return main(argv)
