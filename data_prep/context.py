"""What every dataset loader shares: the data root, the split rule, the error policy and the counters."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from veracity.data_prep import readers
from veracity.data_prep.errors import DataError, ErrorPolicy
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import NLI_LABELS, TERNARY_LABELS, Record, to_nli, to_ternary
from veracity.data_prep.splits import SplitSpec

logger = logging.getLogger(__name__)
R = TypeVar("R", bound=Record)


@dataclass
class LoadContext:
    """State of one preparation run, handed to every loader."""

    data_root: Path
    splits: SplitSpec = field(default_factory=SplitSpec)
    policy: ErrorPolicy = field(default_factory=ErrorPolicy)
    # output name -> event -> count ("filtered:empty_claim", "kept:evidence_text_unresolved", ...)
    events: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    inputs: dict[str, list[Path]] = field(default_factory=lambda: defaultdict(list))
    # output name -> id space of its records' group_id (default: the output name); outputs in one id space
    # are joined by equal ids when splits are assigned over connected groups (splits.assign_group_splits)
    group_namespaces: dict[str, str] = field(default_factory=dict)
    # output name -> "raw → canonical" label -> count: the variants that were mapped (shown in the manifest)
    label_variants: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    # (output, record id) -> (file:line, content) of the first row with that id (see ``first_of_id``)
    _ids: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)

    def path(self, relative: str, directory: bool = False) -> Path:
        """A file (or ``directory``) under the data root; missing, unreadable, a symlink loop or the wrong kind
        is a one-line error naming the path and the cause (``readers.check_input``)."""
        path = self.data_root / relative
        readers.check_input(path, directory=directory, root=self.data_root)
        return path

    def origin(self, path: Path, line: int) -> str:
        try:
            rel = path.relative_to(self.data_root)
        except ValueError:
            rel = Path(path.name)
        return f"{rel.as_posix()}:{line}"

    def rows(self, output: str, path: Path, fmt: str = "jsonl", **kwargs: object) -> Iterator[RawRow]:
        """Yield the raw rows of ``path`` (``jsonl``, ``json`` array, ``tsv`` or ``csv``) for ``output``."""
        self.inputs[output].append(path)
        if fmt == "jsonl":
            source = readers.read_jsonl(path, self.policy)
        elif fmt == "json":
            source = readers.read_json_array(path, self.policy)
        elif fmt in ("tsv", "csv"):
            delimiter = "\t" if fmt == "tsv" else ","
            source = readers.read_delimited(path, delimiter, policy=self.policy, **kwargs)  # type: ignore[arg-type]
        else:
            raise ValueError(f"unknown format {fmt!r}")
        count = 0
        for line, data in source:
            count += 1
            yield RawRow(str(path), line, data, self.origin(path, line), output)
        if count == 0:  # not an error (a dataset may legitimately lose a file's rows), but never silent
            logger.warning("%s: empty input file (no records) for %s", path, output)
            self.events[output]["warning:empty_input_file"] += 1

    def first_of_id(self, output: str, record_id: str, row: RawRow) -> bool:
        """The one duplicate-id rule of every loader: True for the first row with ``record_id`` in ``output``;
        a repeat with identical content is dropped and counted (False); a repeat with other content is a
        DataError naming both lines (skipped and logged with ``--skip_invalid``)."""
        content = hashlib.sha1(json.dumps(row.data, sort_keys=True, default=str).encode()).digest()
        first = self._ids.get((output, record_id))
        if first is None:
            self._ids[(output, record_id)] = (f"{row.path}:{row.line}", content)
            return True
        if first[1] == content:
            self.drop(output, "duplicate_identical")
            return False
        raise row.error(f"duplicate id {record_id!r} with other content than {first[0]}")

    def convert(self, rows: Iterable[RawRow], fn: Callable[[RawRow], R | list[R] | None]) -> list[R]:
        """Apply ``fn`` to each row; a DataError goes to the policy (raise, or skip and count)."""
        out: list[R] = []
        for row in rows:
            try:
                result = fn(row)
            except DataError as error:
                self.policy.handle(error)
                continue
            if result is None:
                continue
            out.extend(result if isinstance(result, list) else [result])
        return out

    def drop(self, output: str, reason: str) -> None:
        """Count a record that is filtered on purpose (not an error), e.g. an empty claim."""
        self.events[output][f"filtered:{reason}"] += 1

    def note(self, output: str, event: str) -> None:
        """Count something worth reporting about kept records (e.g. evidence text that could not be resolved)."""
        self.events[output][f"kept:{event}"] += 1

    def ternary(self, row: RawRow, name: str, value: object | None = None, output: str | None = None,
                vote: bool = False) -> str:
        """The ternary label of field ``name`` (or of ``value`` read from it), its variant counted in the manifest
        under ``output`` — the output the label goes to, by default the one whose file the row was read for — and,
        for an annotator's ``vote`` rather than a record's label, as ``votes: <variant>``."""
        value = row.data.get(name) if value is None else value
        label = to_ternary(value)
        if label is None:
            raise row.error(f"unknown label {value!r} (expected a variant of {list(TERNARY_LABELS)})", field=name)
        self._count_variant(row, value, label, output, "votes: " if vote else "")
        return label

    def nli(self, row: RawRow, name: str) -> str:
        value = row.data.get(name)
        label = to_nli(value)
        if label is None:
            raise row.error(f"unknown NLI label {value!r} (expected one of {list(NLI_LABELS)})", field=name)
        self._count_variant(row, value, label)
        return label

    def _count_variant(self, row: RawRow, value: object, label: str, output: str | None = None,
                       kind: str = "") -> None:
        if value != label:
            self.label_variants[output or row.output or "-"][f"{kind}{value} → {label}"] += 1

    def split(self, key: str) -> str:
        """The split of ``key`` (a claim, or an id for records without one) taken on its own.

        For records with a claim this is provisional: ``prepare`` reassigns it over connected groups once every
        loader has run (``splits.assign_group_splits``); it stays final for records without a claim.
        """
        return self.splits.assign(key)

    def group_namespace(self, output: str, namespace: str) -> None:
        """Declare the id space of ``output``'s group ids (outputs sharing one are joined by equal ids)."""
        self.group_namespaces[output] = namespace
