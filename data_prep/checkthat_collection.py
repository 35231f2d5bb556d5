"""Opt-in conversion of the official CheckThat! 4b collection pickle into JSONL (the only place a pickle is read).

Usage: veracity prep sciclaim-collection --pickle subtask4b_collection_data.pkl --output collection.jsonl
                                         --trust_pickle true

The organisers ship the collection as a pandas DataFrame pickle (``cord_uid``, ``title``, ``abstract`` and 14 more
metadata columns). Unpickling runs whatever code the file names, so nothing else in veracity reads pickles and this
command refuses to without ``--trust_pickle true``: run it once on the file you downloaded from the organisers, then
give every job the JSONL it writes (one ``{cord_uid, title, abstract, …metadata}`` object per line).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.checkthat_files import read_collection
from veracity.data_prep.errors import DataError
from veracity.data_prep.readers import open_input
from veracity.io import atomic_writer

logger = logging.getLogger(__name__)


@dataclass
class ConvertArgs:
    pickle: str = field(metadata={"help": "The official subtask4b_collection_data.pkl (a pandas DataFrame)."})
    output: str = field(metadata={"help": "JSONL to write (one paper per line)."})
    trust_pickle: bool = field(default=False, metadata={
        "help": "Required: unpickling can run arbitrary code, so only convert a file from a source you trust."})


def convert_pickle(pickle_path: str | Path, output: str | Path, trust_pickle: bool = False) -> int:
    """Write the DataFrame pickle's rows as JSONL (values JSON-safe: timestamps as ISO strings, NaN as null)."""
    if not trust_pickle:
        raise DataError(pickle_path, None, "refusing to unpickle without --trust_pickle true (a pickle can run code "
                                           "when loaded; convert only the organisers' file)")
    import pandas as pd  # lazy: heavy to import (it comes with datasets), and only this opt-in conversion needs it

    with open_input(Path(pickle_path)) as handle:  # a missing or unreadable file: a one-line DataError
        frame = pd.read_pickle(handle)  # noqa: S301 - the explicit, documented opt-in above

    def plain(value: object) -> object:
        if isinstance(value, float) and math.isnan(value):
            return None
        if hasattr(value, "isoformat"):
            return value.isoformat()  # type: ignore[union-attr]
        if hasattr(value, "item"):
            return value.item()  # numpy scalars
        return value

    count = 0
    with atomic_writer(output) as handle:
        for row in frame.to_dict(orient="records"):
            handle.write(json.dumps({k: plain(v) for k, v in row.items()}, ensure_ascii=False) + "\n")
            count += 1
    read_collection(output)  # the JSONL must load the way every job will read it
    return count


def make_parser() -> Any:
    return parser_for((ConvertArgs,), "veracity prep sciclaim-collection")


def main(argv: Sequence[str] | None = None) -> int:
    (args,) = parse_config(make_parser(), argv)
    count = convert_pickle(args.pickle, args.output, args.trust_pickle)  # refused: a DataError (veracity.cli: exit 2)
    print(f"{count} papers written to {args.output}")
    return count
