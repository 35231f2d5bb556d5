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

from veracity.data_prep.checkthat_files import Paper, Post, read_collection, read_posts, write_submission
from veracity.data_prep.errors import DataError
from veracity.data_prep.sciclaim_tasks import build_task
from veracity.infer.eval.sciclaim import checkthat_scores
from veracity.infer.pipelines.contract import Pipeline
from veracity.infer.pipelines.sciclaimseekers.ablation import (
    ablation_rankings,
    ablation_table,
    llm_posts,
    markdown_table,
)
from veracity.infer.pipelines.sciclaimseekers.config import SciClaimConfig
from veracity.infer.pipelines.sciclaimseekers.prompt import SCORE_REGEX, parse_score, rerank_messages
from veracity.infer.pipelines.sciclaimseekers.ranking import (
    FirstStage,
    fuse_back,
    interpolate,
    order_by_llm_scores,
    order_by_scores,
    top_ids,
)
from veracity.infer.pipelines.sciclaimseekers.report import FLAGS as REPORT_FLAGS
from veracity.infer.pipelines.sciclaimseekers.report import report_item
from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec, encoder_id
from veracity.infer.retrieval.fusion import Hits, reciprocal_rank_fusion
from veracity.infer.retrieval.index import IndexMismatchError, IndexSettings, build_index, load_index
from veracity.infer.retrieval.rerank import CrossEncoderReranker, reranker_id
from veracity.infer.retrieval.searcher import Searcher, SearchSettings
from veracity.io import atomic_writer, write_json
from veracity.models.engine import (
    EngineConfig,
    EngineUnavailableError,
    GenerationRequest,
    record_decoding,
    unavailable_error,
)
from veracity.models.engine_factory import make_engine

logger = logging.getLogger(__name__)


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
        self.config, self.engine_config = config, engine_config
        self.papers = {p.key: p for p in papers}
        folder = Path(config.index_dir or Path(config.output_dir) / "index")
        corpus = write_index_corpus(papers, folder / "corpus.jsonl")
        settings = IndexSettings(include_title=True, analyzer=config.analyzer, stem=config.stem,
                                 embedder=config.embedder, query_prefix=config.query_prefix,
                                 max_length=config.max_length, encode_batch_size=config.encode_batch_size,
                                 encoder_backend=config.encoder_backend, faiss_kind="flat", progress=config.progress)
        encoder = DenseEncoder(settings.encoder_spec(), device=engine_config.device)
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
            self.engine = make_engine(engine_config)
        if "cross_encoder" in rerankers:
            self.cross_encoder = CrossEncoderReranker(config.cross_encoder, batch_size=config.cross_encoder_batch_size,
                                                      device=engine_config.device)
        self.llm_stats, self.cross_encoder_stats = RerankStats(), RerankStats()

    def first_stage(self, posts: Sequence[Post]) -> list[FirstStage]:
        """BM25 and dense top ``candidates`` per post, fused by RRF into the top ``fusion_depth``."""
        c = self.config
        searcher = Searcher(self.index, SearchSettings(mode="rrf", candidates=c.candidates, rrf_k=c.rrf_k))
        sparse, dense = searcher.retrieve_each([p.text for p in posts])
        return [FirstStage(s, d, reciprocal_rank_fusion([s, d], c.rrf_k, c.fusion_depth))
                for s, d in zip(sparse, dense, strict=True)]

    def llm_rerank(self, post: Post, fused: Hits) -> tuple[Hits, list[dict[str, Any]], dict[str, Any]]:
        """Score every candidate 0–10 in one engine call; returns the new order, one answer record each and the
        decoding facts the answers were made under (``record_decoding``).

        Raises:
            EngineUnavailableError: the engine made no answer for some candidate (the post is an error record).
        """
        if self.engine is None:
            raise RuntimeError("the pipeline was built without the LLM reranker")
        c = self.config
        constraint = {"regex": SCORE_REGEX} if c.constrained else {}
        self.llm_stats.constraint = constraint or None
        budget = c.rerank_new_tokens(bool(constraint) and self.engine.decoding(["regex"])["constrained"])
        requests = [GenerationRequest.chat(
            rerank_messages(post.text, self.papers[doc].title, self.papers[doc].abstract, c.abstract_max_words),
            n=1, temperature=0.0, max_new_tokens=budget, seed=0, **constraint) for doc, _ in fused]
        start = time.perf_counter()
        results = self.engine.generate(requests) if requests else []
        self.llm_stats.seconds += time.perf_counter() - start
        failed = unavailable_error(results)
        if failed is not None:
            raise failed
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
        decoding = record_decoding(self.engine, ["regex"] if constraint else [], results)
        return order_by_llm_scores(fused, scores), answers, decoding

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


def resolve_inputs(config: SciClaimConfig) -> tuple[Path | None, Path]:
    """(posts, collection): the files given, or those of a task built from prepared records (under
    ``<output_dir>/task``). Without ``--posts`` (the Python API) posts is None."""
    if config.task and not (config.posts and config.collection):
        paths = build_task(config.prepared_dir, config.task, Path(config.output_dir) / "task")
        if config.split not in paths:
            splits = sorted(set(paths) - {"collection"})
            raise DataError(Path(config.output_dir) / "task", None,
                            f"task {config.task!r} has no split {config.split!r} (has {splits})", field="split")
        return paths[config.split], paths["collection"]
    if not config.collection:
        raise DataError("--collection", None, "give --posts and --collection, or --task (with --prepared_dir)")
    return (Path(config.posts) if config.posts else None), Path(config.collection)


def rerank_record(pipeline: SciClaimPipeline, config: SciClaimConfig, post: Post, stage: FirstStage
                  ) -> dict[str, Any]:
    """The configured reranker over one post: its record (both retrievers' heads, the RRF candidates with scores,
    every LLM answer or cross-encoder score, the final ranking)."""
    answers, scores, decoding = None, {}, None
    if config.reranker == "llm":
        final, answers, decoding = pipeline.llm_rerank(post, stage.fused)
        scores = {a["doc_id"]: a["score"] for a in answers if a["score"] is not None}
    elif config.reranker == "cross_encoder":
        final = pipeline.cross_encoder_rerank(post, stage.fused)
        scores = dict(final)
    else:
        final = stage.fused
    if config.reranker != "none":
        if config.rerank_fusion:
            final = fuse_back(final, stage, config)
        elif config.interpolates:
            final = interpolate(scores, stage, config)
    return {"post_id": post.post_id, "text": post.text, "gold": post.gold,
            "bm25": top_ids(stage.sparse, 10), "dense": top_ids(stage.dense, 10),
            "rrf": [[d, round(s, 6)] for d, s in stage.fused], "llm_answers": answers,
            "cross_encoder_scores": {d: round(v, 4) for d, v in scores.items()}
            if config.reranker == "cross_encoder" else None,
            "ranking": [[d, round(s, 6)] for d, s in final[: config.top_k]], "decoding": decoding}


class SciClaim(Pipeline):
    """The contract (``contract.py``) of ``veracity infer sciclaim``: posts in, one record per post out (its
    ranking and why; with ``ablation``, every configuration's top ids), ``submission.tsv`` made from the records,
    scored with the CheckThat MRR@5 when every post has gold ids."""

    name = "sciclaim"
    unit = "posts"
    config_types = (SciClaimConfig, EngineConfig)
    report_flags = REPORT_FLAGS
    report_item = staticmethod(report_item)
    error_fields = ("gold",)  # a failed post scores 0 against its gold

    def __init__(self, config: SciClaimConfig, engine_config: EngineConfig):
        super().__init__(config, engine_config)
        self.engine_config = engine_config
        self.models: SciClaimPipeline | None = None
        self.inputs: tuple[Path | None, Path] | None = None
        self.papers: list[Paper] | None = None
        self.posts: list[Post] = []

    @property
    def batch_size(self) -> int:
        return self.config.posts_per_call

    def _inputs(self) -> tuple[Path | None, Path]:
        if self.inputs is None:
            self.inputs = resolve_inputs(self.config)
        return self.inputs

    def _papers(self) -> list[Paper]:
        if self.papers is None:
            self.papers = read_collection(self._inputs()[1])
        return self.papers

    def items(self) -> list[dict[str, Any]]:
        posts_path, _ = self._inputs()
        if posts_path is None:
            raise DataError("--posts", None, "give --posts and --collection, or --task (with --prepared_dir)")
        self.posts = read_posts(posts_path)[: self.config.max_examples or None]
        self._papers()
        if self.config.ablation and not all(p.gold for p in self.posts):
            raise DataError(posts_path, None, "--ablation needs a gold id for every post", field="cord_uid")
        return [{"id": p.post_id, "text": p.text, "gold": p.gold, "position": k} for k, p in enumerate(self.posts)]

    def row_item(self, row: dict[str, Any], source: str, line: int) -> dict[str, Any]:
        """``{id, text[, gold]}``: a post and, to score it, its gold paper ids."""
        if not isinstance(row.get("text"), str) or not row["text"].strip():
            raise DataError(source, line, "missing or empty post text", field="text")
        gold = row.get("gold") or []
        return {"id": str(row["id"]), "text": row["text"], "gold": [gold] if isinstance(gold, str) else list(gold),
                "position": line - 1}

    def load(self, run_dir: Path) -> None:
        rerankers = ("llm", "cross_encoder") if self.config.ablation else (self.config.reranker,)
        self.models = SciClaimPipeline(self.config, self.engine_config, self._papers(), rerankers)

    def load_worker(self, run_dir: Path) -> None:
        self.items()  # the posts: an ablation gives the LLM reranker a share of all of them, not of a batch
        self.load(run_dir)

    def model_ids(self) -> dict[str, str]:
        """The dense encoder and the cross-encoder by content, named from their options (so also before load(): a
        resume under another one is refused before any model loads or the index is rebuilt) and, once built, the
        LLM reranker's generator."""
        c = self.config
        ids = {"embedder": encoder_id(EncoderSpec(model=c.embedder, backend=c.encoder_backend))}
        if c.ablation or c.reranker == "cross_encoder":
            ids["cross_encoder"] = reranker_id(c.cross_encoder)
        if self.models is not None and self.models.engine is not None:
            ids["generator"] = self.models.engine.identity
        return ids

    def decoding(self) -> dict[str, Any] | None:
        engine = self.models.engine if self.models is not None else None
        return engine.decoding(["regex"] if self.config.constrained else []) if engine is not None else None

    def __call__(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any] | Exception]:
        assert self.models is not None, "load() first"
        posts = [Post(item["id"], item["text"], list(item.get("gold") or [])) for item in items]
        start = time.perf_counter()
        stages = self.models.first_stage(posts)
        middle = time.perf_counter()
        n_llm = llm_posts(self.config, len(self.posts) or len(items)) if self.config.ablation else 0
        records: list[dict[str, Any] | Exception] = []
        for item, post, stage in zip(items, posts, stages, strict=True):
            try:  # a post the engine made no answer for fails alone
                if self.config.ablation:
                    rankings, decoding = ablation_rankings(self.models, self.config, post, stage,
                                                           item["position"] < n_llm)
                    records.append({"post_id": post.post_id, "gold": post.gold, "rankings": rankings,
                                    "decoding": decoding})
                else:
                    records.append(rerank_record(self.models, self.config, post, stage))
            except EngineUnavailableError as error:
                records.append(error)
        self.seconds["first_stage"] += middle - start
        self.seconds["rerank"] += time.perf_counter() - middle
        return records

    def close(self) -> None:
        if self.models is not None:
            self.models.close()

    def stats(self) -> dict[str, Any]:
        if self.models is None:
            return {}
        return {"llm_rerank": self.models.llm_stats.to_dict(),
                "cross_encoder": self.models.cross_encoder_stats.to_dict()}

    def _facts(self) -> dict[str, Any]:
        posts_path, collection_path = self._inputs()
        return {"posts": len(self.posts), "papers": len(self._papers()), "posts_file": str(posts_path),
                "collection": str(collection_path), "first_stage_seconds": round(self.seconds["first_stage"], 2)}

    def finish(self, records: Sequence[dict[str, Any]], run_dir: Path) -> dict[str, Any]:
        """``submission.tsv`` (``post_id<TAB>[uid1, …, uid5]``); with ``ablation``, one per configuration under
        ``submissions/``."""
        if self.config.ablation:
            ablation_table(self.config, records, run_dir)
            return self._facts()
        rankings = {r["id"]: [d for d, _ in r["result"]["ranking"]] for r in records if r["status"] == "ok"}
        write_submission(run_dir / "submission.tsv", rankings, self.config.top_k)
        stats = self.models.llm_stats if self.models is not None else None
        if self.config.reranker == "llm" and stats is not None:
            logger.info("LLM rerank: %d pairs, %d unparsable answers (kept in their RRF slot)", stats.pairs,
                        stats.unparsable)
        return {**self._facts(), "reranker": self.config.reranker}

    def score(self, records: Sequence[dict[str, Any]], run_dir: Path) -> dict[str, Any] | None:
        """MRR@5, hit@1, hit@5 over the run's posts (``metrics.json``), when every post has gold ids (a failed
        post scores 0); with ``ablation``, the table (``metrics.json`` rows, ``results.md``)."""
        gold = [r.get("gold") if r["status"] == "error" else r["result"]["gold"] for r in records]
        if not records or not all(gold):
            return None
        if self.config.ablation:
            result = {**self._facts(), **ablation_table(self.config, records), **self.stats()}
            write_json(run_dir / "metrics.json", result)
            table = markdown_table(result)
            (run_dir / "results.md").write_text(table + "\n", encoding="utf-8")
            print(table)
            return result

        rankings = {r["id"]: [d for d, _ in r["result"]["ranking"]] for r in records if r["status"] == "ok"}
        metrics = checkthat_scores(rankings, {r["id"]: g for r, g in zip(records, gold, strict=True)})
        write_json(run_dir / "metrics.json", metrics)
        print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
        return metrics

