"""Raw file readers that keep line numbers, so every later error can say where the record came from.

Each reader yields ``(line_number, row)`` where ``row`` is a dict. Undecodable bytes and malformed JSON are
:class:`DataError` s naming the file and line; with a permissive :class:`ErrorPolicy` they are skipped instead.

A UTF-8 byte order mark at the start of a file is accepted, and lines end at LF, CRLF or a lone CR (old Mac files,
or mixed endings); lines are numbered that way too, as editors number them.

A file that cannot be read at all — missing, a directory, a symlink loop, no read permission — is a one-line
:class:`DataError` naming the path and the cause (:func:`check_input`), also with ``--skip_invalid``: that flag
skips bad records, not a dataset's missing file.
"""

from __future__ import annotations

import bisect
import codecs
import csv
import errno
import io
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError, ErrorPolicy
from veracity.io import json_error_message, parse_jsonl
from veracity.made_by import made_by

Row = dict[str, Any]
_LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_END_BYTES = re.compile(rb"\r\n|\r|\n")


def _cause(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "a symlink loop (too many levels of symbolic links)"
    if isinstance(error, PermissionError):
        return "permission denied (not readable by this user)"
    if isinstance(error, IsADirectoryError):
        return "is a directory, expected a file"
    if isinstance(error, FileNotFoundError):
        return "not found"
    return error.strerror or str(error)


def missing_under_root(path: Path, root: Path) -> str:
    """Why a dataset file is not under the data root, and where the data comes from: the root may lack the dataset's
    folder (a root without the data) or only this file."""
    folder = Path(path).relative_to(root).parts[0]
    if not any(Path(root).iterdir()):
        what = "the folder is empty"
    else:
        what = f"it has no {folder}/" if not (root / folder).exists() else f"its {folder}/ lacks this file"
    return (f"not found under data root {root}: {what} (where each dataset comes from and the layout veracity prep "
            "reads: docs/data.md#the-data-root; --datasets prepares only the ones you have)")


def check_input(path: Path, directory: bool = False, root: Path | None = None) -> None:
    """Raise a one-line DataError unless ``path`` is a readable file (or ``directory``)."""
    try:
        info = os.stat(path)  # follows links: a loop is ELOOP here, not a silent "does not exist"
    except OSError as error:
        cause = _cause(error)
        if isinstance(error, FileNotFoundError) and os.path.lexists(path):
            cause = "a dangling symlink (its target does not exist)"
        elif isinstance(error, FileNotFoundError) and root is not None:
            cause = missing_under_root(path, root)
        elif isinstance(error, FileNotFoundError) and (made := made_by(path)):  # a training set, a trained adapter
            cause = f"not found; {made}"
        raise DataError(path, None, cause) from None
    if directory and not stat.S_ISDIR(info.st_mode):
        raise DataError(path, None, "is a file, expected a directory")
    if not directory and stat.S_ISDIR(info.st_mode):
        raise DataError(path, None, "is a directory, expected a file")
    if not os.access(path, os.R_OK | (os.X_OK if directory else 0)):
        raise DataError(path, None, "permission denied (not readable by this user)")


def open_input(path: Path):  # noqa: ANN201 - a binary file object
    """``open(path, "rb")`` with the cause of a failure as a one-line DataError."""
    try:
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    except OSError as error:
        raise DataError(path, None, _cause(error)) from None


def read_jsonl(path: str | Path, policy: ErrorPolicy | None = None) -> Iterator[tuple[int, Row]]:
    """Yield ``(line, object)`` for each non-blank line of a JSONL file, parsed by the project's one JSONL parser
    (:func:`veracity.io.parse_jsonl`: lines end at LF or CR only, never inside a record at U+2028, U+2029 or
    U+0085); a bad line is a DataError naming file and line, skipped under a permissive policy."""
    path, policy = Path(path), policy or ErrorPolicy()
    with open_input(path) as handle:
        for number, row, problem in parse_jsonl(handle):
            if problem is None and not isinstance(row, dict):
                problem = f"expected a JSON object, got {type(row).__name__}"
            if problem is not None:
                policy.handle(DataError(path, number, problem))
                continue
            yield number, row


def read_json_array(path: str | Path, policy: ErrorPolicy | None = None) -> Iterator[tuple[int, Row]]:
    """Yield ``(line, object)`` for each element of a top-level JSON array (AVeriTeC files).

    The line is where the element starts in the file, found by decoding the array one element at a time.
    """
    path, policy = Path(path), policy or ErrorPolicy()
    text = _read_utf8(path)
    decoder = json.JSONDecoder()
    line_starts = [0] + [m.end() for m in _LINE_END.finditer(text)]

    def line_at(offset: int) -> int:
        return bisect.bisect_right(line_starts, offset)

    pos = _skip_ws(text, 0)
    if pos >= len(text) or text[pos] != "[":
        raise DataError(path, line_at(pos), "expected a JSON array of records")
    pos = _skip_ws(text, pos + 1)
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        try:
            row, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            # The rest of the array cannot be located reliably after a syntax error: always fatal.
            line = line_at(err.pos)
            raise DataError(path, line, json_error_message(err, err.pos - line_starts[line - 1] + 1)) from None
        if isinstance(row, dict):
            yield line_at(pos), row
        else:
            policy.handle(DataError(path, line_at(pos), f"expected a JSON object, got {type(row).__name__}"))
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        elif pos < len(text) and text[pos] == "]":
            return
        else:
            raise DataError(path, line_at(pos), "malformed JSON array (expected ',' or ']')")


def _read_utf8(path: Path) -> str:
    """A whole file as text, without a leading byte order mark; undecodable bytes are an error naming the line
    they are on."""
    with open_input(path) as handle:
        data = handle.read()
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as err:
        line = len(_LINE_END_BYTES.findall(data, 0, bom + err.start)) + 1
        raise DataError(path, line, f"not valid UTF-8 (byte offset {bom + err.start})") from None


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def read_delimited(
    path: str | Path, delimiter: str, required: tuple[str, ...], policy: ErrorPolicy | None = None
) -> Iterator[tuple[int, Row]]:
    """Yield ``(line, row)`` from a CSV/TSV file with a header; ``line`` is where the record starts.

    Quoted fields may span lines (the FEVER-8 CSV packs QA evidence with newlines), so the line of each record
    is taken from the csv reader's own counter.
    """
    path, policy = Path(path), policy or ErrorPolicy()
    text = _read_utf8(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = next(reader, None)
    if header is None:
        raise DataError(path, 1, "empty file (expected a header line)")
    missing = [name for name in required if name not in header]
    if missing:
        raise DataError(path, 1, f"header lacks column(s) {missing}; has {header}", field=missing[0])
    start = reader.line_num + 1
    for values in reader:
        line, start = start, reader.line_num + 1
        if not values or values == [""]:
            continue
        if len(values) != len(header):
            policy.handle(DataError(path, line, f"expected {len(header)} columns, got {len(values)}"))
            continue
        yield line, dict(zip(header, values, strict=True))
