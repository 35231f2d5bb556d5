"""SciClaimSeekers over a set of posts: social BM25 + dense (top 100 each) → RRF k=60 → top 50 → rerank → top 5.

``SciClaimPipeline(config, engine_config, papers)`` indexes the collection once (or reuses a matching index) and
loads the reranker it needs. :meth:`first_stage` retrieves for all posts at once; :meth:`llm_rerank` sends the 50
candidates of a post to the engine in **one batched call** (one request per candidate, Table 1's prompt, greedy;
with ``constrained``, decoding held to the integers 0–10 of ``prompt.SCORE_REGEX``) and orders them by the parsed
0–10 score (ties by RRF; an unparsable answer keeps its RRF slot and is counted);
:meth:`cross_encoder_rerank` scores the same candidates with the cross-encoder.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.data_prep.checkthat_files import Paper, Post
from veracity.infer.pipelines.sciclaimseekers.config import SciClaimConfig
from veracity.infer.pipelines.sciclaimseekers.prompt import SCORE_REGEX, parse_score, rerank_messages
from veracity.infer.pipelines.sciclaimseekers.ranking import order_by_llm_scores, order_by_scores
from veracity.infer.retrieval.fusion import Hits, reciprocal_rank_fusion
from veracity.models.engine import EngineConfig, GenerationRequest

logger = logging.getLogger(__name__)


@dataclass
class FirstStage:
    """Each retriever's top ``candidates`` and the RRF head of one post."""

    sparse: Hits
    dense: Hits
    fused: Hits


@dataclass
class RerankStats:
    pairs: int = 0
    posts: int = 0
    seconds: float = 0.0
    unparsable: int = 0
    reasons: Counter = field(default_factory=Counter)
    constraint: dict[str, str] | None = None  # what the requests asked the engine to enforce (LLM rerank)

    def to_dict(self) -> dict[str, Any]:
        return {"posts": self.posts, "pairs": self.pairs, "seconds": round(self.seconds, 2),
                "pairs_per_second": round(self.pairs / self.seconds, 3) if self.seconds else None,
                "unparsable": self.unparsable, "unparsable_reasons": dict(self.reasons),
                **({"constraint": self.constraint} if self.constraint else {})}


def write_index_corpus(papers: Sequence[Paper], path: Path) -> Path:
    """The collection as index records (doc_id, title, text = abstract); same papers → same bytes → index reuse."""
    from veracity.io import atomic_writer

    lines = [json.dumps({"doc_id": p.key, "title": p.title, "text": p.abstract}, ensure_ascii=False) for p in papers]
    content = "\n".join(lines) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != content:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(path) as handle:
            handle.write(content)
    return path


def passage_text(paper: Paper) -> str:
    """What the cross-encoder reads of a paper (in the pipeline and when it is fine-tuned): "title. abstract"."""
    return f"{paper.title}. {paper.abstract}" if paper.title else paper.abstract


class SciClaimPipeline:
    """Index, encoder and rerankers, loaded once."""

    def __init__(self, config: SciClaimConfig, engine_config: EngineConfig, papers: Sequence[Paper],
                 rerankers: Sequence[str] = ()):
        from veracity.infer.retrieval.dense import DenseEncoder
        from veracity.infer.retrieval.index import IndexMismatchError, IndexSettings, build_index, load_index

        self.config, self.engine_config = config, engine_config
        self.papers = {p.key: p for p in papers}
        folder = Path(config.index_dir or Path(config.output_dir) / "index")
        corpus = write_index_corpus(papers, folder / "corpus.jsonl")
        settings = IndexSettings(include_title=True, analyzer=config.analyzer, stem=config.stem,
                                 embedder=config.embedder, query_prefix=config.query_prefix,
                                 max_length=config.max_length, encode_batch_size=config.encode_batch_size,
                                 faiss_kind="flat", progress=config.progress)
        encoder = DenseEncoder(settings.encoder_spec())
        try:
            self.index = load_index(folder, corpus=corpus, encoder=encoder)
            sparse_meta = self.index.meta["sparse"] or {}
            if (sparse_meta.get("name"), sparse_meta.get("stem")) != (config.analyzer, config.stem):  # type: ignore
                raise IndexMismatchError(f"BM25 analyzer {sparse_meta} differs from {config.analyzer}")
        except (FileNotFoundError, IndexMismatchError) as reason:
            logger.info("indexing %d papers in %s (%s)", len(papers), folder, reason)
            build_index(corpus, folder, settings, encoder=encoder)
            self.index = load_index(folder, corpus=corpus, encoder=encoder)
        self.engine = self.cross_encoder = None
        if "llm" in rerankers:
            from veracity.models.engine import make_engine

            self.engine = make_engine(engine_config)
        if "cross_encoder" in rerankers:
            from veracity.infer.retrieval.rerank import CrossEncoderReranker

            self.cross_encoder = CrossEncoderReranker(config.cross_encoder, batch_size=config.cross_encoder_batch_size)
        self.llm_stats, self.cross_encoder_stats = RerankStats(), RerankStats()

    def first_stage(self, posts: Sequence[Post]) -> list[FirstStage]:
        """BM25 and dense top ``candidates`` per post, fused by RRF into the top ``fusion_depth``."""
        from veracity.infer.retrieval.searcher import Searcher, SearchSettings

        c = self.config
        searcher = Searcher(self.index, SearchSettings(mode="rrf", candidates=c.candidates, rrf_k=c.rrf_k))
        sparse, dense = searcher.retrieve_each([p.text for p in posts])
        return [FirstStage(s, d, reciprocal_rank_fusion([s, d], c.rrf_k, c.fusion_depth))
                for s, d in zip(sparse, dense, strict=True)]

    def llm_rerank(self, post: Post, fused: Hits) -> tuple[Hits, list[dict[str, Any]]]:
        """Score every candidate 0–10 in one engine call; returns the new order and one answer record each."""
        if self.engine is None:
            raise RuntimeError("the pipeline was built without the LLM reranker")
        c = self.config
        constraint = {"regex": SCORE_REGEX} if c.constrained else {}
        self.llm_stats.constraint = constraint or None
        requests = [GenerationRequest.chat(
            rerank_messages(post.text, self.papers[doc].title, self.papers[doc].abstract, c.abstract_max_words),
            n=1, temperature=0.0, max_new_tokens=c.rerank_new_tokens, seed=0, **constraint) for doc, _ in fused]
        start = time.perf_counter()
        results = self.engine.generate(requests) if requests else []
        self.llm_stats.seconds += time.perf_counter() - start
        answers, scores = [], []
        for (doc, rrf), result in zip(fused, results, strict=True):
            text = result.candidates[0].text if result.candidates else ""
            score, error = parse_score(text) if result.ok else (None, (result.error or "error").split(":")[0])
            if score is None:
                self.llm_stats.unparsable += 1
                self.llm_stats.reasons[(error or "").split(":")[0]] += 1
            scores.append(score)
            answers.append({"doc_id": doc, "rrf": round(rrf, 6), "answer": text, "score": score, "error": error})
        self.llm_stats.pairs += len(requests)
        self.llm_stats.posts += 1
        return order_by_llm_scores(fused, scores), answers

    def cross_encoder_rerank(self, post: Post, fused: Hits) -> Hits:
        """Cross-encoder scores of (post, "title. abstract") for every candidate, best first."""
        if self.cross_encoder is None:
            raise RuntimeError("the pipeline was built without the cross-encoder")
        texts = [passage_text(self.papers[d]) for d, _ in fused]
        start = time.perf_counter()
        scores = self.cross_encoder.score(post.text, texts) if texts else []
        self.cross_encoder_stats.seconds += time.perf_counter() - start
        self.cross_encoder_stats.pairs += len(texts)
        self.cross_encoder_stats.posts += 1
        return order_by_scores(fused, [float(s) for s in scores])

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
