"""Every plot veracity writes (PNG, matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib  # lazy here and below, as scikit-learn: seconds to import, for plots alone

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def reliability_diagram(curves: Mapping[str, tuple[Sequence[float], Sequence[bool]]], path: str | Path,
                        bins: int = 10) -> Path:
    """Accuracy against confidence per equal-width bin (scikit-learn's ``calibration_curve``), one line per
    named confidence (e.g. calibrated and uncalibrated), with the diagonal of perfect calibration."""
    from sklearn.calibration import calibration_curve

    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(5, 5))
    axis.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfectly calibrated")
    for name, (confidence, correct) in curves.items():
        if len(confidence) and len(set(map(bool, correct))) > 0:
            true, predicted = calibration_curve(np.asarray(correct, dtype=int), np.clip(confidence, 0, 1),
                                                n_bins=bins, strategy="uniform")
            axis.plot(predicted, true, marker="o", label=name)
    axis.set(xlabel="confidence", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1), title="Reliability")
    axis.legend(loc="upper left")
    return _save(figure, path)


def risk_coverage_plot(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], path: str | Path) -> Path:
    """Selective risk against coverage, one line per named curve (``infer.metrics.risk_coverage``)."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    for name, (coverage, risk) in curves.items():
        axis.plot(coverage, risk, label=name)
    axis.set(xlabel="coverage", ylabel="selective risk (error rate when answering)", xlim=(0, 1), ylim=(0, 1),
             title="Risk–coverage")
    axis.legend(loc="upper left")
    return _save(figure, path)


def lines_over_steps(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: str | Path, *,
                     title: str, ylabel: str, xlabel: str = "training step") -> Path:
    """One quantity against the training step, one line per named series ``{name: (steps, values)}`` (a loss and
    its eval loss, a metric per dev source): what training reports and checkpoint sweeps plot."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    for name, (steps, values) in series.items():
        axis.plot(list(steps), list(values), marker="o" if len(steps) <= 30 else None, markersize=3, label=name)
    axis.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if len(series) > 1:
        axis.legend(loc="best")
    axis.grid(alpha=0.3)
    return _save(figure, path)


def _save(figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return path
