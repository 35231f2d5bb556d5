"""Cross-encoder reranking of a fused candidate list.

Two backends behind one class: a transformers folder (``config.json``; e.g. BAAI/bge-reranker-v2-m3, loaded
with sentence-transformers' CrossEncoder) and an ONNX folder (``model.onnx`` + ``tokenizer.json``; the embedded
INT8 ms-marco-MiniLM-L-12-v2), run with onnxruntime directly.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from veracity.infer.retrieval.fusion import Hits
from veracity.models.device import resolve_device
from veracity.models.fingerprint import content_id
from veracity.models.loading import loading_deferred
from veracity.models.registry import resolve_model

logger = logging.getLogger(__name__)


class _OnnxCrossEncoder:
    def __init__(self, folder: Path, max_length: int):
        import onnxruntime as ort  # lazy: 0.2 s, only this backend needs it
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # two cores: thread contention costs more than it gives
        self.session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.no_padding()  # batches are padded to their own longest pair (see predict)
        self.input_names = {i.name for i in self.session.get_inputs()}

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> np.ndarray:
        """Scores in input order. Pairs are batched by token length, each batch padded only to its longest pair:
        a batch of mixed lengths would spend most of its time on padding (batched was slower than one pair at a
        time before; ``bench/sciclaim_rerank.py``)."""
        encoded = self.tokenizer.encode_batch(list(pairs)) if pairs else []
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        scores = np.zeros(len(encoded), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            width = max(len(encoded[i].ids) for i in batch)
            feed = {name: np.zeros((len(batch), width), dtype=np.int64)
                    for name in ("input_ids", "attention_mask", "token_type_ids")}
            for row, i in enumerate(batch):
                e, n = encoded[i], len(encoded[i].ids)
                feed["input_ids"][row, :n], feed["attention_mask"][row, :n] = e.ids, e.attention_mask
                feed["token_type_ids"][row, :n] = e.type_ids
            logits = self.session.run(None, {k: v for k, v in feed.items() if k in self.input_names})[0]
            scores[batch] = logits.reshape(len(batch), -1)[:, 0]
        return scores


class _HFCrossEncoder:
    def __init__(self, folder: Path, max_length: int, device: str):
        from sentence_transformers import CrossEncoder  # lazy, as torch: seconds to import
        from torch import nn

        self.model = CrossEncoder(str(folder), device=resolve_device(device), max_length=max_length)
        # raw logits, as the ONNX backend returns: a sigmoid would change how scores mix with others (min–max sums)
        self.raw_logits = nn.Identity()

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int) -> np.ndarray:
        scores = self.model.predict(list(pairs), batch_size=batch_size, show_progress_bar=False,
                                    activation_fn=self.raw_logits)
        scores = np.asarray(scores)
        return scores if scores.ndim == 1 else scores[:, -1]


def reranker_id(model: str) -> str:
    """How run records name the cross-encoder ``model`` (folder and content fingerprint), without loading it: a
    resume under another cross-encoder is refused before any model loads."""
    return content_id(resolve_model("reranker", model))


class CrossEncoderReranker:
    """Scores (query, document) pairs; higher is more relevant."""

    def __init__(self, model: str = "embedded", max_length: int = 512, batch_size: int = 32, device: str = "auto"):
        """``device`` (:mod:`veracity.models.device`) places a transformers cross-encoder; an ONNX one (the
        embedded reranker) runs on the CPU through ONNX Runtime. The model loads now, or on first use when built
        under :func:`~veracity.models.loading.deferred_loading`."""
        self.folder = resolve_model("reranker", model)
        self.batch_size, self.max_length = batch_size, max_length
        self.device = resolve_device(device)
        if not ((self.folder / "config.json").exists() or (self.folder / "model.onnx").exists()):
            raise FileNotFoundError(f"{self.folder} holds neither a transformers model nor model.onnx")
        self._backend: _OnnxCrossEncoder | _HFCrossEncoder | None = None
        if not loading_deferred():
            self.load()

    def load(self) -> _OnnxCrossEncoder | _HFCrossEncoder:
        """The scoring backend, loaded unless loaded: a transformers cross-encoder, else the folder's model.onnx."""
        if self._backend is None:
            if (self.folder / "config.json").exists():
                self._backend = _HFCrossEncoder(self.folder, self.max_length, self.device)
            else:
                self._backend = _OnnxCrossEncoder(self.folder, self.max_length)
        return self._backend

    @property
    def backend(self) -> _OnnxCrossEncoder | _HFCrossEncoder:
        return self.load()

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return self.backend.predict([(query, t) for t in texts], self.batch_size)

    def rerank(self, query: str, hits: Hits, texts: dict[str, str], top_n: int) -> Hits:
        """Re-score the first ``top_n`` hits; the rest keep their order below them."""
        head, tail = hits[:top_n], hits[top_n:]
        if not head:
            return list(hits)
        scores = self.score(query, [texts[doc] for doc, _ in head])
        order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
        return [(head[i][0], float(scores[i])) for i in order] + list(tail)
