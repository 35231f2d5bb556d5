"""Run directories: every job records its resolved config, package versions and git revision before work."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
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


# Settings that change how much of a run is done or how fast, never what a record holds: a run may resume under
# other values of these (api_key: recorded redacted, and older records hold the old default "EMPTY").
RESUMABLE_FIELDS = frozenset({"api_key", "output_dir", "max_examples", "progress", "retry_errors", "shard",
                              "claims_per_call", "items_per_call", "posts_per_call", "batch_size", "nli_batch_size"})


class RunConfigMismatchError(ValueError):
    """A resumed run would add records made under another config or other model weights to a batch output."""


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


REDACTED = "<redacted>"
# Config fields never written to a run's files (run folders are shared; report.html is made to be): recorded as
# REDACTED when set.
SECRET_FIELDS = frozenset({"api_key"})


def to_plain(obj: Any) -> Any:
    """Dataclasses, enums, Paths and tuples → YAML-safe builtins; a :data:`SECRET_FIELDS` field is :data:`REDACTED`
    when set."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: REDACTED if f.name in SECRET_FIELDS and getattr(obj, f.name)
                else to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, Enum):
        return to_plain(obj.value)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)  # anything else (paths, dtypes, callables) is recorded by its readable form


def write_run_config(run_dir: str | Path, *configs: Any, job: str, models: dict[str, str] | None = None,
                     decoding: dict[str, Any] | None = None, device: str | None = None,
                     resumed: bool = False) -> Path:
    """Create ``run_dir`` and write ``run_config.yaml`` (job, start time in UTC, configs, models, versions, git
    revision) before work.

    ``models`` names each model the records depend on by content (path + fingerprint). ``decoding`` says how the
    generator decoded (:func:`summarise_facts` of the records' own facts, or before any record ``Engine.decoding``).
    ``device`` is where the job's models run, resolved (``cpu``, ``cuda:0``; the config keeps ``--device`` as given).
    ``resumed``: this run appends to records an earlier run made, so ``started`` and ``git_revision`` stay that
    run's and this one is added to ``resumes`` (when it started, its revision).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "run_config.yaml"
    config = [to_plain(c) for c in configs] if len(configs) != 1 else to_plain(configs[0])
    now = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "git_revision": git_revision()}
    old = read_run_config(path, run_dir) if resumed else {}
    first = {k: old[k] for k in ("started", "git_revision") if k in old} if old.get("started") else now
    resumes = [*(old.get("resumes") or []), now] if old.get("started") else []
    record = {
        "job": job,
        "started": first["started"],  # when the run began (report.html), kept across resumes
        "config": config,
        **({"models": models} if models else {}),
        **({"decoding": decoding} if decoding else {}),
        **({"device": device} if device else {}),
        "versions": {"python": platform.python_version(), **package_versions()},
        "git_revision": first.get("git_revision", ""),
        **({"resumes": resumes} if resumes else {}),
        "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "VERACITY_DATA_ROOT") if k in os.environ},
    }
    with atomic_writer(path) as handle:
        yaml.safe_dump(record, handle, sort_keys=False, allow_unicode=True)
    logger.info("run directory %s (config recorded)", run_dir)
    return path


MIXED = "mixed"


def summarise_facts(facts: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """One description of many records' facts (each record's ``decoding``; None: a record made without one): the
    facts themselves when every record has the same; else each key the records agree on with its value, the others
    :data:`MIXED`, and under ``mixed`` each combination of the keys that differ with its number of records (most
    first). None when no record has facts."""
    return summarise_counts(Counter(json.dumps(dict(f), sort_keys=True) for f in facts if f))


def summarise_counts(groups: Counter[str]) -> dict[str, Any] | None:
    """:func:`summarise_facts` of records counted by their facts as JSON (``{json.dumps(facts): records}``)."""
    if not groups:
        return None
    found = [json.loads(key) for key in groups]
    if len(found) == 1:
        return found[0]
    keys = list(dict.fromkeys(k for f in found for k in f))
    differ = [k for k in keys if len({json.dumps(f.get(k)) for f in found}) > 1]
    summary: dict[str, Any] = {k: MIXED if k in differ else found[0][k] for k in keys}
    summary[MIXED] = [{**{k: f.get(k) for k in differ}, "records": n}
                      for f, n in sorted(zip(found, groups.values(), strict=True), key=lambda fn: -fn[1])]
    return summary


def summarise_devices(counts: Mapping[str, int]) -> str | None:
    """Where records were made (``{device: records}``): the device when all agree, else ``mixed: cpu × 2, cuda:0 ×
    1``; None when no record says."""
    counts = Counter({d: n for d, n in counts.items() if d and n > 0})
    if len(counts) <= 1:
        return next(iter(counts), None)
    return f"{MIXED}: " + ", ".join(f"{d} × {n}" for d, n in counts.most_common())


def record_facts(run_dir: str | Path, *, decoding: dict[str, Any] | None = None, device: str | None = None) -> bool:
    """Rewrite ``run_config.yaml``'s ``decoding`` and ``device`` (those given) with what the records now say
    (:func:`summarise_facts`, :func:`summarise_devices`); True when that changed the file."""
    path = Path(run_dir) / "run_config.yaml"
    if not path.is_file() or (decoding is None and device is None):
        return False
    record = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    new = {**record, **({"decoding": decoding} if decoding is not None else {}),
           **({"device": device} if device is not None else {})}
    if new == record:
        return False
    if decoding is not None and decoding != record.get("decoding"):
        logger.info("%s: decoding of its records: %s (was %s)", run_dir, decoding, record.get("decoding"))
    with atomic_writer(path) as handle:
        yaml.safe_dump(new, handle, sort_keys=False, allow_unicode=True)
    return True


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """A training run's ``checkpoint-N`` folders, oldest step first (by number: checkpoint-100 after checkpoint-50):
    what its report, its checkpoint sweep and a merge of one of them read."""
    found = [p for p in Path(run_dir).glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(folder: Path) -> int:
    """The training step a ``checkpoint-N`` folder was saved at: N."""
    return int(folder.name.split("-")[-1])


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Where two recorded configs differ, as ``key: old → new`` lines (keys in RESUMABLE_FIELDS ignored)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            if key in RESUMABLE_FIELDS:
                continue
            found += differences(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and any(
            isinstance(v, (dict, list)) for v in old):
        return [line for i, (a, b) in enumerate(zip(old, new, strict=True))
                for line in differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}: {old!r} → {new!r}"]


def read_run_config(record_path: Path, outputs: Path) -> dict[str, Any]:
    """The run record at ``record_path`` ({} when there is none); unreadable, a ``RunConfigMismatchError``: what
    ``outputs`` were made with cannot be told."""
    if not record_path.is_file():
        return {}
    try:
        return yaml.safe_load(record_path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise RunConfigMismatchError(f"{record_path}: unreadable ({error}); cannot tell what {outputs.name} "
                                     "was made with") from None


def check_resume(record_path: Path, records: Path, config: Any, models: dict[str, str], *, running: bool = False,
                 partial: bool = False) -> None:
    """Refuse to resume ``records`` when ``record_path`` says they were made under another config or models.

    ``running``: a run is writing ``records`` now, so it is checked even while it holds no record yet.
    ``partial``: ``models`` names only some of the models (those named before any loads): only they are compared.
    """
    if not (record_path.is_file() and (running or (records.is_file() and records.stat().st_size))):
        return
    old = read_run_config(record_path, records)
    recorded = old.get("models") or {}
    if partial:
        recorded = {k: v for k, v in recorded.items() if k in models}
    found = differences(old.get("config"), config) + differences(recorded, models, "models")
    if found:
        shown = "; ".join(found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")
        made = "the run writing it now was started" if running else "its records were made"
        raise RunConfigMismatchError(
            f"{records}: {made} under another run config ({shown}); resuming would mix the two. "
            f"Rerun with the recorded settings, choose a new --output_dir, or delete {records.name} to start over")
