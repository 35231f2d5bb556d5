"""The NLI verifier as a model: (premise, hypothesis) → probabilities of entailment, neutral, contradiction.

Loads any 3-way sequence-classification folder (the embedded verifier veracity trains, or
``cross-encoder/nli-deberta-v3-large`` at real scale) and feeds it the way it was trained: label order from
``id2label``; article titles, ``max_length`` and the truncation side from the ``veracity_*`` keys ``train nli``
writes into ``config.json`` (``veracity_truncation``: ``only_first`` cuts the premise and keeps the claim whole;
veracity verifiers older than the key were trained that way too; other models get ``longest_first``, the
tokenizers' default). Inputs are scored in length-sorted batches, each distinct pair once per call.

A premise longer than the token budget is not truncated: it is split into overlapping, sentence-packed windows
that each fit (tokens are counted, not sentences), every window is scored, and the windows are aggregated —
entailment and contradiction are the max over windows (one window that settles the claim is enough), neutral the
min, renormalised. How many inputs were split is reported in :attr:`NLIVerifier.stats`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veracity.data_prep.schema import NLI_LABELS, NLI_TO_TERNARY, to_nli
from veracity.io import without_lone_surrogates
from veracity.logs import quiet_unless_asked
from veracity.models import openvino_runtime
from veracity.models.device import resolve_device
from veracity.models.fingerprint import content_id
from veracity.models.loading import loading_deferred
from veracity.models.onnx_runtime import BACKENDS as ONNX_BACKENDS
from veracity.models.onnx_runtime import FILES as ONNX_FILES
from veracity.models.onnx_runtime import OnnxSession, backend_model_id, export_model
from veracity.models.openvino_runtime import CascadeSession, OpenVINOSession, export_openvino, openvino_session
from veracity.models.registry import resolve_model

logger = logging.getLogger(__name__)
# Verifiers trained before train nli recorded its input settings were all trained at 128 tokens, premise side
# truncated (the three shipped recipes); other models (hub cross-encoders) get their tokenizer's limit.
LEGACY_VERACITY_MAX_LENGTH = 128
LEGACY_VERACITY_TRUNCATION = "only_first"
TRUNCATIONS = ("only_first", "only_second", "longest_first")  # what a tokenizer's `truncation` accepts by name
# The backend ``auto`` picks on a CPU (bench/r2vc.py measures the three: docs/results.md#verifier-backends).
DEFAULT_CPU_BACKEND = "onnx"


# torch; ONNX Runtime fp32 and dynamic INT8; OpenVINO fp32, static INT8, and INT8 with fp32 for the close calls
# (all but torch on the CPU only)
BACKENDS = (*ONNX_BACKENDS, *openvino_runtime.BACKENDS)
Session = OnnxSession | OpenVINOSession | CascadeSession  # a graph backend's: run(batch) -> logits


def verifier_model_id(folder: Path, backend: str) -> str:
    """How run records name the verifier in ``folder`` run by ``backend``: the folder with its content
    fingerprint, and for a graph backend the graph's export (an INT8 graph scores differently)."""
    if backend in openvino_runtime.BACKENDS:
        return f"{content_id(folder)}+{openvino_runtime.graph_tag(backend)}"
    return backend_model_id(folder, backend)


def resolve_backend(backend: str, device: str = "cpu") -> str:
    """The verifier backend ``backend`` names on ``device``: ``auto`` is :data:`DEFAULT_CPU_BACKEND` on a CPU (its
    graph exported on first use) and torch elsewhere — by the device alone, never by whether a graph is cached
    yet, so a run and its resume name the same verifier."""
    if backend not in ("auto", *BACKENDS):
        raise ValueError(f"unknown verifier backend {backend!r}; choose auto, {', '.join(BACKENDS)}")
    if backend == "auto":
        return DEFAULT_CPU_BACKEND if device == "cpu" else "torch"
    if backend != "torch" and device != "cpu":
        raise ValueError(f"the {backend} backend runs on the CPU; use backend torch on {device}")
    return backend


def verifier_device(backend: str, device: str = "auto") -> str:
    """The torch device a verifier with ``backend`` runs on for ``--device`` ``device`` (resolved): ONNX Runtime is
    a CPU backend, so ``auto`` means the CPU for it."""
    return resolve_device("cpu" if backend not in ("auto", "torch") and device == "auto" else device)


def verifier_id(model: str, backend: str = "auto", device: str = "auto") -> str:
    """The verifier's model id (:attr:`NLIVerifier.model_id`) from its options, without loading it: what a run
    checks a resume against before any model loads."""
    device = verifier_device(backend, device)
    return verifier_model_id(Path(resolve_model("nli_verifier", model)), resolve_backend(backend, device))
_END_PUNCTUATION = re.compile(r"(?<=[.!?])\s+(?=\S)")


def split_at_end_punctuation(text: str) -> list[str]:
    """Pieces of ``text`` cut after ``.``, ``?`` or ``!`` and a space: where a premise window may end.

    Not the project's sentence splitter (``veracity.data_prep.text.split_sentences``, Punkt): a piece only bounds a
    window that is packed by token count, so a cut after "Mr." costs at most a window boundary there, and every
    windowed verifier score the tables of docs/results.md were measured with rests on these cuts.
    """
    return [s for s in _END_PUNCTUATION.split(text.strip()) if s]


def pack_windows(sentences: Sequence[str], lengths: Sequence[int], budget: int, overlap: int = 1) -> list[list[int]]:
    """Group sentence indices into consecutive windows of at most ``budget`` tokens, ``overlap`` sentences shared.

    A sentence longer than the budget forms a window of its own (the caller cuts it by tokens).

    Args:
        sentences: the sentences (only their count is used; lengths carry the sizes).
        lengths: tokens of each sentence (a separating space counted in).
        budget: tokens per window.
        overlap: sentences repeated at the start of the next window, so a fact spanning a boundary is seen whole.
    """
    windows: list[list[int]] = []
    start = 0
    while start < len(sentences):
        end, used = start, 0
        while end < len(sentences) and (end == start or used + lengths[end] <= budget):
            used += lengths[end]
            end += 1
        windows.append(list(range(start, end)))
        if end >= len(sentences):
            break
        start = max(end - overlap, start + 1)
    return windows


def aggregate_windows(probabilities: np.ndarray) -> np.ndarray:
    """One row from the rows of a premise's windows: max entailment, min neutral, max contradiction, renormalised."""
    probabilities = np.asarray(probabilities, dtype=float)
    row = np.array([probabilities[:, 0].max(), probabilities[:, 1].min(), probabilities[:, 2].max()])
    return row / row.sum()


@dataclass
class VerifierStats:
    """What the last calls did: pairs asked, distinct pairs scored, premises split into windows, forward rows, rows
    the cascade backend re-scored in fp32."""

    pairs: int = 0
    distinct: int = 0
    windowed: int = 0
    windows: int = 0
    truncated_hypotheses: int = 0
    rescored_fp32: int = 0
    by_call: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if k != "by_call"}


class NLIVerifier:
    """A 3-way NLI cross-encoder, batched and windowed; rows follow :data:`NLI_LABELS`."""

    def __init__(self, model: str = "embedded", batch_size: int = 32, device: str = "auto",
                 max_length: int | None = None, backend: str = "auto"):
        """``backend``: ``torch``, ``onnx`` (fp32 graph through ONNX Runtime), ``onnx_int8`` (dynamically quantized),
        ``openvino`` (fp32 through OpenVINO), ``openvino_int8`` (statically quantized by NNCF), ``openvino_cascade``
        (that INT8, with the pairs it scores as close calls re-scored in fp32), or ``auto`` —
        :data:`DEFAULT_CPU_BACKEND` on a CPU, torch on a GPU (:func:`resolve_backend`). A graph is exported on first
        use and cached with the weights' fingerprint (``models/onnx_runtime.py``, ``models/openvino_runtime.py``;
        ``train nli`` exports the ONNX graphs of the verifiers it trains, ``veracity models export-onnx`` any other);
        a missing or stale one is rebuilt, never used. The weights (and the graph) load at construction, or on first
        use when built under :func:`~veracity.models.loading.deferred_loading` (a Ray driver: named, not loaded).
        Used from Python, the libraries stay as quiet as on the command line (``veracity.logs.quiet_unless_asked``)."""
        quiet_unless_asked()
        import torch  # lazy, as transformers: seconds to import, and only a loaded verifier needs them
        from transformers import AutoConfig, AutoTokenizer

        device = verifier_device(backend, device)
        self.backend = resolve_backend(backend, device)
        self.folder = Path(resolve_model("nli_verifier", model))
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.config = config = AutoConfig.from_pretrained(self.folder)
        mapping = {int(i): to_nli(name) for i, name in config.id2label.items()}
        if len(mapping) != 3 or sorted(m for m in mapping.values() if m) != sorted(NLI_TO_TERNARY):
            raise ValueError(f"{self.folder}/config.json: field 'id2label': {config.id2label} is not a 3-way NLI "
                             "label map (entailment, neutral, contradiction)")
        self.columns = [[mapping[i] for i in range(3)].index(name) for name in NLI_LABELS]
        ours = hasattr(config, "veracity_evidence_titles")
        self.evidence_titles = bool(getattr(config, "veracity_evidence_titles", False))
        limit = min(getattr(self.tokenizer, "model_max_length", 512) or 512,
                    getattr(config, "max_position_embeddings", 512) or 512, 512)
        self.max_length = int(max_length or getattr(config, "veracity_max_length", 0)
                              or (LEGACY_VERACITY_MAX_LENGTH if ours else limit))
        self.truncation = str(getattr(config, "veracity_truncation", None)
                              or (LEGACY_VERACITY_TRUNCATION if ours else "longest_first"))
        if self.truncation not in TRUNCATIONS:
            raise ValueError(f"{self.folder}/config.json: field 'veracity_truncation': {self.truncation!r} is not "
                             f"one of {TRUNCATIONS}")
        self.batch_size, self.device, self.torch = batch_size, device, torch
        self.stats = VerifierStats()
        self._special = self.tokenizer.num_special_tokens_to_add(pair=True)
        self._model: Any = None
        self._session: Session | None = None
        self._session_wanted = self.backend != "torch"
        if not loading_deferred():
            self.load()  # now: a verifier that cannot load fails here, not claim by claim

    def load(self) -> None:
        """Load the weights, and the graph of a graph backend (ONNX Runtime, OpenVINO), unless loaded."""
        if self._model is None:
            from transformers import AutoModelForSequenceClassification

            self._model = AutoModelForSequenceClassification.from_pretrained(self.folder).to(self.device).eval()
        if self._session_wanted and self._session is None:
            self._session = self._graph_session()

    @property
    def model(self) -> Any:
        """The torch model, loaded when first needed."""
        if self._model is None:
            self.load()
        return self._model

    @property
    def session(self) -> Session | None:
        """The runtime session of a graph backend (None: torch), loaded when first needed."""
        if self._session_wanted and self._session is None:
            self.load()
        return self._session

    @session.setter
    def session(self, session: Session | None) -> None:
        """Replace the session; None runs the torch model from then on."""
        self._session, self._session_wanted = session, session is not None

    # --- public -----------------------------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        """The model folder with its content fingerprint, and the backend when it is not torch with its graph's
        export (an INT8 graph scores differently): what run records and caches name it by."""
        return verifier_model_id(self.folder, self.backend)

    def predict(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        """Probabilities ``(n, 3)`` in :data:`NLI_LABELS` order, one row per (premise, hypothesis)."""
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises for {len(hypotheses)} hypotheses")
        distinct = list(dict.fromkeys(zip(premises, hypotheses, strict=True)))
        self.stats.pairs += len(premises)
        self.stats.distinct += len(distinct)
        self.stats.by_call.append(len(distinct))
        inputs: list[tuple[str, str]] = []
        owner: list[int] = []
        for k, (premise, hypothesis) in enumerate(distinct):
            # the tokenizer refuses a lone surrogate (a corpus text can hold one): scored as U+FFFD
            premise, hypothesis = without_lone_surrogates(premise), without_lone_surrogates(hypothesis)
            windows = self.windows(premise, hypothesis)
            inputs += [(w, hypothesis) for w in windows]
            owner += [k] * len(windows)
        rows, owner_array = self._forward(inputs), np.asarray(owner)
        # One window: its own row (the aggregate of one row is that row); several: aggregated.
        scored = {pair: aggregate_windows(rows[owner_array == k]) for k, pair in enumerate(distinct)}
        out = [scored[pair] for pair in zip(premises, hypotheses, strict=True)]
        return np.vstack(out) if out else np.zeros((0, 3))

    probabilities = predict  # the name the checkpoint evaluation used

    def windows(self, premise: str, hypothesis: str) -> list[str]:
        """``[premise]`` if the pair fits ``max_length``, else sentence-packed windows that each fit."""
        hyp_tokens = len(self.tokenizer(hypothesis, add_special_tokens=False)["input_ids"])
        budget = self.max_length - self._special - hyp_tokens
        if budget < 16:  # the claim alone nearly fills the model: the tokenizer truncates it (counted)
            self.stats.truncated_hypotheses += 1
            budget = max(16, (self.max_length - self._special) // 2)
        if len(self.tokenizer(premise, add_special_tokens=False)["input_ids"]) <= budget:
            return [premise]
        sentences = self._fitting_pieces(split_at_end_punctuation(premise), budget)
        lengths = [len(self.tokenizer(" " + s, add_special_tokens=False)["input_ids"]) for s in sentences]
        windows = [" ".join(sentences[i] for i in idx) for idx in pack_windows(sentences, lengths, budget)]
        self.stats.windowed += 1
        self.stats.windows += len(windows)
        return windows

    def truncation_for(self, premise: str, hypothesis: str) -> str:
        """The truncation strategy for one pair: :attr:`truncation`, or ``longest_first`` where the side it keeps
        whole (the claim, for ``only_first``) does not fit by itself — the tokenizer could not cut the other side
        far enough, and the claim must be cut too (counted in ``truncated_hypotheses`` by :meth:`windows`)."""
        kept = {"only_first": hypothesis, "only_second": premise}.get(self.truncation)
        if kept is None:
            return self.truncation
        kept_tokens = len(self.tokenizer(kept, add_special_tokens=False)["input_ids"])
        return self.truncation if kept_tokens + self._special < self.max_length else "longest_first"

    def encode(self, pairs: Sequence[tuple[str, str]], truncation: str | None = None) -> Any:
        """Padded model inputs (PyTorch tensors) of (premise, hypothesis) pairs, at most ``max_length`` tokens each,
        cut the way the verifier was trained (``truncation``, default :attr:`truncation`)."""
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=truncation or self.truncation,
                              max_length=self.max_length, padding=True, return_tensors="pt")

    # --- internals --------------------------------------------------------------------------------------

    def _fitting_pieces(self, sentences: list[str], budget: int) -> list[str]:
        """Sentences, with any sentence over the budget cut into token pieces that fit."""
        pieces = []
        for sentence in sentences:
            ids = self.tokenizer(sentence, add_special_tokens=False)["input_ids"]
            if len(ids) <= budget:
                pieces.append(sentence)
                continue
            step = max(1, budget - 2)
            pieces += [self.tokenizer.decode(ids[i : i + step]) for i in range(0, len(ids), step)]
        return pieces

    def _graph_session(self) -> Session:
        """The session of this model's graph for :attr:`backend`, exported first when missing or stale."""
        if self.backend in openvino_runtime.BACKENDS:
            graphs = export_openvino(self.folder, self.model, self.tokenizer, self.max_length, self.truncation)
            return openvino_session(graphs, self.backend)
        return OnnxSession(export_model(self.folder, self.model, self.tokenizer) / ONNX_FILES[self.backend])

    def _logits(self, batch: Any) -> np.ndarray:
        if self.session is not None:
            logits = self.session.run({k: v.numpy() for k, v in batch.items()})
            self.stats.rescored_fp32 += getattr(self.session, "last_rescored", 0)  # the cascade's second looks
            return logits
        with self.torch.inference_mode():
            return self.model(**batch.to(self.device)).logits.float().cpu().numpy()

    def _forward(self, inputs: list[tuple[str, str]]) -> np.ndarray:
        if not inputs:
            return np.zeros((0, 3))
        strategies = [self.truncation_for(p, h) for p, h in inputs]
        lengths = [len(p) + len(h) for p, h in inputs]
        # One strategy per batch (a tokenizer call takes one); similar lengths together: less padding per batch.
        order = sorted(range(len(inputs)), key=lambda k: (strategies[k] != self.truncation, lengths[k]))
        out = np.zeros((len(inputs), 3))
        start = 0
        while start < len(order):
            strategy = strategies[order[start]]
            idx = [k for k in order[start : start + self.batch_size] if strategies[k] == strategy]
            logits = self._logits(self.encode([inputs[k] for k in idx], strategy))
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            out[idx] = (probs / probs.sum(-1, keepdims=True))[:, self.columns]
            start += len(idx)
        return out
