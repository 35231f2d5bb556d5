"""UTS article drafting for CheckThat 2026 Task 3 (SPEC §4): stub drafter, cite frames, ShadowVal.

Usage: veracity infer uts --config configs/pipelines/uts_embedded.yaml [--source averitec_task3_dev] [--split dev]
                          [--max_examples 30] [--shadowval true] [--output_dir runs/uts/embedded]
       veracity infer uts --config configs/pipelines/uts_embedded.yaml --items my_task3.json
                          [--articles_dir DIR] --output_dir runs/uts/mine

Items come from prepared AVeriTeC Task-3 records (``averitec_task3_{train,dev}``) or ``--items`` (the task-item
schema or WatClaimCheck records, see ``items.py``). Writes ``items.jsonl`` (the items drafted, in the task-item
schema), ``records.jsonl`` (one record per item with every intermediate, resumable), ``articles.jsonl``
(``{"id", "factchecking_article"}``, the task's submission format), ``summary.json`` and ``run_config.yaml``.
Re-running into the same folder resumes: items already in ``records.jsonl`` are kept, so a changed config needs a
fresh ``--output_dir``.
Score with ``veracity eval m4 --articles O/articles.jsonl --items O/items.jsonl --output_dir O/m4``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.data_prep.task3_items import TaskItem, from_article_item, read_items
from veracity.infer.pipelines.uts.config import UTSConfig
from veracity.models.engine import EngineConfig

logger = logging.getLogger(__name__)


def make_parser() -> Any:
    from veracity.config import make_parser as parser

    return parser((UTSConfig, EngineConfig), prog="veracity infer uts")


def load_task_items(config: UTSConfig) -> list[TaskItem]:
    """The items to draft: ``--items``, or the prepared source (of ``--split`` when given), first N in order."""
    if config.items:
        items = read_items(config.items, config.articles_dir, config.review_dir)
    else:
        from veracity.data_prep.prepared import read_prepared
        from veracity.data_prep.schema import ArticleItem

        records = read_prepared(config.prepared_dir, config.source, [config.split] if config.split else None)
        items = [from_article_item(r) for r in records if isinstance(r, ArticleItem)]
    return items[: config.max_examples] if config.max_examples else items


def run(config: UTSConfig, engine_config: EngineConfig) -> dict[str, Any]:
    """Draft with parsed settings (what ``main`` does after parsing)."""
    from veracity.data_prep.errors import DataError
    from veracity.data_prep.prepared import PreparedDataError
    from veracity.infer.batch import latest_records, run_batch
    from veracity.infer.pipelines.uts.pipeline import UTSPipeline
    from veracity.io import write_json, write_jsonl
    from veracity.rundir import write_run_config

    try:
        items = load_task_items(config)
    except (DataError, PreparedDataError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    out = Path(config.output_dir)
    pipeline = UTSPipeline(config, engine_config)
    try:
        models = {"judge": pipeline.judge.name} if getattr(pipeline.judge, "name", None) else {}
        write_run_config(out, config, engine_config, job="infer uts", models=models, resumes=out / "records.jsonl")
        write_jsonl(out / "items.jsonl", [item.to_dict() for item in items])
        summary = run_batch([item.to_dict() for item in items], pipeline, out / "records.jsonl",
                            batch_size=config.items_per_call, progress=config.progress, retry_errors=True)
    finally:
        pipeline.close()
    wanted = {item.id for item in items}
    records = [r for r in latest_records(out / "records.jsonl") if r["id"] in wanted]
    drafted = [r["result"] for r in records if r.get("status") == "ok"]
    write_jsonl(out / "articles.jsonl", [{"id": r["id"], "factchecking_article": r["factchecking_article"]}
                                        for r in drafted])
    outcomes: dict[str, int] = {}
    for record in drafted:
        for outcome, count in record["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
    report = {**summary.to_dict(), "items": len(items), "articles": len(drafted), "cite_outcomes": outcomes,
              "judge": pipeline.judge.stats.to_dict() if hasattr(pipeline.judge, "stats") else None}
    write_json(out / "summary.json", report)
    print(summary)
    print(f"{len(drafted)} articles → {out / 'articles.jsonl'}; cites: {outcomes}")
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from veracity.config import parse_config

    return run(*parse_config(make_parser(), argv))
