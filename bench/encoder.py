"""Dense encoder benchmark: the encoder's CPU backends side by side (torch, ONNX Runtime fp32, ONNX Runtime INT8).

Usage: OMP_NUM_THREADS=2 .venv/bin/python bench/encoder.py [--prepared_dir runs/prep] [--docs 2000] [--queries 200]
       [--embedder embedded] [--max_length 256]

On the same texts in one run: the first ``--docs`` Climate-FEVER corpus passages (what an index build encodes) and
``--queries`` Climate-FEVER claims, each encoded by ``DenseEncoder`` with each backend (the graphs are exported
before timing: once per model, cached). Each row: documents/s and queries/s, the factor over torch, the smallest
cosine between a document's vector and its torch vector, and the mean overlap of each query's exact top-10
documents with torch's. Read the ratios; absolute numbers move with machine load.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

BACKENDS = ("torch", "onnx", "onnx_int8")


def texts(prepared_dir: str, docs: int, queries: int) -> tuple[list[str], list[str]]:
    from veracity.data_prep.prepared import PreparedDataError, read_prepared

    try:
        corpus = [d.text for d in read_prepared(prepared_dir, "climate_fever_corpus")][:docs]
        claims = [q.text for q in read_prepared(prepared_dir, "climate_fever_queries")][:queries]
    except PreparedDataError as error:
        sys.exit(f"bench/encoder.py: {error}")
    return corpus, claims


def top10(queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    return np.argsort(-(queries @ docs.T), axis=1, kind="stable")[:, :10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared_dir", default="runs/prep")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--embedder", default="embedded")
    parser.add_argument("--max_length", type=int, default=256)
    args = parser.parse_args()
    from veracity.logs import quiet_third_party

    quiet_third_party()
    from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec

    corpus, claims = texts(args.prepared_dir, args.docs, args.queries)
    encoders = {b: DenseEncoder(EncoderSpec(model=args.embedder, max_length=args.max_length, backend=b))
                for b in BACKENDS}  # exports the graphs first when missing
    results = {}
    for backend, encoder in encoders.items():
        encoder.encode_documents(corpus[:64])  # warm-up: first-call allocations are not the backend's speed
        start = time.perf_counter()
        docs = encoder.encode_documents(corpus)
        doc_seconds = time.perf_counter() - start
        start = time.perf_counter()
        queries = encoder.encode_queries(claims)
        results[backend] = (docs, queries, doc_seconds, time.perf_counter() - start)

    reference_docs, reference_queries, torch_seconds, _ = results["torch"]
    reference_top = top10(reference_queries, reference_docs)
    print(f"{len(corpus)} Climate-FEVER passages, {len(claims)} claims, encoder {encoders['torch'].folder} "
          f"(max_length {args.max_length})\n")
    print("| backend | documents/s | × torch | queries/s | min cosine to torch | top-10 overlap with torch |")
    print("|---|---:|---:|---:|---:|---:|")
    for backend, (docs, queries, doc_seconds, query_seconds) in results.items():
        cosine = float((docs * reference_docs).sum(axis=1).min())
        top = top10(queries, docs)
        overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, reference_top, strict=True)])
        print(f"| {backend} | {len(corpus) / doc_seconds:.1f} | {torch_seconds / doc_seconds:.2f} | "
              f"{len(claims) / query_seconds:.1f} | {cosine:.5f} | {overlap:.3f} |")


if __name__ == "__main__":
    main()
