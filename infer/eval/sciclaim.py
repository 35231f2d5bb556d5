"""CheckThat! source-retrieval scorer: MRR@5, Hit@1, Hit@5 of a submission TSV against gold posts.

Usage: veracity eval sciclaim --submission S.tsv --gold posts.tsv --output_dir O [--only_submitted true]

The CheckThat definition (the organisers' notebook): per post, 1 / rank of the gold id within the first 5
predictions, else 0, averaged over the gold posts; a post the submission lacks scores 0. Where a post has several
gold ids (the built Climate-FEVER task), the first of them in the ranking counts. Writes ``O/metrics.json`` with
exactly ``mrr@5``, ``hit@1``, ``hit@5`` and ``n`` (the posts scored).

Errors follow the project's one rule (an error is a wrong answer, and its count is shown): a post the submission
lacks is the only error that can reach this scorer (``veracity infer sciclaim`` ranks every post or stops; an LLM
answer that does not parse keeps its RRF slot, counted in ``summary.json``: a ranking, not an error). It scores 0
in every metric and the count is logged ("N of M gold posts have no prediction"); ``metrics.json`` keeps the
CheckThat keys only, so no ``n_errors`` key. ``--only_submitted true`` (a run on a subset of the posts) leaves the
unsubmitted posts out instead: they were never asked, not failed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.checkthat_files import read_posts, read_submission
from veracity.data_prep.errors import DataError
from veracity.infer.retrieval.metrics import hit_at_k, reciprocal_rank
from veracity.io import write_json

logger = logging.getLogger(__name__)


@dataclass
class SciClaimEvalArgs:
    submission: str = field(metadata={"help": "Submission TSV: post_id<TAB>[uid1, …, uid5]."})
    gold: str = field(metadata={"help": "Posts TSV with the gold column (cord_uid), e.g. the CheckThat dev file."})
    output_dir: str = field(metadata={"help": "Where metrics.json is written."})
    only_submitted: bool = field(default=False, metadata={
        "help": "Score only the gold posts the submission has (a subset run) instead of counting the rest as 0."})


def checkthat_scores(rankings: Mapping[str, Sequence[str]], gold: Mapping[str, Sequence[str]],
                     only_submitted: bool = False) -> dict[str, float | int]:
    """``{"mrr@5", "hit@1", "hit@5", "n"}`` over the gold posts (pure)."""
    posts = [p for p in gold if p in rankings] if only_submitted else list(gold)
    rr = [reciprocal_rank(list(rankings.get(p, [])), set(gold[p]), 5) for p in posts]
    h1 = [hit_at_k(list(rankings.get(p, [])), set(gold[p]), 1) for p in posts]
    h5 = [hit_at_k(list(rankings.get(p, [])), set(gold[p]), 5) for p in posts]
    n = len(posts)
    return {"mrr@5": sum(rr) / n if n else 0.0, "hit@1": sum(h1) / n if n else 0.0,
            "hit@5": sum(h5) / n if n else 0.0, "n": n}


def make_parser() -> Any:
    return parser_for((SciClaimEvalArgs,), "veracity eval sciclaim")


def main(argv: Sequence[str] | None = None) -> dict[str, float | int]:
    (args,) = parse_config(make_parser(), argv)
    # a bad row is a DataError naming file, line and field; veracity.cli prints it (exit status 2)
    rankings = read_submission(args.submission)
    posts = read_posts(args.gold)
    if not any(p.gold for p in posts):
        raise DataError(args.gold, 1, "no gold ids (expected a cord_uid or gold_id column)", field="cord_uid")
    gold = {p.post_id: p.gold for p in posts if p.gold}
    missing = sum(p not in rankings for p in gold)
    unknown = sum(p not in gold for p in rankings)
    if missing:
        logger.warning("%d of %d gold posts have no prediction (%s)", missing, len(gold),
                       "left out" if args.only_submitted else "scored 0")
    if unknown:
        logger.warning("%d submitted posts are not in the gold file (ignored)", unknown)
    metrics = checkthat_scores(rankings, gold, args.only_submitted)
    write_json(Path(args.output_dir) / "metrics.json", metrics)
    print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
    return metrics
