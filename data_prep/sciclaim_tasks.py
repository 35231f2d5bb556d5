"""CheckThat-format retrieval tasks built from prepared records, for evaluation where the paper collection is absent.

Usage: veracity prep sciclaim-tasks [--prepared_dir runs/prep] [--tasks climate_fever fever_evidence]
                                    [--output_dir runs/prep/sciclaim]

Writes ``<output_dir>/<task>/collection.jsonl`` and ``posts_<split>.tsv`` (``post_id, tweet_text, cord_uid``, the
gold cell a list of ids) for every split, so that ``veracity infer sciclaim --posts … --collection …`` and
``veracity eval sciclaim`` run on them exactly as on the real CheckThat files.

- ``climate_fever``: a post is a Climate-FEVER claim, its gold the evidence sentences annotated SUPPORTS or REFUTES;
  the collection is every evidence sentence (key = the Climate-FEVER evidence id, title = the Wikipedia article
  title, abstract = the sentence). From ``climate_fever_corpus`` / ``climate_fever_queries``.
- ``fever_evidence``: the FEVER-family pool (FEVER-Symmetric + SufficientFacts-FEVER evidence texts; no titles).
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.prepared import read_prepared
from veracity.data_prep.schema import CorpusDocument, RetrievalQuery
from veracity.io import atomic_writer

logger = logging.getLogger(__name__)
TASKS = {"climate_fever": ("climate_fever_corpus", "climate_fever_queries"),
         "fever_evidence": ("fever_evidence_corpus", "fever_evidence_queries")}


@dataclass
class TaskArgs:
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep."})
    tasks: list[str] = field(default_factory=lambda: list(TASKS), metadata={"help": f"Any of {sorted(TASKS)}."})
    output_dir: str = field(default="runs/prep/sciclaim", metadata={"help": "One folder per task is written here."})


def _tsv_cell(text: str) -> str:
    return " ".join(text.split())  # tabs and newlines inside a post would break the TSV


def build_task(prepared_dir: str | Path, task: str, output_dir: str | Path) -> dict[str, Path]:
    """Write one task's collection and per-split posts files; returns ``{"collection": …, "<split>": …}``."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(TASKS)}")
    corpus_name, queries_name = TASKS[task]
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs = [d for d in read_prepared(prepared_dir, corpus_name) if isinstance(d, CorpusDocument)]
    queries = [q for q in read_prepared(prepared_dir, queries_name) if isinstance(q, RetrievalQuery)]
    paths: dict[str, Path] = {"collection": out / "collection.jsonl"}
    with atomic_writer(paths["collection"]) as handle:
        for d in docs:
            handle.write(json.dumps({"doc_id": d.doc_id, "title": d.title, "abstract": d.text, "url": d.url,
                                     "origin": d.origin}, ensure_ascii=False) + "\n")
    for split in sorted({q.split for q in queries}):
        paths[split] = out / f"posts_{split}.tsv"
        with atomic_writer(paths[split]) as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["post_id", "tweet_text", "cord_uid"])
            writer.writerows([q.query_id, _tsv_cell(q.text), repr(list(q.gold_ids))] for q in queries
                             if q.split == split)
    logger.info("task %s: %d papers, posts per split %s", task, len(docs),
                {s: sum(q.split == s for q in queries) for s in paths if s != "collection"})
    return paths


def make_parser() -> Any:
    return parser_for((TaskArgs,), "veracity prep sciclaim-tasks")


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, Path]]:
    (args,) = parse_config(make_parser(), argv)
    built = {task: build_task(args.prepared_dir, task, Path(args.output_dir) / task) for task in args.tasks}
    for task, paths in built.items():
        print(f"{task}: " + ", ".join(f"{k} {v}" for k, v in paths.items()))
    return built
