"""Build a retrieval index over a corpus.

Usage: veracity index build --corpus runs/prep/climate_fever_corpus.jsonl --output_dir runs/index/cf [--dense false]
       [--executor ray --workers K [--ray_address auto]]

With ``--executor ray`` the documents are embedded by ``--workers`` Ray actors (``infer/retrieval/ray_embed.py``:
each loads the encoder once; the driver loads none), one Ray task per ``--stream_batch`` documents, and the index is
built from their vectors: the same index as a local build (the same batches: even INT8 vectors, whose dynamic
quantization depends on a text's batch-mates, come out bit for bit).

The corpus is checked before anything is written: a record without a string ``doc_id`` / ``text``, a repeated
``doc_id`` or an empty corpus exits with status 2 and one line naming the file and line.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.infer.executors import ExecutorConfig
from veracity.infer.retrieval.index import IndexSettings, build_index, check_corpus
from veracity.models.device import DeviceOptions, resolve_device
from veracity.models.registry import resolve_model
from veracity.rundir import write_run_config


@dataclass
class BuildArgs:
    corpus: str = field(metadata={"help": "CorpusDocument JSONL (e.g. a veracity prep output)."})
    output_dir: str = field(metadata={"help": "Index folder to write."})


def make_parser() -> Any:
    return parser_for((BuildArgs, IndexSettings, DeviceOptions, ExecutorConfig), "veracity index build")


def main(argv: Sequence[str] | None = None) -> Path:
    build, settings, where, executor = parse_config(make_parser(), argv)
    documents = check_corpus(build.corpus)  # a bad record (DataError, exit 2) stops here, before anything is written
    device = resolve_device(where.device) if settings.dense else None  # BM25 alone loads no model
    if settings.dense:  # a --embedder that is not there is one error line too, before anything is written
        resolve_model("embedder", settings.embedder)
    write_run_config(build.output_dir, build, settings, executor, job="index build", device=device)
    embedded = None
    if settings.dense and executor.executor == "ray":
        from veracity.infer.retrieval.ray_embed import STAGING, embed_on_ray  # lazy: Ray

        embedded = embed_on_ray(Path(build.corpus), Path(build.output_dir), settings.encoder_spec(),
                                settings.include_title, executor, settings.stream_batch, where.device)
    folder = build_index(build.corpus, build.output_dir, settings, checked=documents, device=where.device,
                         embedded=embedded)
    if embedded is not None:
        shutil.rmtree(folder / STAGING)  # the index holds the vectors now
    print(f"index written to {folder}")
    return folder
