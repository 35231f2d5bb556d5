"""CPU inference of a transformers encoder through ONNX Runtime: exported once, cached with the model's fingerprint.

``NLIVerifier`` (any sequence-classification cross-encoder) and ``DenseEncoder`` (a sentence-transformers encoder)
can run as an ONNX graph instead of torch: on these CPUs that removes torch's per-op overhead, and dynamic INT8
quantization of the linear layers (``onnxruntime.quantization.quantize_dynamic``) roughly halves the work again.
A BERT-family graph is exported with eager attention and fused by ONNX Runtime's transformer optimizer (one
``Attention`` node per layer, ``EmbedLayerNormalization``, ``SkipLayerNormalization``, ``BiasGelu``) before it is
quantized, so INT8 gets ``QAttention`` too. The export is made on first use and kept in
``<cache>/onnx/<fingerprint>-export<version>-int<bits>/`` with a ``fingerprint.txt`` (the weights' fingerprint and the
export recipe): a model retrained in place gets a new fingerprint, so its old graph is never found; another export
version or another CPU's INT8 range (nodes with and without VNNI sharing a cache) gets a folder of its own, so no
node replaces the graphs another reads; and a graph whose recorded fingerprint or recipe does not match (a stale or
hand-copied file) is rebuilt, never used. One process exports a folder at a time (a lock file beside it): a second
exporter waits, then finds the graphs made.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from veracity.io import atomic_directory
from veracity.models.fingerprint import content_id, model_fingerprint
from veracity.models.paths import cache_dir

logger = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "onnx_int8")
FILES = {"onnx": "model.onnx", "onnx_int8": "model.int8.onnx"}


@dataclass(frozen=True)
class GraphCache:
    """Where a runtime keeps the graphs it makes from a model, by the weights' fingerprint: ``folder(fingerprint)``
    (under ``<cache>/<runtime>/``), the ``fingerprint.txt`` text a current folder holds (the fingerprint and the
    runtime's ``recipe()``), and the graph files it must hold."""

    folder: Callable[[str], Path]
    recipe: Callable[[], str]
    files: tuple[str, ...]

    def stamp(self, fingerprint: str) -> str:
        return f"{fingerprint}\n{self.recipe()}\n"

    def is_current(self, target: Path, fingerprint: str) -> bool:
        """Whether ``target`` holds every graph, made from the weights with ``fingerprint`` by this recipe."""
        recorded = target / "fingerprint.txt"
        return (recorded.is_file() and recorded.read_text() == self.stamp(fingerprint)
                and all((target / name).is_file() for name in self.files))


def onnx_dir(folder: Path, fingerprint: str) -> Path:
    """Where the ONNX graphs of the model with ``fingerprint`` live: by content, so a copy of the model (an installed
    verifier) finds the graphs of its original, and a retrained one never does; and by this machine's export recipe,
    so a node with another INT8 range never rebuilds (deletes) the graphs a node sharing the cache reads."""
    return cache_dir() / "onnx" / f"{fingerprint}-export{EXPORT_VERSION}-int{int8_bits()}"


INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# Architectures whose graphs ONNX Runtime's BERT fusion is checked on (tests/test_nli_onnx.py: the fused graph scores
# as torch does); others are exported unfused.
FUSED_MODEL_TYPES = ("bert",)
EXPORT_VERSION = 2  # 2: eager attention + BERT fusion, INT8 range by CPU; 1: SDPA export, unfused, 7-bit INT8


@cache
def has_vnni() -> bool:
    """Whether this CPU has VNNI (AVX512-VNNI or AVX-VNNI), read from ``/proc/cpuinfo``; False where unknown."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def int8_bits() -> int:
    """The range of this machine's INT8 weights. Without VNNI the u8×s8 products of dynamic quantization saturate at
    8 bits, so weights get 7-bit ranges (``reduce_range``; ONNX Runtime's quantization guide); with VNNI full 8-bit
    ranges are exact and score closer to fp32."""
    return 8 if has_vnni() else 7


def recipe() -> str:
    """How this machine exports: the export version and the INT8 range."""
    return f"export {EXPORT_VERSION}, int8 per-channel, reduce_range={int8_bits() == 7}"


ONNX_GRAPHS = GraphCache(lambda fingerprint: onnx_dir(Path(), fingerprint), recipe, tuple(FILES.values()))


def graph_tag(backend: str) -> str:
    """What names the graph of ``backend`` in a model id: the export version, and the INT8 weights' range."""
    bits = f"-int{int8_bits()}" if backend == "onnx_int8" else ""
    return f"{backend}@export{EXPORT_VERSION}{bits}"


def backend_model_id(folder: Path, backend: str) -> str:
    """How run records name a model run by ``backend``: the folder with its content fingerprint, and for an ONNX
    backend the graph's export (an INT8 graph scores differently). Computed without loading the model, so a
    resume under other weights is refused before any model loads."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose {', '.join(BACKENDS)}")
    return content_id(folder) + ("" if backend == "torch" else f"+{graph_tag(backend)}")


def stamp(fingerprint: str) -> str:
    """The content of ``fingerprint.txt`` for a graph of the weights with ``fingerprint`` made by :func:`recipe`."""
    return ONNX_GRAPHS.stamp(fingerprint)


def transformer_of(model: Any) -> Any:
    """The transformers model inside ``model`` (itself, or a sentence-transformers encoder's ``auto_model``)."""
    from transformers import PreTrainedModel  # lazy: seconds, and only an export needs it

    return next(m for m in model.modules() if isinstance(m, PreTrainedModel))


def eager_copy(model: Any) -> tuple[Any, Any]:
    """A copy of ``model`` with eager (matmul + softmax) attention, the pattern ONNX Runtime's fusion recognises
    (the SDPA export it does not), and its transformers config. A copy, because tracing a model with
    ``torch.onnx.export`` leaves that model's own torch forward wrong afterwards (transformers 5.24, SDPA, padded
    inputs: logits off by 0.43), and the caller may go on scoring with it."""
    import copy

    twin = copy.deepcopy(model)
    inner = transformer_of(twin)
    inner.set_attn_implementation("eager")
    return twin, inner.config


def fuse(path: Path, config: Any) -> None:
    """Rewrite the graph at ``path`` with ONNX Runtime's transformer fusions when its architecture is in
    :data:`FUSED_MODEL_TYPES` (Python fusion only, ``opt_level=0``: no CPU-specific nodes in the file)."""
    if config.model_type not in FUSED_MODEL_TYPES:
        return
    from onnxruntime.transformers.optimizer import optimize_model  # lazy, as onnxruntime

    graph = optimize_model(str(path), model_type="bert", num_heads=config.num_attention_heads,
                           hidden_size=config.hidden_size, opt_level=0)
    graph.save_model_to_file(str(path))


def export(model: Any, sample: dict[str, Any], target: Path, fingerprint: str,
           head: Callable[[Any, dict[str, Any]], Any]) -> Path:
    """Write ``model.onnx`` (fp32, dynamic batch and sequence axes; fused, see :func:`fuse`) and ``model.int8.onnx``
    (dynamic INT8 quantization of its MatMuls and attention) into ``target``, with ``fingerprint.txt``
    (:func:`stamp`); atomically (all or nothing).

    ``sample`` is one tokenizer output (PyTorch tensors); ``head(model, features)`` is the tensor the graph returns:
    a cross-encoder's logits (:func:`classifier_head`) or an encoder's sentence embeddings (:func:`encoder_head`).
    """
    import onnx
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
        twin, config = eager_copy(model)
        with torch.inference_mode():
            torch.onnx.export(Graph(twin.eval()), tuple(sample[n] for n in names), str(fp32), input_names=names,
                              output_names=["output"], dynamic_axes={**axes, "output": {0: "batch"}},
                              opset_version=17, dynamo=False)
        fuse(fp32, config)
        # per-channel weights; the fused nodes carry no type information the quantizer can infer: float
        quantize_dynamic(str(fp32), str(Path(tmp) / FILES["onnx_int8"]), weight_type=QuantType.QInt8,
                         per_channel=True, reduce_range=int8_bits() == 7,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        (Path(tmp) / "fingerprint.txt").write_text(stamp(fingerprint))
    logger.info("exported %s to ONNX (fp32 + INT8) in %s", fingerprint, target)
    return target


def classifier_head(model: Any, features: dict[str, Any]) -> Any:
    """A sequence-classification model's logits."""
    return model(**features).logits


def encoder_head(model: Any, features: dict[str, Any]) -> Any:
    """A sentence-transformers model's sentence embeddings (its pooling and any normalization inside the graph)."""
    return model(features)["sentence_embedding"]


def current_graphs(folder: Path, build: Callable[[Path, str], Any], graphs: GraphCache | None = None) -> Path:
    """The folder of the graphs of the model in ``folder`` (by its weights' fingerprint; ``graphs``: which
    runtime's, ONNX Runtime's by default), made by ``build(target, fingerprint)`` first when they are missing or
    stale: an old graph is rebuilt, never used."""
    graphs = graphs or ONNX_GRAPHS
    fingerprint = model_fingerprint(folder)
    target = graphs.folder(fingerprint)
    if graphs.is_current(target, fingerprint):
        return target
    with export_lock(target):
        if not graphs.is_current(target, fingerprint):  # another process may have made it while this one waited
            logger.info("exporting %s to %s (once)", folder, target.parent.name)
            build(target, fingerprint)
    return target


@contextlib.contextmanager
def export_lock(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<target>.lock`` until the block ends, waiting for it: processes sharing a cache
    export a graph folder one at a time (two at once would rename over each other: ENOTEMPTY, or a deleted folder
    another one reads). The file stays (an empty file in the cache), so every process locks the same inode."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target.with_name(target.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def is_current(target: Path, fingerprint: str) -> bool:
    """Whether ``target`` holds both ONNX graphs made from the weights with ``fingerprint`` by this machine's
    :func:`recipe`."""
    return ONNX_GRAPHS.is_current(target, fingerprint)


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
        """``threads``: intra-op threads; by default ``OMP_NUM_THREADS`` where it is set, as torch reads it (a Ray
        actor gets its CPU count there: two actors on two cores then run a thread each, not two), else ONNX
        Runtime's own choice (the physical cores)."""
        import onnxruntime as ort  # lazy: 0.2 s, only an ONNX backend needs it

        options = ort.SessionOptions()
        omp = os.environ.get("OMP_NUM_THREADS", "")
        threads = threads or (int(omp) if omp.isdigit() else None)
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def run(self, batch: dict[str, Any]) -> np.ndarray:
        feed = {name: np.asarray(batch[name], dtype=np.int64) for name in self.inputs}
        return self.session.run(None, feed)[0]
