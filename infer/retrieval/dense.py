"""Dense retrieval: a sentence-transformers encoder and a FAISS inner-product index (exact or HNSW).

Vectors are L2-normalized, so inner product = cosine. Queries and documents may carry different prefixes
(multilingual-e5-large-instruct wants an instruction before queries only;
docs/pipelines/sciclaimseekers.md#how-it-works). On a CPU the encoder can run as an ONNX graph (``backend``:
``onnx`` fp32, ``onnx_int8`` dynamically quantized; models/onnx_runtime.py), exported on first use and cached by
the weights' fingerprint; bench/encoder.py measures the three backends side by side.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from veracity.infer.retrieval.fusion import Hits
from veracity.infer.retrieval.gpu import to_cpu, to_gpu_if_available
from veracity.logs import quiet_unless_asked
from veracity.models.device import resolve_device
from veracity.models.loading import loading_deferred
from veracity.models.onnx_runtime import BACKENDS, OnnxSession, backend_model_id, export_encoder
from veracity.models.onnx_runtime import FILES as ONNX_FILES
from veracity.models.registry import model_fingerprint, resolve_model

logger = logging.getLogger(__name__)

E5_INSTRUCT_QUERY_PREFIX = (
    "Instruct: Given a social media post that paraphrases a scientific finding, retrieve the scientific paper it "
    "refers to.\nQuery: "
)


@dataclass(frozen=True)
class EncoderSpec:
    """Which encoder and how it is fed. ``model`` is a role name, local path or hub id (models.registry);
    ``backend`` is torch, onnx or onnx_int8 (the ONNX ones on the CPU only)."""

    model: str = "embedded"
    query_prefix: str = ""
    doc_prefix: str = ""
    max_length: int = 256
    batch_size: int = 64
    backend: str = "torch"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown encoder backend {self.backend!r}; choose {', '.join(BACKENDS)}")


def encoder_id(spec: EncoderSpec) -> str:
    """How run records name the encoder of ``spec`` (folder, content fingerprint, ONNX graph), without loading it:
    a resume under another encoder is refused before any model loads (:attr:`DenseEncoder.model_id` is the same)."""
    return backend_model_id(resolve_model("embedder", spec.model), spec.backend)


class DenseEncoder:
    """Batched, normalized sentence embeddings."""

    def __init__(self, spec: EncoderSpec, show_progress: bool = False, device: str = "auto"):
        """``device`` (:mod:`veracity.models.device`) places the torch encoder; the ONNX backends run on the CPU.
        The model loads now, or on first use when built under :func:`~veracity.models.loading.deferred_loading`;
        used from Python, as quietly as on the command line (:func:`veracity.logs.quiet_unless_asked`)."""
        quiet_unless_asked()
        self.spec = spec
        self.folder = resolve_model("embedder", spec.model)
        self.fingerprint = model_fingerprint(self.folder)
        self.device = "cpu" if spec.backend != "torch" else resolve_device(device)
        self.show_progress = show_progress
        self._model: Any = None
        self._onnx: OnnxSession | None = None
        if not loading_deferred():
            self.load()

    def load(self) -> Any:
        """Load the model (and the ONNX graph of an ONNX backend) unless loaded; the sentence-transformers model."""
        if self._model is None:
            from sentence_transformers import SentenceTransformer  # lazy: seconds (torch); BM25 alone does without

            model = SentenceTransformer(str(self.folder), device=self.device)
            model.max_seq_length = self.spec.max_length
            if self.spec.backend != "torch":
                self._onnx = OnnxSession(export_encoder(self.folder, model) / ONNX_FILES[self.spec.backend])
            self._model = model
        return self._model

    @property
    def model(self) -> Any:
        return self.load()

    @property
    def onnx(self) -> OnnxSession | None:
        self.load()
        return self._onnx

    @property
    def dim(self) -> int:
        return int(self.model.get_embedding_dimension())

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        if self.onnx is not None:
            return self._encode_onnx([prefix + t for t in texts])
        vectors = self.model.encode(
            [prefix + t for t in texts], batch_size=self.spec.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=self.show_progress,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _encode_onnx(self, texts: list[str]) -> np.ndarray:
        """The ONNX graph's embeddings, batched by length (less padding) like sentence-transformers' ``encode``,
        L2-normalized, in input order."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda k: -len(texts[k]))
        for start in range(0, len(order), self.spec.batch_size):
            idx = order[start : start + self.spec.batch_size]
            features = self.model.preprocess([texts[k] for k in idx])
            out[idx] = self.onnx.run(features)  # the graph's inputs only (np.asarray of CPU tensors)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.ascontiguousarray(out / np.maximum(norms, 1e-12), dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.spec.query_prefix)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, self.spec.doc_prefix)

    def describe(self) -> dict[str, object]:
        return {**asdict(self.spec), "fingerprint": self.fingerprint, "dim": self.dim}


def embed_shard(encoder: DenseEncoder, texts: Sequence[str]) -> np.ndarray:
    """The vectors of one batch of document texts: float32, ``(len(texts), encoder.dim)``, L2-normalized, the
    document prefix applied.

    The only model work of an index build, and a pure function of the encoder and the texts: no index, file or
    row number involved. ``build_index`` calls it on each ``stream_batch``; a distributed executor (a Ray Data
    actor that loads the encoder once in ``__init__``) can map it over batches of the corpus instead, and the
    results go to disk through ``store.ShardWriter`` as the shards an index folder holds.
    """
    vectors = encoder.encode_documents(texts)
    if vectors.shape != (len(texts), encoder.dim):
        raise ValueError(f"encoder returned {vectors.shape} for {len(texts)} texts of dim {encoder.dim}")
    return np.ascontiguousarray(vectors, dtype=np.float32)


@dataclass(frozen=True)
class FaissParams:
    kind: str = "hnsw"  # "flat" (exact) or "hnsw"
    m: int = 32
    ef_construction: int = 200
    ef_search: int = 128

    def __post_init__(self) -> None:
        if self.kind not in ("flat", "hnsw"):
            raise ValueError(f"faiss kind must be 'flat' or 'hnsw', got {self.kind!r}")


def new_faiss_index(dim: int, params: FaissParams) -> faiss.Index:
    if params.kind == "flat":
        return faiss.IndexFlatIP(dim)
    index = faiss.IndexHNSWFlat(dim, params.m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = params.ef_construction
    index.hnsw.efSearch = params.ef_search
    return index


class DenseIndex:
    """FAISS index over document vectors, rows aligned with ``doc_ids``."""

    def __init__(self, index: faiss.Index, params: FaissParams, doc_ids: list[str]):
        if index.ntotal != len(doc_ids):
            raise ValueError(f"faiss index holds {index.ntotal} vectors for {len(doc_ids)} doc ids")
        self.index, self.params, self.doc_ids = index, params, doc_ids

    @classmethod
    def from_vectors(cls, vectors: np.ndarray, doc_ids: Sequence[str], params: FaissParams) -> DenseIndex:
        index = new_faiss_index(vectors.shape[1], params)
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        return cls(to_gpu_if_available(index), params, list(doc_ids))

    def set_ef_search(self, ef_search: int) -> None:
        if self.params.kind == "hnsw":
            self.index.hnsw.efSearch = ef_search

    def search_vectors(self, vectors: np.ndarray, k: int = 100) -> list[Hits]:
        k = min(k, len(self.doc_ids))
        if k == 0 or len(vectors) == 0:
            return [[] for _ in range(len(vectors))]
        scores, indices = self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        return [
            [(self.doc_ids[i], float(s)) for i, s in zip(row_i, row_s, strict=True) if i >= 0]
            for row_i, row_s in zip(indices, scores, strict=True)
        ]

    def save(self, path: Path) -> None:
        faiss.write_index(to_cpu(self.index), str(path))

    @classmethod
    def load(cls, path: Path, params: FaissParams, doc_ids: list[str]) -> DenseIndex:
        index = to_gpu_if_available(faiss.read_index(str(path)))  # searched on a GPU where there is one (not HNSW)
        dense = cls(index, params, doc_ids)
        dense.set_ef_search(params.ef_search)
        return dense
