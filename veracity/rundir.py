"""Run directories: every job records its resolved config, package versions and git revision before work."""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import subprocess
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from veracity.io import atomic_writer

logger = logging.getLogger(__name__)

TRACKED_PACKAGES = (
    "veracity", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "sentence-transformers",
    "faiss-cpu", "bm25s", "scikit-learn", "numpy",
)


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    """Installed versions, read from metadata (no imports, so this stays instant)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_revision(cwd: str | Path | None = None) -> str:
    """``HEAD`` of the repository the code runs from, with ``+dirty`` for uncommitted changes; '' if none."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=5)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def to_plain(obj: Any) -> Any:
    """Dataclasses, enums, Paths and tuples → YAML-safe builtins."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, Enum):
        return to_plain(obj.value)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)  # anything else (paths, dtypes, callables) is recorded by its readable form


def write_run_config(run_dir: str | Path, *configs: Any, job: str) -> Path:
    """Create ``run_dir`` and write ``run_config.yaml`` (job, configs, versions, git revision) before any work."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "job": job,
        "config": [to_plain(c) for c in configs] if len(configs) != 1 else to_plain(configs[0]),
        "versions": {"python": platform.python_version(), **package_versions()},
        "git_revision": git_revision(),
        "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "VERACITY_DATA_ROOT") if k in os.environ},
    }
    path = run_dir / "run_config.yaml"
    with atomic_writer(path) as handle:
        yaml.safe_dump(record, handle, sort_keys=False, allow_unicode=True)
    logger.info("run directory %s (config recorded)", run_dir)
    return path
