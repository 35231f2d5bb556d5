"""Rerank throughput of SciClaimSeekers: (post, paper) pairs per second, batched vs one at a time.

Usage: OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python bench/sciclaim_rerank.py [--llm_pairs 24] [--ce_pairs 100]
       [--cross_encoders embedded runs/train/reranker_climate_fever/model]
       [--collection runs/sciclaim/ablation_climate_fever/task/collection.jsonl
        --posts runs/sciclaim/ablation_climate_fever/task/posts_dev.tsv]

Real pairs: the first posts of a task, each with as many papers of the collection as needed (throughput depends on
lengths, not relevance). LLM: the embedded SmolLM2 with Table 1's prompt, greedy, 8 new tokens — all pairs in one
engine call (one forward batch) vs one request per call. Cross-encoder: the embedded ms-marco MiniLM-L-12 (INT8
ONNX; ``--cross_encoders`` adds others, e.g. the fine-tuned one) in batches of 32 vs one pair per call. No cache.
Read the ratios; absolute numbers move with machine load.
"""

from __future__ import annotations

import argparse
import time

from veracity.data_prep.checkthat_files import Paper, read_collection, read_posts
from veracity.infer.pipelines.sciclaimseekers.pipeline import passage_text
from veracity.infer.pipelines.sciclaimseekers.prompt import rerank_messages
from veracity.infer.retrieval.rerank import CrossEncoderReranker
from veracity.models.engine import GenerationRequest


def pairs(posts_path: str, collection_path: str, count: int, per_post: int = 8) -> list[tuple[str, str, str]]:
    posts, papers = read_posts(posts_path), read_collection(collection_path)
    return [(posts[i // per_post % len(posts)].text, papers[i % len(papers)].title, papers[i % len(papers)].abstract)
            for i in range(count)]


def bench_llm(items: list[tuple[str, str, str]]) -> list[tuple[str, float]]:
    from veracity.models.hf_engine import TransformersEngine  # lazy: torch, needed by this bench alone

    requests = [GenerationRequest.chat(rerank_messages(*p), temperature=0.0, max_new_tokens=8, seed=0) for p in items]
    out = []
    for label, batch in (("batched (one call)", len(requests)), ("one at a time", 1)):
        engine = TransformersEngine("embedded", batch_size=batch)
        engine.generate(requests[:1])  # warm-up
        start = time.perf_counter()
        if batch == 1:
            for r in requests:
                engine.generate([r])
        else:
            engine.generate(requests)
        out.append((label, len(requests) / (time.perf_counter() - start)))
    return out


def bench_cross_encoder(items: list[tuple[str, str, str]], model: str = "embedded") -> list[tuple[str, float]]:
    texts = [(post, passage_text(Paper("", title, abstract))) for post, title, abstract in items]
    out = []
    for label, batch in (("batched (32 per call)", 32), ("one at a time", 1)):
        reranker = CrossEncoderReranker(model, batch_size=batch)
        reranker.backend.predict(texts[:1], 1)  # warm-up
        start = time.perf_counter()
        reranker.backend.predict(texts, batch)
        out.append((label, len(texts) / (time.perf_counter() - start)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", default="runs/sciclaim/ablation_climate_fever/task/posts_dev.tsv")
    parser.add_argument("--collection", default="runs/sciclaim/ablation_climate_fever/task/collection.jsonl")
    parser.add_argument("--llm_pairs", type=int, default=24)
    parser.add_argument("--ce_pairs", type=int, default=100)
    parser.add_argument("--cross_encoders", nargs="+", default=["embedded"], help="e.g. embedded and a folder "
                        "written by `veracity train reranker` (a transformers model, run by torch)")
    args = parser.parse_args()
    rows = [("LLM SmolLM2-135M", *r, args.llm_pairs)
            for r in bench_llm(pairs(args.posts, args.collection, args.llm_pairs))]
    for model in args.cross_encoders:
        name = "cross-encoder MiniLM-L-12" + (" (INT8 ONNX)" if model == "embedded" else f" ({model})")
        rows += [(name, *r, args.ce_pairs)
                 for r in bench_cross_encoder(pairs(args.posts, args.collection, args.ce_pairs), model)]
    print("| reranker | mode | pairs | pairs/s | speed-up |\n|---|---|---:|---:|---:|")
    for i, (model, mode, rate, n) in enumerate(rows):
        base = rows[i + 1][2] if i % 2 == 0 else rate
        print(f"| {model} | {mode} | {n} | {rate:.2f} | {rate / base:.1f}× |")


if __name__ == "__main__":
    main()
