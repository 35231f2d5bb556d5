"""Raw file readers that keep line numbers, so every later error can say where the record came from.

Each reader yields ``(line_number, row)`` where ``row`` is a dict. Undecodable bytes and malformed JSON are
:class:`DataError` s naming the file and line; with a permissive :class:`ErrorPolicy` they are skipped instead.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError, ErrorPolicy

Row = dict[str, Any]


def _decode_line(path: Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = raw[err.start : err.start + 1]
        raise DataError(path, number, f"not valid UTF-8 (byte {err.start}: {bad!r})") from None


def read_jsonl(path: str | Path, policy: ErrorPolicy | None = None) -> Iterator[tuple[int, Row]]:
    """Yield ``(line, object)`` for each non-blank line of a JSONL file."""
    path, policy = Path(path), policy or ErrorPolicy()
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = _decode_line(path, number, raw)
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as err:
                    raise DataError(path, number, f"malformed JSON ({err.msg} at column {err.colno})") from None
                if not isinstance(row, dict):
                    raise DataError(path, number, f"expected a JSON object, got {type(row).__name__}")
            except DataError as error:
                policy.handle(error)
                continue
            yield number, row


def read_json_array(path: str | Path, policy: ErrorPolicy | None = None) -> Iterator[tuple[int, Row]]:
    """Yield ``(line, object)`` for each element of a top-level JSON array (AVeriTeC files).

    The line is where the element starts in the file, found by decoding the array one element at a time.
    """
    path, policy = Path(path), policy or ErrorPolicy()
    text = _read_utf8(path)
    decoder = json.JSONDecoder()

    def line_at(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

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
            raise DataError(path, err.lineno, f"malformed JSON ({err.msg} at column {err.colno})") from None
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
    """A whole file as text; undecodable bytes are an error naming the line they are on."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(path, line, f"not valid UTF-8 (byte offset {err.start})") from None


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
