"""The house's size rules: no source file in ``src/`` or ``benchmarks/`` over 600 lines, and no
function in ``src/commgraph/cli/`` over 40 lines (the CLI parses and renders; the work lives in the
package that owns it)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 600
MAX_CLI_FUNCTION_LINES = 40


def sources() -> list[Path]:
    return sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def long_functions(source: str, limit: int) -> list[tuple[str, int, int]]:
    """Every function (methods and nested ones too) of ``source`` longer than ``limit`` lines:
    its name, first line and length, decorators included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            length = node.end_lineno - first + 1
            if length > limit:
                found.append((node.name, first, length))
    return found


def test_no_source_file_is_over_600_lines():
    over = {
        path.relative_to(ROOT).as_posix(): lines for path in sources() if (lines := line_count(path)) > MAX_FILE_LINES
    }
    assert not over, f"split these by concern (at most {MAX_FILE_LINES} lines a file): {over}"


def test_no_cli_function_is_over_40_lines():
    over = [
        f"{path.relative_to(ROOT)}:{first} {name} ({length} lines)"
        for path in sorted((ROOT / "src" / "commgraph" / "cli").rglob("*.py"))
        for name, first, length in long_functions(path.read_text(), MAX_CLI_FUNCTION_LINES)
    ]
    assert not over, f"move the work into the package that owns it, keep parsing and printing here: {over}"


@pytest.mark.parametrize(
    ("body_lines", "decorated", "expected"),
    [(38, False, []), (39, False, [("f", 1, 40)]), (38, True, [("f", 1, 40)])],
)
def test_a_function_counts_its_decorators_and_body(body_lines, decorated, expected):
    """The check counts from a function's first decorator to its last line: a 39-line body under
    its ``def`` is 40 lines and is caught at a limit of 39."""
    source = ("@staticmethod\n" if decorated else "") + "def f():\n" + "    x = 1\n" * body_lines
    assert long_functions(source, 39) == expected
