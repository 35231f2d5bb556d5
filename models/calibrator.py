"""The R2VC calibrator as a model: logistic regression from a candidate's features to P(its label is correct).

Stored as inspectable JSON (feature names, coefficients, intercept, the versions that fit it, its metrics and any
risk-controlled threshold) — never a pickle. Loading checks the file; predicting checks that every feature the
calibrator was fit on is given as a finite number, so a calibrator fit with token log-probabilities refuses inputs
without them (None, NaN or ±inf are refused, never replaced). Fitting lives in ``train/calibrator.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veracity.io import write_json

# /2: the R2VC features changed meaning (issue 24): label_agreement counts every candidate the decision chooses
# among, the NLI candidate included, and a missing log-probability is no longer 0.0. A /1 file was fit on the old
# features, so its weights do not apply to the new ones: it is refused with a request to refit.
FORMAT = "veracity-logistic-calibrator/2"
_STALE_FORMATS = {"veracity-logistic-calibrator/1": "label_agreement over generated candidates only"}


class CalibratorFeatureError(ValueError):
    """Features given do not match the ones the calibrator was fit on."""


def calibrator_file(path: str | Path) -> Path:
    """The calibrator JSON a path names: the file itself, or ``calibrator.json`` in a calibrator folder."""
    path = Path(path)
    return path / "calibrator.json" if path.is_dir() else path


def logprob_definition(decoding: Mapping[str, Any] | None) -> str | None:
    """What the ``mean_logprob`` feature means under ``decoding`` (an engine's ``decoding()``, as the run record
    keeps it): the engine's log-prob definition and whether decoding was constrained. The one definition
    renormalises over the tokens a grammar allowed, so a constrained answer's log-probs and a free one's measure
    different things, and a calibrator fit on one must refuse the other. None where the engine does not say."""
    if not decoding or decoding.get("logprob_definition") is None:
        return None
    constrained = decoding.get("constrained")
    way = "constrained" if constrained is True else "free" if constrained is False else str(constrained)
    return f"{decoding['logprob_definition']}, {way}"


@dataclass
class LogisticCalibrator:
    """``p = σ(intercept + Σ coef_i · x_i)`` over the named features (standardisation folded into the weights)."""

    feature_names: list[str]
    coefficients: list[float]
    intercept: float
    versions: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    risk_control: dict[str, Any] = field(default_factory=dict)  # {target_risk, delta, tau_cal, ...} when chosen
    # How the log-probabilities it was fit on were defined (logprob_definition below); None: fit without them.
    logprob_definition: str | None = None

    def __post_init__(self) -> None:
        if len(self.feature_names) != len(self.coefficients):
            raise ValueError(f"{len(self.feature_names)} feature names for {len(self.coefficients)} coefficients")
        if len(set(self.feature_names)) != len(self.feature_names):
            raise ValueError(f"duplicate feature names in {self.feature_names}")
        if not all(math.isfinite(c) for c in [*self.coefficients, self.intercept]):
            raise ValueError("calibrator coefficients must be finite numbers")

    def check_logprob_definition(self, definition: str | None, engine: str) -> None:
        """Refuse log-probabilities made under another definition than the ones this calibrator was fit on (an
        engine that computes them another way or does not say how, or decoding constrained where the fit's was free
        or the other way round: :func:`logprob_definition`): the feature would mean something else.

        Raises:
            CalibratorFeatureError: naming both definitions and the engine.
        """
        if "mean_logprob" in self.feature_names and definition != self.logprob_definition:
            raise CalibratorFeatureError(
                f"the calibrator was fit on log-probabilities defined as {self.logprob_definition!r}, but engine "
                f"{engine} gives {definition!r}: refit it with `veracity train calibrator` on this engine and "
                "decoding, or use a calibrator without the mean_logprob feature")

    def matrix(self, rows: Sequence[Mapping[str, float | None]]) -> np.ndarray:
        """Feature rows (dicts) → a matrix in this calibrator's column order.

        Raises:
            CalibratorFeatureError: a feature is missing, None or not a finite number in some row.
        """
        for number, row in enumerate(rows):
            missing = [name for name in self.feature_names if name not in row or row[name] is None]
            if missing:
                raise CalibratorFeatureError(
                    f"row {number}: the calibrator was fit on {self.feature_names} and needs {missing}; "
                    "fit one without them (e.g. for an engine without token log-probabilities)")
            odd = [name for name in self.feature_names if not math.isfinite(float(row[name]))]
            if odd:
                raise CalibratorFeatureError(f"row {number}: features {odd} are not finite numbers "
                                             f"({[row[name] for name in odd]})")
        return np.array([[float(row[name]) for name in self.feature_names] for row in rows], dtype=float)

    def predict_proba(self, rows: Sequence[Mapping[str, float | None]] | np.ndarray) -> np.ndarray:
        """P(correct) per row; rows are dicts keyed by feature name, or a matrix in :attr:`feature_names` order."""
        x = np.asarray(rows, dtype=float) if isinstance(rows, np.ndarray) else self.matrix(rows)
        if x.size == 0:
            return np.zeros(0)
        if x.ndim != 2 or x.shape[1] != len(self.feature_names):
            raise CalibratorFeatureError(f"expected {len(self.feature_names)} columns {self.feature_names}, "
                                         f"got shape {x.shape}")
        if not np.isfinite(x).all():
            raise CalibratorFeatureError(f"feature values must be finite numbers; columns {self.feature_names}")
        logits = x @ np.asarray(self.coefficients) + self.intercept
        return 1.0 / (1.0 + np.exp(-logits))

    # --- storage ----------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    def save(self, path: str | Path) -> Path:
        write_json(path, self.to_dict())
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> LogisticCalibrator:
        path = calibrator_file(path)
        if not path.is_file():
            raise FileNotFoundError(f"no calibrator at {path}: fit one with `veracity train calibrator`")
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") in _STALE_FORMATS:
            raise ValueError(f"{path}: a calibrator fit on an older definition of the features "
                             f"({_STALE_FORMATS[data['format']]}); refit it with `veracity train calibrator`")
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: field 'format' is {data.get('format')!r}, expected {FORMAT!r}")
        try:
            return cls(**{k: v for k, v in data.items() if k != "format"})
        except TypeError as error:
            raise ValueError(f"{path}: not a calibrator file ({error})") from None
