"""The documentation reads as short sentences, the README stays a front door, every example is shown, and
the lists of what the code holds (the middleware, the public names) name all of it.

A sentence is counted in prose only: paragraphs, list items and admonitions. Code blocks, snippet
includes, tables and headings are not prose. An inline code span counts as one word, a link as its text.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import dramatiq
import pytest
from opentelemetry import trace

import pipelines
from pipelines import stack
from pipelines.flow.runtime import Runtime
from pipelines.store import embedded_store
from pipelines.testing import embedded_settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
API_REFERENCE = DOCS / "reference" / "api.md"
#: A Sphinx role (``:meth:`start```), which mkdocstrings shows as written: the reference uses Markdown links.
SPHINX_ROLE = re.compile(r":(?:py:)?(?:meth|func|class|data|attr|mod|exc|obj|ref):`")
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


def test_every_code_block_of_getting_started_is_an_included_example() -> None:
    blocks = re.findall(r"^```\w*\n(.*?)^```", (DOCS / "getting-started.md").read_text(), flags=re.M | re.S)

    assert blocks
    assert [b for b in blocks if not re.fullmatch(r'--8<-- "examples/[\w/.]+"\n', b)] == []


def test_the_readmes_own_project_repeats_the_examples_getting_started_includes() -> None:
    own_project = section(README, "## Your own project")
    blocks = re.findall(r"```(\w*)\n(.*?)```", own_project, flags=re.DOTALL)
    examples, commands = DOCS / "examples", DOCS / "examples" / "getting_started"
    *_, result_line = (commands / "result.py").read_text().splitlines()
    python_line = re.search(r"imports `shop`: `([^`]+)`", own_project)

    assert [kind for kind, _ in blocks] == ["", "python", "toml", ""]
    (_, install), (_, shop), (_, config), (_, run) = blocks
    assert install == (commands / "install.sh").read_text()
    assert (examples / "shop.py").read_text().startswith(shop), "the README's shop.py is not the example's start"
    assert config == (examples / "shop_config.toml").read_text()
    assert run == (commands / "run.sh").read_text()
    assert python_line is not None
    assert python_line.group(1) == result_line.split("  # ")[0]


def section(path: Path, heading: str) -> str:
    """The text under a heading of a Markdown file, down to the next heading of its level or above."""
    level = heading.split(" ", 1)[0]
    below = path.read_text().split(f"\n{heading}\n", 1)[1]
    return re.split(rf"\n#{{1,{len(level)}}} ", below, maxsplit=1)[0]


def first_column(table: str) -> list[str]:
    """The code spans in the first column of a table's rows, top to bottom (its header and rule have none)."""
    rows = (row for row in table.splitlines() if row.startswith("|"))
    return [span for row in rows for span in re.findall(r"`([^`]+)`", row.split("|")[1])]


def middleware_table() -> list[str]:
    """The code spans of the Reliability guide's middleware table (the class names), top to bottom."""
    return first_column(section(DOCS / "guides" / "reliability.md", "## The middleware, in order"))


def middleware_build_middleware_makes() -> set[str]:
    """Every middleware class ``build_middleware`` makes, whatever the settings (read from its source)."""
    tree = ast.parse(inspect.getsource(stack.build_middleware))
    called = (node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name))
    made = {name: getattr(stack, name, None) for name in called}
    return {name for name, kind in made.items() if isinstance(kind, type) and issubclass(kind, dramatiq.Middleware)}


def test_the_reliability_guide_names_every_middleware_build_middleware_can_return() -> None:
    made = middleware_build_middleware_makes()

    assert {"Tracing", "Metrics", "OutboxRelay", "Schedules", "ActorTimeLimit"} <= made
    assert made - set(middleware_table()) == set(), "the Reliability guide's middleware table misses these"


def test_the_reliability_guide_shows_the_middleware_in_their_order() -> None:
    settings = embedded_settings(telemetry={"enabled": True}, metrics={"enabled": True, "multiprocess": False})
    store = embedded_store(namespace="docs", retention_s=60)
    runtime = Runtime(store=store, lease_s=1, max_result_bytes=1)

    built = [type(m).__name__ for m in stack.build_middleware(settings, runtime, store, tracer=trace.NoOpTracer())]

    assert [name for name in middleware_table() if name in built] == built


def test_contributing_names_every_middleware_module() -> None:
    layout = section(CONTRIBUTING, "## The layout")
    modules = sorted(p.stem for p in (ROOT / "middleware").glob("*.py") if p.stem != "__init__")

    assert [m for m in modules if f"`{m}`" not in layout] == []


def test_troubleshooting_tells_every_public_error_that_has_no_subclass() -> None:
    shown = set(first_column(section(DOCS / "troubleshooting.md", "## Errors raised on purpose")))
    public = (getattr(pipelines, name) for name in pipelines.__all__)
    leaves = {
        error.__name__
        for error in public
        if isinstance(error, type) and issubclass(error, pipelines.PipelinesError) and not error.__subclasses__()
    }

    assert sorted(leaves - shown) == []


def rendered(identifier: str) -> tuple[ModuleType, object]:
    """What a ``:::`` line of the API reference renders, and the module it is found in."""
    try:
        module = importlib.import_module(identifier)
    except ModuleNotFoundError:
        parent, name = identifier.rsplit(".", 1)
        module, _ = rendered(parent)
        return module, getattr(module, name)
    return module, module


def api_reference() -> list[tuple[ModuleType, object]]:
    """Each ``:::`` line of the API reference: what it renders, and the module it is found in."""
    return [rendered(identifier) for identifier in re.findall(r"^::: ([\w.]+)$", API_REFERENCE.read_text(), re.M)]


def test_the_api_reference_shows_every_public_name() -> None:
    shown = [target for _, target in api_reference()]
    members = [
        value
        for module in shown
        if isinstance(module, ModuleType)
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    ]
    public = {name: getattr(pipelines, name) for name in pipelines.__all__}

    assert [name for name, value in public.items() if not any(value is seen for seen in shown + members)] == []


def test_the_api_reference_renders_no_sphinx_role() -> None:
    defined = (inspect.unwrap(t) if inspect.isclass(t) or inspect.isroutine(t) else m for m, t in api_reference())
    sources = {Path(inspect.getsourcefile(source) or "") for source in defined}

    assert sorted(str(s.relative_to(ROOT)) for s in sources if SPHINX_ROLE.search(s.read_text())) == []
