"""CPU inference of a transformers encoder through ONNX Runtime: exported once, cached with the model's fingerprint.

``NLIVerifier`` (and any sequence-classification cross-encoder of the same shape) can run as an ONNX graph instead
of torch: on these CPUs that removes torch's per-op overhead, and dynamic INT8 quantization of the linear layers
(``onnxruntime.quantization.quantize_dynamic``) roughly halves the work again. The export is made on first use
and kept in ``<cache>/onnx/<fingerprint>/`` with a ``fingerprint.txt``: a model retrained in place
gets a new fingerprint, so its old graph is never found, and a graph whose recorded fingerprint does not match
(a stale or hand-copied file) is rebuilt, never used.
"""

from __future__ import annotations

import logging
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


def export(model: Any, tokenizer: Any, target: Path, fingerprint: str) -> Path:
    """Write ``model.onnx`` (fp32, dynamic batch and sequence axes) and ``model.int8.onnx`` (dynamic INT8
    quantization of its MatMuls) into ``target``, with ``fingerprint.txt``; atomically (all or nothing)."""
    import torch  # lazy, as onnxruntime: seconds, and only an export needs them
    from onnxruntime.quantization import QuantType, quantize_dynamic

    sample = tokenizer(["a premise"], ["a claim"], return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
    axes = {n: {0: "batch", 1: "sequence"} for n in names}

    class Logits(torch.nn.Module):  # the graph returns the logits alone
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, inputs, strict=True))).logits

    with atomic_directory(target, f"ONNX export of {fingerprint}") as tmp:
        fp32 = Path(tmp) / FILES["onnx"]
        with torch.inference_mode():
            torch.onnx.export(Logits(model.eval()), tuple(sample[n] for n in names), str(fp32), input_names=names,
                              output_names=["logits"], dynamic_axes={**axes, "logits": {0: "batch"}},
                              opset_version=17, dynamo=False)
        # per-channel weights, and 7-bit ranges: without VNNI (AVX2-only CPUs such as these) the u8×s8 products
        # saturate at 8 bits (ONNX Runtime's quantization guide)
        quantize_dynamic(str(fp32), str(Path(tmp) / FILES["onnx_int8"]), weight_type=QuantType.QInt8,
                         per_channel=True, reduce_range=True)
        (Path(tmp) / "fingerprint.txt").write_text(fingerprint + "\n")
    logger.info("exported %s to ONNX (fp32 + INT8) in %s", fingerprint, target)
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


def export_model(folder: Path) -> Path:
    """Export the sequence-classification model in ``folder`` (both graphs) unless current ones exist."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer  # lazy: seconds, for an export

    fingerprint = model_fingerprint(folder)
    target = onnx_dir(folder, fingerprint)
    if not is_current(target, fingerprint):
        model = AutoModelForSequenceClassification.from_pretrained(folder)
        export(model, AutoTokenizer.from_pretrained(folder), target, fingerprint)
    return target


class OnnxClassifier:
    """An ONNX Runtime session over an exported cross-encoder: ``logits(batch)`` from tokenizer outputs."""

    def __init__(self, path: Path, threads: int | None = None):
        import onnxruntime as ort  # lazy: 0.2 s, only an ONNX backend needs it

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def logits(self, batch: dict[str, Any]) -> np.ndarray:
        feed = {name: np.asarray(batch[name], dtype=np.int64) for name in self.inputs}
        return self.session.run(None, feed)[0]
