"""Build a retrieval index over a corpus.

Usage: veracity index build --corpus runs/prep/climate_fever_corpus.jsonl --output_dir runs/index/cf [--dense false]

The corpus is checked before anything is written: a record without a string ``doc_id`` / ``text``, a repeated
``doc_id`` or an empty corpus exits with status 2 and one line naming the file and line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.infer.retrieval.index import IndexSettings, build_index, check_corpus
from veracity.models.device import DeviceOptions, resolve_device
from veracity.rundir import write_run_config


@dataclass
class BuildArgs:
    corpus: str = field(metadata={"help": "CorpusDocument JSONL (e.g. a veracity prep output)."})
    output_dir: str = field(metadata={"help": "Index folder to write."})


def make_parser() -> Any:
    return parser_for((BuildArgs, IndexSettings, DeviceOptions), "veracity index build")


def main(argv: Sequence[str] | None = None) -> Path:
    build, settings, where = parse_config(make_parser(), argv)
    documents = check_corpus(build.corpus)  # a bad record (DataError, exit 2) stops here, before anything is written
    device = resolve_device(where.device) if settings.dense else None  # BM25 alone loads no model
    write_run_config(build.output_dir, build, settings, job="index build", device=device)
    folder = build_index(build.corpus, build.output_dir, settings, checked=documents, device=where.device)
    print(f"index written to {folder}")
    return folder
