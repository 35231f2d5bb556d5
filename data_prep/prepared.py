"""The one way every job reads the records ``veracity prep`` wrote.

``read_prepared(prepared_dir, name, splits)`` checks the output against ``manifest.json`` (listed, and the file's
sha256 equal to the one recorded), types every row through :data:`RECORD_TYPES`, and filters by split. A folder
where ``veracity prep`` has not run, an output it did not write, or a file changed since, is an error that says so
in one line — never a numpy error three stages later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from veracity.data_prep.readers import read_jsonl
from veracity.data_prep.schema import RECORD_TYPES, Record
from veracity.io import sha256_file

MANIFEST = "manifest.json"
_VERIFIED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) → sha256 checked in this process


class PreparedDataError(FileNotFoundError):
    """Prepared records are missing or do not match their manifest; the message names the file and the fix."""


def read_manifest(prepared_dir: str | Path) -> dict[str, Any]:
    """The manifest of a prep run, or a :class:`PreparedDataError` that says to run ``veracity prep``."""
    path = Path(prepared_dir) / MANIFEST
    if not path.is_file():
        raise PreparedDataError(f"{path} not found: run `veracity prep --output_dir {prepared_dir}` first")
    return json.loads(path.read_text(encoding="utf-8"))


def prepared_names(prepared_dir: str | Path, prefix: str = "") -> list[str]:
    """The outputs the manifest lists (optionally those starting with ``prefix``), sorted."""
    return sorted(name for name in read_manifest(prepared_dir)["outputs"] if name.startswith(prefix))


def prepared_path(prepared_dir: str | Path, name: str) -> Path:
    """The checked file of output ``name``: listed in the manifest, present, and unchanged since prep wrote it."""
    outputs = read_manifest(prepared_dir)["outputs"]
    if name not in outputs:
        raise PreparedDataError(f"{Path(prepared_dir) / MANIFEST}: no output {name!r} (it lists {sorted(outputs)}); "
                                f"run `veracity prep` with the dataset that writes it")
    info = outputs[name]
    path = Path(prepared_dir) / info.get("file", f"{name}.jsonl")
    if not path.is_file():
        raise PreparedDataError(f"{path} is listed in the manifest but missing: re-run `veracity prep`")
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    digest = _VERIFIED.get(key) or sha256_file(path)
    if digest != info["sha256"]:
        raise PreparedDataError(f"{path}: sha256 {digest[:12]}… differs from the manifest's {info['sha256'][:12]}…: "
                                "the file changed after `veracity prep` wrote it; re-run `veracity prep`")
    _VERIFIED[key] = digest
    return path


def read_prepared(prepared_dir: str | Path, name: str, splits: Iterable[str] | None = None) -> list[Record]:
    """Typed records of output ``name``, those of ``splits`` only when given (records without a split are kept).

    Args:
        prepared_dir: the ``--output_dir`` of ``veracity prep``.
        name: an output name from the manifest, e.g. ``fever_symmetric`` or ``nli_sick``.
        splits: e.g. ``["dev"]``; None keeps every split.

    Raises:
        PreparedDataError: prep has not run, the output is not listed, or the file differs from the manifest.
    """
    path = prepared_path(prepared_dir, name)
    kind = read_manifest(prepared_dir)["outputs"][name].get("kind", "")
    record_type = RECORD_TYPES.get(kind)
    if record_type is None:
        raise PreparedDataError(f"{Path(prepared_dir) / MANIFEST}: output {name!r} has unknown record kind {kind!r}")
    wanted = set(splits) if splits is not None else None
    return [record_type.from_dict(row) for _, row in read_jsonl(path)
            if wanted is None or "split" not in row or row["split"] in wanted]
