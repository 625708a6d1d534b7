"""The documentation reads as short sentences, the README stays a front door, and every example is shown.

A sentence is counted in prose only: paragraphs, list items and admonitions. Code blocks, snippet
includes, tables and headings are not prose. An inline code span counts as one word, a link as its text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
EXAMPLES = sorted(p for p in (DOCS / "examples").rglob("*") if p.is_file() and "__pycache__" not in p.parts)

#: Words a sentence may average on a page (Dramatiq's guide: 13).
MAX_AVERAGE_WORDS = 20
README_MAX_LINES = 200


def prose(markdown: str) -> str:
    """The page's prose: code blocks, snippet lines, tables, headings, HTML and images left out."""
    text = re.sub(r"^([ \t]*)(```|~~~)[^\n]*\n.*?^\1\2[ \t]*$", "", markdown, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("|", "#", "--8<--", "!![", "![", ":::", "<")):
            kept.append("")
            continue
        kept.append(re.sub(r"^(!!!|\?\?\?)\s*\w+(\s+\"[^\"]*\")?\s*$", "", stripped))
    text = "\n".join(kept)
    text = re.sub(r"`[^`\n]+`", "CODE", text)
    return re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)


def sentences(markdown: str) -> list[list[str]]:
    """Every sentence of the prose, as its words; a list item or a paragraph ends a sentence too."""
    found = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.)\s)", prose(markdown)):
        item = re.sub(r"^\s*(?:[-*]|\d+\.)\s+", "", block.strip())
        for sentence in re.split(r"(?<=[.!?:])\s+(?=[A-Z`\"(*])|(?<=[.!?])\s*$", item.replace("\n", " ")):
            words = [w for w in sentence.split() if re.search(r"\w", w)]
            if words:
                found.append(words)
    return found


def average_words(markdown: str) -> float:
    counted = sentences(markdown)
    return sum(map(len, counted)) / len(counted) if counted else 0.0


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_page_averages_short_sentences(page: Path) -> None:
    average = average_words(page.read_text())

    assert average <= MAX_AVERAGE_WORDS, f"{page.relative_to(ROOT)} averages {average:.1f} words a sentence"


def test_the_readme_is_a_front_door_of_short_sentences() -> None:
    text = README.read_text()

    assert len(text.splitlines()) <= README_MAX_LINES
    assert average_words(text) <= MAX_AVERAGE_WORDS


def test_the_readme_keeps_the_command_ci_runs() -> None:
    assert "make test" in README.read_text()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_example_is_included_by_a_page(example: Path) -> None:
    include = f'--8<-- "{example.relative_to(DOCS)}"'

    assert any(include in page.read_text() for page in PAGES), f"no page includes {example.relative_to(ROOT)}"


def test_the_readmes_shop_is_the_example_getting_started_runs() -> None:
    section = README.read_text().split("\n## Your own project\n", 1)[1].split("\n## ", 1)[0]
    shown = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    example = (DOCS / "examples" / "shop.py").read_text()

    assert shown is not None
    assert example.startswith(shown.group(1)), "README's shop.py differs from docs/examples/shop.py"
