"""Abstention with a finite-sample guarantee on the error rate among answered claims (beyond the paper).

Learn-then-Test (Angelopoulos et al., 2021) with fixed-sequence testing: candidate thresholds λ are the calib
confidences from high to low, from the first that answers enough claims for a test to succeed. For each λ the null
hypothesis "the selective risk of answering when p ≥ λ exceeds the target" is tested with the exact binomial
p-value ``P(Binom(n_λ, target) ≤ errors_λ)``; thresholds are accepted while the p-value stays ≤ δ, and the lowest
accepted λ (the most coverage) is returned. With exchangeable calib and test claims, P(selective risk of the chosen
λ > target) ≤ δ.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def binomial_p_value(errors: int, n: int, target_risk: float) -> float:
    """P(Binom(n, target) ≤ errors): small when so few errors would be unlikely were the risk ≥ target."""
    from scipy.stats import binom  # lazy: scipy.stats takes a second to import

    return float(binom.cdf(errors, n, target_risk)) if n else 1.0


def risk_controlled_threshold(confidence: Sequence[float], correct: Sequence[bool], target_risk: float,
                              delta: float) -> dict[str, float | int | None]:
    """The lowest threshold whose selective risk is certified ≤ ``target_risk`` at level ``delta``.

    Returns:
        ``{"tau_cal", "coverage", "selective_risk", "answered", "tested"}`` on the calib data; ``tau_cal`` is
        None when not even the most confident claim can be certified (then abstain on everything).
    """
    if not 0 < target_risk < 1 or not 0 < delta < 1:
        raise ValueError(f"target_risk and delta must be in (0, 1), got {target_risk}, {delta}")
    p, y = np.asarray(confidence, dtype=float), np.asarray(correct, dtype=bool)
    chosen: dict[str, float | int | None] = {"tau_cal": None, "coverage": 0.0, "selective_risk": None, "answered": 0}
    tested = 0
    # Fewer answered claims than this cannot be certified even with no error (P(Binom(n, α) = 0) > δ): the
    # sequence starts where a test can succeed, as Geifman & El-Yaniv's selective guaranteed risk does.
    n_min = int(np.ceil(np.log(delta) / np.log(1 - target_risk)))
    for threshold in np.unique(p)[::-1]:  # high to low: the fixed sequence
        answered = p >= threshold
        n, errors = int(answered.sum()), int((~y[answered]).sum())
        if n < n_min:
            continue
        tested += 1
        if binomial_p_value(errors, n, target_risk) > delta:
            break
        chosen = {"tau_cal": float(threshold), "coverage": n / len(p), "selective_risk": errors / n, "answered": n}
    return {**chosen, "tested": tested, "target_risk": target_risk, "delta": delta}
