"""Load a script of the repository (``bench/*.py``, ``scripts/*.py``) as a module: they run by path, not installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The module of ``REPO / relative`` (e.g. ``bench/seed_spread.py``), executed afresh, with its folder on
    ``sys.path`` as ``python bench/x.py`` puts it there (so it imports its siblings, e.g. ``bench/machine.py``)."""
    path = REPO / relative
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses read their module's namespace while the class is made
    spec.loader.exec_module(module)
    return module
