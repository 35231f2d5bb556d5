"""Resumable batch runner: append-only JSONL keyed by item id, crash-safe, shardable, per-item error isolation.

- Output records are ``{"id", "status": "ok"|"error", "result"| "error", "seconds"}``, one JSON line each, written
  in one call and flushed, so a kill -9 leaves at most one partial last line; on resume that line is dropped and
  every item already recorded (ok or error) is skipped — no duplicates, no lost items.
- ``shard=(i, n)`` keeps the items whose id hashes to i mod n: the same split on every machine.
- A failing item becomes an error record with the exception; the batch goes on. ``retry_errors=True`` re-runs
  exactly the items whose last record is an error and appends their new records: the file stays append-only,
  and readers take the last record of an id (:func:`latest_records`).
- One writer per output: an exclusive ``flock`` on the sibling ``<output>.lock`` is held for the whole run
  (resume and truncation of a torn line included); a second run on the same output is refused with
  :class:`OutputLockedError`, which names the file and the holder's pid.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError
from veracity.data_prep.readers import read_jsonl
from veracity.io import parse_jsonl  # the project's one JSONL parser (a record holding U+2028 stays whole)

logger = logging.getLogger(__name__)
Item = dict[str, Any]


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"i/n"`` → (i, n) with 0 <= i < n; None → (0, 1)."""
    if not text:
        return 0, 1
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"shard must look like i/n (e.g. 0/4), got {text!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"shard {text!r}: need 0 <= i < n")
    return i, n


def shard_file(stem: str, shard: tuple[int, int], suffix: str = ".jsonl") -> str:
    """The batch output of one shard: ``<stem>.jsonl`` unsharded, ``<stem>.shard-i-of-n.jsonl`` for shard i/n (the
    one place that names them: ``infer generate`` and every pipeline run)."""
    i, n = shard
    return f"{stem}{suffix}" if n == 1 else f"{stem}.shard-{i}-of-{n}{suffix}"


def layout_files(folder: Path, stem: str, shard: tuple[int, int]) -> list[Path]:
    """Every batch output of ``shard``'s layout in ``folder``: the one file unsharded, the n files of an i/n layout
    (the shards of one run). Files of another layout (an older sharded or unsharded run) are not in it."""
    return [folder / shard_file(stem, (i, shard[1])) for i in range(shard[1])]


def found_layout(folder: Path, stem: str) -> list[Path]:
    """The batch outputs in ``folder``: ``<stem>.jsonl``, else the shard files of the one ``--shard i/n`` layout
    there (those that exist). Raises ``FileNotFoundError`` when there are none, ``ValueError`` when shards of
    several layouts are there (which one is the run cannot be told)."""
    if (folder / shard_file(stem, (0, 1))).is_file():
        return [folder / shard_file(stem, (0, 1))]
    layouts = sorted({int(p.name.rsplit("-of-", 1)[1].split(".", 1)[0]) for p in folder.glob(f"{stem}.shard-*-of-*")})
    if not layouts:
        raise FileNotFoundError(f"{folder}: no {shard_file(stem, (0, 1))} and no {stem}.shard-i-of-n files")
    if len(layouts) > 1:
        raise ValueError(f"{folder}: shards of {len(layouts)} layouts (of {', '.join(map(str, layouts))}): "
                         "move one layout's files away")
    return [path for path in layout_files(folder, stem, (0, layouts[0])) if path.is_file()]


def in_shard(item_id: str, shard: tuple[int, int]) -> bool:
    i, n = shard
    return n == 1 or int(hashlib.sha256(item_id.encode()).hexdigest()[:16], 16) % n == i


class IdCheck:
    """Ids of an input file's rows, checked while it is read (before anything is written): a row without an id,
    or with one seen before, is a ``DataError`` naming the file and line (and the line it was first on)."""

    def __init__(self, path: str | Path, id_field: str = "id"):
        self.path, self.id_field = str(path), id_field
        self.first_line: dict[str, int] = {}

    def check(self, line: int, row: Item) -> str:
        value = row.get(self.id_field)
        if value is None or value == "":
            raise DataError(self.path, line, "missing id", field=self.id_field)
        item_id = str(value)
        if item_id in self.first_line:
            raise DataError(self.path, line, f"duplicate id {item_id!r} (first on line {self.first_line[item_id]})",
                            field=self.id_field)
        self.first_line[item_id] = line
        return item_id

    def require_some(self, what: str = "items") -> None:
        """An input without a single row is an error too (a run over nothing would report n = 0 as a result)."""
        if not self.first_line:
            raise DataError(self.path, None, f"no {what}: the file is empty (one JSON object per line expected)")


def checked_rows(path: str | Path, id_field: str = "id") -> list[Item]:
    """The rows of a JSONL input, each with an id no other row has, at least one; else a one-line DataError."""
    ids = IdCheck(path, id_field)
    rows = []
    for line, row in read_jsonl(path):
        ids.check(line, row)
        rows.append(row)
    ids.require_some()
    return rows


class OutputLockedError(RuntimeError):
    """Another process (or thread) is writing the same batch output."""


@contextlib.contextmanager
def output_lock(output: Path) -> Iterator[Path]:
    """Hold an exclusive lock on ``<output>.lock`` (with this pid in it) until the block ends.

    The lock file is removed while still held; a process that opened the old file before the removal sees, once
    it has the lock, that the path no longer names its file and tries again — so two writers never both hold it.
    """
    path = output.with_name(output.name + ".lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise OutputLockedError(f"{output} is being written by another run (pid {holder}, lock {path}); "
                                    "wait for it to finish or pick another --output_dir") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file we locked: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)


def recover_statuses(path: Path) -> dict[str, str]:
    """Id → status of its last record in ``path``; a torn last line (crash mid-write) is cut off first."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1
    if cut < len(data):
        logger.warning("%s: dropping a partial last line (%d bytes) left by an interrupted run", path, len(data) - cut)
        with open(path, "r+b") as handle:
            handle.truncate(cut)
    statuses: dict[str, str] = {}
    for number, line in enumerate(data[:cut].splitlines(), start=1):
        if line.strip():
            try:
                record = json.loads(line)
                statuses[str(record["id"])] = str(record.get("status", "ok"))
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise DataError(path, number, f"not a batch output record ({error}); refusing to append (choose "
                                              "another --output_dir)") from None
    return statuses


def recover_output(path: Path) -> set[str]:
    """Ids already recorded in ``path`` (ok or error); a torn last line is cut off first."""
    return set(recover_statuses(path))


def latest_records(path: str | Path, what: str = "a batch output record", *,
                   complete_lines: bool = False) -> list[dict[str, Any]]:
    """The records of a batch output, one per id: the last one written (a retried error is replaced), in the
    order the ids first appear. A line that is not a record is a ValueError naming ``path:line`` (and ``what``).
    ``complete_lines``: only the lines that end in a newline (a file being written, or torn by a kill, is read as
    far as its last whole record)."""
    latest: dict[str, dict[str, Any]] = {}
    data = Path(path).read_bytes()
    if complete_lines:
        data = data[: data.rfind(b"\n") + 1]
    with io.BytesIO(data) as handle:
        for number, record, problem in parse_jsonl(handle):
            try:
                if problem is not None:
                    raise ValueError(problem)
                latest[str(record["id"])] = record
            except (ValueError, KeyError, TypeError) as error:
                raise DataError(path, number, f"not {what} ({error})") from None
    return list(latest.values())


@dataclass
class BatchSummary:
    total_in_shard: int = 0
    already_done: int = 0
    retried: int = 0
    processed: int = 0
    ok: int = 0
    errors: int = 0
    errors_kept: int = 0  # items skipped as done whose last record is an error (not retried this run)
    seconds: float = 0.0
    error_examples: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """Items of the shard whose last record is an error once this run is over."""
        return self.errors + self.errors_kept

    @property
    def items_per_second(self) -> float:
        return self.processed / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "items_per_second": round(self.items_per_second, 3), "failed_items": self.failed}

    def count(self, record: dict[str, Any]) -> None:
        """Count one record written by this run (ok or error; the first errors are kept as examples)."""
        self.processed += 1
        if record["status"] != "error":
            self.ok += 1
            return
        self.errors += 1
        if len(self.error_examples) < 5:
            self.error_examples.append(f"{record['id']}: {record['error']}")

    def __str__(self) -> str:
        retried = f", {self.retried} failed ones retried" if self.retried else ""
        kept = f" ({self.errors_kept} of them failed: --retry_errors true runs them again)" if self.errors_kept else ""
        return (f"{self.total_in_shard} items in shard: {self.already_done} already done{kept}{retried}, "
                f"{self.processed} processed "
                f"({self.ok} ok, {self.errors} errors) in {self.seconds:.1f} s, {self.items_per_second:.2f} items/s")


def run_batch(
    items: Iterable[Item],
    process: Callable[[Sequence[Item]], list[Any]],
    output: str | Path,
    *,
    id_field: str = "id",
    shard: tuple[int, int] = (0, 1),
    batch_size: int = 1,
    progress: bool = True,
    fsync: bool = False,
    retry_errors: bool = False,
    take_lock: bool = True,
    error_fields: Sequence[str] = (),
    stamp: dict[str, Any] | None = None,
    observe: Callable[[list[dict[str, Any]]], None] | None = None,
) -> BatchSummary:
    """Run ``process`` over the items not yet in ``output`` and append one record per item.

    ``process`` takes a list of items and returns one result per item, in order; a returned ``Exception``
    marks that item as failed. If ``process`` raises, the items of that call are retried one by one so one bad
    item cannot sink its neighbours. With ``retry_errors``, items whose last record is an error are run again
    (their new record is appended; the last record of an id wins). ``take_lock=False`` when the caller already
    holds :func:`output_lock` on ``output`` (to write its run record under the same lock). ``error_fields``: item
    fields copied into an error record (R2VC keeps ``gold`` and ``source``, so its scorer counts the failed claim
    as a wrong answer). ``stamp``: fields every record of this run gets (``device``: where it was made).
    ``observe``: called with each batch's records once they are written (the run record's tally of their facts).

    Raises:
        OutputLockedError: another run holds the lock on ``output``.
        ValueError: a missing or duplicate item id, or an output file that is not a batch output.
    """
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(output) if take_lock else contextlib.nullcontext():
        todo, summary = pending_items(items, recover_statuses(output), id_field=id_field, shard=shard,
                                      retry_errors=retry_errors)
        batches = (batch_records(process, todo[first : first + batch_size], id_field=id_field,
                                 error_fields=error_fields, stamp=stamp)
                   for first in range(0, len(todo), batch_size))
        return append_batches(output, batches, summary, total=len(todo), progress=progress, fsync=fsync,
                              observe=observe)


def append_batches(output: Path, batches: Iterable[list[dict[str, Any]]], summary: BatchSummary, *, total: int,
                   progress: bool, fsync: bool = False, desc: str | None = None,
                   observe: Callable[[list[dict[str, Any]]], None] | None = None) -> BatchSummary:
    """Append each batch of records to ``output`` as it comes (one write per record, flushed after each batch —
    ``fsync`` too, if asked — so a killed run loses no batch it was handed), counting them in ``summary`` and on a
    progress bar of ``total`` items, then handing them to ``observe``; ``summary.seconds`` is the time spent. Every
    executor writes through this."""
    from tqdm.auto import tqdm  # lazy: 0.08 s; the CLI imports this module for its error types

    start = time.perf_counter()
    bar = tqdm(total=total, unit="item", desc=desc or output.name, disable=not progress)
    with open(output, "a", encoding="utf-8") as handle:
        for records in batches:
            for record in records:
                summary.count(record)
                handle.write(record_line(record))  # one write per record
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
            bar.update(len(records))
            bar.set_postfix(errors=summary.errors)
            if observe is not None:
                observe(records)
    bar.close()
    summary.seconds = time.perf_counter() - start
    return summary


def pending_items(items: Iterable[Item], statuses: dict[str, str], *, id_field: str = "id",
                  shard: tuple[int, int] = (0, 1), retry_errors: bool = False) -> tuple[list[Item], BatchSummary]:
    """The items of ``shard`` still to run, given ``statuses`` (id → status of its last record, from
    :func:`recover_statuses`): those not recorded, and with ``retry_errors`` those whose last record is an error;
    and a summary that counts the shard, the items already done and the ones retried. Every executor submits
    exactly these.

    Raises:
        ValueError: an item without an id, or with an id seen before.
    """
    todo: list[Item] = []
    seen: set[str] = set()
    summary = BatchSummary()
    for number, item in enumerate(items, start=1):
        if id_field not in item or item[id_field] in (None, ""):
            raise ValueError(f"item {number}: missing id field '{id_field}'")
        item_id = str(item[id_field])
        if item_id in seen:
            raise ValueError(f"item {number}: duplicate id {item_id!r}")
        seen.add(item_id)
        if not in_shard(item_id, shard):
            continue
        summary.total_in_shard += 1
        status = statuses.get(item_id)
        if status is None:
            todo.append(item)
        elif retry_errors and status == "error":
            summary.retried += 1
            todo.append(item)
        else:
            summary.already_done += 1
            summary.errors_kept += status == "error"
    return todo, summary


def record_line(record: dict[str, Any]) -> str:
    """A record as the one JSON line of the batch output that holds it (written in one call): UTF-8 as it is,
    or ``\\u`` escapes where the record holds what UTF-8 cannot write (a lone surrogate: half an emoji in a
    corpus document), so one odd text never stops a run."""
    line = json.dumps(record, ensure_ascii=False, default=str)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(record, ensure_ascii=True, default=str)
    return line + "\n"


def batch_records(process: Callable[[Sequence[Item]], list[Any]], chunk: Sequence[Item], *, id_field: str = "id",
                  error_fields: Sequence[str] = (), stamp: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The output records of one batch, as :func:`run_batch` writes them: ``{"id", "seconds", <stamp>, "status":
    "ok", "result"}`` or ``{"id", "seconds", <stamp>, "status": "error", "error", <error_fields>}`` (the Python API
    returns the same). A failing item fails alone (:func:`_process_isolated`)."""
    t0 = time.perf_counter()
    results = _process_isolated(process, list(chunk))
    per_item = (time.perf_counter() - t0) / max(len(chunk), 1)
    records = []
    for item, result in zip(chunk, results, strict=True):
        record: dict[str, Any] = {"id": str(item[id_field]), "seconds": round(per_item, 4), **(stamp or {})}
        if isinstance(result, BaseException):
            record.update(status="error", error=f"{type(result).__name__}: {result}")
            record.update({k: item[k] for k in error_fields if k in item})
        else:
            record.update(status="ok", result=result)
        records.append(record)
    return records


def _process_isolated(process: Callable[[Sequence[Item]], list[Any]], chunk: list[Item]) -> list[Any]:
    try:
        results = process(chunk)
        if len(results) != len(chunk):
            raise RuntimeError(f"process returned {len(results)} results for {len(chunk)} items")
        return results
    except Exception as error:  # noqa: BLE001 - isolation is the point
        if len(chunk) == 1:
            logger.debug("item failed: %s", traceback.format_exc())
            return [error]
        return [_process_isolated(process, [item])[0] for item in chunk]
