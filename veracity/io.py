"""Small I/O helpers shared by every layer: atomic writes, JSONL, content hashes."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def process_umask() -> int:
    """The process umask, read without changing it where Linux says it (``os.umask`` alone must set one)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once (briefly visible to other threads)
    os.umask(mask)
    return mask


@contextmanager
def atomic_writer(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temp file next to ``path`` and rename it over ``path`` only if the block succeeds.

    A crash or an exception leaves the previous file (if any) untouched and no half-written output behind. The file
    gets the mode a plain ``open`` would give it (``0o666`` less the umask), not the temp file's private ``0o600``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~process_umask())
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding, newline=None if "b" in mode else "\n") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dumps_canonical(obj: Any) -> str:
    """One JSON line with a stable key order, so equal records always serialise to equal bytes."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> tuple[int, str]:
    """Atomically write ``rows`` as JSONL.

    Returns:
        The number of rows and the sha256 of the bytes written.
    """
    digest = hashlib.sha256()
    count = 0
    with atomic_writer(path, "wb") as handle:
        for row in rows:
            data = (dumps_canonical(row) + "\n").encode("utf-8")
            digest.update(data)
            handle.write(data)
            count += 1
    return count, digest.hexdigest()


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write pretty, key-sorted JSON (manifests, metrics)."""
    with atomic_writer(path) as handle:
        json.dump(obj, handle, ensure_ascii=False, indent=2, sort_keys=True)
        handle.write("\n")


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Read JSONL written by :func:`write_jsonl` (our own outputs; raw inputs go through data_prep.readers)."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def sha256_file(path: str | Path, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


COMPLETED = "COMPLETED"


@contextmanager
def atomic_directory(target: str | Path, note: str) -> Iterator[Path]:
    """Build a folder in a temp sibling and move it to ``target`` with a COMPLETED marker only on success.

    For converted or merged models: a crash leaves no half-written folder where a loader would find it. The folder
    gets the mode a plain ``mkdir`` would give it (``0o777`` less the umask), not the temp folder's private ``0o700``.
    """
    import shutil

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        tmp.chmod(0o777 & ~process_umask())
        yield tmp
        mark_completed(tmp, note)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def mark_completed(folder: str | Path, note: str) -> None:
    """Write the COMPLETED marker that says a run or model folder is whole."""
    (Path(folder) / COMPLETED).write_text(note + "\n")


def is_completed(folder: str | Path) -> bool:
    return (Path(folder) / COMPLETED).exists()
