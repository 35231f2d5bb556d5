"""The veracity cache folder, where converted and trained models, ONNX graphs, weight hashes and NLTK data live.

Its own module so the modules the registry imports (fingerprints, ONNX export, NLTK data) can name it at their top.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "VERACITY_CACHE"


def cache_dir() -> Path:
    """Where converted and trained models live: ``$VERACITY_CACHE`` or ``~/.cache/veracity``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "veracity")
