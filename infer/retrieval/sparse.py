"""BM25 on ``bm25s`` (sparse-matrix scoring; ≈ 13× faster queries than rank_bm25 here) with our analyzers.

The index is built chunk by chunk (:mod:`bm25_build`) and searched without scanning every document
(:mod:`bm25_topk`); both keep bm25s's scores exactly and its saved format, so ``bm25s.BM25.load`` reads our folders
and we read its.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from pathlib import Path

import bm25s
import numpy as np

from veracity.infer.retrieval.analyzers import Analyzer
from veracity.infer.retrieval.bm25_build import STREAMABLE_METHODS, BM25Builder
from veracity.infer.retrieval.bm25_topk import column_maxima, top_k
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
        if model.method not in STREAMABLE_METHODS:  # bm25l/bm25+ add a per-query constant top_k does not know
            raise ValueError(f"BM25 method {model.method!r} is not supported; use one of {STREAMABLE_METHODS}")
        self.analyzer, self.params, self.model, self.doc_ids = analyzer, params, model, doc_ids

    @classmethod
    def build(cls, doc_ids: Sequence[str], texts: Iterable[str], analyzer: Analyzer | None = None,
              params: BM25Params | None = None) -> BM25Index:
        analyzer, params = analyzer or Analyzer(), params or BM25Params()
        builder = cls.builder(analyzer, params)
        texts = iter(texts)
        while chunk := list(islice(texts, 4096)):
            builder.add(chunk)
        if builder.documents != len(doc_ids):
            raise ValueError(f"{builder.documents} texts for {len(doc_ids)} doc ids")
        return cls(analyzer, params, builder.finish(), list(doc_ids))

    @staticmethod
    def builder(analyzer: Analyzer, params: BM25Params) -> BM25Builder:
        """A streaming builder: ``add`` chunks of texts in row order, then
        ``BM25Index(analyzer, params, builder.finish(), doc_ids)``."""
        return BM25Builder(analyzer, params.k1, params.b, params.method)

    @cached_property
    def _maxima(self) -> np.ndarray:
        return column_maxima(self.model.scores["data"], self.model.scores["indptr"])

    def search(self, queries: Sequence[str], k: int = 100) -> list[Hits]:
        """Top-``k`` (doc_id, score) per query; documents with score 0 (no shared term) are left out."""
        if not queries:
            return []
        k = min(k, len(self.doc_ids))
        vocab, matrix = self.model.vocab_dict, self.model.scores
        results = []
        for query in queries:
            terms = [vocab[t] for t in self.analyzer(query) if t in vocab]  # unknown terms score nothing
            rows, scores = top_k(matrix["data"], matrix["indices"], matrix["indptr"], self._maxima, terms, k)
            results.append([(self.doc_ids[i], float(s)) for i, s in zip(rows.tolist(), scores, strict=True) if s > 0])
        return results

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
