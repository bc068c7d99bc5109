"""The documentation stands on the repository alone: no page of ``docs/`` (``docs/benchmarks/``
included), no ``benchmarks/*.md``, no docstring of ``benchmarks/*.py`` and not the README names a
temporary folder or a path outside the checkout, and the benchmark pages say nothing of who ran what.
``benchmarks/RESULTS.md`` is an index of at most 150 lines whose every link leads to a section that
exists. Pure file reading."""

import ast
import re
from pathlib import Path

import pytest

from test_docs import LINK, anchors

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
BOOK = ROOT / "docs" / "benchmarks"
OUTSIDE = re.compile(r"/tmp/|\.\./shared|(?<![\w.])/work/")
WHO = re.compile(r"\bthis stop\b|\bthe lead\b|\bhelpers?\b|\bsessions?\b|\bbranch `", re.I)
INDEX_LINES = 150


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "benchmarks").glob("*.md"))]


def docstrings(source: str) -> list[str]:
    """Every docstring of a Python module: the module's and each class's and function's."""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [
        text for node in ast.walk(ast.parse(source)) if isinstance(node, kinds) and (text := ast.get_docstring(node))
    ]


def outside_paths(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if OUTSIDE.search(line)]


@pytest.mark.parametrize("document", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_temporary_or_outside_path(document):
    assert not outside_paths(document.read_text()), f"{document.relative_to(ROOT)} names a path outside the repository"


@pytest.mark.parametrize("script", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda p: p.name)
def test_no_benchmark_docstring_names_a_temporary_or_outside_path(script):
    found = [line for text in docstrings(script.read_text()) for line in outside_paths(text)]
    assert not found, f"{script.name}'s docstrings name paths outside the repository: {found}"


@pytest.mark.parametrize("page", [RESULTS, *sorted(BOOK.glob("*.md"))], ids=lambda p: p.name)
def test_benchmark_pages_say_nothing_of_who_ran_what(page):
    found = [line.strip() for line in page.read_text().splitlines() if WHO.search(line)]
    assert not found, f"{page.name}: {found}"


def test_the_results_file_is_a_short_index_whose_links_lead_to_sections():
    text = RESULTS.read_text()
    assert len(text.splitlines()) <= INDEX_LINES
    links = [target for target in LINK.findall(text) if not target.startswith(("http://", "https://"))]
    sections = [target for target in links if "#" in target]
    assert len(sections) >= 10, "the summary table links each headline figure to its section"
    for target in links:
        path, _, anchor = target.partition("#")
        page = (RESULTS.parent / path).resolve()
        assert page.exists() and ROOT in page.parents, f"RESULTS.md links {target}: no such file here"
        assert not anchor or anchor in anchors(page), f"RESULTS.md links {target}: no such section"


@pytest.mark.parametrize("page", sorted(BOOK.glob("*.md")), ids=lambda p: p.name)
def test_benchmark_pages_link_only_to_what_exists(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists() and ROOT in linked.parents, f"{page.name} links {target}: no such file here"
        assert not anchor or anchor in anchors(linked), f"{page.name} links {target}: no such section"


def test_the_checks_catch_what_they_look_for():
    assert outside_paths("run it in /tmp/x\nfine line\nsee ../shared/seeds\nor /work/main") == [
        "run it in /tmp/x",
        "see ../shared/seeds",
        "or /work/main",
    ]
    assert not outside_paths("a relative work/ folder, tmp/ and docs/benchmarks/")
    source = '"""module /tmp/a"""\ndef f():\n    """fn"""\n    x = "/tmp/not-a-docstring"\n'
    assert docstrings(source) == ["module /tmp/a", "fn"]
    assert WHO.search("measured by the lead at this stop") and not WHO.search("a leading term")


CONFLICT = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.M)


def test_no_file_holds_a_merge_conflict_marker():
    """A merge left unresolved shows as ``<<<<<<<``, ``=======`` and ``>>>>>>>`` lines."""
    texts = [*markdown_files(), *ROOT.glob("*.toml"), *ROOT.glob("Makefile")]
    for folder in ("src", "tests", "benchmarks", "examples"):
        texts += sorted((ROOT / folder).rglob("*.py"))
    marked = [str(path.relative_to(ROOT)) for path in texts if CONFLICT.search(path.read_text())]
    assert marked == []
