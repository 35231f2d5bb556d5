"""BM25 on ``bm25s`` (sparse-matrix scoring; ≈ 13× faster queries than rank_bm25 here) with our analyzers."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np

from veracity.infer.retrieval.analyzers import Analyzer
from veracity.infer.retrieval.fusion import Hits

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"  # the paper used Lucene's BM25


class BM25Index:
    """A BM25 index over documents identified by ``doc_ids`` (texts are not kept)."""

    def __init__(self, analyzer: Analyzer, params: BM25Params, model: bm25s.BM25, doc_ids: list[str]):
        self.analyzer, self.params, self.model, self.doc_ids = analyzer, params, model, doc_ids

    @classmethod
    def build(cls, doc_ids: Sequence[str], texts: Iterable[str], analyzer: Analyzer | None = None,
              params: BM25Params | None = None) -> BM25Index:
        analyzer, params = analyzer or Analyzer(), params or BM25Params()
        tokens = [analyzer(text) for text in texts]
        if len(tokens) != len(doc_ids):
            raise ValueError(f"{len(tokens)} texts for {len(doc_ids)} doc ids")
        if not any(tokens):
            raise ValueError("no indexable terms in the corpus (every document is empty after analysis)")
        model = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
        model.index(tokens, show_progress=False)
        return cls(analyzer, params, model, list(doc_ids))

    def search(self, queries: Sequence[str], k: int = 100) -> list[Hits]:
        """Top-``k`` (doc_id, score) per query; documents with score 0 (no shared term) are left out."""
        if not queries:
            return []
        k = min(k, len(self.doc_ids))
        tokens = [self.analyzer(q) or ["\x00"] for q in queries]  # an empty query matches nothing
        indices, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [
            [(self.doc_ids[i], float(s)) for i, s in zip(row_i, row_s, strict=True) if s > 0]
            for row_i, row_s in zip(np.asarray(indices), np.asarray(scores), strict=True)
        ]

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save(str(folder), show_progress=False)
        (folder / "analyzer.json").write_text(json.dumps({**self.analyzer.to_dict(), **self.params.__dict__}))

    @classmethod
    def load(cls, folder: Path, doc_ids: list[str]) -> BM25Index:
        meta = json.loads((folder / "analyzer.json").read_text())
        analyzer = Analyzer(meta["name"], meta["stem"], meta["stopwords"])
        params = BM25Params(meta["k1"], meta["b"], meta["method"])
        model = bm25s.BM25.load(str(folder), show_progress=False)
        return cls(analyzer, params, model, doc_ids)
