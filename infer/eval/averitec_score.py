"""The old AVeriTeC score (Hungarian METEOR), as the FEVER-8 (2025) scorer computes it, as pure functions.

Per claim:
- each QA pair is flattened to ``"question answer"``; predictions are cut to their first 10 pairs, gold is not;
- METEOR (nltk ``single_meteor_score``, reference first, both ``word_tokenize``-d) of every predicted against
  every gold string, the best one-to-one matching (Hungarian, maximised), matched sum / number of gold strings;
- Q-only does the same on questions alone, with repeated gold questions kept once; Q+A keeps every gold pair;
- the claim counts for the old AVeriTeC score when its Q+A score is strictly above 0.25 and the label matches.
Over claims: means of the three, plus label accuracy and macro-F1 over the four verdicts.

Evidence is a list of :class:`~veracity.data_prep.schema.QAPair`; a pair here is one (question, answer), a question
with several answers giving one pair per answer (:func:`~veracity.data_prep.averitec.flat_pairs`). The FEVER-8 CSV's
``evi`` strings are read and written by ``data_prep/averitec.py``. METEOR needs NLTK's WordNet and Punkt: call
``veracity.models.nltk_data.ensure_nltk_data()`` once before ``meteor``; every other function takes the pairwise
metric as an argument. The numbers depend on nltk's ``word_tokenize``: nltk 3.9.3+ splits at dashes, which the
2025 scorer did not (pinned <3.9.3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import linear_sum_assignment

from veracity.data_prep.averitec import flat_pairs
from veracity.data_prep.schema import AVERITEC_LABELS, QAPair

VERDICTS = AVERITEC_LABELS
MAX_PREDICTED_PAIRS = 10
OLD_AVERITEC_THRESHOLD = 0.25  # FEVER-8; the 2024 task reported 0.1 … 0.5

Metric = Callable[[str, str], float]  # (candidate, reference) -> similarity


@dataclass(frozen=True)
class ClaimScore:
    """One claim's scores; ``pred_label`` None means the system gave no prediction for this claim."""

    id: str
    gold_label: str
    pred_label: str | None
    q_only: float
    qa: float
    counted: bool


@lru_cache(maxsize=65536)
def _tokens(text: str) -> tuple[str, ...]:
    # every string meets ~10 others per claim; tokenising once is the same tokens, faster
    from nltk import word_tokenize  # lazy here and in meteor(): nltk takes 1.5 s to import, only METEOR needs it

    return tuple(word_tokenize(text))


def meteor(candidate: str, reference: str) -> float:
    """nltk METEOR of ``candidate`` against ``reference`` on ``word_tokenize`` tokens (needs ensure_nltk_data)."""
    from nltk.translate.meteor_score import single_meteor_score  # lazy: as in _tokens

    return float(single_meteor_score(list(_tokens(reference)), list(_tokens(candidate))))


def pairwise_scores(predicted: Sequence[str], gold: Sequence[str], metric: Metric = meteor) -> np.ndarray:
    """``scores[i, j] = metric(predicted[i], gold[j])``: predicted rows, gold columns, as the official scorer."""
    scores = np.zeros((len(predicted), len(gold)))
    for i, candidate in enumerate(predicted):
        for j, reference in enumerate(gold):
            scores[i, j] = metric(candidate, reference)
    return scores


def hungarian_score(scores: np.ndarray) -> float:
    """Best one-to-one matching of rows (predicted) to columns (gold), matched sum / number of gold columns.

    Unmatched gold items score 0, so predicting fewer items than the gold has caps the score below 1.

    Raises:
        ValueError: no gold column (the score is undefined; the official scorer divides by zero).
    """
    if scores.shape[1] == 0:
        raise ValueError("no gold items: the evidence score is undefined")
    rows, cols = linear_sum_assignment(scores, maximize=True)
    return float(scores[rows, cols].sum() / scores.shape[1])


def qa_text(question: str, answer: str) -> str:
    """The string METEOR compares for a pair: question and answer joined by one space."""
    return f"{question} {answer}"


def question_only_score(predicted: Sequence[QAPair], gold: Sequence[QAPair], metric: Metric = meteor) -> float:
    """Q-only evidence score: first 10 predicted questions against the distinct gold questions."""
    pred_questions = [q for q, _ in flat_pairs(predicted)[:MAX_PREDICTED_PAIRS]]
    gold_questions = list(dict.fromkeys(q for q, _ in flat_pairs(gold)))  # deduplicated, first occurrence order
    return hungarian_score(pairwise_scores(pred_questions, gold_questions, metric))


def question_answer_score(predicted: Sequence[QAPair], gold: Sequence[QAPair], metric: Metric = meteor) -> float:
    """Q+A evidence score: first 10 predicted "question answer" strings against every gold one."""
    return hungarian_score(pairwise_scores([qa_text(*p) for p in flat_pairs(predicted)[:MAX_PREDICTED_PAIRS]],
                                           [qa_text(*p) for p in flat_pairs(gold)], metric))


def counts_for_averitec(qa: float, pred_label: str | None, gold_label: str,
                        threshold: float = OLD_AVERITEC_THRESHOLD) -> bool:
    """The old AVeriTeC criterion: Q+A evidence score strictly above ``threshold`` and the right label."""
    return qa > threshold and pred_label == gold_label


def score_claim(claim_id: str, gold_label: str, gold: Sequence[QAPair], pred_label: str | None,
                predicted: Sequence[QAPair], metric: Metric = meteor,
                threshold: float = OLD_AVERITEC_THRESHOLD) -> ClaimScore:
    """Both evidence scores and the old AVeriTeC criterion for one claim (no prediction: pass ``[]``, None)."""
    q_only = question_only_score(predicted, gold, metric)
    qa = question_answer_score(predicted, gold, metric)
    return ClaimScore(claim_id, gold_label, pred_label, q_only, qa,
                      counts_for_averitec(qa, pred_label, gold_label, threshold))


def label_f1(gold: Sequence[str], pred: Sequence[str | None], labels: Sequence[str] = VERDICTS) -> dict[str, float]:
    """Per-label F1 (0 where a label has no gold, no predicted and so no true positive)."""
    scores = {}
    for label in labels:
        tp = sum(g == label and p == label for g, p in zip(gold, pred, strict=True))
        wrong = sum((g == label) != (p == label) for g, p in zip(gold, pred, strict=True))
        scores[label] = 2 * tp / (2 * tp + wrong) if tp + wrong else 0.0
    return scores


def aggregate(claims: Sequence[ClaimScore]) -> dict[str, object]:
    """Corpus metrics: means over claims of Q-only, Q+A and the old AVeriTeC score; label accuracy, macro-F1.

    A flat dict, so other evidence scores (``ev2r_*``) can be added beside these keys.
    """
    gold = [c.gold_label for c in claims]
    pred = [c.pred_label for c in claims]
    per_label = label_f1(gold, pred)

    def mean(values: Iterable[float]) -> float:
        values = list(values)
        return float(np.mean(values)) if values else 0.0

    return {
        "n": len(claims),
        "n_missing_predictions": sum(c.pred_label is None for c in claims),
        "q_only": mean(c.q_only for c in claims),
        "qa": mean(c.qa for c in claims),
        "old_averitec_score": mean(float(c.counted) for c in claims),
        "label_accuracy": mean(float(g == p) for g, p in zip(gold, pred, strict=True)),
        "macro_f1": mean(per_label.values()),
        "label_f1": per_label,
        "max_predicted_pairs": MAX_PREDICTED_PAIRS,
    }
