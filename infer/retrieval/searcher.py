"""A searcher over a loaded index: BM25, dense, α-fusion or RRF, then an optional cross-encoder rerank."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from veracity.infer.retrieval.fusion import DEFAULT_ALPHA, DEFAULT_RRF_K, Hits, alpha_fusion, reciprocal_rank_fusion
from veracity.infer.retrieval.index import LoadedIndex
from veracity.infer.retrieval.rerank import CrossEncoderReranker

MODES = ("bm25", "dense", "alpha", "rrf")


@dataclass
class SearchSettings:
    mode: str = field(default="alpha", metadata={"help": f"One of {MODES}."})
    alpha: float = field(default=DEFAULT_ALPHA, metadata={"help": "Weight of BM25 in α-fusion (R2VC)."})
    rrf_k: int = field(default=DEFAULT_RRF_K, metadata={"help": "RRF constant k."})
    candidates: int = field(default=100, metadata={"help": "Hits taken from each retriever before fusion."})
    top_k: int = field(default=10, metadata={"help": "Hits returned."})
    rerank: bool = field(default=False, metadata={"help": "Re-score the fused head with a cross-encoder."})
    reranker: str = field(default="embedded", metadata={"help": "Reranker: 'embedded', 'real', path or hub id."})
    rerank_top_n: int = field(default=20, metadata={"help": "How many fused hits the reranker re-scores."})

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")


def combine(mode: str, sparse: Hits, dense: Hits, alpha: float, rrf_k: int, top: int) -> Hits:
    """The fused list of one query from the two retrievers' lists (pure; shared by search and evaluation)."""
    if mode == "bm25":
        return sparse[:top]
    if mode == "dense":
        return dense[:top]
    if mode == "alpha":
        return alpha_fusion(sparse, dense, alpha, top)
    if mode == "rrf":
        return reciprocal_rank_fusion([sparse, dense], rrf_k, top)
    raise ValueError(f"unknown mode {mode!r}")


class Searcher:
    def __init__(self, index: LoadedIndex, settings: SearchSettings, reranker: CrossEncoderReranker | None = None,
                 device: str = "auto"):
        """``device``: where the cross-encoder runs when the settings ask for one and none is given."""
        needs_sparse = settings.mode in ("bm25", "alpha", "rrf")
        needs_dense = settings.mode in ("dense", "alpha", "rrf")
        if needs_sparse and index.sparse is None:
            raise ValueError(f"mode {settings.mode!r} needs a BM25 index; {index.folder} has none")
        if needs_dense and index.dense is None:
            raise ValueError(f"mode {settings.mode!r} needs a dense index; {index.folder} has none")
        self.index, self.settings = index, settings
        if reranker is None and settings.rerank:
            reranker = CrossEncoderReranker(settings.reranker, device=device)
        self.reranker = reranker
        self._texts = index.texts() if self.reranker else {}

    def retrieve_each(self, queries: Sequence[str]) -> tuple[list[Hits], list[Hits]]:
        """Each retriever's candidates per query (an unused retriever gives empty lists)."""
        n = self.settings.candidates
        sparse = self.index.sparse.search(queries, n) if self.index.sparse else [[] for _ in queries]
        if self.index.dense and self.index.encoder:
            dense = self.index.dense.search_vectors(self.index.encoder.encode_queries(queries), n)
        else:
            dense = [[] for _ in queries]
        return sparse, dense

    def search(self, queries: Sequence[str]) -> list[Hits]:
        s = self.settings
        sparse, dense = self.retrieve_each(queries)
        depth = max(s.top_k, s.rerank_top_n if self.reranker else 0)
        fused = [combine(s.mode, sp, de, s.alpha, s.rrf_k, depth) for sp, de in zip(sparse, dense, strict=True)]
        if self.reranker:
            fused = [self.reranker.rerank(q, hits, self._texts, s.rerank_top_n) for q, hits in zip(queries, fused,
                                                                                                   strict=True)]
        return [hits[: s.top_k] for hits in fused]
