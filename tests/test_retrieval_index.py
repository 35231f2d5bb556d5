"""Index build/load round trip, mismatch errors, a golden run on a hand-made corpus, rerank, evaluation job."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from retrieval_fixture import write_benchmark

from veracity.data_prep.errors import DataError
from veracity.infer.retrieval.index import IndexMismatchError, IndexSettings, build_index, load_index
from veracity.infer.retrieval.searcher import Searcher, SearchSettings

# BM25 (default analyzer, stemming, titles indexed) on the hand-made corpus: regenerate deliberately.
GOLDEN_BM25 = {
    "q1": ["d01", "d02", "d04"],
    "q2": ["d07", "d08"],
    "q4": ["d04", "d01", "d05"],
}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark(tmp_path_factory.mktemp("bench"))


def _settings(tiny_encoder_dir: Path, **overrides: object) -> IndexSettings:
    values = {"embedder": str(tiny_encoder_dir), "faiss_kind": "flat", "stem": True, **overrides}
    return IndexSettings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def index_dir(bench: Path, tiny_encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(bench / "toy_corpus.jsonl", tmp_path_factory.mktemp("idx"), _settings(tiny_encoder_dir))


def test_golden_bm25_run(index_dir: Path, bench: Path) -> None:
    index = load_index(index_dir)
    queries = {q["query_id"]: q["text"] for q in map(json.loads, open(bench / "toy_queries.jsonl"))}
    hits = index.sparse.search([queries[q] for q in GOLDEN_BM25], k=3)
    assert {q: [d for d, _ in h] for q, h in zip(GOLDEN_BM25, hits, strict=True)} == GOLDEN_BM25


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (0.9, 0.3)])
def test_built_bm25_index_ranks_as_rank_bm25(k1: float, b: float, index_dir: Path, bench: Path,
                                             tmp_path: Path) -> None:
    """The golden lists above came from our own code; rank_bm25's BM25Okapi (Lucene IDF, the same tokens, k1 and
    b; see test_bm25_reference.py for why that makes scores equal up to the factor k1 + 1) gives them independently,
    and every toy query ranks the same through build_index -> load_index, with non-default k1 and b as well."""
    from test_bm25_reference import assert_same_ranking, lucene_okapi, reference_ranking

    from veracity.infer.retrieval.analyzers import Analyzer
    from veracity.infer.retrieval.index import document_text

    if (k1, b) == (1.5, 0.75):  # the default settings: the module's index
        folder = index_dir
    else:
        folder = build_index(bench / "toy_corpus.jsonl", tmp_path / "idx",
                             IndexSettings(dense=False, stem=True, k1=k1, b=b))
    index = load_index(folder)
    assert (index.meta["sparse"]["k1"], index.meta["sparse"]["b"], index.meta["sparse"]["method"]) == (k1, b, "lucene")
    docs = [json.loads(line) for line in open(bench / "toy_corpus.jsonl")]
    analyzer = Analyzer(stem=True)
    doc_ids = [d["doc_id"] for d in docs]
    reference = lucene_okapi([analyzer(document_text(d, include_title=True)) for d in docs], k1, b)
    queries = {q["query_id"]: q["text"] for q in map(json.loads, open(bench / "toy_queries.jsonl"))}
    for query_id, text in queries.items():
        expected = reference_ranking(reference, doc_ids, analyzer(text), k1)
        assert_same_ranking(index.sparse.search([text], k=len(docs))[0], expected, query_id)
        if query_id in GOLDEN_BM25 and (k1, b) == (1.5, 0.75):
            assert [d for d, _ in expected[:3]] == GOLDEN_BM25[query_id], query_id


def test_round_trip_gives_the_same_results(index_dir: Path, bench: Path, tiny_encoder_dir: Path) -> None:
    from veracity.infer.retrieval.dense import DenseEncoder, DenseIndex, FaissParams

    index = load_index(index_dir, corpus=bench / "toy_corpus.jsonl")
    meta = json.loads((index_dir / "index_meta.json").read_text())
    assert meta["corpus"]["documents"] == 12 and meta["dense"]["encoder"]["dim"] == 32
    encoder = DenseEncoder(_settings(tiny_encoder_dir).encoder_spec())
    docs = [json.loads(line) for line in open(bench / "toy_corpus.jsonl")]
    fresh = DenseIndex.from_vectors(encoder.encode_documents([f"{d['title']}. {d['text']}" for d in docs]),
                                    [d["doc_id"] for d in docs], FaissParams("flat"))
    query = encoder.encode_queries(["polar bear sea ice"])
    loaded, rebuilt = index.dense.search_vectors(query, 5)[0], fresh.search_vectors(query, 5)[0]
    assert [d for d, _ in loaded] == [d for d, _ in rebuilt]
    assert [s for _, s in loaded] == pytest.approx([s for _, s in rebuilt], abs=1e-6)


def test_searcher_modes(index_dir: Path) -> None:
    """Each mode returns what it names: BM25's list, the dense list, the min–max α-fusion of both, or their RRF —
    each recomputed here by hand from the two retrievers' own candidate lists."""
    index = load_index(index_dir)
    query = "capital of France"
    sparse = index.sparse.search([query], 100)[0]
    dense = index.dense.search_vectors(index.encoder.encode_queries([query]), 100)[0]

    def search(mode: str, **settings: object) -> list[tuple[str, float]]:
        return Searcher(index, SearchSettings(mode=mode, top_k=4, **settings)).search([query])[0]

    assert search("bm25") == sparse[:4] and [d for d, _ in sparse[:2]] == ["d07", "d08"]
    assert [d for d, _ in search("dense")] == [d for d, _ in dense[:4]]
    assert [s for _, s in search("dense")] == pytest.approx([s for _, s in dense[:4]])
    assert [sc for _, sc in dense] == sorted((sc for _, sc in dense), reverse=True)

    def norm(hits: list[tuple[str, float]]) -> dict[str, float]:
        low, high = min(sc for _, sc in hits), max(sc for _, sc in hits)
        return {d: (sc - low) / (high - low) for d, sc in hits}

    for alpha in (0.0, 0.3, 1.0):
        s, d = norm(sparse), norm(dense)
        by_hand = sorted(((doc, alpha * s.get(doc, 0) + (1 - alpha) * d.get(doc, 0)) for doc in s.keys() | d.keys()),
                         key=lambda item: (-item[1], item[0]))[:4]
        got = search("alpha", alpha=alpha)
        assert [doc for doc, _ in got] == [doc for doc, _ in by_hand]
        assert [sc for _, sc in got] == pytest.approx([sc for _, sc in by_hand])
    assert search("alpha", alpha=1.0)[0][0] == sparse[0][0] and search("alpha", alpha=0.0)[0][0] == dense[0][0]
    rank_s = {doc: r for r, (doc, _) in enumerate(sparse, start=1)}
    rank_d = {doc: r for r, (doc, _) in enumerate(dense, start=1)}
    rrf_by_hand = sorted(((doc, sum(1 / (60 + ranks[doc]) for ranks in (rank_s, rank_d) if doc in ranks))
                          for doc in rank_s.keys() | rank_d.keys()), key=lambda item: (-item[1], item[0]))[:4]
    rrf = search("rrf")
    assert [doc for doc, _ in rrf] == [doc for doc, _ in rrf_by_hand] and rrf[0][0] == "d07"
    assert [sc for _, sc in rrf] == pytest.approx([sc for _, sc in rrf_by_hand])


def test_index_from_another_corpus_is_an_error(index_dir: Path, bench: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text((bench / "toy_corpus.jsonl").read_text().replace("Paris", "Lyon"))
    with pytest.raises(IndexMismatchError, match="built from a corpus with sha256"):
        load_index(index_dir, corpus=other)


def test_index_with_another_encoder_is_an_error(index_dir: Path) -> None:
    with pytest.raises(IndexMismatchError, match="fingerprint"):
        load_index(index_dir, embedder="embedded")


def test_mode_needs_its_index(bench: Path, tmp_path: Path, tiny_encoder_dir: Path) -> None:
    folder = build_index(bench / "toy_corpus.jsonl", tmp_path / "sparse_only",
                         _settings(tiny_encoder_dir, dense=False))
    index = load_index(folder)
    assert index.dense is None
    with pytest.raises(ValueError, match="needs a dense index"):
        Searcher(index, SearchSettings(mode="rrf"))


def test_bad_corpus_record_names_file_and_line(tmp_path: Path, tiny_encoder_dir: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"doc_id": "a", "text": "x"}\n{"doc_id": "b"}\n')
    with pytest.raises(DataError, match=r"c.jsonl:2: field 'text'"):
        build_index(corpus, tmp_path / "i", _settings(tiny_encoder_dir, dense=False))
    corpus.write_text('{"doc_id": "a", "text": "x"}\n{"doc_id": "a", "text": "y"}\n')
    with pytest.raises(DataError, match=r"c.jsonl:2: field 'doc_id': duplicate doc_id 'a' \(first on line 1\)"):
        build_index(corpus, tmp_path / "i", _settings(tiny_encoder_dir, dense=False))
    assert not (tmp_path / "i" / "index_meta.json").exists()


@pytest.mark.parametrize(("rows", "message"), [
    (['{"doc_id": "a", "text": "x"}', '{"doc_id": "b", "text": "y"}', '{"doc_id": "a", "text": "z"}'],
     ":3: field 'doc_id': duplicate doc_id 'a' (first on line 1)"),
    (['{"doc_id": "a", "text": "x"}', '{"doc_id": "b"}'], ":2: field 'text': missing or not a string"),
    ([], ": no documents: the corpus is empty"),
])
def test_index_build_on_a_bad_corpus_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                rows: list[str], message: str) -> None:
    from veracity import cli

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(row + "\n" for row in rows))
    out = tmp_path / "index"
    with pytest.raises(SystemExit) as info:
        cli.main(["index", "build", "--corpus", str(corpus), "--output_dir", str(out), "--dense", "false"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {corpus}{message}", err
    assert not out.exists(), "nothing may be written, not even run_config.yaml"


def test_hnsw_matches_exact_on_a_small_corpus(bench: Path, tmp_path: Path, tiny_encoder_dir: Path) -> None:
    exact = load_index(build_index(bench / "toy_corpus.jsonl", tmp_path / "flat", _settings(tiny_encoder_dir)))
    hnsw = load_index(build_index(bench / "toy_corpus.jsonl", tmp_path / "hnsw",
                                  _settings(tiny_encoder_dir, faiss_kind="hnsw")))
    vectors = exact.encoder.encode_queries(["polar bears", "capital city", "film"])
    got = [[d for d, _ in h] for h in hnsw.dense.search_vectors(vectors, 5)]
    assert got == [[d for d, _ in h] for h in exact.dense.search_vectors(vectors, 5)]


def test_embedded_reranker_orders_by_relevance() -> None:
    from veracity.infer.retrieval.rerank import CrossEncoderReranker

    reranker = CrossEncoderReranker()
    texts = {"a": "The stock market fell.", "b": "Paris is the capital of France.", "c": "France is in Europe."}
    hits = [("a", 3.0), ("c", 2.0), ("b", 1.0), ("z", 0.5)]
    reranked = reranker.rerank("What is the capital of France?", hits, texts | {"z": ""}, top_n=3)
    assert [d for d, _ in reranked][0] == "b"
    assert reranked[-1][0] == "z"  # beyond top_n: kept, below the reranked head


def test_length_sorted_batches_give_the_one_at_a_time_scores_in_input_order() -> None:
    from veracity.infer.retrieval.rerank import CrossEncoderReranker

    reranker = CrossEncoderReranker()
    query = "What is the capital of France?"
    texts = ["Paris is the capital of France, and its largest city by far, on the Seine in the north of the country.",
             "Paris.", "The stock market fell sharply on Monday after the announcement.", "France is in Europe.", ""]
    pairs = [(query, t) for t in texts]
    one_at_a_time = reranker.backend.predict(pairs, 1)
    batched = reranker.backend.predict(pairs, 2)  # lengths mixed: sorted into batches, returned in input order
    # the batches depend on lengths only, so any input order gives each pair the very same score
    np.testing.assert_array_equal(reranker.backend.predict(pairs[::-1], 2)[::-1], batched)
    # INT8 dynamic quantization scales activations per batch, so padding moves a logit by up to ~0.2: same ranking
    np.testing.assert_allclose(batched, one_at_a_time, atol=0.25)
    assert list(np.argsort(-batched)) == list(np.argsort(-one_at_a_time))
    assert reranker.backend.predict([], 4).shape == (0,)


def test_eval_job_writes_metrics_and_table(bench: Path, tmp_path: Path, tiny_encoder_dir: Path) -> None:
    from veracity.infer.retrieval.evaluate import main

    results = main(["--prepared_dir", str(bench), "--benchmarks", "toy", "--output_dir", str(tmp_path / "run"),
                    "--embedder", str(tiny_encoder_dir), "--faiss_kind", "flat", "--rerank", "false",
                    "--alphas", "0.2", "0.8"])
    toy = results["toy"]
    assert toy["queries"] == {"dev": 4, "train": 3}
    assert set(toy["rows"]) == {"BM25", "dense", "α=0.2", "α=0.8", f"α*={toy['best_alpha']:g} (tuned on train)",
                                "RRF k=60"}
    assert toy["rows"]["BM25"]["hit@5"] == 1.0
    table = (tmp_path / "run" / "results.md").read_text()
    assert "| BM25 |" in table and "mrr@5" in table
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["toy"]["best_alpha"] in (0.2, 0.8)
    # TREC run files, qrels and per-query metrics, as IR tools read them
    run = tmp_path / "run"
    assert (run / "trec" / "toy.qrels").read_text().splitlines() == [
        "q1 0 d01 1", "q2 0 d07 1", "q3 0 d09 1", "q4 0 d04 1", "q4 0 d12 1"]
    bm25 = [line.split() for line in (run / "trec" / "toy" / "BM25.run").read_text().splitlines()]
    assert all(len(cols) == 6 and cols[1] == "Q0" and cols[5] == "BM25" for cols in bm25)
    q1 = [cols for cols in bm25 if cols[0] == "q1"]
    assert [int(c[3]) for c in q1] == list(range(1, len(q1) + 1)) and q1[0][2] == "d01"
    assert [float(c[4]) for c in q1] == sorted((float(c[4]) for c in q1), reverse=True)
    assert {p.name for p in (run / "trec" / "toy").iterdir()} == {
        "BM25.run", "dense.run", "alpha_0.2.run", "alpha_0.8.run", "RRF_k_60.run",
        f"alpha_star_{toy['best_alpha']:g}_tuned_on_train.run"}
    per_query = [json.loads(line) for line in (run / "per_query" / "toy.jsonl").read_text().splitlines()]
    assert len(per_query) == 4 * 6
    bm25_ndcg = [r["ndcg@10"] for r in per_query if r["configuration"] == "BM25"]
    assert sum(bm25_ndcg) / 4 == pytest.approx(toy["rows"]["BM25"]["ndcg@10"], abs=1e-6)
    significance = toy["significance"]
    best = significance["reference"]
    assert toy["rows"][best]["ndcg@10"] == max(r["ndcg@10"] for r in toy["rows"].values())
    assert significance["p"][best] == 1.0 and all(0 < p <= 1 for p in significance["p"].values())
    assert "| p vs best |" in table and "≈: the ndcg@10 difference from the best row" in table


def test_embeddings_are_reused_for_another_faiss_configuration(index_dir: Path, bench: Path, tmp_path: Path,
                                                               tiny_encoder_dir: Path, monkeypatch) -> None:
    import numpy as np

    from veracity.infer.retrieval.dense import DenseEncoder
    from veracity.infer.retrieval.store import read_embeddings

    settings = _settings(tiny_encoder_dir, faiss_kind="hnsw", reuse_embeddings=str(index_dir))
    encoder = DenseEncoder(settings.encoder_spec())
    monkeypatch.setattr(encoder, "encode_documents", lambda texts: pytest.fail("must not re-encode"))
    folder = build_index(bench / "toy_corpus.jsonl", tmp_path / "hnsw", settings, encoder=encoder)
    assert np.array_equal(read_embeddings(folder), read_embeddings(index_dir))
    other = tmp_path / "other.jsonl"
    other.write_text((bench / "toy_corpus.jsonl").read_text().replace("Paris", "Lyon"))
    with pytest.raises(IndexMismatchError, match="another corpus"):
        build_index(other, tmp_path / "x", settings, encoder=encoder)


def test_paired_randomization_test_by_hand() -> None:
    from veracity.infer.retrieval.metrics import paired_randomization_test

    # 3 queries, every difference +1: of the 8 sign flips, only all-plus and all-minus reach |mean| 1 → p = 2/8
    assert paired_randomization_test([1, 1, 1], [0, 0, 0]) == 0.25
    assert paired_randomization_test([0.5, 0.2], [0.5, 0.2]) == 1.0  # no difference at all
    # differences (1, -1, 0, 2): |mean| 0.5; flips reaching >= 0.5: those where the ±1 and 2 signs give |sum| >= 2
    by_hand = sum(abs(a - b + 2 * c) >= 2 for a in (1, -1) for b in (1, -1) for c in (1, -1)) / 8
    assert paired_randomization_test([1, 0, 0.3, 2], [0, 1, 0.3, 0]) == by_hand == 0.75
    # 40 queries, all +0.1: the Monte Carlo p is its floor 1/(samples+1); order of a and b does not matter
    assert paired_randomization_test([0.1] * 40, [0.0] * 40, samples=999) == 1 / 1000
    assert paired_randomization_test([0.0] * 40, [0.1] * 40, samples=999) == 1 / 1000


def test_index_commands_and_the_tuned_search_recipe(bench: Path, tmp_path: Path, tiny_encoder_dir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`veracity index build` / `index search` through the command line; the α* that `eval retrieval` tuned comes
    back as a recipe that `index search --config` reads."""
    import yaml

    from veracity import cli
    from veracity.infer.retrieval.evaluate import main as evaluate
    from veracity.infer.retrieval.fusion import DEFAULT_ALPHA

    folder = tmp_path / "idx"
    cli.main(["index", "build", "--corpus", str(bench / "toy_corpus.jsonl"), "--output_dir", str(folder),
              "--embedder", str(tiny_encoder_dir), "--faiss_kind", "flat", "--stem", "true"])
    assert (folder / "index_meta.json").is_file() and (folder / "run_config.yaml").is_file()
    results = evaluate(["--prepared_dir", str(bench), "--benchmarks", "toy", "--output_dir", str(tmp_path / "run"),
                        "--embedder", str(tiny_encoder_dir), "--faiss_kind", "flat", "--rerank", "false",
                        "--alphas", "0.2", "0.8"])
    recipe = tmp_path / "run" / "search" / "toy.yaml"
    values = yaml.safe_load(recipe.read_text())
    assert values["mode"] == "alpha" and values["alpha"] == results["toy"]["best_alpha"] != DEFAULT_ALPHA
    capsys.readouterr()
    cli.main(["index", "search", "--config", str(recipe), "--index_dir", str(folder), "--top_k", "3",
              "--query", "polar bear sea ice"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# polar bear sea ice" and len(lines) == 4
    index = load_index(folder)
    settings = SearchSettings(mode="alpha", alpha=values["alpha"], top_k=3)
    tuned = Searcher(index, settings).search(["polar bear sea ice"])
    assert [line.split()[2] for line in lines[1:]] == [doc for doc, _ in tuned[0]]
