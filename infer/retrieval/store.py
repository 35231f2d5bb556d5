"""The parts of an index folder that grow with the corpus, written while it streams and read without loading it.

- ``embeddings/shard-00000.npy`` …: the document vectors, ``shard_size`` rows per file (the last one shorter), in
  corpus order. A shard is the unit of work that can be computed elsewhere (e.g. by a Ray Data actor calling
  :func:`veracity.infer.retrieval.dense.embed_shard`) and the unit added to FAISS. Folders of index format 1 hold
  one ``embeddings.npy`` instead; :class:`EmbeddingReader` reads both.
- ``texts.bin`` + ``text_offsets.npy``: each document's indexed text, UTF-8, back to back, and the byte offset
  where each one starts (int64, one more than the documents). :class:`DocTexts` maps a doc id to its text by
  slicing a memory map, so evidence text costs no RAM until it is asked for.
"""

from __future__ import annotations

import mmap
import shutil
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

SHARD_DIR = "embeddings"
LEGACY_EMBEDDINGS = "embeddings.npy"  # index format 1
TEXTS, TEXT_OFFSETS = "texts.bin", "text_offsets.npy"


def shard_path(folder: Path, number: int) -> Path:
    return folder / SHARD_DIR / f"shard-{number:05d}.npy"


def clear_embeddings(folder: Path) -> None:
    """Remove the vectors of an earlier build into ``folder`` (a shorter corpus would leave stale shards)."""
    shutil.rmtree(folder / SHARD_DIR, ignore_errors=True)
    (folder / LEGACY_EMBEDDINGS).unlink(missing_ok=True)


class ShardWriter:
    """Takes vectors in row order in batches of any size; writes each full shard and passes it to ``on_shard``."""

    def __init__(self, folder: Path, shard_size: int, on_shard: Callable[[np.ndarray], object] | None = None):
        if shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        self.folder, self.shard_size, self.on_shard = folder, shard_size, on_shard
        self.rows = self.shards = 0
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        (folder / SHARD_DIR).mkdir(parents=True, exist_ok=True)

    def add(self, vectors: np.ndarray) -> None:
        self._pending.append(np.ascontiguousarray(vectors, dtype=np.float32))
        self._pending_rows += len(vectors)
        while self._pending_rows >= self.shard_size:
            self._flush(self.shard_size)

    def close(self) -> int:
        """Write the last, shorter shard; returns the number of shards."""
        if self._pending_rows:
            self._flush(self._pending_rows)
        return self.shards

    def _flush(self, rows: int) -> None:
        buffered = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        shard, rest = buffered[:rows], buffered[rows:]
        np.save(shard_path(self.folder, self.shards), shard)
        if self.on_shard is not None:
            self.on_shard(shard)
        self.shards, self.rows = self.shards + 1, self.rows + rows
        self._pending, self._pending_rows = ([rest] if len(rest) else []), len(rest)


class EmbeddingReader:
    """Rows of an index folder's vectors (shards, or format 1's single file), memory-mapped."""

    def __init__(self, folder: Path):
        files = sorted((folder / SHARD_DIR).glob("shard-*.npy")) or [folder / LEGACY_EMBEDDINGS]
        if not files[0].exists():
            raise FileNotFoundError(f"{folder}: no embeddings ({SHARD_DIR}/ or {LEGACY_EMBEDDINGS})")
        self.parts = [np.load(f, mmap_mode="r") for f in files]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as one float32 array (copied out of the maps)."""
        pieces, first = [], int(np.searchsorted(self.starts, start, side="right")) - 1
        for part in range(max(first, 0), len(self.parts)):
            lo, hi = max(start, self.starts[part]), min(stop, self.starts[part + 1])
            if lo >= hi:
                break
            pieces.append(self.parts[part][lo - self.starts[part] : hi - self.starts[part]])
        return np.array(np.concatenate(pieces) if pieces else np.zeros((0, self.parts[0].shape[1])), np.float32)

    def all(self) -> np.ndarray:
        return self.rows(0, len(self))


def read_embeddings(folder: str | Path) -> np.ndarray:
    """Every document vector of an index folder, in row order."""
    return EmbeddingReader(Path(folder)).all()


class DocTextWriter:
    """Appends document texts to ``texts.bin``; :meth:`close` writes the offsets."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._file = open(folder / TEXTS, "wb")  # noqa: SIM115 - closed in close()
        self._offsets = array("q", [0])

    def add(self, texts: Sequence[str]) -> None:
        for text in texts:
            data = text.encode("utf-8", "surrogatepass")  # JSON may carry lone surrogates: kept as they came
            self._file.write(data)
            self._offsets.append(self._offsets[-1] + len(data))

    def close(self) -> None:
        self._file.close()
        np.save(self.folder / TEXT_OFFSETS, np.frombuffer(self._offsets, dtype=np.int64))


class DocTexts(Mapping[str, str]):
    """doc_id → indexed text, read from ``texts.bin`` on demand (the doc_id → row map is built on first use)."""

    def __init__(self, folder: Path, doc_ids: Sequence[str]):
        self.folder, self.doc_ids = Path(folder), doc_ids
        self._offsets = np.load(self.folder / TEXT_OFFSETS, mmap_mode="r")
        if len(self._offsets) != len(doc_ids) + 1:
            raise ValueError(f"{folder}: {len(self._offsets) - 1} texts for {len(doc_ids)} doc ids")
        with open(self.folder / TEXTS, "rb") as handle:
            size = handle.seek(0, 2)
            self._data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self._rows: dict[str, int] | None = None

    def __reduce__(self) -> tuple[type, tuple[Path, Sequence[str]]]:  # a memory map does not pickle: reopen
        return DocTexts, (self.folder, self.doc_ids)

    def text(self, row: int) -> str:
        data = self._data[int(self._offsets[row]) : int(self._offsets[row + 1])]
        return bytes(data).decode("utf-8", "surrogatepass")

    def __getitem__(self, doc_id: str) -> str:
        if self._rows is None:
            self._rows = {d: i for i, d in enumerate(self.doc_ids)}
        return self.text(self._rows[doc_id])

    def __iter__(self) -> Iterator[str]:
        return iter(self.doc_ids)

    def __len__(self) -> int:
        return len(self.doc_ids)
