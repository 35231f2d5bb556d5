"""R2VC verifier signals, calibrator features and the two-stage decision (docs/pipelines/r2vc.md#signals), as pure
functions.

Inputs are plain data: per-passage NLI probabilities ``(n_passages, 3)`` in ``entailment, neutral, contradiction``
order (``data_prep.schema.NLI_LABELS``), the candidate's label and cited passage ids (1-based), the claim and the
passage texts. Every threshold and weight comes in through :class:`SignalSettings`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from veracity.data_prep.schema import NOT_ENOUGH_INFO, REFUTES, SUPPORTS

NLI_TRUE, NLI_FALSE, NLI_UNCERTAIN = "True", "False", "Uncertain"
NLI_TO_LABEL = {NLI_TRUE: SUPPORTS, NLI_FALSE: REFUTES, NLI_UNCERTAIN: NOT_ENOUGH_INFO}
LABEL_TO_NLI = {v: k for k, v in NLI_TO_LABEL.items()}
_WORD = re.compile(r"[a-z0-9]+(?:[.,][0-9]+)*")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_STOPWORDS = frozenset(
    "a an the of in on at to for by with from and or is are was were be been being it its this that as has have had "
    "not no do does did but which who whom whose than then there their they he she his her".split()
)


@dataclass(frozen=True)
class SignalSettings:
    """Thresholds and weights of the signals (docs/pipelines/r2vc.md#signals; defaults are the paper's)."""

    t_ent: float = field(default=0.60, metadata={"help": "T_ent: entailment threshold of y_NLI True."})
    t_contr: float = field(default=0.60, metadata={"help": "T_contr: contradiction threshold of y_NLI False."})
    margin: float = field(default=0.10, metadata={"help": "δ: how far the winning side must beat the other."})
    coverage_top: int = field(default=6, metadata={"help": "Passages averaged in s_cov."})
    w_ent: float = field(default=0.6, metadata={"help": "Weight of s_ent in s_ver."})
    w_cov: float = field(default=0.2, metadata={"help": "Weight of s_cov in s_ver."})
    w_excess_contr: float = field(default=0.3, metadata={
        "help": "Weight of max(0, s_contr − s_ent) in s_ver (subtracted)."})
    w_cons: float = field(default=0.1, metadata={"help": "Weight of s_cons in s_ver."})
    w_align: float = field(default=0.1, metadata={"help": "Weight of s_align in s_ver."})
    w_cit: float = field(default=0.1, metadata={"help": "Weight of 1 − s_cit in s_ver (subtracted)."})
    cit_numeric_weight: float = field(default=0.5, metadata={
        "help": "Share of number matching in s_cit (claims without numbers: word overlap alone)."})
    orientation: str = field(default="verdict", metadata={"help": "verdict or claim (docs/design.md#r2vc-decisions)."})

    def __post_init__(self) -> None:
        if self.orientation not in ORIENTATIONS:
            raise ValueError(f"orientation must be one of {ORIENTATIONS}, got {self.orientation!r}")


ORIENTATIONS = ("verdict", "claim")


def nli_label(s_ent: float, s_contr: float, settings: SignalSettings) -> str:
    """``y_NLI``: True when entailment clears ``t_ent`` and beats contradiction by the margin; False the mirror;
    otherwise Uncertain."""
    tolerance = 1e-9  # a margin of exactly δ counts (0.7 - 0.6 is 0.0999… in floating point)
    if s_ent >= settings.t_ent - tolerance and s_ent - s_contr >= settings.margin - tolerance:
        return NLI_TRUE
    if s_contr >= settings.t_contr - tolerance and s_contr - s_ent >= settings.margin - tolerance:
        return NLI_FALSE
    return NLI_UNCERTAIN


def consistency(label: str, y_nli: str) -> float:
    """``s_cons``: 1 when the generator's label is the NLI label, 0 when they are opposite (SUPPORTS vs False,
    REFUTES vs True), 0.5 when exactly one side is undecided (NOT ENOUGH INFO or Uncertain)."""
    if LABEL_TO_NLI.get(label) == y_nli:
        return 1.0
    if label == NOT_ENOUGH_INFO or y_nli == NLI_UNCERTAIN:
        return 0.5
    return 0.0


def _content_words(text: str) -> list[str]:
    """Lower-cased words without stopwords and numbers (numbers are matched on their own)."""
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS and not _NUMBER.fullmatch(w)]


def citation_similarity(claim: str, passage: str, numeric_weight: float = 0.5) -> float:
    """Heuristic claim–passage similarity in [0, 1]: the share of the claim's content words found in the passage,
    mixed with the share of the claim's numbers found there (``numeric_weight``; claims without numbers use the
    word overlap alone)."""
    words = set(_content_words(claim))
    passage_words = set(_content_words(passage))
    overlap = len(words & passage_words) / len(words) if words else 0.0
    numbers = {n.replace(",", "") for n in _NUMBER.findall(claim)}
    if not numbers:
        return overlap
    passage_numbers = {n.replace(",", "") for n in _NUMBER.findall(passage)}
    numeric = len(numbers & passage_numbers) / len(numbers)
    return (1 - numeric_weight) * overlap + numeric_weight * numeric


def alignment(cited: Sequence[int], p_ent: Sequence[float]) -> float:
    """``s_align``: Jaccard overlap of the cited passages with as many top-entailment passages (1-based ids).
    A candidate that cites nothing has no alignment (0)."""
    cited_set = {i for i in cited if 1 <= i <= len(p_ent)}
    if not cited_set:
        return 0.0
    order = np.argsort(-np.asarray(p_ent, dtype=float), kind="stable")
    top = {int(i) + 1 for i in order[: len(cited_set)]}
    return len(cited_set & top) / len(cited_set | top)


@dataclass(frozen=True)
class Signals:
    s_ent: float
    s_contr: float
    s_cov: float
    s_cit: float
    y_nli: str
    s_cons: float
    s_align: float
    s_ver: float

    def to_dict(self) -> dict[str, float | str]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def claim_signals(nli: np.ndarray, settings: SignalSettings) -> tuple[float, float, float, str]:
    """The candidate-independent part: ``s_ent, s_contr, s_cov, y_NLI`` from the claim's passage scores."""
    nli = np.asarray(nli, dtype=float).reshape(-1, 3)
    if len(nli) == 0:  # no evidence: nothing entails or contradicts
        return 0.0, 0.0, 0.0, NLI_UNCERTAIN
    p_ent, p_contr = nli[:, 0], nli[:, 2]
    s_ent, s_contr = float(p_ent.max()), float(p_contr.max())
    s_cov = float(np.sort(p_ent)[::-1][: settings.coverage_top].mean())
    return s_ent, s_contr, s_cov, nli_label(s_ent, s_contr, settings)


def oriented(nli: np.ndarray, label: str, orientation: str) -> tuple[np.ndarray, np.ndarray]:
    """Per passage: (support, against) of what the candidate asserts.

    ``claim`` reads the paper's formula literally (docs/design.md#r2vc-decisions): support = P(entailment of the
    claim), against = P(contradiction), whatever the candidate's label — so a correct REFUTES answer gets a low
    ``s_ver`` and is always abstained on.
    ``verdict`` (default) scores the candidate's verdict, as the paper's verifier ``V(c, ŷ_i, S_i)`` takes the
    label: SUPPORTS as above; REFUTES support = P(contradiction), against = P(entailment); NOT ENOUGH INFO
    support = P(neutral), against = the passage's stronger of entailment and contradiction.
    """
    nli = np.asarray(nli, dtype=float).reshape(-1, 3)
    p_ent, p_neut, p_contr = nli[:, 0], nli[:, 1], nli[:, 2]
    if orientation == "claim" or label == SUPPORTS:
        return p_ent, p_contr
    if label == REFUTES:
        return p_contr, p_ent
    return p_neut, np.maximum(p_ent, p_contr)


def candidate_signals(nli: np.ndarray, label: str, cited: Sequence[int], claim: str, passages: Sequence[str],
                      settings: SignalSettings) -> Signals:
    """Every signal of one candidate (docs/pipelines/r2vc.md#signals) and its ``s_ver``.

    ``s_ent``, ``s_contr``, ``s_cov`` and ``s_align`` read the passages through :func:`oriented`; ``y_NLI`` (and so
    ``s_cons``) is always the claim-level NLI label. ``s_cit`` is the best similarity between the claim and a
    passage the candidate cites (all passages when it cites none: an uncited answer is judged on the whole pool).
    """
    _, _, _, y_nli = claim_signals(nli, settings)
    support, against = oriented(nli, label, settings.orientation)
    if len(support):
        s_ent, s_contr = float(support.max()), float(against.max())
        s_cov = float(np.sort(support)[::-1][: settings.coverage_top].mean())
        if settings.orientation == "verdict" and label == NOT_ENOUGH_INFO:
            s_ent = 1.0 - s_contr  # no passage settles the claim: the strongest settling passage is the evidence
    else:
        s_ent = s_contr = s_cov = 0.0
    pool = [passages[i - 1] for i in cited if 1 <= i <= len(passages)] or list(passages)
    s_cit = max((citation_similarity(claim, p, settings.cit_numeric_weight) for p in pool), default=0.0)
    s_cons = consistency(label, y_nli)
    s_align = alignment(cited, support) if len(passages) else 0.0
    s_ver = (settings.w_ent * s_ent + settings.w_cov * s_cov - settings.w_excess_contr * max(0.0, s_contr - s_ent)
             + settings.w_cons * s_cons + settings.w_align * s_align - settings.w_cit * (1 - s_cit))
    return Signals(s_ent, s_contr, s_cov, s_cit, y_nli, s_cons, s_align, float(s_ver))


# --- calibrator features ----------------------------------------------------------------------------------

FEATURES: tuple[str, ...] = ("mean_logprob", "s_ver", "label_agreement", "passages_used", "rationale_tokens",
                             "s_cons", "s_align")
NLI_CANDIDATE_FEATURE = "from_nli"


def feature_names(logprobs: bool, nli_candidate: bool) -> list[str]:
    """The paper's feature list (docs/pipelines/r2vc.md#calibrator), without ``mean_logprob`` when the engine gives
    none, plus ``from_nli`` when the verifier's own label competes as a candidate."""
    names = [f for f in FEATURES if logprobs or f != "mean_logprob"]
    return names + ([NLI_CANDIDATE_FEATURE] if nli_candidate else [])


def usable_logprob(value: float | None) -> float | None:
    """A mean token log-probability as a feature value: the value when it is a finite number, else None.

    None means "the engine gave none" (missing, empty or not finite). It is never replaced by a number: 0.0 would be
    the best log-probability there is.
    """
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def candidate_features(signals: Signals, label: str, pool_labels: Sequence[str], cited: Sequence[int],
                       rationale: str, mean_logprob: float | None, from_nli: bool = False) -> dict[str, float | None]:
    """One candidate's feature row.

    Args:
        signals: the candidate's verifier signals.
        label: the candidate's label.
        pool_labels: the labels of every candidate the decision chooses among — each parsed generator candidate
            and the NLI candidate when it competes — this one included. ``label_agreement`` is the share of them
            equal to ``label``: one definition for every recipe, so the NLI candidate of the NLI-only ablation
            (a pool of one) is measured as it would be in the full pipeline with the same pool.
        cited: the passage ids the candidate cites (1-based).
        rationale: the candidate's rationale.
        mean_logprob: the generator's mean token log-probability, None where the engine gave none.
        from_nli: the candidate is the verifier's own label.

    Returns:
        Feature name → value. ``mean_logprob`` is None for a generator candidate without a finite log-probability
        (a calibrator fit on the feature refuses such a row, see ``pipeline.require_logprobs``). The NLI candidate
        has no log-probability by construction: it gets the constant 0.0 with ``from_nli`` = 1, an indicator
        coding whose weight absorbs the constant (calibrators with ``mean_logprob`` have ``from_nli`` whenever an
        NLI candidate competes), not a stand-in for a missing value.
    """
    agreement = sum(lab == label for lab in pool_labels) / len(pool_labels) if pool_labels else 0.0
    return {
        "mean_logprob": 0.0 if from_nli else usable_logprob(mean_logprob),
        "s_ver": signals.s_ver,
        "label_agreement": agreement,
        "passages_used": float(len(set(cited))),
        "rationale_tokens": float(len(rationale.split())),
        "s_cons": signals.s_cons,
        "s_align": signals.s_align,
        NLI_CANDIDATE_FEATURE: float(from_nli),
    }


# --- decision ---------------------------------------------------------------------------------------------

def abstain(s_ver: float, confidence: float, tau_ver: float | None, tau_cal: float | None) -> str | None:
    """The two-stage abstention: a reason (``"s_ver < τ_ver"`` / ``"p < τ_cal"``) or None to answer.

    A threshold of None is off. The boundaries answer: ``s_ver == τ_ver`` and ``p == τ_cal`` pass. The values are
    compared as given (unrounded: 0.5499996 < 0.55 abstains); only the reason's text is rounded, with as many
    digits as it takes to show the value below its threshold.
    """
    if tau_ver is not None and s_ver < tau_ver:
        return f"s_ver {_shown_below(s_ver, tau_ver)} < tau_ver {tau_ver}"
    if tau_cal is not None and confidence < tau_cal:
        return f"p {_shown_below(confidence, tau_cal)} < tau_cal {tau_cal}"
    return None


def _shown_below(value: float, threshold: float) -> str:
    """``value`` with three decimals, or more where three would round it up to ``threshold``."""
    for digits in range(3, 17):
        text = f"{value:.{digits}f}"
        if float(text) < threshold:
            return text
    return repr(value)
