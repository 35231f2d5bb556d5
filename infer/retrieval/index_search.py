"""Query a retrieval index: BM25, dense, α-fusion or RRF, optionally reranked.

Usage: veracity index search --index_dir runs/index/cf --query "text" [--mode rrf] [--rerank true]
       veracity index search --config runs/eval_retrieval/search/climate_fever.yaml --index_dir ... --query ...
       (the settings `veracity eval retrieval` tuned, α* included)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.infer.retrieval.fusion import Hits
from veracity.infer.retrieval.index import load_index
from veracity.infer.retrieval.searcher import Searcher, SearchSettings
from veracity.models.device import DeviceOptions


@dataclass
class SearchArgs:
    index_dir: str = field(metadata={"help": "Index folder."})
    query: list[str] = field(metadata={"help": "One or more queries."})
    corpus: str | None = field(default=None, metadata={"help": "Corpus to check the index against."})


def make_parser() -> Any:
    return parser_for((SearchArgs, SearchSettings, DeviceOptions), "veracity index search")


def main(argv: Sequence[str] | None = None) -> list[Hits]:
    search, settings, where = parse_config(make_parser(), argv)
    index = load_index(search.index_dir, corpus=search.corpus, device=where.device)
    texts = index.texts()
    results = Searcher(index, settings, device=where.device).search(search.query)
    for query, hits in zip(search.query, results, strict=True):
        print(f"# {query}")
        for rank, (doc, score) in enumerate(hits, start=1):
            print(f"{rank:3} {score:8.4f} {doc}  {texts.get(doc, '')[:100]}")
    return results
