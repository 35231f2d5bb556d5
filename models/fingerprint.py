"""Content fingerprints of model folders: what the response cache and retrieval indexes key on.

Two checkpoints with the same config and weight sizes (an SFT and a DPO adapter, a model retrained in place) must
never share a fingerprint, so weights are hashed by content. Hashing gigabytes on every load would be slow, so each
weight file's sha256 is stored with its size and mtime_ns in a small sidecar: beside the folder
(``.veracity_fingerprint.json``) where the folder is writable, else under ``cache_dir()/fingerprints/``. A stored
hash is reused only while the file's size and mtime_ns are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from veracity.io import sha256_file, write_json
from veracity.models.paths import cache_dir

logger = logging.getLogger(__name__)

SIDECAR = ".veracity_fingerprint.json"
SIDECAR_VERSION = 1
# Files whose bytes decide what the model computes: weights go through the stored hashes, the rest are small
# and read every time (a tokenizer or chat template change changes the outputs as surely as a weight change).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".gguf", ".pt", ".pth", ".h5", ".msgpack")
CONFIG_SUFFIXES = (".json", ".txt", ".model", ".jinja")


def fingerprinted_files(folder: Path) -> list[Path]:
    """The files a fingerprint covers, sorted: weights, configs, tokenizer files and chat templates.

    Hidden files (the sidecar, temp files of atomic writes) and the Trainer's ``checkpoint-*`` resume folders are
    left out: ``from_pretrained`` on the folder never loads them.
    """
    chosen = []
    for path in folder.rglob("*"):
        parts = path.relative_to(folder).parts
        if any(p.startswith(".") or p.startswith("checkpoint-") for p in parts[:-1]) or parts[-1].startswith("."):
            continue
        if path.is_file() and path.name.endswith(WEIGHT_SUFFIXES + CONFIG_SUFFIXES):
            chosen.append(path)
    return sorted(chosen)


def sidecar_path(folder: Path) -> Path:
    """Where the stored weight hashes of ``folder`` live: inside it if writable, else in the veracity cache."""
    folder = folder.resolve()
    # Root may write anywhere, so os.access alone would let us write into shared read-only folders (mode r-x):
    # the folder's own write bits count too.
    if os.access(folder, os.W_OK) and folder.stat().st_mode & 0o222:
        return folder / SIDECAR
    key = hashlib.sha256(str(folder).encode()).hexdigest()[:24]
    return cache_dir() / "fingerprints" / f"{key}.json"


def _load_stored(sidecar: Path, folder: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return {}
    # A sidecar in the cache is keyed by a hash of the path: check it really describes this folder.
    if data.get("version") != SIDECAR_VERSION or data.get("folder") not in (None, str(folder)):
        return {}
    return data.get("files", {})


def weight_hashes(folder: Path, files: list[Path]) -> dict[str, str]:
    """sha256 of each weight file in ``files`` (relative path → hex), reusing stored hashes of unchanged files."""
    folder = folder.resolve()
    sidecar = sidecar_path(folder)
    stored = _load_stored(sidecar, folder)
    entries: dict[str, dict[str, Any]] = {}
    changed = False
    for path in files:
        rel = path.relative_to(folder).as_posix()
        stat = path.stat()
        entry = stored.get(rel)
        if not entry or entry.get("size") != stat.st_size or entry.get("mtime_ns") != stat.st_mtime_ns:
            logger.info("hashing %s (%.1f MB)", path, stat.st_size / 1e6)
            entry, changed = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}, True
        entries[rel] = entry
    if changed or set(entries) != set(stored):
        record = {"version": SIDECAR_VERSION, "files": entries}
        if sidecar.parent != folder:
            record["folder"] = str(folder)
        try:
            write_json(sidecar, record)
        except OSError as error:  # a read-only place we misjudged: the hashes are right, only not remembered
            logger.warning("cannot store weight hashes at %s: %s", sidecar, error)
    return {rel: entry["sha256"] for rel, entry in entries.items()}


def model_fingerprint(folder: str | Path) -> str:
    """A short content hash of a model folder: equal only for equal weights, configs and tokenizer files.

    Weight files are hashed once and the hashes stored (see the module docstring); a re-run costs a ``stat`` per
    weight file.

    Args:
        folder: a local model or adapter folder.

    Returns:
        16 hex characters.

    Raises:
        FileNotFoundError: ``folder`` is not a directory (a hub id has no content to hash).
    """
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot fingerprint {folder}: not a local folder")
    files = fingerprinted_files(folder)
    weights = weight_hashes(folder, [p for p in files if p.name.endswith(WEIGHT_SUFFIXES)])
    digest = hashlib.sha256()
    for path in files:
        rel = path.relative_to(folder).as_posix()
        content = weights[rel] if rel in weights else hashlib.sha256(path.read_bytes()).hexdigest()
        digest.update(f"{rel}\0{content}\n".encode())
    return digest.hexdigest()[:16]


def content_id(folder: str | Path) -> str:
    """``<folder>#<fingerprint>``: how run records and caches name a model folder (by path and by content)."""
    return f"{folder}#{model_fingerprint(folder)}"
