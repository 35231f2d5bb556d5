"""A corpus embedded across Ray workers against one process: wall time, the index each gives, HNSW recall.

Usage: python bench/ray_index.py [--documents 100000] [--queries 1000] [--workers 2] [--encoder_backend onnx_int8]
           [--work_dir runs/bench/ray_index] [--data_root ../shared/data]

The corpus is real text: the distinct premises and hypotheses (4 words or more) of the NLI collections under
``<data_root>/nli/`` (119,589 texts, 33 words on average), shuffled with a fixed seed; the first ``--documents`` are
the corpus, the next ``--queries`` the queries. The same ``veracity index build`` command (embedded MiniLM encoder,
BM25 and HNSW) runs twice as a child process: in one process, then with ``--executor ray --workers K`` (a local
Ray started by the command; the actors embed, the driver builds). The table gives each build's wall time and
passages/s, whether the two indexes agree (vectors, ids, BM25 files), and the recall@10 of the HNSW index against
exact search over the same vectors for the query texts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from machine import machine  # bench/machine.py

from veracity.data_prep.prepare import resolve_data_root


def real_texts(data_root: Path) -> list[str]:
    """The distinct premise / hypothesis texts of 4 words or more under ``data_root/nli``, sorted."""
    texts: set[str] = set()
    for path in sorted((data_root / "nli").glob("*/*.jsonl")):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                for key in ("premise", "hypothesis"):
                    text = row.get(key)
                    if isinstance(text, str) and len(text.split()) >= 4:
                        texts.add(" ".join(text.split()))
    if not texts:
        raise SystemExit(f"bench/ray_index.py: no NLI texts under {data_root / 'nli'} (set --data_root)")
    return sorted(texts)


def build(corpus: Path, folder: Path, backend: str, extra: list[str]) -> float:
    """Seconds of one ``veracity index build`` in a child process (its own interpreter: imports included)."""
    command = [sys.executable, "-m", "veracity.cli", "index", "build", "--corpus", str(corpus), "--output_dir",
               str(folder), "--encoder_backend", backend, "--progress", "false", *extra]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


def same_files(a: Path, b: Path, pattern: str) -> bool:
    files = sorted(p.relative_to(a) for p in a.glob(pattern) if p.is_file())
    return bool(files) and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--encoder_backend", default="onnx_int8", help="torch, onnx or onnx_int8")
    parser.add_argument("--work_dir", default="runs/bench/ray_index")
    parser.add_argument("--data_root", default=None)
    args = parser.parse_args()

    import faiss

    from veracity.infer.retrieval.index import load_index
    from veracity.infer.retrieval.store import read_embeddings

    texts = real_texts(resolve_data_root(args.data_root))
    random.Random(13).shuffle(texts)
    if len(texts) < args.documents + args.queries:
        raise SystemExit(f"bench/ray_index.py: {len(texts)} texts, fewer than --documents + --queries")
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus_{args.documents}.jsonl"
    body = "".join(json.dumps({"doc_id": f"nli-{i:07d}", "text": text}) + "\n"
                   for i, text in enumerate(texts[:args.documents]))
    corpus.write_text(body, encoding="utf-8")
    queries = texts[args.documents:args.documents + args.queries]
    print(f"corpus: {args.documents:,} real texts ({len(body.split()) / args.documents:.1f} words each, "
          f"sha256 {hashlib.sha256(body.encode()).hexdigest()[:12]}); {len(queries)} queries")

    one = build(corpus, work / "one", args.encoder_backend, [])
    ray = build(corpus, work / "ray", args.encoder_backend, ["--executor", "ray", "--workers", str(args.workers)])

    vectors, ray_vectors = read_embeddings(work / "one"), read_embeddings(work / "ray")
    same_ids = (work / "one" / "doc_ids.json").read_bytes() == (work / "ray" / "doc_ids.json").read_bytes()
    diff = float(np.abs(vectors - ray_vectors).max())
    bm25_same = same_files(work / "one", work / "ray", "bm25/**/*")

    loaded = load_index(work / "ray")  # its own encoder (the index's) embeds the queries
    query_vectors = loaded.encoder.encode_queries(queries)
    exact = faiss.IndexFlatIP(ray_vectors.shape[1])
    exact.add(np.ascontiguousarray(ray_vectors))
    _, truth = exact.search(query_vectors, 10)
    hits = loaded.dense.search_vectors(query_vectors, 10)
    recall = float(np.mean([len({d for d, _ in hit} & {loaded.doc_ids[j] for j in truth[i]}) / 10
                            for i, hit in enumerate(hits)]))

    rows = [("build, one process (s)", f"{one:.0f}"), (f"build, Ray, {args.workers} workers (s)", f"{ray:.0f}"),
            ("speed-up", f"{one / ray:.2f}x"),
            ("passages/s, one process / Ray", f"{args.documents / one:.0f} / {args.documents / ray:.0f}"),
            ("same doc ids / BM25 files", f"{same_ids} / {bm25_same}"),
            ("max |vector difference|", f"{diff:.1e}"),
            (f"HNSW recall@10 vs exact ({len(queries)} queries)", f"{recall:.3f}")]
    print(f"\n{machine(('torch', 'onnxruntime', 'faiss-cpu', 'ray', 'sentence-transformers'))}")
    print(f"encoder backend {args.encoder_backend} (the builds inherit the OMP_NUM_THREADS above)\n")
    print("| measure | value |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
