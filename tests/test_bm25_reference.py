"""BM25 against an independent implementation: ``rank_bm25.BM25Okapi`` on the same tokens with the same k1 and b.

Our BM25 (``infer/retrieval/sparse.py``) is bm25s with ``method="lucene"``: per query token (repeats count again)

    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))                  (always > 0)
    tf part = tf / (tf + k1 * (1 - b + b * |d| / avgdl))          (Lucene >= 8 dropped the (k1 + 1) numerator)

``BM25Okapi`` scores idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl)) with its own IDF,
ln((N - df + 0.5) / (df + 0.5)), floored at 0.25 x the mean IDF for terms in more than half of the documents.
So: give BM25Okapi Lucene's IDF (computed here from document frequencies) and its scores are exactly (k1 + 1) x
ours, the same ranking; with its stock IDF the per-term scores differ by the IDF ratio and nothing else.
The analyzer is shared on purpose (the same tokens go to both): this checks the scoring and the ranking.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest
from rank_bm25 import BM25Okapi

from veracity.infer.retrieval.analyzers import Analyzer
from veracity.infer.retrieval.sparse import BM25Index, BM25Params

ANALYZER = Analyzer(stem=True)
# Hand-made: lengths differ (so scores do not tie), some terms repeat in a document, "climate" is in 5 of 8
# documents (BM25Okapi's stock IDF is negative there and floored), "ice" in 4 of 8 (stock IDF exactly 0).
CORPUS = {
    "a": "The glacier retreats as the climate warms; the glacier lost most of its ice.",
    "b": "Climate change raises the sea level.",
    "c": "Sea ice in the Arctic melts earlier each year as the climate warms, and polar bears lose sea ice.",
    "d": "Coral reefs bleach when ocean heat stays high.",
    "e": "A glacier is a persistent body of dense ice.",
    "f": "Climate models project more ocean heat, more coral bleaching and a higher sea level.",
    "g": "Paris is the capital of France.",
    "h": "Climate: the long-term weather of a region; ice ages are a climate extreme.",
}
QUERIES = [
    "glacier ice",
    "climate",  # a term in more than half of the documents
    "glacier glacier climate",  # a repeated query term counts twice in both
    "ocean heat coral bleaching sea",
    "sea level climate change",
    "zeppelin climate",  # an unknown term scores nothing
    "zeppelin",  # nothing matches: no hits
]


def tokens(texts: list[str]) -> list[list[str]]:
    return [ANALYZER(text) for text in texts]


def lucene_idf(corpus_tokens: list[list[str]]) -> dict[str, float]:
    n, df = len(corpus_tokens), Counter(t for doc in corpus_tokens for t in set(doc))
    return {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}


def lucene_okapi(corpus_tokens: list[list[str]], k1: float, b: float) -> BM25Okapi:
    """BM25Okapi with bm25s's Lucene IDF: its scores are (k1 + 1) x bm25s-lucene's."""
    reference = BM25Okapi(corpus_tokens, k1=k1, b=b)
    reference.idf = lucene_idf(corpus_tokens)
    return reference


def reference_ranking(reference: BM25Okapi, doc_ids: list[str], query_tokens: list[str],
                      k1: float) -> list[tuple[str, float]]:
    """Documents with a positive reference score, best first, scores divided by (k1 + 1); refuses ties (the test
    data is made so that the order is unique)."""
    scores = reference.get_scores(query_tokens) / (k1 + 1)
    ranked = sorted(((doc_ids[i], float(s)) for i, s in enumerate(scores) if s > 0), key=lambda hit: -hit[1])
    assert len({round(s, 6) for _, s in ranked}) == len(ranked), f"tied scores for {query_tokens}: fix the data"
    return ranked


def assert_same_ranking(ours: list[tuple[str, float]], expected: list[tuple[str, float]], query: str) -> None:
    assert [d for d, _ in ours] == [d for d, _ in expected], query
    # bm25s stores and sums float32: relative 1e-5 is ~100 float32 ulps, far below a changed k1, b or IDF
    assert [s for _, s in ours] == pytest.approx([s for _, s in expected], rel=1e-5, abs=1e-6), query


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (1.2, 0.6), (0.9, 0.3)])
def test_bm25_ranks_and_scores_as_bm25okapi_with_lucene_idf(k1: float, b: float, tmp_path: Path) -> None:
    doc_ids, texts = list(CORPUS), list(CORPUS.values())
    reference = lucene_okapi(tokens(texts), k1, b)
    index = BM25Index.build(doc_ids, texts, ANALYZER, BM25Params(k1=k1, b=b))
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25", doc_ids)
    for query in QUERIES:
        expected = reference_ranking(reference, doc_ids, ANALYZER(query), k1)
        for ours in (index, loaded):
            assert_same_ranking(ours.search([query], k=len(doc_ids))[0], expected, query)
            assert_same_ranking(ours.search([query], k=2)[0], expected[:2], query)  # top-k is a prefix
    assert loaded.params == BM25Params(k1=k1, b=b, method="lucene")
    assert index.search(["zeppelin"])[0] == []


def test_stock_bm25okapi_differs_only_by_its_idf() -> None:
    """The known difference, exactly: per term, stock BM25Okapi / ours = (k1 + 1) x stock IDF / Lucene IDF."""
    k1, b = 1.5, 0.75
    doc_ids, corpus_tokens = list(CORPUS), tokens(list(CORPUS.values()))
    stock, idf = BM25Okapi(corpus_tokens, k1=k1, b=b), lucene_idf(corpus_tokens)
    index = BM25Index.build(doc_ids, list(CORPUS.values()), ANALYZER, BM25Params(k1=k1, b=b))
    climate, ice = ANALYZER("climate")[0], ANALYZER("ice")[0]
    assert stock.idf[climate] == pytest.approx(0.25 * stock.average_idf)  # df 5 of 8: floored at eps x mean
    assert stock.idf[ice] == 0.0 and idf[ice] > 0  # df 4 of 8: stock IDF 0, the term counts for nothing there
    words = {word: ANALYZER(word)[0] for text in CORPUS.values() for word in re.findall(r"\w+", text)
             if ANALYZER(word)}
    assert set(words.values()) == set(idf), "every indexed term is checked"
    for word, term in sorted(words.items()):
        ours = dict(index.search([word], k=len(doc_ids))[0])
        expected = stock.get_scores([term]) * idf[term] / ((k1 + 1) * stock.idf[term]) if stock.idf[term] else None
        if expected is None:
            assert ours and all(s > 0 for s in ours.values()), word
            continue
        assert {d: s for d, s in zip(doc_ids, expected, strict=True) if s > 0} == pytest.approx(ours, rel=1e-5), word
