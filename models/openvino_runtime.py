"""CPU inference of a sequence-classification model through OpenVINO: fp32, and static INT8 quantized by NNCF.

ONNX Runtime's INT8 (``models/onnx_runtime.py``) quantizes weights only and the activations on the fly, batch by
batch; OpenVINO's INT8 is static: NNCF's post-training quantization (``nncf.quantize``, transformer preset: smooth
quant, fast bias correction) fixes the activations' ranges once on calibration pairs, so every matrix product runs
in INT8 (measured: bench/r2vc.py, docs/results.md#verifier-backends). The calibration pairs are WordNet's glosses and
example sentences (:func:`wordnet_pairs`): the same on every machine, no dataset needed, and none of the data a
verifier is evaluated on. WordNet comes from the Debian packages ``scripts/setup.sh`` installs (METEOR reads it too).

The model is converted from torch (``openvino.convert_model``, eager attention, dynamic batch and sequence axes)
on first use and kept like the ONNX graphs: in ``<cache>/openvino/<fingerprint>-ov<version>/`` with a
``fingerprint.txt`` naming the weights, the export version, the calibration and the OpenVINO / NNCF versions; a
folder whose record does not match is rebuilt, never used. Inference precision is fp32 outside the INT8 products
(``INFERENCE_PRECISION_HINT``): a CPU with bf16 would otherwise run the rest in bf16 and score differently.

``openvino_cascade`` scores every pair with the INT8 graph and re-scores with the fp32 graph the pairs whose INT8
probabilities leave the top label less than :data:`CASCADE_MARGIN` ahead of the next (:class:`CascadeSession`):
INT8 moves a label only where the two are close, so those few pairs get fp32's answer and the rest INT8's speed.
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from veracity.io import atomic_directory
from veracity.models.onnx_runtime import INPUT_NAMES, GraphCache, current_graphs, eager_copy
from veracity.models.paths import cache_dir

logger = logging.getLogger(__name__)

BACKENDS = ("openvino", "openvino_int8", "openvino_cascade")
FILES = {"openvino": "model.xml", "openvino_int8": "model.int8.xml"}  # the cascade runs both
EXPORT_VERSION = 1
CALIBRATION_PAIRS = 300  # NNCF's default subset size
# The cascade's top-two probability gap below which INT8's answer is re-scored in fp32: the smallest of 0.05, 0.10,
# 0.15, … that kept every source's accuracy on the installed verifier's calib split within 0.01 of torch fp32
# (docs/experiment-log.md#openvino-int8-with-an-fp32-second-look-issue-47); about 8% of pairs are re-scored.
CASCADE_MARGIN = 0.10


def ov_dir(fingerprint: str) -> Path:
    """Where the OpenVINO graphs of the weights with ``fingerprint`` live."""
    return cache_dir() / "openvino" / f"{fingerprint}-ov{EXPORT_VERSION}"


def recipe() -> str:
    """How graphs are made here: the export version, the INT8 calibration, and the library versions (another
    quantizer may choose other ranges)."""
    return (f"openvino export {EXPORT_VERSION}; int8: nncf.quantize, transformer preset, {CALIBRATION_PAIRS} WordNet "
            f"pairs; openvino {version('openvino')}, nncf {version('nncf')}")


GRAPHS = GraphCache(ov_dir, recipe, tuple(FILES.values()))


def graph_tag(backend: str) -> str:
    """What names the graph of ``backend`` in a model id: the export version, the INT8 calibration, and the
    cascade's margin."""
    int8 = f"-wordnet{CALIBRATION_PAIRS}" if backend in ("openvino_int8", "openvino_cascade") else ""
    margin = f"-margin{CASCADE_MARGIN:g}" if backend == "openvino_cascade" else ""
    return f"{backend}@ov{EXPORT_VERSION}{int8}{margin}"


def wordnet_pairs(count: int = CALIBRATION_PAIRS) -> list[tuple[str, str]]:
    """``count`` (premise, hypothesis) pairs of English sentences for calibration, the same on every machine: the
    premise a WordNet synset's gloss and example sentences, the hypothesis one of its examples (two pairs in three)
    or another synset's (one in three), synsets taken at even steps through WordNet 3.0.

    Raises:
        NLTKDataError: WordNet is not installed (the message names the apt packages).
    """
    from veracity.models.nltk_data import ensure_nltk_data

    ensure_nltk_data()
    from nltk.corpus import wordnet  # lazy: nltk takes 1.5 s to import

    synsets = [s for s in wordnet.all_synsets() if s.examples()]
    step = len(synsets) // count
    pairs = []
    for i in range(count):
        own = synsets[i * step]
        other = synsets[(i * step + 7919) % len(synsets)]
        premise = " ".join(f"{text[:1].upper()}{text[1:]}." for text in (own.definition(), *own.examples()))
        example = (other if i % 3 == 0 else own).examples()[-1]
        pairs.append((premise, f"{example[:1].upper()}{example[1:]}."))
    return pairs


def export_openvino(folder: Path, model: Any, tokenizer: Any, max_length: int, truncation: str = "only_first") -> Path:
    """The folder of the OpenVINO graphs of the sequence-classification ``model`` loaded from ``folder`` (fp32 and
    INT8), made first when missing or stale; the calibration pairs are tokenized as the verifier feeds its inputs
    (``max_length``, ``truncation``)."""

    def build(target: Path, fingerprint: str) -> None:
        import nncf  # lazy: seconds to import, and only a build needs it
        import openvino as ov
        import torch

        pairs = wordnet_pairs()
        encoded = [dict(tokenizer([p], [h], truncation=truncation, max_length=max_length, return_tensors="pt"))
                   for p, h in pairs]
        names = [n for n in INPUT_NAMES if n in encoded[0]]

        class Logits(torch.nn.Module):  # named inputs in, logits out
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
                extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
                return self.inner(input_ids=input_ids, attention_mask=attention_mask, **extra).logits

        twin, _ = eager_copy(model)
        with torch.inference_mode():
            graph = ov.convert_model(Logits(twin.eval()), example_input={n: encoded[0][n] for n in names},
                                     input={n: ([-1, -1], ov.Type.i64) for n in names})
        data = nncf.Dataset(encoded, lambda features: {n: features[n].numpy() for n in names})
        quantized = nncf.quantize(graph, data, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(pairs))
        with atomic_directory(target, f"OpenVINO export of {fingerprint}") as tmp:
            ov.save_model(graph, str(Path(tmp) / FILES["openvino"]))
            ov.save_model(quantized, str(Path(tmp) / FILES["openvino_int8"]))
            (Path(tmp) / "fingerprint.txt").write_text(GRAPHS.stamp(fingerprint))
        logger.info("exported %s to OpenVINO (fp32 + INT8) in %s", fingerprint, target)

    return current_graphs(Path(folder), build, GRAPHS)


class OpenVINOSession:
    """A compiled OpenVINO model on the CPU: ``run(batch)`` from tokenizer outputs → logits, as
    :class:`~veracity.models.onnx_runtime.OnnxSession`."""

    def __init__(self, path: Path, threads: int | None = None):
        """``threads``: inference threads; by default ``OMP_NUM_THREADS`` where it is set (as torch and the ONNX
        sessions read it), else OpenVINO's own choice."""
        import openvino as ov  # lazy: only an OpenVINO backend needs it

        omp = os.environ.get("OMP_NUM_THREADS", "")
        threads = threads or (int(omp) if omp.isdigit() else None)
        config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        self.model = ov.Core().compile_model(str(path), "CPU", config)
        self.inputs = [port.get_any_name() for port in self.model.inputs]

    def run(self, batch: dict[str, Any]) -> np.ndarray:
        feed = {name: np.asarray(batch[name], dtype=np.int64) for name in self.inputs}
        return np.asarray(self.model(feed)[0])


def top_two_gap(logits: np.ndarray) -> np.ndarray:
    """Per row of ``logits`` ``(n, labels)``: the softmax probability of the top label minus the runner-up's."""
    from scipy.special import softmax  # lazy: 0.12 s to import, and only the cascade needs it

    ranked = np.sort(softmax(np.asarray(logits, dtype=np.float64), axis=1), axis=1)
    return ranked[:, -1] - ranked[:, -2]


class CascadeSession:
    """INT8 first, fp32 for the close calls: ``run(batch)`` scores the batch with ``int8`` and re-scores with
    ``fp32`` the rows whose INT8 top-two probability gap is below ``margin`` (cut to their own longest input);
    ``scored`` and ``rescored`` count rows, ``last_rescored`` those of the last batch."""

    def __init__(self, int8: OpenVINOSession, fp32: OpenVINOSession, margin: float = CASCADE_MARGIN):
        self.int8, self.fp32, self.margin = int8, fp32, margin
        self.scored = self.rescored = self.last_rescored = 0

    def run(self, batch: dict[str, Any]) -> np.ndarray:
        logits = np.array(self.int8.run(batch), dtype=np.float32)
        close = np.flatnonzero(top_two_gap(logits) < self.margin)
        if close.size:
            rows = {name: np.asarray(values)[close] for name, values in batch.items()}
            if "attention_mask" in rows:  # drop the columns that are padding in every re-scored row
                used = rows["attention_mask"].any(axis=0)
                rows = {name: values[:, used] for name, values in rows.items()}
            logits[close] = self.fp32.run(rows)
        self.last_rescored = int(close.size)
        self.scored += len(logits)
        self.rescored += self.last_rescored
        return logits


def openvino_session(graphs: Path, backend: str) -> OpenVINOSession | CascadeSession:
    """The session of ``backend`` over the graphs in ``graphs`` (:func:`export_openvino`)."""
    if backend == "openvino_cascade":
        int8, fp32 = (OpenVINOSession(graphs / FILES[name]) for name in ("openvino_int8", "openvino"))
        return CascadeSession(int8, fp32)
    return OpenVINOSession(graphs / FILES[backend])
