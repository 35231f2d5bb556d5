"""Retrieval benchmark: bm25s vs rank_bm25, FAISS HNSW vs exact, and our wrappers vs the raw libraries.

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/retrieval.py [--prepared runs/prep] [--docs 60000] [--queries 200]

Everything is measured side by side in one run on the same corpus and queries; read the ratios, not the
absolute times (the machines are noisy). Corpus: distinct NLI premises from `veracity prep` (real sentences and
paragraphs); queries: NLI hypotheses (claims). Dense part: real MiniLM embeddings of the Climate-FEVER + FEVER
evidence corpora (encoded once, cached under runs/bench/), plus a larger synthetic clustered set for scale.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    """Best of ``repeat`` wall-clock runs (seconds) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def overhead(ours: float, raw: float) -> str:
    return f"{ours / raw - 1:+.1%}"


def load_texts(prepared: Path, docs: int, queries: int) -> tuple[list[str], list[str]]:
    from veracity.data_prep.prepared import PreparedDataError, prepared_names, read_prepared

    premises: dict[str, None] = {}
    hypotheses: list[str] = []
    try:
        for name in prepared_names(prepared, "nli_"):
            for pair in read_prepared(prepared, name):
                premises.setdefault(pair.premise)
                hypotheses.append(pair.hypothesis)
    except PreparedDataError as error:
        raise SystemExit(f"bench/retrieval.py: {error}") from None
    rng = np.random.default_rng(0)
    picked = rng.choice(len(hypotheses), size=queries, replace=False)
    return list(premises)[:docs], [hypotheses[i] for i in picked]


def bench_bm25(corpus: list[str], queries: list[str]) -> list[tuple[str, str, str]]:
    import bm25s
    from rank_bm25 import BM25Okapi

    from veracity.infer.retrieval.analyzers import Analyzer
    from veracity.infer.retrieval.sparse import BM25Index, BM25Params

    analyzer = Analyzer()
    tokens = [analyzer(t) for t in corpus]
    query_tokens = [analyzer(q) or ["\x00"] for q in queries]
    rows = []

    build_bm25s, raw = timed(lambda: _bm25s_index(bm25s, tokens), repeat=1)
    build_rank, rank = timed(lambda: BM25Okapi(tokens), repeat=1)
    q_bm25s, _ = timed(lambda: raw.retrieve(query_tokens, k=10, show_progress=False, n_threads=1))
    sample = query_tokens[: max(20, len(query_tokens) // 5)]  # rank_bm25 is slow: time a subset, per query
    q_rank, _ = timed(lambda: [np.argsort(-rank.get_scores(q))[:10] for q in sample], repeat=1)
    per_bm25s, per_rank = q_bm25s / len(query_tokens) * 1e3, q_rank / len(sample) * 1e3
    rows.append(("BM25 index build (s)", f"bm25s {build_bm25s:.2f}", f"rank_bm25 {build_rank:.2f}"))
    speedup = per_rank / per_bm25s
    rows.append(("BM25 ms/query (k=10)", f"bm25s {per_bm25s:.2f}", f"rank_bm25 {per_rank:.1f}  -> {speedup:.0f}x"))
    top1_same = np.mean([
        raw.retrieve([q], k=1, show_progress=False)[0][0][0] == int(np.argmax(rank.get_scores(q))) for q in sample
    ])
    rows.append(("BM25 same top-1 (subset)", f"{top1_same:.2f}", ""))

    ours = BM25Index(analyzer, BM25Params(), raw, [str(i) for i in range(len(corpus))])

    def raw_search():  # what a caller of bm25s does by hand: analyze, retrieve, map rows to ids
        out = raw.retrieve([analyzer(q) or ["\x00"] for q in queries], k=10, show_progress=False, n_threads=1)
        return [[(str(i), float(s)) for i, s in zip(r_i, r_s, strict=True) if s > 0] for r_i, r_s in zip(*out,
                                                                                                          strict=True)]

    t_raw, _ = timed(raw_search)
    t_ours, _ = timed(lambda: ours.search(queries, k=10))
    rows.append(("BM25 wrapper overhead", f"raw {t_raw * 1e3:.0f} ms",
                 f"ours {t_ours * 1e3:.0f} ms  -> {overhead(t_ours, t_raw)}"))
    return rows


def _bm25s_index(bm25s, tokens):
    model = bm25s.BM25()
    model.index(tokens, show_progress=False)
    return model


def bench_faiss(vectors: np.ndarray, queries: np.ndarray, label: str) -> list[tuple[str, str, str]]:
    import faiss

    from veracity.infer.retrieval.dense import DenseIndex, FaissParams

    rows = []
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(vectors)
    t_exact, (_, truth) = timed(lambda: exact.search(queries, 10))
    rows.append((f"{label}: exact (Flat IP)", f"{t_exact / len(queries) * 1e3:.3f} ms/query", "recall@10 1.000"))
    t_build, hnsw = timed(lambda: _hnsw(faiss, vectors), repeat=1)
    for ef in (16, 32, 64, 128, 256):
        hnsw.hnsw.efSearch = ef
        t, (_, found) = timed(lambda: hnsw.search(queries, 10))
        recall = np.mean([len(set(f) & set(g)) / 10 for f, g in zip(found, truth, strict=True)])
        rows.append((f"{label}: HNSW M=32 efSearch={ef}", f"{t / len(queries) * 1e3:.3f} ms/query",
                     f"recall@10 {recall:.3f}  (build {t_build:.1f} s)"))
    ours = DenseIndex(exact, FaissParams("flat"), [str(i) for i in range(len(vectors))])

    def raw_search():
        scores, ids = exact.search(queries, 10)
        return [[(str(i), float(s)) for i, s in zip(r_i, r_s, strict=True) if i >= 0] for r_i, r_s in zip(ids, scores,
                                                                                                           strict=True)]

    t_raw, _ = timed(raw_search)
    t_ours, _ = timed(lambda: ours.search_vectors(queries, 10))
    rows.append((f"{label}: wrapper overhead", f"raw {t_raw * 1e3:.1f} ms",
                 f"ours {t_ours * 1e3:.1f} ms  -> {overhead(t_ours, t_raw)}"))
    return rows


def _hnsw(faiss, vectors):
    index = faiss.IndexHNSWFlat(vectors.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 200
    index.add(vectors)
    return index


def real_embeddings(prepared: Path, cache: Path) -> tuple[np.ndarray, np.ndarray]:
    if (cache / "docs.npy").exists():
        return np.load(cache / "docs.npy"), np.load(cache / "queries.npy")
    from veracity.data_prep.prepared import read_prepared
    from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec

    docs, queries = [], []
    for name in ("climate_fever", "fever_evidence"):
        docs += [d.text for d in read_prepared(prepared, f"{name}_corpus")]
        queries += [q.text for q in read_prepared(prepared, f"{name}_queries")]
    encoder = DenseEncoder(EncoderSpec())
    cache.mkdir(parents=True, exist_ok=True)
    d, q = encoder.encode_documents(docs), encoder.encode_queries(queries[:500])
    np.save(cache / "docs.npy", d)
    np.save(cache / "queries.npy", q)
    return d, q


def synthetic(n: int, dim: int = 384, clusters: int = 200, queries: int = 500) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(clusters, dim))
    def draw(m: int) -> np.ndarray:
        x = centers[rng.integers(clusters, size=m)] + 0.6 * rng.normal(size=(m, dim))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return draw(n), draw(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", default="runs/prep")
    parser.add_argument("--docs", type=int, default=60000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--synthetic", type=int, default=100000)
    args = parser.parse_args()
    prepared = Path(args.prepared)
    corpus, queries = load_texts(prepared, args.docs, args.queries)
    rows = [("corpus", f"{len(corpus)} NLI premises", f"{len(queries)} claim queries")]
    rows += bench_bm25(corpus, queries)
    docs, qv = real_embeddings(prepared, Path("runs/bench/embeddings"))
    rows += bench_faiss(docs, qv, f"real MiniLM {len(docs)}x{docs.shape[1]}")
    sd, sq = synthetic(args.synthetic)
    rows += bench_faiss(sd, sq, f"synthetic {len(sd)}x{sd.shape[1]}")
    width = max(len(r[0]) for r in rows)
    for name, a, b in rows:
        print(f"{name:{width}}  {a:28}  {b}")


if __name__ == "__main__":
    main()
