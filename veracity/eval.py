"""The scorers as functions on plain records, for a notebook: what ``veracity eval …`` computes, without files.

    from veracity import eval as scores

    scores.r2vc(records)          # R2VC records (batch records or their results): accuracy, macro-F1, ECE, AURC…
    scores.sciclaim(records)      # SciClaimSeekers records: {"mrr@5", "hit@1", "hit@5", "n"}
    scores.checkthat_scores(rankings, gold)  # post id → ranked ids, post id → gold ids
    scores.m4_items(items, articles, judge, predict), scores.m4_corpus(rows)   # UTS articles (M4, an LLM judge)

Errors count as every scorer here counts them: a record whose status is ``error`` is a wrong answer (R2VC: when it
carries its gold label; SciClaimSeekers: a post without a ranking scores 0). AIC's records are scored against the
AVeriTeC gold by ``veracity eval averitec`` (METEOR, Ev²R) on the run's ``submission.csv`` and ``gold.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from veracity.infer.eval.m4 import corpus_metrics as m4_corpus
from veracity.infer.eval.m4 import score_items as m4_items
from veracity.infer.eval.r2vc import evaluate as r2vc_metrics
from veracity.infer.eval.sciclaim import checkthat_scores

__all__ = ["checkthat_scores", "m4_corpus", "m4_items", "r2vc", "r2vc_metrics", "sciclaim"]


def _split(records: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(results of the ok records, the error records); a plain result (no ``status``) is an ok one."""
    results, errors = [], []
    for record in records:
        if record.get("status") == "error":
            errors.append(record)
        else:
            results.append(record["result"] if "status" in record else record)
    return results, errors


def r2vc(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The metrics ``veracity eval r2vc`` writes to ``metrics.json``, from R2VC records."""
    results, errors = _split(records)
    if not results and not errors:
        return {"n": 0, "n_errors": 0, "errors": 0}
    return {**r2vc_metrics(results, errors), "errors": len(errors)}


def sciclaim(records: Sequence[dict[str, Any]]) -> dict[str, float | int]:
    """MRR@5, hit@1, hit@5 over the records' posts that carry gold ids (a failed post scores 0)."""
    results, errors = _split(records)
    rankings = {str(r["post_id"]): [d for d, _ in r["ranking"]] for r in results}
    gold = {str(r["post_id"]): r["gold"] for r in results if r.get("gold")}
    gold.update({str(r["id"]): r["gold"] for r in errors if r.get("gold")})
    return checkthat_scores(rankings, gold)
