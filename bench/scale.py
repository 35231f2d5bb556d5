"""Retrieval at scale: build time, peak RSS and query latency of BM25, dense HNSW and fused search, per corpus size.

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/scale.py [--sizes 10000 100000 1000000] [--queries 200]
           [--work_dir runs/bench/scale] [--data_root ../shared/data] [--encoder hashed] [--minilm_sample 256]

All sizes run side by side in one run and print one table (also written to <work_dir>/scale.json).
- Corpus: real sentences recombined. Sentences come from the raw data under the data root (the evidence side only:
  NLI premises, Climate-FEVER evidence sentences, FEVER ReAct Wikipedia observations, WatClaimCheck review
  articles; split at sentence ends, 40-400 characters, deduplicated: ~78k sentences on the shared data). Each
  paragraph joins 3-7 of them drawn at random (seeded), ~120 words; the corpus of size n is the first n paragraphs of
  one stream, so smaller corpora are prefixes of larger ones. Written once per size under --work_dir and reused.
- Queries: claims from the same files (NLI hypotheses, Climate-FEVER claims), drawn at random (seeded).
- Dense vectors: MiniLM on these CPUs embeds a handful of such paragraphs a second, so a million would take days:
  by default the dense index is built from a cheap stand-in encoder, a 384-d signed hashing of the BM25 tokens
  (labelled in the output; --encoder embedded uses MiniLM itself). MiniLM's throughput is measured on
  --minilm_sample generated paragraphs and extrapolated to each size.
- Each build (BM25 alone, dense alone) and the query phase run in their own child process: a row's peak RSS is
  that process's VmHWM (interpreter and imports included; their share is the "baseline" row), never the
  parent's or another build's.
- Latency: one query at a time, after 5 warm-up queries: BM25 (k=100), HNSW search of a pre-encoded query vector
  (k=100), and fused = Searcher in the project's default mode (α-fusion of both retrievers' 100 candidates,
  query encoding included, top 10). bm25s's own full-scan retrieval is timed beside ours, and its scores are
  compared with ours query by query.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import zlib
from dataclasses import asdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
SENTENCES_PER_DOC = (3, 7)
SEED = 0


# --- corpus --------------------------------------------------------------------------------------------------------

def harvest(data_root: Path) -> tuple[list[str], list[str]]:
    """(sentences, claims) from the raw files under the data root, in a fixed file order."""
    from veracity.data_prep.readers import read_jsonl

    sentences: dict[str, None] = {}
    claims: dict[str, None] = {}

    def add(text: object) -> None:
        if isinstance(text, str):
            for sentence in SENTENCE_END.split(text):
                sentence = " ".join(sentence.split())
                if 40 <= len(sentence) <= 400:
                    sentences.setdefault(sentence)

    def rows(pattern: str):  # noqa: ANN202 - an iterator of dicts
        for path in sorted(data_root.glob(pattern)):
            yield from (row for _, row in read_jsonl(path))

    for row in rows("nli/*/*.jsonl"):
        add(row.get("premise"))
        if isinstance(row.get("hypothesis"), str):
            claims.setdefault(row["hypothesis"])
    for row in rows("climate_fever/*.jsonl"):
        for evidence in row.get("evidences") or []:
            add(evidence.get("evidence"))
        if isinstance(row.get("claim"), str):
            claims.setdefault(row["claim"])
    for row in rows("fever/react_wikipedia_observations*.jsonl"):
        for step in row.get("observations") or []:
            add(step.get("observation"))
    for row in rows("watclaimcheck_flawcheck/*.jsonl"):
        for paragraph in row.get("review_article") or []:
            add(paragraph)
    if not sentences or not claims:
        raise SystemExit(f"bench/scale.py: no sentences or claims under {data_root} (set --data_root)")
    return list(sentences), list(claims)


def write_corpora(sentences: list[str], sizes: list[int], work_dir: Path) -> dict[int, Path]:
    """corpus_<n>.jsonl for each size (prefixes of one seeded stream); files made by an identical call are reused."""
    import hashlib

    pool = hashlib.sha256("\n".join(sentences).encode()).hexdigest()
    recipe = {"pool_sha256": pool, "seed": SEED, "sentences_per_doc": SENTENCES_PER_DOC}
    paths = {n: work_dir / f"corpus_{n}.jsonl" for n in sizes}
    stale = [n for n in sizes if not _recipe_matches(paths[n], {**recipe, "documents": n})]
    if not stale:
        return paths
    work_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    handles = {n: open(paths[n], "w", encoding="utf-8") for n in stale}  # noqa: SIM115 - closed below
    low, high = SENTENCES_PER_DOC
    for i in range(max(stale)):
        picks = rng.integers(len(sentences), size=int(rng.integers(low, high + 1)))
        line = json.dumps({"doc_id": f"p{i:07d}", "text": " ".join(sentences[j] for j in picks)}) + "\n"
        for n, handle in handles.items():
            if i < n:
                handle.write(line)
    for n, handle in handles.items():
        handle.close()
        paths[n].with_suffix(".recipe.json").write_text(json.dumps({**recipe, "documents": n}))
    return paths


def _recipe_matches(path: Path, recipe: dict[str, object]) -> bool:
    sidecar = path.with_suffix(".recipe.json")
    return path.exists() and sidecar.exists() and json.loads(sidecar.read_text()) == json.loads(json.dumps(recipe))


# --- the stand-in encoder ---------------------------------------------------------------------------------------

class HashedBagOfWords:
    """A cheap, deterministic stand-in for a sentence encoder (duck-types ``DenseEncoder``): each BM25 token adds
    ±1 to one of ``dim`` buckets (crc32 of the token), the vector is L2-normalized. Lexical, not semantic: it
    gives FAISS real text-shaped vectors at a million documents without hours of MiniLM."""

    def __init__(self, dim: int = 384):
        from veracity.infer.retrieval.analyzers import Analyzer
        from veracity.infer.retrieval.dense import EncoderSpec

        self.dim, self.analyzer = dim, Analyzer()
        self.spec = EncoderSpec(model=f"hashed-bow-{dim}")
        self.fingerprint = f"hashed-bow-crc32-{dim}"
        self._buckets: dict[str, int] = {}  # token → signed bucket + 1 (crc32 once per distinct token)

    def _bucket(self, token: str) -> int:
        code = zlib.crc32(token.encode())
        return (code % self.dim + 1) * (1 if code & (1 << 31) else -1)

    def _encode(self, texts: list[str]) -> np.ndarray:
        cache = self._buckets
        rows: list[int] = []
        codes: list[int] = []
        for row, text in enumerate(texts):
            tokens = self.analyzer(text)
            rows.extend([row] * len(tokens))
            codes.extend([cache[t] if t in cache else cache.setdefault(t, self._bucket(t)) for t in tokens])
        signed = np.asarray(codes, dtype=np.int64)
        cells = np.asarray(rows, dtype=np.int64) * self.dim + np.abs(signed) - 1
        vectors = np.bincount(cells, np.sign(signed).astype(np.float64), len(texts) * self.dim).reshape(-1, self.dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    encode_documents = encode_queries = _encode

    def describe(self) -> dict[str, object]:
        return {**asdict(self.spec), "fingerprint": self.fingerprint, "dim": self.dim}


def make_encoder(name: str):  # noqa: ANN201 - HashedBagOfWords or DenseEncoder
    """``hashed`` (the stand-in), else a DenseEncoder for a models.registry name or path (``embedded``: MiniLM);
    the seconds spent encoding documents are counted in ``.seconds``."""
    if name == "hashed":
        encoder = HashedBagOfWords()
    else:
        from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec

        encoder = DenseEncoder(EncoderSpec(model=name))
    encode, encoder.seconds = encoder.encode_documents, 0.0

    def counted(texts: list[str]) -> np.ndarray:
        start = time.perf_counter()
        vectors = encode(texts)
        encoder.seconds += time.perf_counter() - start
        return vectors

    encoder.encode_documents = counted
    return encoder


def encoder_label(name: str) -> str:
    return "hashed bag of words, 384-d (a stand-in, not MiniLM)" if name == "hashed" else f"{name} (real encoder)"


# --- child processes ---------------------------------------------------------------------------------------------

def _rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    import resource  # not Linux: the peak is all there is

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_seconds() -> float:
    """User + system CPU time of this process so far: on a busy machine wall time stretches, this does not."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_build(corpus: str, folder: str, kind: str, encoder_name: str) -> dict[str, object]:
    from veracity.infer.retrieval.index import IndexSettings, build_index

    baseline = _rss_mib("VmRSS")
    encoder = make_encoder(encoder_name) if kind == "dense" else None
    settings = IndexSettings(sparse=kind == "bm25", dense=kind == "dense", progress=False)
    start = time.perf_counter()
    build_index(corpus, folder, settings, encoder=encoder)
    result = {"seconds": time.perf_counter() - start, "cpu_seconds": _cpu_seconds(), "peak_mib": _rss_mib("VmHWM"),
              "baseline_mib": baseline}
    if encoder is not None:
        result["encode_seconds"] = encoder.seconds
    return result


def child_queries(bm25_dir: str, dense_dir: str, queries: list[str], encoder_name: str) -> dict[str, object]:
    from veracity.infer.retrieval.bm25_topk import column_maxima, top_k
    from veracity.infer.retrieval.index import LoadedIndex, load_index
    from veracity.infer.retrieval.searcher import Searcher, SearchSettings
    from veracity.infer.retrieval.store import EmbeddingReader

    encoder = make_encoder(encoder_name)
    sparse_index, dense_index = load_index(bm25_dir), load_index(dense_dir, encoder=encoder)
    sparse, dense = sparse_index.sparse, dense_index.dense
    assert sparse is not None and dense is not None and dense.doc_ids == sparse.doc_ids
    dense.doc_ids = dense_index.doc_ids = sparse.doc_ids  # one list of ids, as one combined folder would load
    both = LoadedIndex(Path(bm25_dir), sparse_index.meta, sparse.doc_ids, sparse, dense, encoder)
    searcher = Searcher(both, SearchSettings(mode="alpha", candidates=100, top_k=10))
    vectors = encoder.encode_queries(queries)
    model, matrix = sparse.model, sparse.model.scores
    tokens = [sparse.analyzer(q) or ["\x00"] for q in queries]

    def timed(fn) -> list[float]:  # noqa: ANN001 - a one-argument callable over query numbers
        for i in range(min(5, len(queries))):
            fn(i)
        out = []
        for i in range(len(queries)):
            start = time.perf_counter()
            fn(i)
            out.append((time.perf_counter() - start) * 1e3)
        return out

    k = min(100, len(sparse.doc_ids))
    result: dict[str, object] = {
        "bm25_ms": timed(lambda i: sparse.search([queries[i]], k)),
        # n_threads=0: bm25s's own loop, no worker thread (a thread hand-off per query would be timed too)
        "bm25s_ms": timed(lambda i: model.retrieve([tokens[i]], k=k, show_progress=False, n_threads=0)),
        "hnsw_ms": timed(lambda i: dense.search_vectors(vectors[i : i + 1], k)),
        "fused_ms": timed(lambda i: searcher.search([queries[i]])),
    }
    same = 0
    for i, query in enumerate(queries):  # ours against bm25s's full scan: the same scores, rank by rank
        ours = [s for _, s in sparse.search([query], k)[0]]
        _, scores = model.retrieve([tokens[i]], k=k, show_progress=False, n_threads=0)
        same += ours == [float(s) for s in scores[0] if s > 0]
    result["bm25_same_scores"] = same
    read, postings, maxima = [], [], column_maxima(matrix["data"], matrix["indptr"])
    df = np.diff(matrix["indptr"])
    for query in queries:  # how much of the query terms' posting lists the pruned search reads whole
        stats: dict[str, int] = {}
        terms = [model.vocab_dict[t] for t in sparse.analyzer(query) if t in model.vocab_dict]
        top_k(matrix["data"], matrix["indices"], matrix["indptr"], maxima, terms, k, stats)
        read.append(stats.get("read", 0))
        postings.append(int(df[sorted(set(terms))].sum()) if terms else 0)
    result["bm25_read_mean"], result["bm25_postings_mean"] = float(np.mean(read)), float(np.mean(postings))
    result["peak_mib"] = _rss_mib("VmHWM")  # before the exact search below maps every vector
    result["hnsw_recall10"] = _recall_at_10(EmbeddingReader(Path(dense_dir)), vectors, dense)
    return result


def _recall_at_10(reader, vectors: np.ndarray, dense) -> float:  # noqa: ANN001 - EmbeddingReader, DenseIndex
    """HNSW's top 10 against the exact top 10 (inner product over every shard, a block at a time), tie-aware: a
    found document counts if its score reaches the exact 10th score (recombined text has exact duplicates)."""
    depth = min(10, len(reader))
    best = np.full((len(vectors), depth), -np.inf, dtype=np.float32)
    for start in range(0, len(reader), 65536):
        scores = vectors @ reader.rows(start, min(start + 65536, len(reader))).T
        best = -np.partition(-np.concatenate([best, scores], 1), depth - 1, axis=1)[:, :depth]
    tenth = best.min(axis=1, keepdims=True)
    found_scores, _ = dense.index.search(vectors, depth)
    return float(np.mean((found_scores >= tenth - 1e-5).sum(axis=1) / depth))


def child_minilm(corpus: str, sample: int) -> dict[str, object]:
    from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec, embed_shard
    from veracity.infer.retrieval.index import iter_corpus

    texts = [str(d["text"]) for d in next(iter_corpus(Path(corpus), sample))]
    encoder = DenseEncoder(EncoderSpec())
    embed_shard(encoder, texts[:8])  # warm-up
    start = time.perf_counter()
    embed_shard(encoder, texts)
    return {"passages": len(texts), "per_second": len(texts) / (time.perf_counter() - start),
            "model": encoder.spec.model, "batch_size": encoder.spec.batch_size}


CHILDREN = {"build": child_build, "queries": child_queries, "minilm": child_minilm}


def run_child(task: str, **kwargs: object) -> dict[str, object]:
    """Run one task in a fresh interpreter; its result comes back as JSON through a file."""
    out = Path(str(kwargs.pop("result_file")))
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = json.dumps({"task": task, "kwargs": kwargs, "result_file": str(out)})
    subprocess.run([sys.executable, str(HERE), "--child", spec], check=True)
    return json.loads(out.read_text())


# --- the table ---------------------------------------------------------------------------------------------------

def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    info = Path("/proc/cpuinfo")
    if info.exists():
        lines = info.read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        cpu = names[0] if names else cpu
    ram = "?"
    if Path("/proc/meminfo").exists():
        total = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        ram = f"{int(total.split()[1]) / 2**20:.1f} GiB"
    import bm25s
    import faiss

    return (f"{cpu}, {os.cpu_count()} cores, {ram} RAM; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
            f" (faiss uses {faiss.omp_get_max_threads()}); python {platform.python_version()}, numpy {np.__version__}"
            f", faiss {faiss.__version__}, bm25s {bm25s.__version__}")


def folder_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def p50_p95(values: list[float]) -> str:
    return f"{np.percentile(values, 50):.2f} / {np.percentile(values, 95):.2f}"


def table(results: dict[int, dict[str, object]]) -> list[tuple[str, list[str]]]:
    def row(label: str, fn) -> tuple[str, list[str]]:  # noqa: ANN001 - result → cell text
        return label, [fn(results[n]) for n in results]

    return [
        row("documents", lambda r: f"{r['documents']:,}"),
        row("corpus JSONL (MiB)", lambda r: f"{r['corpus_mib']:.0f}"),
        row("BM25 postings / terms", lambda r: f"{r['postings']:,} / {r['terms']:,}"),
        row("BM25 build, wall / CPU (s)", lambda r: f"{r['bm25']['seconds']:.1f} / {r['bm25']['cpu_seconds']:.1f}"),
        row("BM25 build peak RSS (MiB)", lambda r: f"{r['bm25']['peak_mib']:.0f}"),
        row("dense build, encoding + HNSW M=32 efC=200, wall / CPU (s)",
            lambda r: f"{r['dense']['seconds']:.1f} / {r['dense']['cpu_seconds']:.1f}"),
        row("  of which encoding (s)", lambda r: f"{r['dense']['encode_seconds']:.1f}"),
        row("dense build peak RSS (MiB)", lambda r: f"{r['dense']['peak_mib']:.0f}"),
        row("baseline RSS, interpreter + imports (MiB)", lambda r: f"{r['bm25']['baseline_mib']:.0f}"),
        row("index folders on disk, BM25 / dense (MiB)", lambda r: f"{r['bm25_mib']:.0f} / {r['dense_mib']:.0f}"),
        row("query process peak RSS (MiB)", lambda r: f"{r['queries']['peak_mib']:.0f}"),
        row("BM25 ms/query p50 / p95", lambda r: p50_p95(r["queries"]["bm25_ms"])),
        row("  bm25s full scan, same index (reference)", lambda r: p50_p95(r["queries"]["bm25s_ms"])),
        row("  queries with bm25s's exact scores", lambda r: f"{r['queries']['bm25_same_scores']}/{r['n_queries']}"),
        row("  postings read whole / in the query's lists (mean)",
            lambda r: f"{r['queries']['bm25_read_mean']:,.0f} / {r['queries']['bm25_postings_mean']:,.0f}"),
        row("dense HNSW ms/query p50 / p95", lambda r: p50_p95(r["queries"]["hnsw_ms"])),
        row("  HNSW recall@10 vs exact", lambda r: f"{r['queries']['hnsw_recall10']:.3f}"),
        row("fused (α-fusion, both retrievers) p50 / p95", lambda r: p50_p95(r["queries"]["fused_ms"])),
    ]


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000, 1000000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--work_dir", default="runs/bench/scale", help="Generated corpora and indexes go here.")
    parser.add_argument("--data_root", default=None, help="Raw data root (default: $VERACITY_DATA_ROOT, else "
                        "../shared/data).")
    parser.add_argument("--encoder", default="hashed", help="Dense vectors: 'hashed' (the cheap stand-in), or a "
                        "models.registry name or path ('embedded': MiniLM; hours per 100k on 2 cores).")
    parser.add_argument("--minilm_sample", type=int, default=256,
                        help="Paragraphs MiniLM embeds to measure its throughput (0: skip).")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> dict[int, dict[str, object]]:
    args = make_parser().parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        result = CHILDREN[spec["task"]](**spec["kwargs"])
        Path(spec["result_file"]).write_text(json.dumps(result))
        return {}
    from veracity.data_prep.prepare import resolve_data_root

    sizes, work = sorted(set(args.sizes)), Path(args.work_dir)
    sentences, claims = harvest(resolve_data_root(args.data_root))
    rng = np.random.default_rng(SEED)
    queries = [claims[i] for i in rng.choice(len(claims), size=min(args.queries, len(claims)), replace=False)]
    corpora = write_corpora(sentences, sizes, work)
    print(f"{len(sentences):,} sentences, {len(claims):,} claims; corpora in {work}", flush=True)
    results: dict[int, dict[str, object]] = {}
    for n in sizes:
        folder = work / f"index_{n}"
        bm25 = run_child("build", corpus=str(corpora[n]), folder=str(folder / "bm25"), kind="bm25",
                         encoder_name=args.encoder, result_file=folder / "bm25.result.json")
        dense = run_child("build", corpus=str(corpora[n]), folder=str(folder / "dense"), kind="dense",
                          encoder_name=args.encoder, result_file=folder / "dense.result.json")
        timing = run_child("queries", bm25_dir=str(folder / "bm25"), dense_dir=str(folder / "dense"),
                           queries=queries, encoder_name=args.encoder, result_file=folder / "queries.result.json")
        params = json.loads((folder / "bm25" / "bm25" / "params.index.json").read_text())
        terms = len(json.loads((folder / "bm25" / "bm25" / "vocab.index.json").read_text())) - 1  # less the "" token
        postings = np.load(folder / "bm25" / "bm25" / "data.csc.index.npy", mmap_mode="r").shape[0]
        results[n] = {"documents": params["num_docs"], "corpus_mib": corpora[n].stat().st_size / 2**20,
                      "terms": terms, "postings": int(postings), "bm25": bm25, "dense": dense, "queries": timing,
                      "n_queries": len(queries),
                      "bm25_mib": folder_mib(folder / "bm25"), "dense_mib": folder_mib(folder / "dense")}
        print(f"size {n:,} done", flush=True)
    minilm = None
    if args.minilm_sample > 0:
        minilm = run_child("minilm", corpus=str(corpora[sizes[0]]), sample=args.minilm_sample,
                           result_file=work / "minilm.result.json")
    print(f"\nmachine: {machine()}")
    print(f"corpus: {len(sentences):,} real sentences recombined into paragraphs of {SENTENCES_PER_DOC[0]}-"
          f"{SENTENCES_PER_DOC[1]}; {len(queries)} claim queries; dense vectors: {encoder_label(args.encoder)}")
    rows = table(results)
    width = max(len(label) for label, _ in rows)
    cells = max(len(c) for _, row in rows for c in row)
    for label, row in rows:
        print(f"{label:{width}}  " + "  ".join(f"{c:>{cells}}" for c in row))
    if minilm:
        rate = float(minilm["per_second"])
        eta = "  ".join(f"{n:,}: {_duration(n / rate)}" for n in sorted({*sizes, 1_000_000}))
        print(f"MiniLM ({minilm['model']}, batch {minilm['batch_size']}) on {minilm['passages']} of these paragraphs:"
              f" {rate:.1f} passages/s -> embedding would take {eta}")
    (work / "scale.json").write_text(json.dumps({"machine": machine(), "encoder": encoder_label(args.encoder),
                                                 "results": results, "minilm": minilm}, indent=1))
    return results


if __name__ == "__main__":
    main()
