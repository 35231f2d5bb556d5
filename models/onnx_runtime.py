"""CPU inference of a transformers encoder through ONNX Runtime: exported once, cached with the model's fingerprint.

``NLIVerifier`` (any sequence-classification cross-encoder) and ``DenseEncoder`` (a sentence-transformers encoder)
can run as an ONNX graph instead of torch: on these CPUs that removes torch's per-op overhead, and dynamic INT8
quantization of the linear layers (``onnxruntime.quantization.quantize_dynamic``) roughly halves the work again.
The export is made on first use and kept in ``<cache>/onnx/<fingerprint>/`` with a ``fingerprint.txt``: a model
retrained in place gets a new fingerprint, so its old graph is never found, and a graph whose recorded
fingerprint does not match (a stale or hand-copied file) is rebuilt, never used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from veracity.io import atomic_directory
from veracity.models.fingerprint import model_fingerprint
from veracity.models.paths import cache_dir

logger = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "onnx_int8")
FILES = {"onnx": "model.onnx", "onnx_int8": "model.int8.onnx"}


def onnx_dir(folder: Path, fingerprint: str) -> Path:
    """Where the ONNX graphs of the model with ``fingerprint`` live: by content, so a copy of the model (an installed
    verifier) finds the graphs of its original, and a retrained one never does."""
    return cache_dir() / "onnx" / fingerprint


INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def export(model: Any, sample: dict[str, Any], target: Path, fingerprint: str,
           head: Callable[[Any, dict[str, Any]], Any]) -> Path:
    """Write ``model.onnx`` (fp32, dynamic batch and sequence axes) and ``model.int8.onnx`` (dynamic INT8
    quantization of its MatMuls) into ``target``, with ``fingerprint.txt``; atomically (all or nothing).

    ``sample`` is one tokenizer output (PyTorch tensors); ``head(model, features)`` is the tensor the graph returns:
    a cross-encoder's logits (:func:`classifier_head`) or an encoder's sentence embeddings (:func:`encoder_head`).
    """
    import torch  # lazy, as onnxruntime: seconds, and only an export needs them
    from onnxruntime.quantization import QuantType, quantize_dynamic

    names = [n for n in INPUT_NAMES if n in sample]
    axes = {n: {0: "batch", 1: "sequence"} for n in names}

    class Graph(torch.nn.Module):  # positional inputs in, the head's one tensor out
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return head(self.inner, dict(zip(names, inputs, strict=True)))

    with atomic_directory(target, f"ONNX export of {fingerprint}") as tmp:
        fp32 = Path(tmp) / FILES["onnx"]
        with torch.inference_mode():
            torch.onnx.export(Graph(model.eval()), tuple(sample[n] for n in names), str(fp32), input_names=names,
                              output_names=["output"], dynamic_axes={**axes, "output": {0: "batch"}},
                              opset_version=17, dynamo=False)
        # per-channel weights, and 7-bit ranges: without VNNI (AVX2-only CPUs such as these) the u8×s8 products
        # saturate at 8 bits (ONNX Runtime's quantization guide)
        quantize_dynamic(str(fp32), str(Path(tmp) / FILES["onnx_int8"]), weight_type=QuantType.QInt8,
                         per_channel=True, reduce_range=True)
        (Path(tmp) / "fingerprint.txt").write_text(fingerprint + "\n")
    logger.info("exported %s to ONNX (fp32 + INT8) in %s", fingerprint, target)
    return target


def classifier_head(model: Any, features: dict[str, Any]) -> Any:
    """A sequence-classification model's logits."""
    return model(**features).logits


def encoder_head(model: Any, features: dict[str, Any]) -> Any:
    """A sentence-transformers model's sentence embeddings (its pooling and any normalization inside the graph)."""
    return model(features)["sentence_embedding"]


def current_graphs(folder: Path, build: Callable[[Path, str], Any]) -> Path:
    """The folder of the graphs of the model in ``folder`` (by its weights' fingerprint), made by
    ``build(target, fingerprint)`` first when they are missing or stale: an old graph is rebuilt, never used."""
    fingerprint = model_fingerprint(folder)
    target = onnx_dir(folder, fingerprint)
    if not is_current(target, fingerprint):
        logger.info("exporting %s to ONNX (once)", folder)
        build(target, fingerprint)
    return target


def is_current(target: Path, fingerprint: str) -> bool:
    """Whether ``target`` holds both graphs made from the weights with ``fingerprint``."""
    stamp = target / "fingerprint.txt"
    return (stamp.is_file() and stamp.read_text().strip() == fingerprint
            and all((target / name).is_file() for name in FILES.values()))


def has_onnx(folder: Path) -> bool:
    """Whether the model in ``folder`` has current ONNX graphs (its fingerprint's folder, complete)."""
    fingerprint = model_fingerprint(folder)
    return is_current(onnx_dir(folder, fingerprint), fingerprint)


def export_model(folder: Path, model: Any = None, tokenizer: Any = None) -> Path:
    """Export the sequence-classification model in ``folder`` (both graphs) unless current ones exist; ``model``
    and ``tokenizer``: the ones already loaded from ``folder``."""

    def build(target: Path, fingerprint: str) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer  # lazy: seconds, for an export

        classifier = model if model is not None else AutoModelForSequenceClassification.from_pretrained(folder)
        pairs = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(folder)
        sample = dict(pairs(["a premise"], ["a claim"], return_tensors="pt"))  # one (premise, claim) pair
        export(classifier, sample, target, fingerprint, classifier_head)

    return current_graphs(folder, build)


def export_encoder(folder: Path, model: Any = None) -> Path:
    """Export the sentence-transformers encoder in ``folder`` (both graphs, returning its normalized or pooled
    sentence embedding) unless current ones exist; ``model``: the encoder already loaded from ``folder``."""

    def build(target: Path, fingerprint: str) -> None:
        from sentence_transformers import SentenceTransformer  # lazy: seconds, for an export

        encoder = model if model is not None else SentenceTransformer(str(folder), device="cpu")
        export(encoder, dict(encoder.preprocess(["a sentence"])), target, fingerprint, encoder_head)

    return current_graphs(folder, build)


class OnnxSession:
    """An ONNX Runtime session over an exported graph: ``run(batch)`` from tokenizer outputs (logits or
    embeddings, whichever head it was exported with)."""

    def __init__(self, path: Path, threads: int | None = None):
        import onnxruntime as ort  # lazy: 0.2 s, only an ONNX backend needs it

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def run(self, batch: dict[str, Any]) -> np.ndarray:
        feed = {name: np.asarray(batch[name], dtype=np.int64) for name in self.inputs}
        return self.session.run(None, feed)[0]
