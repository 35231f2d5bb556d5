"""Dependency direction (STYLE.md, issue #26 item 3): every import of a layer, at the top of a module or inside a
function, points down — the scorers import nothing from the pipelines they score."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# folder → module prefixes nothing in it may import
FORBIDDEN = {
    "data_prep": ("veracity.train", "veracity.infer"),
    "models": ("veracity.train", "veracity.infer.pipelines"),
    "infer": ("veracity.train",),
    "infer/eval": ("veracity.infer.pipelines",),
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement in the file, relative imports resolved against the package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(folder: str) -> None:
    wrong = [f"{path.relative_to(REPO)}:{line}: {module}"
             for path in sorted((REPO / folder).rglob("*.py"))
             for line, module in imported_modules(path)
             if module.startswith(FORBIDDEN[folder])]
    assert not wrong, "imports against the dependency direction:\n" + "\n".join(wrong)
