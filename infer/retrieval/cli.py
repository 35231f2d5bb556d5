"""Build and query retrieval indexes.

Usage: veracity index build --corpus runs/prep/climate_fever_corpus.jsonl --output_dir runs/index/cf [--dense false]
       veracity index search --index_dir runs/index/cf --query "text" [--mode rrf] [--rerank true]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from veracity.infer.retrieval.index import IndexSettings
from veracity.infer.retrieval.searcher import SearchSettings


@dataclass
class BuildArgs:
    corpus: str = field(metadata={"help": "CorpusDocument JSONL (e.g. a veracity prep output)."})
    output_dir: str = field(metadata={"help": "Index folder to write."})


@dataclass
class SearchArgs:
    index_dir: str = field(metadata={"help": "Index folder."})
    query: list[str] = field(metadata={"help": "One or more queries."})
    corpus: str | None = field(default=None, metadata={"help": "Corpus to check the index against."})


def main(argv: Sequence[str] | None = None) -> None:
    from veracity.config import parse_config

    args = list(argv or [])
    if not args or args[0] not in ("build", "search"):
        print(__doc__.strip(), file=sys.stderr)
        raise SystemExit(2)
    if args[0] == "build":
        from veracity.infer.retrieval.index import build_index
        from veracity.rundir import write_run_config

        build, settings = parse_config((BuildArgs, IndexSettings), args[1:], prog="veracity index build")
        write_run_config(build.output_dir, build, settings, job="index build")
        folder = build_index(build.corpus, build.output_dir, settings)
        print(f"index written to {folder}")
        return
    from veracity.infer.retrieval.index import load_index
    from veracity.infer.retrieval.searcher import Searcher

    search, settings = parse_config((SearchArgs, SearchSettings), args[1:], prog="veracity index search")
    index = load_index(search.index_dir, corpus=search.corpus)
    texts = index.texts()
    for query, hits in zip(search.query, Searcher(index, settings).search(search.query), strict=True):
        print(f"# {query}")
        for rank, (doc, score) in enumerate(hits, start=1):
            print(f"{rank:3} {score:8.4f} {doc}  {texts.get(doc, '')[:100]}")
