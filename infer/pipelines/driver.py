"""The one driver of every pipeline run: run directory, run record, lock, resume, shards, summary and scoring.

``veracity infer r2vc|aic|sciclaim|uts`` are each a pipeline (:class:`~veracity.infer.pipelines.contract.Pipeline`)
handed to :func:`run_pipeline`, which

1. reads and checks the items and side files — bad input is a ``DataError`` (or ``PreparedDataError``) before
   anything is written, and ``veracity.cli`` turns it into one line and exit status 2;
2. holds the single-writer lock on the batch output (``records.jsonl``, ``records.shard-i-of-n.jsonl`` for
   ``--shard i/n``: :func:`veracity.infer.batch.shard_file`) from model loading to the last output file;
3. claims the folder for one run (:mod:`veracity.infer.run_folder`): another shard layout there, or this layout's
   files (or a sibling shard running now) under another config or other weights, is a ``RunConfigMismatchError`` —
   checked first with the models the pipeline names from its options, before any loads; then loads the models
   and writes ``run_config.yaml`` (configs, models by content, decoding) after the same check with all of them
   (with ``--executor ray`` every model is named there but not loaded:
   :func:`~veracity.models.loading.deferred_loading`);
4. runs the batches (:func:`veracity.infer.batch.run_batch`: resumable after a kill, items already recorded are
   skipped, ``--retry_errors`` re-runs the failed ones, a failing item fails alone) — in this process, or with
   ``--executor ray`` in Ray actors that each load the pipeline (:mod:`veracity.infer.executors`);
5. hands the records of this run's items to the pipeline's ``finish`` (submission files) and writes
   ``summary.json`` (``summary.shard-i-of-n.json`` for a shard, so no sibling overwrites it: batch counts, items/s,
   seconds per stage; a resume with nothing to do keeps the summary of the run that did the work);
6. unsharded, calls the pipeline's scorer on the records (``metrics.json`` and what each scorer writes) and writes
   ``report.html`` (:mod:`veracity.infer.report_html`: config, metrics, plots, one row per item that opens).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_over
from veracity.config import parse_config
from veracity.data_prep.errors import DataError, InputError
from veracity.infer.batch import (
    BatchSummary,
    latest_records,
    layout_files,
    output_lock,
    parse_shard,
    run_batch,
    shard_file,
)
from veracity.infer.executors import ExecutorConfig, actor_device, run_on_ray  # ray itself: imported in run_on_ray
from veracity.infer.pipelines.contract import Item, Pipeline, Record
from veracity.infer.report_html import write_report_html
from veracity.infer.run_folder import RecordFacts, claim_folder, other_runs, summary_file
from veracity.io import write_json
from veracity.models.device import resolved_for
from veracity.models.loading import deferred_loading

logger = logging.getLogger(__name__)

def build_configs(types: tuple[type, ...], values: dict[str, Any]) -> tuple[Any, ...]:
    """One instance of each config dataclass from ``values`` (a recipe's values with the overrides); a key no
    dataclass has is a ValueError naming it, and each dataclass checks its own values (``__post_init__``)."""
    names = [{f.name for f in dataclasses.fields(t) if f.init} for t in types]
    unknown = set(values) - set().union(*names)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}: not fields of {[t.__name__ for t in types]}")
    return tuple(t(**{k: v for k, v in values.items() if k in fields}) for t, fields in zip(types, names, strict=True))


def layout_records(run_dir: Path, stem: str, shard: tuple[int, int], ids: Sequence[str]) -> list[Record]:
    """The records of items ``ids`` in the files of this run's shard layout (the last record of an id wins), in
    the order of ``ids``; an item without a record is left out."""
    latest: dict[str, Record] = {}
    for path in layout_files(run_dir, stem, shard):
        if path.is_file():
            latest.update((r["id"], r) for r in latest_records(path))
    return [latest[i] for i in ids if i in latest]


def claim(pipeline: Pipeline, run_dir: Path, shard: tuple[int, int], loaded: bool,
          facts: RecordFacts | None = None) -> None:
    """The run's claim on its folder (:func:`veracity.infer.run_folder.claim_folder`): before loading, a check with
    the models the pipeline names from its options; once loaded, the check with all of them and ``run_config.yaml``,
    whose decoding and device describe the records already there (``facts``), or before any what this run expects."""
    decoding = device = None
    if loaded:
        decoding = (facts.decoding() if facts else None) or pipeline.decoding()
        device = (facts.device() if facts else None) or pipeline.device()
    claim_folder(run_dir, pipeline.records_stem, shard, [*pipeline.configs, *pipeline.record_extras()],
                 job=f"infer {pipeline.name}", models=pipeline.model_ids(), decoding=decoding, record=loaded,
                 partial=not loaded, device=device)


def run_batches(pipeline: Pipeline, items: list[Item], output: Path, run_dir: Path, shard: tuple[int, int],
                executor: ExecutorConfig, facts: RecordFacts) -> tuple[BatchSummary, dict[str, Any]]:
    """The batches of a loaded and prepared pipeline, by ``executor``: the summary and the pipeline's stats. Each
    record is stamped with the device of the process that made it; ``facts`` counts every batch written."""
    config = pipeline.config
    if executor.executor == "local":
        summary = run_batch(items, pipeline, output, shard=shard, batch_size=pipeline.batch_size,
                            progress=config.progress, retry_errors=config.retry_errors, take_lock=False,
                            error_fields=pipeline.error_fields, stamp={"device": pipeline.device()},
                            observe=facts.observe)
        return summary, pipeline.stats()
    models = pipeline.model_ids()  # what run_config.yaml records: each actor's must match
    pipeline.close()  # the actors load their own copies; what the driver loaded would only hold memory
    return run_on_ray(pipeline, items, output, run_dir, shard=shard, retry_errors=config.retry_errors,
                      progress=config.progress, config=executor, models=models, observe=facts.observe)


def check_one_ray(folder: Path, stem: str, output: Path, shard: tuple[int, int], executor: ExecutorConfig) -> None:
    """One Ray per machine: a shard run that would start a Ray instance of its own (no ``--ray_address``) while a
    sibling shard of the same folder is running is refused — each instance would take every CPU of the machine.
    (A sibling on another machine sharing the folder shows as running too where the filesystem shares locks; give
    each machine a head of its own then, with ``--ray_address auto``.)"""
    if shard[1] == 1 or executor.ray_address or os.environ.get("RAY_ADDRESS"):
        return
    running = [path.name for path, writing in other_runs(folder, stem, output) if writing]
    if running:
        raise InputError(
            f"{folder}: {', '.join(running)} is being written by a sibling shard run with its own Ray instance; "
            f"shard {shard[0]}/{shard[1]} would start a second one on this machine. Start one (`ray start --head`) "
            "and give every shard --ray_address auto, or run one driver without --shard and with --workers K")


def run_pipeline(pipeline: Pipeline, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Run ``pipeline`` over its configured items into its ``output_dir`` (module docstring) with ``executor``
    (default: local); returns the summary, with ``metrics`` when the run was scored.

    Raises:
        DataError, PreparedDataError: bad input, before anything is written.
        OutputLockedError: another run is writing the same batch output.
        RunConfigMismatchError: the output holds records made under other settings or weights.
    """
    config, executor = pipeline.config, executor or ExecutorConfig()
    try:
        shard = parse_shard(config.shard)
    except ValueError as error:
        raise DataError("--shard", None, str(error)) from None
    out = Path(config.output_dir)
    items = pipeline.items()
    pipeline.check()
    output = out / shard_file(pipeline.records_stem, shard)
    made = [p for p in (out, *out.parents) if not p.exists()]  # the folders this run creates, deepest first
    out.mkdir(parents=True, exist_ok=True)
    try:
        # under ray the models are named as the actors will load them: on their device, not this process's
        def naming() -> Any:
            return resolved_for(actor_device(executor)) if executor.executor == "ray" else nullcontext()

        with output_lock(output):  # a refused second run must not overwrite the running one's record
            with naming():
                claim(pipeline, out, shard, loaded=False)  # another layout, config or model: refused before loading
            if executor.executor == "ray":
                check_one_ray(out, pipeline.records_stem, output, shard, executor)
            start = time.perf_counter()
            try:
                # under ray every model is only named here (models/loading.py): the actors load and run them; a
                # step of prepare that needs one (an index to build first) loads it then, in this process
                with deferred_loading() if executor.executor == "ray" else nullcontext():
                    with naming():
                        pipeline.load(out)
                        load_seconds = time.perf_counter() - start
                        made_under = RecordFacts(out, pipeline.records_stem, shard)  # before the claim rewrites it
                        claim(pipeline, out, shard, loaded=True, facts=made_under)
                    facts = pipeline.prepare(out)
                try:
                    summary, stats = run_batches(pipeline, items, output, out, shard, executor, made_under)
                finally:
                    made_under.finish()
            finally:
                pipeline.close()
            records = layout_records(out, pipeline.records_stem, shard, [str(item["id"]) for item in items])
            facts.update(pipeline.finish(records, out))
            report = {**summary.to_dict(), **facts, **stats, "load_seconds": round(load_seconds, 2),
                      "seconds_per_stage": {k: round(v, 2) for k, v in pipeline.seconds.items()}}
            if executor.executor != "local":
                report["executor"] = dataclasses.asdict(executor)
            if pipeline.unit != "items":
                report[f"{pipeline.unit}_per_second"] = round(summary.items_per_second, 4)
            summary_path = out / summary_file(shard)  # one per shard: a sibling never overwrites it
            if summary.processed or not summary_path.exists():  # a no-op resume keeps the work's timings
                write_json(summary_path, report)
            print(summary)
            stages = report["seconds_per_stage"]
            if stages:
                print("seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
            if shard[1] == 1:
                metrics = pipeline.score(records, out)
                if metrics is not None:
                    report["metrics"] = metrics
                page = write_report_html(out, pipeline, records, metrics)
                report["report_html"] = str(page)
                print(f"report: {page}")
    except BaseException:
        for folder in made:  # a run that stopped before its first file leaves no empty folder behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    return json.loads(json.dumps(report, default=str))


def entry(cls: type[Pipeline], usage: str) -> tuple[Callable[[], Any], Callable[..., dict[str, Any]],
                                                    Callable[[Sequence[str] | None], dict[str, Any]]]:
    """``(make_parser, run, main)`` of ``veracity infer <cls.name>``: the parser over the pipeline's configs and
    the executor's options, a run on parsed configs, and ``main(argv)`` (what the CLI and the tests call)."""
    def make_parser() -> Any:
        return parser_over((*cls.config_types, ExecutorConfig), prog=f"veracity infer {cls.name}")

    def run(*configs: Any, executor: ExecutorConfig | None = None) -> dict[str, Any]:
        return run_pipeline(cls(*configs), executor)

    def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
        *configs, executor = parse_config(make_parser(), argv)
        return run(*configs, executor=executor)

    make_parser.__doc__ = f"The options of `veracity infer {cls.name}` ({usage})."
    run.__doc__ = f"Run {cls.name} with parsed configs (what ``main`` does after parsing)."
    return make_parser, run, main
