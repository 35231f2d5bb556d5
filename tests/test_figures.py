"""A figure quoted on several pages is the same figure on each: ``docs/figures.yaml`` holds each such figure once,
and every page that quotes it marks the number as ``<!-- fig:NAME -->VALUE`` (the comment does not render).

Checked: every mark names a figure of figures.yaml and carries its value; every figure is marked on the page that
holds its measurement (its ``source``, a ``docs/<page>.md#anchor`` whose anchor exists) and in at least one other
place; no mark sits in a fenced code block (it would be printed there). To change a figure, change figures.yaml and
every mark the test then names.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import yaml
from test_docs import PAGES, anchors, github_slug, prose_lines, rel

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "docs" / "figures.yaml"
MARK = re.compile(r"<!-- fig:([\w.-]+) -->\s*([0-9][0-9.,–]*[0-9]|[0-9])")
ANY_MARK = re.compile(r"<!-- fig:")


def load_figures(path: Path = FIGURES) -> dict[str, dict[str, str]]:
    figures = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(figures, dict) and figures, f"{path}: expected a mapping of figure names"
    for name, entry in figures.items():
        assert {"value", "what", "source"} <= set(entry), f"{path}: {name} needs value, what and source"
    return {name: {k: str(v) for k, v in entry.items()} for name, entry in figures.items()}


def find_marks(pages: list[Path]) -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    """``({name: [(file:line, value)]}, problems)``: every mark of the pages, and marks that cannot be read or sit in
    a fenced code block."""
    marks: dict[str, list[tuple[str, str]]] = defaultdict(list)
    problems = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        prose = dict(prose_lines(text))
        for number, line in enumerate(text.splitlines(), 1):
            if not ANY_MARK.search(line):
                continue
            where = f"{rel(page) if page.is_relative_to(REPO) else page.name}:{number}"
            if number not in prose:
                problems.append(f"{where}: a figure mark inside a code block (it would be printed)")
                continue
            found = MARK.findall(line)
            if len(found) != len(ANY_MARK.findall(line)):
                problems.append(f"{where}: a mark not followed by a number: {line.strip()[:100]}")
            for name, value in found:
                marks[name].append((where, value))
    return marks, problems


def figure_problems(figures: dict[str, dict[str, str]], marks: dict[str, list[tuple[str, str]]]) -> list[str]:
    problems = []
    for name, places in sorted(marks.items()):
        if name not in figures:
            problems.extend(f"{where}: fig:{name} is not in docs/figures.yaml" for where, _ in places)
            continue
        expected = figures[name]["value"]
        problems.extend(f"{where}: fig:{name} says {value}, docs/figures.yaml says {expected}"
                        for where, value in places if value != expected)
    for name, entry in sorted(figures.items()):
        page, _, anchor = entry["source"].partition("#")
        files = {where.rsplit(":", 1)[0] for where, _ in marks.get(name, [])}
        if page not in files:
            problems.append(f"docs/figures.yaml: {name} is not marked on its source page {page}")
        if len(marks.get(name, [])) < 2:
            problems.append(f"docs/figures.yaml: {name} is marked {len(marks.get(name, []))} time(s); a figure here "
                            "is quoted in two places or more (else it needs no entry)")
        if not (REPO / page).is_file() or (anchor and anchor not in anchors(REPO / page)):
            problems.append(f"docs/figures.yaml: {name}: source {entry['source']} does not resolve")
    return problems


def test_every_figure_quoted_on_two_pages_agrees() -> None:
    marks, problems = find_marks(PAGES)
    problems += figure_problems(load_figures(), marks)
    assert not problems, "figures that disagree between pages:\n" + "\n".join(problems)


def test_the_figure_check_catches_what_it_is_for(tmp_path: Path) -> None:
    """On made-up pages: a mark with another value, an unknown name, a mark in a code block, a figure on one page."""
    one, two = tmp_path / "one.md", tmp_path / "two.md"
    one.write_text("Training takes ≈ <!-- fig:train -->55 min; range <!-- fig:spread -->49–62 min.\n")
    two.write_text("It takes <!-- fig:train -->63 min and <!-- fig:nothing -->1.\n\n```bash\n"
                   "x  # <!-- fig:train -->55\n```\n")
    marks, problems = find_marks([one, two])
    assert marks["train"] == [("one.md:1", "55"), ("two.md:1", "63")] and marks["spread"] == [("one.md:1", "49–62")]
    assert problems == ["two.md:4: a figure mark inside a code block (it would be printed)"]
    figures = {"train": {"value": "55", "what": "", "source": "docs/results.md#nli-verifier"},
               "spread": {"value": "49–62", "what": "", "source": "docs/results.md#nli-verifier"}}
    found = figure_problems(figures, marks)
    assert "two.md:1: fig:train says 63, docs/figures.yaml says 55" in found
    assert "two.md:1: fig:nothing is not in docs/figures.yaml" in found
    assert any("spread is marked 1 time(s)" in p for p in found)
    assert any("train is not marked on its source page docs/results.md" in p for p in found)


# --- every figure the README quotes comes from a measured section that names its command --------------------------

# A figure: a decimal number, or a whole number with a unit (97 s, 25 min, 2.1 GiB, 3×, 2.5%).
FIGURE = re.compile(r"(?<![\w.±])(\d[\d,]*\.\d+|\d[\d,]*(?=\s?(?:min|s|ms|GiB|MiB|h|×|%)(?!\w)))")
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
# What names a section's command: a fenced shell block, or a command in inline code.
COMMAND = re.compile(r"```(?:bash|sh)\n|`(?:[A-Z_]+=\S+ )*"
                     r"(?:veracity |bash scripts/|python |\.venv/bin/(?:python|veracity) )")


def sections(page: Path) -> list[tuple[str, str]]:
    """``(anchor, text)`` of each heading's section of a page (the text before the first heading: anchor "")."""
    found, anchor, lines, fence = [], "", [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        fence = fence != line.startswith("```")
        heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading and not fence:
            found.append((anchor, "\n".join(lines)))
            anchor, lines = github_slug(heading.group(1)), []
        lines.append(line)
    return [*found, (anchor, "\n".join(lines))]


def measured_sections(pages: list[Path]) -> list[tuple[str, set[float]]]:
    """``(page#anchor, the numbers in it)`` of every section of ``pages`` that names its command."""
    return [(f"{rel(page)}#{anchor}", {float(n.replace(",", "")) for n in NUMBER.findall(text)})
            for page in pages for anchor, text in sections(page) if COMMAND.search(text)]


def untraced_figures(page: Path, measured: list[tuple[str, set[float]]]) -> list[str]:
    """The figures of ``page``'s prose and tables (outside code, links and figure marks) that no measured section
    holds, to the figure's own precision (the README rounds 2.37–2.58 to 2.4–2.6)."""
    missing = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        text = re.sub(r"`[^`]*`|\]\([^)]*\)|<!-- fig:[\w.-]+ -->\s*[0-9][0-9.,–]*", " ", line)
        for token in FIGURE.findall(text):
            value, places = float(token.replace(",", "")), len(token.partition(".")[2])
            if not any(round(y, places) == value for _, numbers in measured for y in numbers):
                missing.append(f"{rel(page)}:{number}: {token}")
    return missing


def test_every_figure_the_readme_quotes_comes_from_a_section_that_names_its_command() -> None:
    """A README figure is one of a docs section that names the command producing it (results.md, scale.md, …): a
    marked one through docs/figures.yaml's source, which must name its command and hold the value; any other by
    value in such a section."""
    docs = [page for page in PAGES if page.name != "README.md"]
    measured = measured_sections(docs)
    problems = untraced_figures(REPO / "README.md", measured)
    for name, entry in load_figures().items():
        page, _, anchor = entry["source"].partition("#")
        section = dict(sections(REPO / page)).get(anchor, "")
        if not COMMAND.search(section):
            problems.append(f"docs/figures.yaml: {name}: its source {entry['source']} names no command")
        if entry["value"] not in section:
            problems.append(f"docs/figures.yaml: {name}: its source {entry['source']} does not hold {entry['value']}")
    assert not problems, "figures without the command that measured them:\n" + "\n".join(problems)


def test_the_readme_figure_check_catches_what_it_is_for(tmp_path: Path) -> None:
    measured = measured_sections([REPO / "docs" / "scale.md"])
    readme = tmp_path / "README.md"
    readme.write_text("BM25 builds in 97 s, HNSW in 25 min (`bench/scale.py`), 2.1 GiB; it took 41.7 s; `0.123` "
                      "in code, <!-- fig:x -->0.999 marked, [a](results.md#x) links.\n\n```bash\nx 12.5 s\n```\n")
    assert untraced_figures(readme, measured) == ["README.md:1: 41.7"]
