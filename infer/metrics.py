"""Classification, calibration and selective-prediction metrics as pure functions (accuracy, per-group accuracy,
macro-F1, confusion, Brier, ECE, risk–coverage and AURC)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def accuracy(gold: Sequence[str], pred: Sequence[str | None]) -> float:
    """Share of exact matches; a missing prediction (None, e.g. a parse failure) counts as wrong."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels for {len(pred)} predictions")
    return float(np.mean([g == p for g, p in zip(gold, pred, strict=True)])) if gold else 0.0


def macro_f1(gold: Sequence[str], pred: Sequence[str | None], labels: Sequence[str] | None = None) -> float:
    """Unweighted mean of per-label F1 over ``labels`` (default: the labels present in ``gold``)."""
    labels = list(labels) if labels is not None else sorted(set(gold))
    scores = []
    for label in labels:
        tp = sum(g == label and p == label for g, p in zip(gold, pred, strict=True))
        fp = sum(g != label and p == label for g, p in zip(gold, pred, strict=True))
        fn = sum(g == label and p != label for g, p in zip(gold, pred, strict=True))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores)) if scores else 0.0


def confusion(gold: Sequence[str], pred: Sequence[str | None], labels: Sequence[str]) -> dict[str, dict[str, int]]:
    """``{gold: {pred: count}}``; predictions outside ``labels`` (or None) are counted under ``"(none)"``."""
    table = {g: {p: 0 for p in [*labels, "(none)"]} for g in labels}
    for g, p in zip(gold, pred, strict=True):
        if g in table:
            table[g][p if p in labels else "(none)"] += 1
    return table


def accuracy_by_group(gold: Sequence[str], pred: Sequence[str | None], groups: Sequence[str | None]
                      ) -> dict[str, dict[str, float | int]]:
    """``{group: {"examples": n, "accuracy": a}}`` over the examples whose group is not None, groups sorted."""
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        if group is not None:
            members.setdefault(group, []).append(i)
    return {group: {"examples": len(idx), "accuracy": accuracy([gold[i] for i in idx], [pred[i] for i in idx])}
            for group, idx in sorted(members.items())}


def brier_score(probabilities: np.ndarray, gold_index: Sequence[int]) -> float:
    """Multi-class Brier score: mean over examples of Σ_k (p_k − 1[k = gold])²."""
    probabilities = np.asarray(probabilities, dtype=float)
    onehot = np.zeros_like(probabilities)
    onehot[np.arange(len(gold_index)), list(gold_index)] = 1.0
    return float(np.mean(np.sum((probabilities - onehot) ** 2, axis=1))) if len(gold_index) else 0.0


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """ECE with equal-width confidence bins: Σ_b (n_b / n) · |accuracy_b − mean confidence_b|."""
    confidence, correct = np.asarray(confidence, dtype=float), np.asarray(correct, dtype=float)
    if len(confidence) == 0:
        return 0.0
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.digitize(confidence, edges[1:-1], right=True), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        mask = index == b
        if mask.any():
            total += mask.mean() * abs(correct[mask].mean() - confidence[mask].mean())
    return float(total)


def binary_brier(confidence: Sequence[float], correct: Sequence[bool]) -> float:
    """Brier score of a confidence that the prediction is right: mean (p − 1[correct])²."""
    p, y = np.asarray(confidence, dtype=float), np.asarray(correct, dtype=float)
    return float(np.mean((p - y) ** 2)) if len(p) else 0.0


def risk_coverage(confidence: Sequence[float], correct: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """The risk–coverage curve: one point per distinct confidence ``t``, from high to low, for answering every
    example with confidence ≥ ``t``.

    Examples that tie on confidence are answered together (a threshold cannot separate them), so a tie group is
    one step of the curve, never split in input order: the curve, and :func:`aurc`, do not depend on the order of
    the records. Without ties there is one point per example (k = 1..n).

    Returns:
        ``coverage[j]`` = share of examples with confidence ≥ the j-th highest distinct confidence, and
        ``risk[j]`` = the error rate among them.
    """
    p, y = np.asarray(confidence, dtype=float), np.asarray(correct, dtype=float)
    if len(p) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(-p, kind="stable")
    errors = np.cumsum(1.0 - y[order])
    k = np.arange(1, len(p) + 1)
    sorted_p = p[order]
    last = np.r_[sorted_p[1:] != sorted_p[:-1], True]  # the last position of each tie group
    return k[last] / len(p), errors[last] / k[last]


def aurc(confidence: Sequence[float], correct: Sequence[bool]) -> float:
    """Area under the risk–coverage step curve (lower is better): Σ over distinct confidences ``t`` (high to low)
    of (share of examples with confidence exactly ``t``) × (selective risk answering every example with
    confidence ≥ ``t``). Without ties this is the mean selective risk over the n coverage levels k / n; a tie group
    is one step, so the value does not depend on record order."""
    coverage, risk = risk_coverage(confidence, correct)
    if not len(risk):
        return 0.0
    width = np.diff(np.r_[0.0, coverage])
    return float(np.sum(width * risk))


def selective_metrics(answered: Sequence[bool], correct: Sequence[bool]) -> dict[str, float | None]:
    """Coverage (share answered), selective accuracy and risk over the answered examples; with nothing answered
    the two selective numbers are undefined (None), not 0 — a run that abstains on everything has no risk to
    report, and 0.0 would read as a perfect one."""
    answered_array, correct_array = np.asarray(answered, dtype=bool), np.asarray(correct, dtype=bool)
    n_answered = int(answered_array.sum())
    accuracy_answered = float(correct_array[answered_array].mean()) if n_answered else None
    return {"coverage": float(answered_array.mean()) if len(answered_array) else 0.0, "answered": n_answered,
            "selective_accuracy": accuracy_answered,
            "selective_risk": None if accuracy_answered is None else 1.0 - accuracy_answered}
