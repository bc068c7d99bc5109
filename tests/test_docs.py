"""The documentation works as written: every ``bash runnable`` block of a ``docs/*.md`` page runs (from a
temporary folder, with ``commgraph`` on PATH, stopping at the first failing command as ``set -e`` does),
the README is a front door of at most 150 lines whose links all lead to pages that exist, and no page
shows a command in its old spelling."""

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from commgraph.cli.main import ALIASES
from deadlines import scaled
from warm import warm_commgraph

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
BLOCK = re.compile(r"^```bash runnable\n(.*?)^```$", re.S | re.M)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```$", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGE_SECONDS = 150  # one page's blocks on a quiet machine, scaled by the load (each command imports torch: ~8 s)
TOPICS = (
    "datasets",
    "partitioning",
    "topologies",
    "planning",
    "simulation",
    "llm",
    "multipath",
    "training",
    "features",
    "sampling",
    "memory",
    "out-of-core",
    "analytics",
    "api",
    "testing",
    "architecture",
)


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (outside code fences): lower case, spaces as
    hyphens, every other character but letters, digits and hyphens dropped."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}


def runnable_blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def weight(commands: str) -> tuple[int, int]:
    """How long a page's commands take, roughly, to order the pages longest first: the jobs that
    start workers (``commgraph train``, ``analyze`` or ``predict`` not run ``--dry-run``), then the
    commands (each a fresh process that imports what it needs)."""
    lines = [line.split() for line in commands.splitlines() if line.startswith("commgraph ")]
    jobs = sum(words[1] in ("train", "analyze", "predict") and "--dry-run" not in words for words in lines)
    return jobs, len(lines)


def run_block(commands: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        ["bash", "-c", "set -e -o pipefail -x\n" + commands],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(PAGE_SECONDS),
    )


@pytest.fixture
def doc_env(tmp_path):
    """The environment a page's blocks run in: ``commgraph`` on ``PATH`` is a warm one (:mod:`warm`)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "COMMGRAPH_HOME": str(tmp_path / "home"),
        "MPLBACKEND": "Agg",
    }
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(name, None)
    with warm_commgraph(tmp_path / "bin") as folder:
        env["PATH"] = os.pathsep.join((str(folder), env.get("PATH", "")))
        yield env


@pytest.mark.multiproc
def test_every_documented_runnable_command_works(tmp_path, doc_env):
    jobs = {page.name: "\n".join(runnable_blocks(page.read_text())) for page in pages()}
    jobs = {name: commands for name, commands in jobs.items() if commands.strip()}
    assert len(jobs) >= 5, f"only {sorted(jobs)} have runnable blocks"
    jobs = dict(sorted(jobs.items(), key=lambda job: weight(job[1]), reverse=True))  # the longest start first
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores: two pages at a time
        done = dict(zip(jobs, pool.map(lambda name: run_block(jobs[name], tmp_path / name, doc_env), jobs)))
    failed = {name: result.stderr[-2000:] for name, result in done.items() if result.returncode != 0}
    assert not failed, failed
    assert all(result.stdout.strip() for result in done.values())


@pytest.mark.multiproc
def test_a_block_stops_at_its_first_failing_command(tmp_path, doc_env):
    result = run_block("echo before\nfalse\necho after\n", tmp_path, doc_env)
    assert result.returncode != 0 and result.stdout == "before\n"
    result = run_block("false | cat\necho after\n", tmp_path, doc_env)
    assert result.returncode != 0 and "after" not in result.stdout


def test_pages_that_start_workers_weigh_most():
    commands = (
        "commgraph partition make cora --out c\ncommgraph train c --dry-run\ncommgraph analyze c --algo bfs\ngrep x y\n"
    )
    assert weight(commands) == (1, 3)
    assert weight("commgraph topo list\n") < weight("commgraph predict c --checkpoint-dir ck\n")


def test_blocks_are_found_only_when_marked_runnable():
    text = "```bash runnable\na\nb\n```\n\n```bash\nc\n```\n\n```python runnable\nd\n```\n\n```bash runnable\ne\n```\n"
    assert runnable_blocks(text) == ["a\nb\n", "e\n"]


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert "make demo" in text and "make test" in text and "| GRAPH |" in text
    linked = {target.split("#")[0] for target in LINK.findall(text) if not target.startswith("http")}
    assert {f"docs/{topic}.md" for topic in TOPICS} <= linked


@pytest.mark.parametrize("document", [README, *pages()], ids=lambda p: p.name)
def test_links_lead_to_pages_that_exist_inside_the_repository(document):
    text = document.read_text()
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        page = (document.parent / path).resolve() if path else document
        assert page.is_file() and ROOT in page.parents, f"{document.name} links {target}: no such file here"
        if anchor and page.suffix == ".md":
            assert anchor in anchors(page), f"{document.name} links {target}: no such section"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_each_page_has_one_title_and_plain_sections(page):
    prose = FENCE.sub("", page.read_text())
    titles = re.findall(r"^# .+$", prose, re.M)
    assert len(titles) == 1 and prose.startswith("# "), f"{page.name}: {titles}"


@pytest.mark.parametrize("document", [README, *pages()], ids=lambda p: p.name)
def test_no_command_is_shown_in_its_old_spelling(document):
    old = [" ".join(words) for words in ALIASES]
    for block in FENCE.findall(document.read_text()):
        for line in block.splitlines():
            words = line.split()
            if words[:1] != ["commgraph"]:
                continue
            rest = " ".join(words[1:])
            assert not any(rest == o or rest.startswith(o + " ") for o in old), line
            assert words[1:2] != ["partition"] or words[2:3] in (["make"], ["info"]), line


def test_the_architecture_page_is_the_shared_picture():
    shared = ROOT.parent / "shared" / "ARCHITECTURE.md"
    if not shared.is_file():
        pytest.skip("no ../shared/ARCHITECTURE.md next to this checkout")
    assert (DOCS / "architecture.md").read_text() == shared.read_text()


@pytest.mark.multiproc
def test_the_warm_commgraph_answers_as_the_installed_one(tmp_path, doc_env):
    """The same folder, environment, output and exit code: the warm ``commgraph`` the pages run and
    a fresh ``python -m commgraph`` write the same file, print the same and fail the same."""
    lines = (
        "mkdir -p sub && cd sub\n"
        "commgraph graph info cora --format json > info.json\n"
        "commgraph partition make cora --parts 2 --method chunk --out set > /dev/null 2>&1\n"
        'commgraph topo show || echo "exit $?"\n'
    )
    fresh = f'commgraph() {{ "{sys.executable}" -m commgraph "$@"; }}\n'
    warm = run_block(lines, tmp_path / "warm", doc_env)
    fresh = run_block(fresh + lines, tmp_path / "fresh", doc_env)
    for run in (warm, fresh):
        assert run.returncode == 0 and run.stdout == "exit 2\n", run.stderr
    said = [[line for line in run.stderr.splitlines() if not line.startswith("+")] for run in (warm, fresh)]
    assert said[0] == said[1] and "the following arguments are required: --topology" in said[0][-1]
    assert (tmp_path / "warm/sub/info.json").read_text() == (tmp_path / "fresh/sub/info.json").read_text()
    assert (tmp_path / "warm/sub/set/manifest.json").is_file() and (tmp_path / "fresh/sub/set/manifest.json").is_file()
