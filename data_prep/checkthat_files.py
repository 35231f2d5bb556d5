"""CheckThat-format task files: posts TSV, paper collection (JSONL / Parquet / CSV), submission TSV.

- **Posts** (TSV with a header): ``post_id``, the text in ``tweet_text`` (or ``text``), and the gold paper in
  ``cord_uid`` (or ``gold_id``) when present. The CheckThat! 2025 4b files load as they are, the shared ones
  (``post_id, tweet_text, cord_uid``) and the first release's two columns (``tweet_text, cord_uid``: the post id is
  then the 0-based row number, as the organisers' pandas index numbered them). A gold cell may hold several ids as a
  list (``['a', 'b']``) for tasks with more than one relevant document.
- **Collection**: one paper per row with a key (``cord_uid``, ``pubkey``, ``doc_id``, ``key`` or ``id``, the first
  present), ``title``, ``abstract`` (or ``text``) and any other fields, kept as metadata. The official collection is
  a pandas pickle; pickles run code when loaded, so it is never read here: convert it once, on purpose, with
  ``veracity prep sciclaim-collection --pickle subtask4b_collection_data.pkl --output collection.jsonl --trust_pickle
  true`` (:func:`convert_pickle`).
- **Submission**: ``post_id<TAB>preds`` with a header, ``preds`` the Python list of the top-5 ids
  (``['uid1', 'uid2', …]``), the format the organisers' notebook writes and reads with ``ast.literal_eval``; an
  unquoted ``[uid1, uid2]`` reads too.

Every bad row is a :class:`DataError` naming the file and line (the row number for Parquet).
"""

from __future__ import annotations

import ast
import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError
from veracity.data_prep.readers import open_input, read_delimited, read_jsonl
from veracity.io import atomic_writer


def text_input(path: Path) -> io.TextIOWrapper:
    """A TSV/CSV file opened as text, its BOM dropped; a missing or unreadable file is a one-line DataError."""
    return io.TextIOWrapper(open_input(path), encoding="utf-8-sig", newline="")

KEY_FIELDS = ("cord_uid", "pubkey", "doc_id", "key", "id")
TEXT_FIELDS = ("tweet_text", "text")
GOLD_FIELDS = ("cord_uid", "gold_id")
COLLECTION_SUFFIXES = (".jsonl", ".parquet", ".csv", ".tsv")


@dataclass
class Post:
    post_id: str
    text: str
    gold: list[str] = field(default_factory=list)


@dataclass
class Paper:
    key: str
    title: str
    abstract: str
    metadata: dict[str, Any] = field(default_factory=dict)


def _parse_id_list(path: str | Path, line: int, cell: str, name: str) -> list[str]:
    """``['a', 'b']`` (Python literal) or ``[a, b]`` → ids; a bare ``a`` → ``[a]``."""
    cell = cell.strip()
    if not cell.startswith("["):
        return [cell] if cell else []
    try:
        value = ast.literal_eval(cell)
    except (ValueError, SyntaxError):
        if not cell.endswith("]"):
            raise DataError(path, line, f"unterminated list {cell[:40]!r}", field=name) from None
        value = [part.strip().strip("'\"") for part in cell[1:-1].split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
        raise DataError(path, line, "expected a list of ids", field=name)
    return [str(v) for v in value]


def read_posts(path: str | Path) -> list[Post]:
    """Posts of a TSV file (see the module docstring); empty texts and repeated post ids are errors."""
    path = Path(path)
    with text_input(path) as handle:
        header = next(csv.reader(handle, delimiter="\t"), [])
    text_field = next((f for f in TEXT_FIELDS if f in header), None)
    if text_field is None:
        raise DataError(path, 1, f"header lacks a text column ({' or '.join(TEXT_FIELDS)}); has {header}",
                        field=TEXT_FIELDS[0])
    gold_field = next((f for f in GOLD_FIELDS if f in header), None)
    posts: list[Post] = []
    seen: dict[str, int] = {}
    for row_number, (line, row) in enumerate(read_delimited(path, "\t", (text_field,))):
        post_id = row["post_id"].strip() if "post_id" in row else str(row_number)
        text = row[text_field].strip()
        if not post_id:
            raise DataError(path, line, "empty post id", field="post_id")
        if not text:
            raise DataError(path, line, "empty post text", field=text_field)
        if post_id in seen:
            raise DataError(path, line, f"post id {post_id!r} repeats line {seen[post_id]}", field="post_id")
        seen[post_id] = line
        gold = _parse_id_list(path, line, row[gold_field], gold_field) if gold_field else []
        posts.append(Post(post_id, text, gold))
    return posts


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    suffix = path.suffix.lower()
    if suffix in (".pkl", ".pickle"):
        raise DataError(path, None, "pickles are not read (they can run code): convert the file once with "
                        "`veracity prep sciclaim-collection --pickle FILE --output collection.jsonl --trust_pickle "
                        "true`, then pass the JSONL")
    if suffix == ".jsonl":
        return list(read_jsonl(path))
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # lazy: 0.2 s to import, and only a Parquet collection needs it

        return [(number, row) for number, row in enumerate(pq.read_table(path).to_pylist(), start=1)]
    if suffix in (".csv", ".tsv"):
        with text_input(path) as handle:
            header = next(csv.reader(handle, delimiter="\t" if suffix == ".tsv" else ","), [])
        return list(read_delimited(path, "\t" if suffix == ".tsv" else ",", (next(
            (k for k in KEY_FIELDS if k in header), KEY_FIELDS[0]),)))
    raise DataError(path, None, f"unknown collection format {suffix!r}; use one of {COLLECTION_SUFFIXES}")


def _text_field(path: Path, line: int, row: dict[str, Any], name: str) -> str:
    value = row.get(name)
    if value is None or (isinstance(value, float) and value != value):  # null / NaN: an empty field
        return ""
    if not isinstance(value, str):
        raise DataError(path, line, f"expected a string, got {type(value).__name__}", field=name)
    return value.strip()


def read_collection(path: str | Path) -> list[Paper]:
    """Papers of a JSONL, Parquet or CSV/TSV collection; a row without a key or without any text, a non-string
    title/abstract, or a repeated key is a :class:`DataError` naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "collection file not found")
    papers: list[Paper] = []
    seen: dict[str, int] = {}
    for line, row in _rows(path):
        key_field = next((k for k in KEY_FIELDS if k in row), None)
        key = row.get(key_field) if key_field else None
        if isinstance(key, int) and not isinstance(key, bool):
            key = str(key)
        if not isinstance(key, str) or not key.strip():
            raise DataError(path, line, "missing or empty paper key", field=key_field or "/".join(KEY_FIELDS))
        key = key.strip()
        title = _text_field(path, line, row, "title")
        abstract_field = "abstract" if "abstract" in row or "text" not in row else "text"
        abstract = _text_field(path, line, row, abstract_field)
        if not (title or abstract):
            raise DataError(path, line, "paper has neither a title nor an abstract", field="title")
        if key in seen:
            raise DataError(path, line, f"paper key {key!r} repeats line {seen[key]}", field=key_field)
        seen[key] = line
        metadata = {k: v for k, v in row.items() if k not in (key_field, "title", abstract_field)}
        papers.append(Paper(key, title, abstract, json.loads(json.dumps(metadata, default=str))))
    if not papers:
        raise DataError(path, None, "the collection is empty")
    return papers


def write_submission(path: str | Path, rankings: dict[str, list[str]], top: int = 5) -> None:
    """``post_id<TAB>preds`` (header), ``preds`` the Python list of the top ids, in the order given."""
    with atomic_writer(path) as handle:
        handle.write("post_id\tpreds\n")
        for post_id, ids in rankings.items():
            handle.write(f"{post_id}\t{[str(i) for i in ids[:top]]!r}\n")


def read_submission(path: str | Path) -> dict[str, list[str]]:
    """post_id → ranked ids of a submission TSV (header ``post_id<TAB>preds`` optional)."""
    path = Path(path)
    out: dict[str, list[str]] = {}
    with text_input(path) as handle:
        for line, raw in enumerate(handle, start=1):
            raw = raw.rstrip("\r\n")
            if not raw.strip() or (line == 1 and raw.split("\t")[0].strip() == "post_id"):
                continue
            parts = raw.split("\t")
            if len(parts) != 2:
                raise DataError(path, line, f"expected post_id<TAB>[id, …], got {len(parts)} column(s)")
            post_id, cell = parts[0].strip(), parts[1].strip()
            if not cell.startswith("["):
                raise DataError(path, line, f"predictions must be a list like [uid1, uid2], got {cell[:40]!r}",
                                field="preds")
            if post_id in out:
                raise DataError(path, line, f"post id {post_id!r} appears twice", field="post_id")
            out[post_id] = _parse_id_list(path, line, cell, "preds")
    return out
