"""Small I/O helpers shared by every layer: atomic writes, JSONL, content hashes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

# How every writer encodes text: UTF-8, and a lone surrogate (half an emoji in a corpus document, which JSON's
# "\ud83d" escapes carry into a str) — the one thing UTF-8 cannot write — as its backslash escape ``\ud83d`` instead
# of an error after the work is done. In JSON text a str only holds one inside a string, where the escape is JSON's
# own: the value reads back the same. In HTML or Markdown it shows as the escape.
TEXT_ERRORS = "backslashreplace"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD: what a tokenizer (Rust ``tokenizers`` refuses a str holding one)
    or a grammar over UTF-8 bytes is given."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def encode_text(text: str) -> bytes:
    """``text`` as the bytes every writer here writes (UTF-8; :data:`TEXT_ERRORS` for a lone surrogate)."""
    return text.encode("utf-8", TEXT_ERRORS)


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
    Text mode writes UTF-8 with lone surrogates escaped (:data:`TEXT_ERRORS`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~process_umask())
        text = "b" not in mode
        with os.fdopen(fd, mode, encoding="utf-8" if text else None, errors=TEXT_ERRORS if text else None,
                       newline="\n" if text else None) as handle:
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
            data = encode_text(dumps_canonical(row) + "\n")
            digest.update(data)
            handle.write(data)
            count += 1
    return count, digest.hexdigest()


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write pretty, key-sorted JSON (manifests, metrics)."""
    with atomic_writer(path) as handle:
        json.dump(obj, handle, ensure_ascii=False, indent=2, sort_keys=True)
        handle.write("\n")


def write_text(path: str | Path, text: str) -> None:
    """Atomically write ``text`` (reports, tables) as every writer here encodes it."""
    with atomic_writer(path) as handle:
        handle.write(text)


def json_error_message(error: json.JSONDecodeError, column: int | None = None) -> str:
    """``malformed JSON (Expecting value at column 7)``; json's messages that end in "at" (``Unterminated string
    starting at``) take the column directly instead of reading "at at column"."""
    where = f"column {error.colno if column is None else column}"
    joint = " " if error.msg.endswith(" at") else " at "
    return f"malformed JSON ({error.msg}{joint}{where})"


def jsonl_lines(handle: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line without its ending)`` of a binary JSONL stream (a file opened ``"rb"``).

    Lines end at LF (CRLF: the CR is dropped) and at a lone CR (old Mac files): JSON cannot hold a raw CR or LF
    inside a string, so neither cuts a record. Nothing else ends a line — not U+2028, U+2029 or U+0085, which a
    JSON string may hold raw (``json.dumps(..., ensure_ascii=False)`` keeps them) and which ``str.splitlines()``
    would cut a record at. A UTF-8 byte order mark at the start of the stream is dropped.
    """
    number = 0
    for chunk in handle:  # a binary file iterates at LF only
        body = chunk[:-1] if chunk.endswith(b"\n") else chunk
        if number == 0:
            body = body.removeprefix(b"\xef\xbb\xbf")
        for piece in body.removesuffix(b"\r").split(b"\r"):
            number += 1
            yield number, piece


def parse_jsonl(handle: Iterable[bytes]) -> Iterator[tuple[int, Any, str | None]]:
    """Every non-blank line of a binary JSONL stream as ``(line, value, None)``, or ``(line, None, problem)`` for
    a line that is not UTF-8 or not JSON, so that a caller may report it or skip it and go on. The project's one
    JSONL parser, under its one JSONL reader (``veracity.data_prep.readers.read_jsonl``: numbered records, bad lines
    as DataErrors naming file and line)."""
    for number, raw in jsonl_lines(handle):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            yield number, None, f"not valid UTF-8 (byte {error.start}: {raw[error.start : error.start + 1]!r})"
            continue
        if not text.strip():
            continue
        try:
            yield number, json.loads(text), None
        except json.JSONDecodeError as error:
            yield number, None, json_error_message(error)


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
