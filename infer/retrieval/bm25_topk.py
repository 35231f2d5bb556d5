"""Exact BM25 top-k over a term-major score matrix without scoring the whole corpus (pure, numpy only).

bm25s answers a query by adding the query terms' posting lists into a score array of one float per document and
partitioning that array: every query costs O(corpus size), ~20 ms at a million documents. Here only documents
that can still enter the top k are scored, MaxScore style (Turtle & Flood 1995):

1. Each term's upper bound is its largest score in the matrix (times its repeats in the query). Terms are taken
   in decreasing bound order (the rare, discriminative ones first); their posting lists are merged into a
   candidate set with partial scores.
2. Once the k-th best partial score (a lower bound of the final k-th score) exceeds the sum of the bounds of the
   terms not yet taken, a document outside the candidate set cannot reach the top k: the remaining (common)
   terms' long posting lists are never scanned, only probed for the candidates by binary search, and after each
   term a candidate whose partial score plus the bounds still to come falls below the k-th best is dropped.
3. The few candidates left near the top k are scored exactly as bm25s scores them: float32 sums in query-token
   order, repeats counted again, so the scores are bm25s's bit for bit. Ties are broken by row (bm25s leaves
   their order to its partition).

Bounds are compared with a relative margin far above float32 rounding, so pruning never drops a document that an
exhaustive scan would rank in the top k.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MARGIN = 1e-5  # relative; float32 sums of a few terms are off by ~1e-7


def column_maxima(data: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """The largest score of each term (column); 0 for a term without postings."""
    starts, filled = indptr[:-1], np.diff(indptr) > 0
    maxima = np.zeros(len(starts), dtype=np.float32)
    if filled.any():
        maxima[filled] = np.maximum.reduceat(data, starts[filled])
    return maxima


def _merge(rows: np.ndarray, partial: np.ndarray, posting: np.ndarray,
           values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of two ascending row lists with their values summed per row (a stable sort of two sorted runs is one
    linear merge)."""
    if len(rows) == 0:
        return posting.astype(np.int64), values.astype(np.float64)
    merged_rows, merged_values = np.concatenate([rows, posting]), np.concatenate([partial, values])
    order = np.argsort(merged_rows, kind="stable")
    merged_rows, merged_values = merged_rows[order], merged_values[order]
    first = np.flatnonzero(np.r_[True, merged_rows[1:] != merged_rows[:-1]])
    return merged_rows[first], np.add.reduceat(merged_values, first)


def _probe(posting: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which ``rows`` are in the ascending ``posting`` (mask), and where."""
    if len(posting) == 0 or len(rows) == 0:
        return np.zeros(len(rows), dtype=bool), np.zeros(len(rows), dtype=np.int64)
    at = np.minimum(np.searchsorted(posting, rows), len(posting) - 1)
    return posting[at] == rows, at


def _kth(values: np.ndarray, k: int) -> float:
    """A lower bound of the k-th best final score, from partial scores (0 while there are fewer than k)."""
    if len(values) < k:
        return 0.0
    return float(np.partition(values, len(values) - k)[len(values) - k]) * (1 - MARGIN)


def _ranked(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (row, score) by score, then row."""
    if len(rows) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth  # every tie of the k-th score, so the row order decides among them
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


def top_k(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, maxima: np.ndarray,
          query_terms: Sequence[int], k: int, stats: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best documents of one query: rows and float32 scores, best first, only positive scores.

    Args:
        data, indices, indptr: the CSC score matrix (column = term; rows ascending within a column), as bm25s
            stores it in ``BM25.scores``.
        maxima: :func:`column_maxima` of the matrix.
        query_terms: the query's term ids in query order, repeats included; ids without a column are ignored.
        k: how many documents at most.
        stats: if given, gets ``read`` (posting entries merged whole) and ``scored`` (documents scored exactly).
    """
    terms = np.asarray([t for t in query_terms if 0 <= t < len(indptr) - 1], dtype=np.int64)
    if len(terms) == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    unique, repeats = np.unique(terms, return_counts=True)
    bounds = maxima[unique].astype(np.float64) * repeats
    order = np.argsort(-bounds, kind="stable")
    unique, repeats, bounds = unique[order], repeats[order], bounds[order]
    remaining = np.append(np.cumsum(bounds[::-1])[::-1][1:], 0.0)  # bound of the terms after each one
    rows, partial = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    read, essential = 0, len(unique)
    for j, (term, repeat, rest) in enumerate(zip(unique, repeats, remaining, strict=True)):
        start, stop = indptr[term], indptr[term + 1]
        read += int(stop - start)
        rows, partial = _merge(rows, partial, indices[start:stop], data[start:stop] * float(repeat))
        if len(rows) >= k and _kth(partial, k) > rest * (1 + MARGIN):
            essential = j + 1  # no document outside ``rows`` can reach the top k
            break
    for j in range(essential, len(unique)):  # the other terms: probe the candidates, drop the hopeless ones
        start, stop = indptr[unique[j]], indptr[unique[j] + 1]
        hit, at = _probe(indices[start:stop], rows)
        partial[hit] += data[start:stop][at[hit]] * float(repeats[j])
        keep = (partial + remaining[j]) * (1 + MARGIN) >= _kth(partial, k)
        rows, partial = rows[keep], partial[keep]
    if len(rows) > k:  # ``partial`` is now each candidate's whole score, up to float rounding
        rows = rows[partial * (1 + MARGIN) >= _kth(partial, k)]
    if stats is not None:
        stats.update(read=read, scored=len(rows))
    scores = np.zeros(len(rows), dtype=np.float32)
    for term in terms:  # bm25s's order of float32 additions: query order, repeats again
        start, stop = indptr[term], indptr[term + 1]
        hit, at = _probe(indices[start:stop], rows)
        scores[hit] += data[start:stop][at[hit]]
    return _ranked(rows, scores, k)
