"""AIC CTU FEVER-8 batch inference: long-context RAG, one LLM call per claim (docs/pipelines/aic.md).

Usage: veracity infer aic --config configs/pipelines/aic_embedded.yaml [--max_examples 16]
                          [--knowledge_store DIR] [--proxy_own_documents false] [--output_dir runs/aic/x]

Claims are the prepared AVeriTeC records (``--claims_source averitec_dev``, official id order). Without
``--knowledge_store`` a proxy store is built in ``<output_dir>/store`` (see ``store.py``: each claim's own QA
answers under their URLs plus other claims' documents; ``--proxy_own_documents false`` = distractors only).
Writes ``records.jsonl`` (one record per claim, resumable; sharded: ``records.shard-i-of-n.jsonl``),
``predictions.json`` (AVeriTeC JSON), ``submission.csv`` (FEVER-8 ``id,claim,evi,label,split``), ``gold.json``
(the same claims' gold in the official layout), ``failures.jsonl``, ``summary.json`` (seconds per claim per stage)
and ``run_config.yaml``; unsharded runs end with ``veracity eval averitec`` into ``<output_dir>/eval``.
The output files come from this run's own records only: ``records.jsonl`` unsharded, every
``records.shard-j-of-n.jsonl`` of an i/n layout (the shards of one run), and only of the claims it runs; a file of
another layout left in the folder is never read, and a resume is refused when any file of the layout was made
under another config.
A claim whose answer never parses is a failure: it has no row in the outputs, so the scorer counts it wrong.
``--retry_errors true`` re-runs the claims whose record is an error. The run is the driver's
(``infer/pipelines/driver.py``); the pipeline is :class:`~veracity.infer.pipelines.aic.pipeline.AIC`.
"""

from __future__ import annotations

from veracity.infer.pipelines.aic.pipeline import AIC
from veracity.infer.pipelines.driver import entry

make_parser, run, main = entry(AIC, "--config configs/pipelines/aic_embedded.yaml")
