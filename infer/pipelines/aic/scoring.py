"""The old AVeriTeC score (Hungarian METEOR), as the FEVER-8 (2025) scorer computes it, as pure functions.

Per claim:
- each QA pair is flattened to ``"question answer"``; predictions are cut to their first 10 pairs, gold is not;
- METEOR (nltk ``single_meteor_score``, reference first, both ``word_tokenize``-d) of every predicted against
  every gold string, the best one-to-one matching (Hungarian, maximised), matched sum / number of gold strings;
- Q-only does the same on questions alone, with repeated gold questions kept once; Q+A keeps every gold pair;
- the claim counts for the old AVeriTeC score when its Q+A score is strictly above 0.25 and the label matches.
Over claims: means of the three, plus label accuracy and macro-F1 over the four verdicts.

``evi`` strings (the FEVER-8 CSV column) hold ``question + "\\t\\t\\n" + answer`` pairs, each ended by
``"\\t\\t\\n\\n"``. METEOR needs NLTK's WordNet and Punkt: call ``veracity.models.nltk_data.ensure_nltk_data()``
once before ``meteor``; every other function takes the pairwise metric as an argument. The numbers depend on
nltk's ``word_tokenize``: nltk 3.9.3+ splits at dashes, which the 2025 scorer did not (pinned <3.9.3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

VERDICTS = ("Supported", "Refuted", "Not Enough Evidence", "Conflicting Evidence/Cherrypicking")
MAX_PREDICTED_PAIRS = 10
OLD_AVERITEC_THRESHOLD = 0.25  # FEVER-8; the 2024 task reported 0.1 … 0.5
QA_SEPARATOR = "\t\t\n"
PAIR_TERMINATOR = "\t\t\n\n"

Metric = Callable[[str, str], float]  # (candidate, reference) -> similarity


@dataclass(frozen=True)
class QAPair:
    question: str
    answer: str

    @property
    def text(self) -> str:
        """The string METEOR compares: question and answer joined by one space."""
        return f"{self.question} {self.answer}"


@dataclass(frozen=True)
class ClaimScore:
    """One claim's scores; ``pred_label`` None means the system gave no prediction for this claim."""

    id: str
    gold_label: str
    pred_label: str | None
    q_only: float
    qa: float
    counted: bool


def parse_evi(evi: str) -> list[QAPair]:
    """Split an ``evi`` string into QA pairs (empty pieces skipped, as the official scorer does).

    Raises:
        ValueError: a piece without exactly one question/answer separator.
    """
    pairs = []
    for number, piece in enumerate((p for p in evi.split(PAIR_TERMINATOR) if p != ""), start=1):
        parts = piece.split(QA_SEPARATOR)
        if len(parts) != 2:
            raise ValueError(f"QA pair {number} has {len(parts) - 1} question/answer separators (\\t\\t\\n), "
                             f"expected 1: {piece[:60]!r}")
        pairs.append(QAPair(parts[0], parts[1]))
    return pairs


def format_evi(pairs: Iterable[QAPair]) -> str:
    """The inverse of ``parse_evi``: the FEVER-8 CSV ``evi`` string."""
    return "".join(f"{p.question}{QA_SEPARATOR}{p.answer}{PAIR_TERMINATOR}" for p in pairs)


@lru_cache(maxsize=65536)
def _tokens(text: str) -> tuple[str, ...]:
    # every string meets ~10 others per claim; tokenising once is the same tokens, faster
    from nltk import word_tokenize

    return tuple(word_tokenize(text))


def meteor(candidate: str, reference: str) -> float:
    """nltk METEOR of ``candidate`` against ``reference`` on ``word_tokenize`` tokens (needs ensure_nltk_data)."""
    from nltk.translate.meteor_score import single_meteor_score

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
    from scipy.optimize import linear_sum_assignment

    if scores.shape[1] == 0:
        raise ValueError("no gold items: the evidence score is undefined")
    rows, cols = linear_sum_assignment(scores, maximize=True)
    return float(scores[rows, cols].sum() / scores.shape[1])


def question_only_score(predicted: Sequence[QAPair], gold: Sequence[QAPair], metric: Metric = meteor) -> float:
    """Q-only evidence score: first 10 predicted questions against the distinct gold questions."""
    pred_questions = [p.question for p in predicted[:MAX_PREDICTED_PAIRS]]
    gold_questions = list(dict.fromkeys(p.question for p in gold))  # deduplicated, first occurrence order
    return hungarian_score(pairwise_scores(pred_questions, gold_questions, metric))


def question_answer_score(predicted: Sequence[QAPair], gold: Sequence[QAPair], metric: Metric = meteor) -> float:
    """Q+A evidence score: first 10 predicted "question answer" strings against every gold one."""
    return hungarian_score(pairwise_scores([p.text for p in predicted[:MAX_PREDICTED_PAIRS]],
                                           [p.text for p in gold], metric))


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
