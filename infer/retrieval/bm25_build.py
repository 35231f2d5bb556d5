"""A streaming BM25 build: documents go in chunk by chunk, a ``bm25s.BM25`` comes out.

``bm25s.BM25.index`` wants every document's token list at once: at a million paragraphs that is ~80M Python
strings (several GiB) before it starts. Here each chunk is analyzed, mapped to term ids and reduced to compact
``(term id, tf)`` pairs per document (8 bytes a pair); only those pairs, the document lengths and the vocabulary
stay in memory. :meth:`BM25Builder.finish` turns them into the same CSC score matrix bm25s builds, score for score
(the same float32 values from the same float64 formulas: bm25s's own IDF and term-frequency functions are called),
and returns a ``bm25s.BM25`` that saves, loads and searches like one bm25s indexed itself. Only the term ids
differ: bm25s numbers its vocabulary in set order, this builder in order of first appearance.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import bm25s
import numpy as np
from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer  # bm25s's formulas, so scores stay identical
from scipy import sparse as sp

from veracity.infer.retrieval.analyzers import Analyzer

logger = logging.getLogger(__name__)
# Scores are computed over this many matrix entries at a time: bounds the float64 temporaries (~100 MB).
SCORE_BLOCK = 1 << 22
# bm25l and bm25+ add a per-query non-occurrence term that this builder does not compute.
STREAMABLE_METHODS = ("robertson", "lucene", "atire")


class BM25Builder:
    """Accumulates BM25 statistics over chunks of documents (rows in the order they are added)."""

    def __init__(self, analyzer: Analyzer, k1: float = 1.5, b: float = 0.75, method: str = "lucene"):
        if method not in STREAMABLE_METHODS:
            raise ValueError(f"streaming BM25 supports methods {STREAMABLE_METHODS}, not {method!r}")
        self.analyzer, self.k1, self.b, self.method = analyzer, k1, b, method
        self.vocab: dict[str, int] = {}
        self._terms: list[np.ndarray] = []  # per chunk: term id of each (document, distinct term) pair
        self._tfs: list[np.ndarray] = []  # per chunk: how often that term occurs in that document
        self._pairs: list[np.ndarray] = []  # per chunk: distinct terms per document
        self._lengths: list[np.ndarray] = []  # per chunk: tokens per document (repeats count, as in bm25s)

    @property
    def documents(self) -> int:
        return int(sum(len(lengths) for lengths in self._lengths))

    def add(self, texts: Iterable[str]) -> None:
        """Analyze one chunk of documents and keep its term statistics."""
        vocab = self.vocab
        ids: list[int] = []
        lengths: list[int] = []
        for text in texts:
            tokens = self.analyzer(text)
            lengths.append(len(tokens))
            ids.extend([vocab.setdefault(token, len(vocab)) for token in tokens])
        if not lengths:
            return
        n, width = len(lengths), max(len(vocab), 1)
        doc = np.repeat(np.arange(n, dtype=np.int64), lengths)
        keys, tf = np.unique(doc * width + np.asarray(ids, dtype=np.int64), return_counts=True)  # doc-major
        self._terms.append((keys % width).astype(np.int32))
        self._tfs.append(tf.astype(np.float32))
        self._pairs.append(np.bincount(keys // width, minlength=n).astype(np.int64))
        self._lengths.append(np.asarray(lengths, dtype=np.int64))

    def finish(self) -> bm25s.BM25:
        """The BM25 model over every document added; the accumulated statistics are released."""
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int64)
        if not lengths.any():
            raise ValueError("no indexable terms in the corpus (every document is empty after analysis)")
        n_docs, n_vocab = len(lengths), len(self.vocab)
        indptr = np.zeros(n_docs + 1, dtype=np.int64)
        np.cumsum(np.concatenate(self._pairs), out=indptr[1:])
        terms, tfs = np.concatenate(self._terms), np.concatenate(self._tfs)
        self._terms, self._tfs, self._pairs, self._lengths = [], [], [], []
        # document-major pairs → term-major (CSC): scipy's counting sort keeps rows ascending within each term
        by_term = sp.csr_matrix((tfs, terms, indptr), shape=(n_docs, n_vocab)).tocsc()
        del terms, tfs
        data, rows = by_term.data, by_term.indices.astype(np.int32, copy=False)
        col_ptr = by_term.indptr.astype(np.int64)
        del by_term
        df = np.diff(col_ptr)
        idf_of = _select_idf_scorer(self.method)
        idf = np.array([idf_of(int(d), N=n_docs) for d in df], dtype=np.float32)
        tfc_of = _select_tfc_scorer(self.method)
        avg_len = lengths.mean()  # float64, as bm25s takes it
        for start in range(0, len(data), SCORE_BLOCK):
            stop = min(start + SCORE_BLOCK, len(data))
            cols = np.searchsorted(col_ptr, np.arange(start, stop), side="right") - 1
            tfc = tfc_of(tf_array=data[start:stop], l_d=lengths[rows[start:stop]].astype(np.float64), l_avg=avg_len,
                         k1=self.k1, b=self.b)
            data[start:stop] = idf[cols] * tfc  # float64 product stored as float32, as bm25s stores it
        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        model.scores = {"data": data, "indices": rows, "indptr": col_ptr, "num_docs": n_docs}
        vocab = self.vocab
        vocab.setdefault("", n_vocab)  # bm25s's empty token (id past the last column), so saved vocabularies agree
        model.vocab_dict, model.unique_token_ids_set, model.nonoccurrence_array = vocab, set(vocab.values()), None
        self.vocab = {}
        logger.info("BM25: %d documents, %d terms, %d postings", n_docs, n_vocab, len(data))
        return model
