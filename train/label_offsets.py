"""Per-label logit offsets fitted on calib and folded into a classifier's head: a label-prior correction.

A 3-way verifier learns the label priors of its training mix; the sets it is scored on have others, and each its
own, and the argmax follows the prior. Two offsets (neutral and contradiction, relative to entailment) are added
to the log-probabilities and chosen on the calib split by grid search, maximising the mean over sources of
(accuracy + macro-F1) / 2 — each source weighs the same, whatever its size; of equal ones the smallest shift wins,
so nothing changes when nothing helps. Added to the bias of the head's last linear layer they shift every logit by
the same amount, so every backend (torch, ONNX) scores with them and the folder stays a plain transformers model.
Rows follow :data:`NLI_LABELS` (entailment, neutral, contradiction: SUPPORTS, NOT ENOUGH INFO, REFUTES).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from scipy.special import log_softmax

from veracity.data_prep.schema import NLI_LABELS
from veracity.infer.metrics import accuracy, macro_f1

Sets = dict[str, tuple[np.ndarray, np.ndarray]]  # source → (log-probabilities (n, 3), gold label indices)


def scores(predicted: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """Accuracy and macro-F1 (over the labels present in ``gold``, as ``veracity eval checkpoint`` counts them) of
    label indices."""
    gold_names, predicted_names = [NLI_LABELS[i] for i in gold], [NLI_LABELS[i] for i in predicted]
    return accuracy(gold_names, predicted_names), macro_f1(gold_names, predicted_names)


def objective(sets: Sets, offsets: np.ndarray) -> float:
    """Mean over sources of (accuracy + macro-F1) / 2 with ``offsets`` added to the log-probabilities."""
    return float(np.mean([sum(scores((logp + offsets).argmax(1), gold)) / 2 for logp, gold in sets.values()]))


def offset_grid(span: float = 1.5, step: float = 0.05) -> list[np.ndarray]:
    """Every ``[0, b_neutral, b_contradiction]`` with both offsets on a grid over ``[-span, span]``, the smallest
    total shift first (so a search that keeps the first of equal ones keeps the smallest)."""
    grid = np.round(np.arange(-span, span + step / 2, step), 6)
    pairs = sorted(itertools.product(grid, grid), key=lambda b: (abs(b[0]) + abs(b[1]), b))
    return [np.array([0.0, neutral, contradiction]) for neutral, contradiction in pairs]


def fit_label_offsets(sets: Sets, span: float = 1.5, step: float = 0.05) -> np.ndarray:
    """The offsets ``[0, b_neutral, b_contradiction]`` on a grid over ``[-span, span]`` that maximise
    :func:`objective`; of equal ones, the smallest shift (no offsets when nothing beats none)."""
    best, best_value = np.zeros(3), objective(sets, np.zeros(3))
    for offsets in offset_grid(span, step):
        value = objective(sets, offsets)
        if value > best_value + 1e-12:
            best, best_value = offsets, value
    return best


def log_probabilities(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of a head's logits (``(n, labels)``)."""
    return log_softmax(logits, axis=1)


def fold_into_head(model: Any, offsets: np.ndarray) -> None:
    """Add ``offsets`` to the bias of the last linear layer outside ``model.base_model`` with one output per label
    (``classifier`` in BERT and DeBERTa, ``classifier.out_proj`` in RoBERTa): every logit moves by its offset."""
    import torch

    prefix = f"{model.base_model_prefix}."
    heads = [module for name, module in model.named_modules() if not name.startswith(prefix)
             and isinstance(module, torch.nn.Linear) and module.out_features == model.config.num_labels]
    if not heads or heads[-1].bias is None:
        raise ValueError(f"{type(model).__name__}: no linear output layer with a bias to fold label offsets into")
    with torch.no_grad():
        heads[-1].bias += torch.as_tensor(offsets, dtype=heads[-1].bias.dtype, device=heads[-1].bias.device)
