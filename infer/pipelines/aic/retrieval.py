"""AIC retrieval: a per-claim exact FAISS index over chunk texts (cached safely), k nearest → MMR → l sources;
few-shot examples by BM25 over the train claims.

The cache folder of a claim holds ``index.faiss`` (``faiss.write_index``: a plain binary format, no code) and
``chunks.json`` (the chunks with their metadata, plus what the index was built from: the store file's
fingerprint, the chunk size, and what changes a vector: the encoder's fingerprint, document prefix and input
length). Anything that differs rebuilds the index; nothing is ever unpickled (the public AIC code loads LangChain
stores through pickle).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from veracity.infer.pipelines.aic.store import Chunk
from veracity.infer.retrieval.fusion import mmr
from veracity.infer.retrieval.sparse import BM25Index
from veracity.io import atomic_writer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetrievedSource:
    chunk: Chunk
    similarity: float  # cosine similarity to the claim
    mmr_score: float  # MMR score when picked

    def to_dict(self) -> dict[str, Any]:
        return {**self.chunk.to_dict(), "similarity": round(self.similarity, 6), "mmr_score": round(self.mmr_score, 6)}


def select_sources(query: np.ndarray, index: Any, chunks: Sequence[Chunk], k: int = 40, lambda_: float = 0.75,
                   top: int = 10) -> list[RetrievedSource]:
    """The ``k`` nearest chunks from the claim's exact FAISS index, re-ranked by MMR down to ``top`` sources.

    Vectors are L2-normalized, so inner product = cosine; MMR (``fusion.mmr``) weighs similarity to the claim
    against similarity to the sources already picked, λ : (1 − λ).
    """
    if index is None or index.ntotal == 0:
        return []
    scores, ids = index.search(np.ascontiguousarray(query[None, :], dtype=np.float32), min(k, index.ntotal))
    keep = ids[0] >= 0
    ids, scores = ids[0][keep], scores[0][keep]
    vectors = np.stack([index.reconstruct(int(i)) for i in ids])
    similarity = {int(i): float(s) for i, s in zip(ids, scores, strict=True)}
    picked = mmr(query, vectors, [str(int(i)) for i in ids], lambda_=lambda_, top=top)
    return [RetrievedSource(chunks[int(i)], similarity[int(i)], score) for i, score in picked]


class ClaimIndexCache:
    """Per-claim FAISS exact indexes under ``root/<claim_id>/``, rebuilt when their inputs change.

    ``encoder``: a ``DenseEncoder`` (or anything with its ``fingerprint``, ``spec.doc_prefix``, ``spec.max_length``
    and ``encode_documents``)."""

    def __init__(self, root: str | Path, encoder: Any, max_chars: int):
        self.root, self.encoder, self.max_chars = Path(root), encoder, max_chars
        self.built = self.reused = 0

    def _meta(self, store_fingerprint: str) -> dict[str, Any]:
        """What the cached vectors depend on: the claim's documents, the chunking, and everything that changes a
        chunk's vector — the encoder's weights (fingerprint), the prefix put before each chunk, the input length
        it is cut at (as ``infer/retrieval/index.py`` checks a built index) and the runtime (INT8 moves vectors). A
        run at another ``embed_max_length`` must not read chunk vectors encoded at this one."""
        spec = self.encoder.spec
        return {"store": store_fingerprint, "encoder": self.encoder.fingerprint, "max_chars": self.max_chars,
                "doc_prefix": spec.doc_prefix, "max_length": spec.max_length, "backend": spec.backend,
                "index": "faiss.IndexFlatIP over L2-normalized chunk-text embeddings"}

    def load(self, claim_id: str, store_fingerprint: str) -> tuple[list[Chunk], Any] | None:
        folder = self.root / _safe_name(claim_id)
        try:
            saved = json.loads((folder / "chunks.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if saved.get("meta") != self._meta(store_fingerprint):
            return None
        chunks = [Chunk.from_dict(c) for c in saved["chunks"]]
        if not chunks:
            return chunks, None
        try:
            index = faiss.read_index(str(folder / "index.faiss"))
        except RuntimeError:
            return None
        return (chunks, index) if index.ntotal == len(chunks) else None

    def get(self, claim_id: str, store_fingerprint: str, make_chunks: Any) -> tuple[list[Chunk], Any]:
        """A claim's cached chunks and FAISS index (None without chunks), or ``make_chunks()`` embedded, indexed
        and saved."""
        cached = self.load(claim_id, store_fingerprint)
        if cached is not None:
            self.reused += 1
            return cached
        chunks = make_chunks()
        folder = self.root / _safe_name(claim_id)
        folder.mkdir(parents=True, exist_ok=True)
        index = None
        if chunks:
            vectors = self.encoder.encode_documents([c.text for c in chunks])  # chunk text only, no metadata
            index = faiss.IndexFlatIP(vectors.shape[1])
            index.add(vectors)
            faiss.write_index(index, str(folder / "index.faiss.tmp"))
            (folder / "index.faiss.tmp").replace(folder / "index.faiss")
        with atomic_writer(folder / "chunks.json") as handle:  # written last: it is what marks the folder valid
            json.dump({"meta": self._meta(store_fingerprint), "chunks": [c.to_dict() for c in chunks]}, handle,
                      ensure_ascii=False)
        self.built += 1
        return chunks, index


def _safe_name(claim_id: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(claim_id))


class FewShotSelector:
    """BM25 over the train claims; a train claim with the same text as the query is never an example."""

    def __init__(self, train_claims: Sequence[Any]):
        self.claims = [c for c in train_claims if c.questions]
        self.index = BM25Index.build([str(k) for k in range(len(self.claims))], [c.claim for c in self.claims])

    def select(self, claim: str, count: int) -> list[Any]:
        if count <= 0:
            return []
        same = claim.strip().lower()
        hits = self.index.search([claim], k=min(len(self.claims), count + 3))[0]
        chosen = [self.claims[int(doc)] for doc, _ in hits if self.claims[int(doc)].claim.strip().lower() != same]
        return chosen[:count]
