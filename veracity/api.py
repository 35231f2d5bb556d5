"""The Python API: a pipeline loaded once from a recipe, run on your rows, returning the records the command line
writes.

    from veracity import load_pipeline

    with load_pipeline("configs/pipelines/r2vc_embedded.yaml", model="embedded", calibrator=None) as p:
        records = p.run([{"id": "1", "claim": "The bridge is 120 m long.", "evidence": ["It is 120 m long."]}])
    print(records[0]["result"]["prediction"])

A record is what ``records.jsonl`` holds: ``{"id", "status": "ok", "result", "seconds"}`` or ``{"id", "status":
"error", "error", "seconds"}`` (a failing row fails alone). Keyword overrides are fields of the pipeline's config
dataclasses, as the command's options are. Nothing is written to a run directory unless ``run_dir`` is given to
:meth:`LoadedPipeline.run`; caches and indexes a pipeline builds go to a temporary folder removed on ``close()``.
Rows: R2VC ``{id, claim[, evidence, label]}`` (the ``--claims`` format), AIC ``{id, claim}`` (the claim's id in
the knowledge store), SciClaimSeekers ``{id, text[, gold]}``, UTS the task-item schema (``items.jsonl``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from veracity.config import load_config_values
from veracity.data_prep.errors import DataError
from veracity.infer.batch import IdCheck, batch_records, output_lock, run_batch
from veracity.infer.pipelines.contract import Item, Pipeline, Record
from veracity.infer.pipelines.driver import build_configs, claim, layout_records
from veracity.infer.pipelines.registry import pipeline_class
from veracity.infer.run_folder import RecordFacts


class LoadedPipeline:
    """A pipeline with its models loaded once; :meth:`run` as often as you like, then :meth:`close` (or use it as a
    context manager)."""

    def __init__(self, pipeline: Pipeline, scratch: tempfile.TemporaryDirectory | None):
        self.pipeline, self._scratch = pipeline, scratch
        self.config = pipeline.config
        self.closed = False

    def items(self, rows: Iterable[Item], source: str = "rows") -> list[Item]:
        """Your rows as the pipeline's items (checked: an id on every row, no id twice, the pipeline's fields)."""
        ids, items = IdCheck(source), []
        for line, row in enumerate(rows, start=1):
            if not isinstance(row, dict):
                raise DataError(source, line, f"expected a mapping, got {type(row).__name__}")
            ids.check(line, row)
            items.append(self.pipeline.row_item(row, source, line))
        return items

    def run(self, rows: Iterable[Item], run_dir: str | Path | None = None) -> list[Record]:
        """One record per row, in order (module docstring). With ``run_dir``, the records also go to
        ``<run_dir>/records.jsonl`` with ``run_config.yaml``, as a run of the command does (and a second call with
        the same rows resumes: rows already recorded are not run again)."""
        if self.closed:
            raise RuntimeError("the pipeline is closed; load it again")
        items = self.items(rows)
        if run_dir is not None:
            return self._run_into(items, Path(run_dir))
        size = max(self.pipeline.batch_size, 1)
        records = [record for first in range(0, len(items), size)
                   for record in batch_records(self.pipeline, items[first : first + size],
                                               error_fields=self.pipeline.error_fields,
                                               stamp={"device": self.pipeline.device()})]
        return json.loads(json.dumps(records, ensure_ascii=False, default=str))  # as the file holds them

    def _run_into(self, items: list[Item], run_dir: Path) -> list[Record]:
        output = run_dir / "records.jsonl"
        run_dir.mkdir(parents=True, exist_ok=True)
        with output_lock(output):
            made_under = RecordFacts(run_dir, "records", (0, 1))
            claim(self.pipeline, run_dir, (0, 1), loaded=True, facts=made_under)  # one folder, one run: as the
            try:                                                                   # command claims it
                run_batch(items, self.pipeline, output, batch_size=self.pipeline.batch_size, progress=False,
                          take_lock=False, error_fields=self.pipeline.error_fields,
                          stamp={"device": self.pipeline.device()}, observe=made_under.observe)
            finally:
                made_under.finish()
        return layout_records(run_dir, "records", (0, 1), [str(item["id"]) for item in items])

    def close(self) -> None:
        """Release the engines and remove the temporary folder."""
        if not self.closed:
            self.pipeline.close()
            if self._scratch is not None:
                self._scratch.cleanup()
            self.closed = True

    def __enter__(self) -> LoadedPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_pipeline(config: str | Path | None = None, *, pipeline: str | None = None, **overrides: Any
                  ) -> LoadedPipeline:
    """Load a pipeline from a YAML recipe (``configs/pipelines/*.yaml``; its ``base`` chain resolved) with keyword
    overrides of its config fields, checked and with every model loaded once.

    Args:
        config: the recipe; its file name says the pipeline (``r2vc_*``, ``aic_*``, ``sciclaimseekers_*``,
            ``uts_*``) unless ``pipeline`` does. None: the pipeline's defaults.
        pipeline: ``r2vc``, ``aic``, ``sciclaim`` or ``uts``.
        overrides: config fields, e.g. ``model="embedded"``, ``nli_model=...``, ``calibrator=None``.

    Raises:
        DataError, PreparedDataError: a side file (calibrator, knowledge store, collection) is missing or bad.
        ValueError: an unknown option, or a value the config refuses.
    """
    values = load_config_values(config) if config is not None else {}
    name = pipeline or (Path(config).stem.split("_")[0] if config is not None else None)
    if name is None:
        raise ValueError("give a recipe or pipeline='r2vc' | 'aic' | 'sciclaim' | 'uts'")
    cls = pipeline_class(name)
    scratch = None
    if "output_dir" not in overrides:  # no run directory: what the pipeline caches goes to a temporary folder
        scratch = tempfile.TemporaryDirectory(prefix=f"veracity-{cls.name}-")
        overrides["output_dir"] = scratch.name
    loaded = cls(*build_configs(cls.config_types, {**values, **overrides}))
    run_dir = Path(loaded.config.output_dir)
    try:
        loaded.check()
        loaded.load(run_dir)
        loaded.prepare(run_dir)
    except BaseException:
        loaded.close()
        if scratch is not None:
            scratch.cleanup()
        raise
    return LoadedPipeline(loaded, scratch)
