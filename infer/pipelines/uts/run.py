"""UTS article drafting for CheckThat 2026 Task 3 (docs/pipelines/uts.md): stub drafter, cite frames, ShadowVal.

Usage: veracity infer uts --config configs/pipelines/uts_embedded.yaml [--source averitec_task3_dev] [--split dev]
                          [--max_examples 30] [--shadowval true] [--output_dir runs/uts/embedded]
       veracity infer uts --config configs/pipelines/uts_embedded.yaml --items my_task3.json
                          [--articles_dir DIR] --output_dir runs/uts/mine

Items come from prepared AVeriTeC Task-3 records (``averitec_task3_{train,dev}``) or ``--items`` (the task-item
schema or WatClaimCheck records, see ``items.py``). Writes ``items.jsonl`` (the items drafted, in the task-item
schema), ``records.jsonl`` (one record per item with every intermediate, resumable), ``articles.jsonl``
(``{"id", "factchecking_article"}``, the task's submission format), ``summary.json`` and ``run_config.yaml``.
Re-running into the same folder resumes: items already in ``records.jsonl`` are kept (``--retry_errors true``
re-runs the failed ones), and a changed config is refused (choose a fresh ``--output_dir``); ``--shard i/n`` drafts
one share (``records.shard-i-of-n.jsonl``). The run is the driver's (``infer/pipelines/driver.py``); the pipeline
is :class:`~veracity.infer.pipelines.uts.pipeline.UTS`.
Score with ``veracity eval m4 --articles O/articles.jsonl --items O/items.jsonl --output_dir O/m4``.
"""

from __future__ import annotations

from veracity.infer.pipelines.driver import entry
from veracity.infer.pipelines.uts.pipeline import UTS

make_parser, run, main = entry(UTS, "--config configs/pipelines/uts_embedded.yaml")
