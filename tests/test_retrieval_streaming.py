"""The streaming index build against the in-memory one: bm25s's own index and an all-at-once encoding.

BM25: the builder's score matrix equals ``bm25s.BM25.index`` on the same tokens entry for entry (bit-equal float32),
and the pruned top-k equals an exhaustive scan of every document. Dense: vectors written in shards of any size
equal one encoding of the whole corpus, and so do FAISS's answers. Format 1 folders still load.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import bm25s
import numpy as np
import pytest
from retrieval_fixture import write_benchmark
from test_bm25_reference import CORPUS

from veracity.infer.retrieval.analyzers import Analyzer
from veracity.infer.retrieval.bm25_topk import column_maxima, top_k
from veracity.infer.retrieval.index import IndexSettings, build_index, document_text, load_index
from veracity.infer.retrieval.sparse import BM25Index, BM25Params
from veracity.infer.retrieval.store import DocTexts, DocTextWriter, EmbeddingReader, ShardWriter, read_embeddings


def _postings(model: bm25s.BM25) -> dict[str, tuple[list[int], list[float]]]:
    """term → (rows, float32 scores) of a bm25s model, independent of how it numbered its vocabulary."""
    scores, out = model.scores, {}
    for term, column in model.vocab_dict.items():
        if column < len(scores["indptr"]) - 1:
            span = slice(scores["indptr"][column], scores["indptr"][column + 1])
            out[term] = (scores["indices"][span].tolist(), scores["data"][span].tolist())
    return out


@pytest.mark.parametrize(("k1", "b", "chunk"), [(1.5, 0.75, 3), (0.9, 0.3, 1), (1.2, 0.6, 100)])
def test_streamed_bm25_matrix_is_bm25s_own(k1: float, b: float, chunk: int, tmp_path: Path) -> None:
    analyzer = Analyzer(stem=True)
    texts = list(CORPUS.values()) + ["", "the of and"]  # documents without terms still count (N and lengths)
    reference = bm25s.BM25(k1=k1, b=b, method="lucene")
    reference.index([analyzer(t) for t in texts], show_progress=False)
    builder = BM25Index.builder(analyzer, BM25Params(k1, b))
    for start in range(0, len(texts), chunk):
        builder.add(texts[start : start + chunk])
    model = builder.finish()
    assert model.scores["num_docs"] == reference.scores["num_docs"] == len(texts)
    assert set(model.vocab_dict) == set(reference.vocab_dict)  # "" included, as bm25s adds it
    assert _postings(model) == _postings(reference)  # exact float equality: the same formula, the same rounding
    assert model.scores["indices"].dtype == np.int32 and model.scores["data"].dtype == np.float32
    # and it is a bm25s index: saved and loaded by bm25s, it answers bm25s's own retrieve
    BM25Index(analyzer, BM25Params(k1, b), model, list(map(str, range(len(texts))))).save(tmp_path / "bm25")
    loaded = bm25s.BM25.load(str(tmp_path / "bm25"), show_progress=False)
    query = analyzer("glacier ice climate")
    ours, theirs = loaded.get_scores(query), reference.get_scores(query)
    assert np.array_equal(ours, theirs)


def test_builder_refuses_an_empty_corpus_and_unsupported_methods() -> None:
    builder = BM25Index.builder(Analyzer(), BM25Params())
    builder.add(["", "the and of"])
    with pytest.raises(ValueError, match="no indexable terms"):
        builder.finish()
    with pytest.raises(ValueError, match="streaming BM25 supports"):
        BM25Index.builder(Analyzer(), BM25Params(method="bm25+"))


def _exhaustive(model: bm25s.BM25, terms: list[int], k: int) -> list[tuple[int, float]]:
    """Every document scored by bm25s, positive ones ranked by score then row: what top_k must return."""
    scores = model.get_scores_from_ids(terms) if terms else np.zeros(model.scores["num_docs"], np.float32)
    ranked = sorted(((int(r), float(s)) for r, s in enumerate(scores) if s > 0), key=lambda hit: (-hit[1], hit[0]))
    return ranked[:k]


def test_pruned_top_k_equals_an_exhaustive_scan() -> None:
    """Zipf-distributed words make many near-ties and long common postings; every query, every k, rows and scores
    equal scanning every document (ties ordered by row) — and pruning did skip documents on most queries."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(400)]
    weights = [1 / (i + 1) for i in range(len(words))]
    texts = [" ".join(rng.choices(words, weights, k=rng.randint(0, 30))) for _ in range(1500)]
    index = BM25Index.build([str(i) for i in range(len(texts))], texts, Analyzer(stopwords=False))
    model, matrix = index.model, index.model.scores
    maxima = column_maxima(matrix["data"], matrix["indptr"])
    pruned = 0
    for _ in range(150):
        query = rng.choices(words, weights, k=rng.randint(1, 9)) + rng.sample(words[200:], 1)  # repeats allowed
        terms = [model.vocab_dict[w] for w in query if w in model.vocab_dict]
        for k in (1, 7, 50, len(texts)):
            stats: dict[str, int] = {}
            rows, scores = top_k(matrix["data"], matrix["indices"], matrix["indptr"], maxima, terms, k, stats)
            assert list(zip(rows.tolist(), scores.tolist(), strict=True)) == _exhaustive(model, terms, k), (query, k)
            pruned += k == 7 and stats["read"] < sum(np.diff(matrix["indptr"])[t] for t in set(terms))
    assert pruned > 75, "the common terms' postings should mostly be probed, not read"
    assert top_k(matrix["data"], matrix["indices"], matrix["indptr"], maxima, [], 5)[0].size == 0
    assert index.search(["zeppelin"]) == [[]] and index.search([""]) == [[]]


def test_shard_writer_cuts_fixed_shards_from_any_batches(tmp_path: Path) -> None:
    vectors = np.arange(12 * 3, dtype=np.float32).reshape(12, 3)
    added: list[np.ndarray] = []
    writer = ShardWriter(tmp_path, shard_size=5, on_shard=added.append)
    for start in (0, 3, 6, 9):  # batches of 3 across shards of 5
        writer.add(vectors[start : start + 3])
    assert writer.close() == 3
    assert [len(a) for a in added] == [5, 5, 2]
    assert [np.load(p).shape[0] for p in sorted((tmp_path / "embeddings").iterdir())] == [5, 5, 2]
    reader = EmbeddingReader(tmp_path)
    assert np.array_equal(reader.all(), vectors) and np.array_equal(np.concatenate(added), vectors)
    for start, stop in ((0, 12), (4, 11), (5, 10), (9, 10), (11, 12), (3, 3)):
        assert np.array_equal(reader.rows(start, stop), vectors[start:stop]), (start, stop)


def test_doc_texts_read_back_exactly_and_pickle(tmp_path: Path) -> None:
    import pickle

    texts = ["Paris is the capital of France.", "", "é ✓ 漢字", "a lone \ud800 surrogate from JSON"]
    writer = DocTextWriter(tmp_path)
    writer.add(texts[:3])
    writer.add(texts[3:])
    writer.close()
    stored = DocTexts(tmp_path, ["a", "b", "c", "d"])
    assert [stored[k] for k in "abcd"] == texts and list(stored) == ["a", "b", "c", "d"] and len(stored) == 4
    assert stored.get("zz") is None and "c" in stored
    assert dict(pickle.loads(pickle.dumps(stored))) == dict(stored)  # reopened, not a pickled memory map
    with pytest.raises(ValueError, match="4 texts for 3 doc ids"):
        DocTexts(tmp_path, ["a", "b", "c"])


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_benchmark(tmp_path_factory.mktemp("toy")) / "toy_corpus.jsonl"


def test_streaming_build_equals_the_in_memory_build(toy: Path, tmp_path: Path, tiny_encoder_dir: Path) -> None:
    """Batches of 3 documents, shards of 5 (12 documents: shards 5, 5, 2, a batch across each boundary): BM25
    scores, vectors, FAISS answers and stored texts equal building from the whole corpus at once."""
    from veracity.infer.retrieval.dense import DenseEncoder, DenseIndex, FaissParams

    settings = IndexSettings(embedder=str(tiny_encoder_dir), faiss_kind="flat", stem=True, stream_batch=3,
                             shard_size=5, progress=False)
    index = load_index(build_index(toy, tmp_path / "idx", settings))
    docs = [json.loads(line) for line in toy.read_text().splitlines()]
    ids, texts = [d["doc_id"] for d in docs], [document_text(d, include_title=True) for d in docs]
    queries = [json.loads(line)["text"] for line in toy.with_name("toy_queries.jsonl").read_text().splitlines()]

    reference = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    reference.index([settings.analyzer_obj()(t) for t in texts], show_progress=False)
    assert _postings(index.sparse.model) == _postings(reference)
    in_memory = BM25Index.build(ids, texts, settings.analyzer_obj(), settings.bm25_params())
    assert index.sparse.search(queries, k=12) == in_memory.search(queries, k=12)

    encoder = DenseEncoder(settings.encoder_spec())
    whole = encoder.encode_documents(texts)
    assert [np.load(p).shape[0] for p in sorted((tmp_path / "idx" / "embeddings").iterdir())] == [5, 5, 2]
    np.testing.assert_allclose(read_embeddings(tmp_path / "idx"), whole, atol=1e-6)
    exact = DenseIndex.from_vectors(whole, ids, FaissParams("flat"))
    vectors = encoder.encode_queries(queries)
    for got, expected in zip(index.dense.search_vectors(vectors, 12), exact.search_vectors(vectors, 12), strict=True):
        assert [d for d, _ in got] == [d for d, _ in expected]
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-5)
    stored = index.texts()
    assert dict(stored) == dict(zip(ids, texts, strict=True)) and stored["d07"] == texts[6]

    # vectors reused across another shard size (rows read across shard boundaries) are the same vectors
    again = IndexSettings(**{**settings.__dict__, "shard_size": 4, "stream_batch": 5,
                             "reuse_embeddings": str(tmp_path / "idx")})
    build_index(toy, tmp_path / "again", again, encoder=encoder)
    assert np.array_equal(read_embeddings(tmp_path / "again"), read_embeddings(tmp_path / "idx"))
    assert len(list((tmp_path / "again" / "embeddings").iterdir())) == 3


def test_a_format_1_folder_still_loads(toy: Path, tmp_path: Path, tiny_encoder_dir: Path) -> None:
    """Format 1 (one embeddings.npy, no text store): search, texts from the corpus, and reuse of its vectors."""
    settings = IndexSettings(embedder=str(tiny_encoder_dir), faiss_kind="flat", progress=False)
    folder = build_index(toy, tmp_path / "v2", settings)
    expected = load_index(folder)
    old = tmp_path / "v1"
    shutil.copytree(folder, old)
    np.save(old / "embeddings.npy", read_embeddings(old))
    shutil.rmtree(old / "embeddings")
    (old / "texts.bin").unlink()
    (old / "text_offsets.npy").unlink()
    meta = json.loads((old / "index_meta.json").read_text())
    (old / "index_meta.json").write_text(json.dumps({**meta, "format_version": 1}))
    index = load_index(old)
    assert index.sparse.search(["capital of France"]) == expected.sparse.search(["capital of France"])
    assert dict(index.texts()) == dict(expected.texts())
    reuse = IndexSettings(**{**settings.__dict__, "reuse_embeddings": str(old)})
    reused = build_index(toy, tmp_path / "reused", reuse, encoder=expected.encoder)
    assert np.array_equal(read_embeddings(reused), read_embeddings(folder))
    (old / "index_meta.json").write_text(json.dumps({**meta, "format_version": 3}))
    with pytest.raises(ValueError, match="index format 3"):
        load_index(old)
