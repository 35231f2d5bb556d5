"""The pipeline contract: what each of the four pipelines declares, and nothing about how a run is kept.

A pipeline is made from its parsed configs (``config_types``, the first one holding ``output_dir``, ``shard``,
``retry_errors`` and ``progress``) and loads nothing until asked. :func:`~veracity.infer.pipelines.driver.run_pipeline`
runs it from the command line and calls, in this order:

- ``items()``: the configured items, read and checked (bad input: a DataError before anything is written);
- ``check()``: side files and settings, checked before anything is written (R2VC's calibrator);
- ``load(run_dir)``: every model, loaded once (``run_dir``: where caches and indexes go);
- ``model_ids()`` and ``decoding()``: each model a record depends on, by content (path + fingerprint: embedders,
  cross-encoders, verifier, generator), and how the generator decodes, for the run record (a resume must match);
  ``model_ids()`` is also called before ``load``, where it names the models it can from the options alone, so a
  resume under another model is refused before any model loads;
- ``prepare(run_dir)``: side inputs a run keeps in its folder (AIC's proxy store and ``gold.json``);
- ``__call__(items)``: a batch of items → one record, or the item's Exception, per item;
- ``close()``: the engines released;
- ``finish(records, run_dir)``: the files made from the records (submissions, articles) → facts for summary.json;
- ``score(records, run_dir)``: the scorer (unsharded runs): writes ``metrics.json`` etc., returns the metrics.

``report.html`` (:func:`~veracity.infer.report_html.write_report_html`) shows each record through the class's
``report_item`` (the record as JSON unless a pipeline says more) with ``report_flags`` as its filters' legend.

With ``--executor ray`` the driver still calls each of these on its own instance (``close()`` before the batches),
and each Ray actor makes a fresh instance from the same configs and calls ``load_worker(run_dir)`` once, then
``__call__`` on its batches (``stats()`` and ``seconds`` are read from the actors).

``records`` are the batch records of this run's items (``{"id", "status", "result" | "error", "seconds"}``, the
last one of an id), in item order. :func:`veracity.load_pipeline` (the Python API) calls ``check``, ``load`` and
``prepare`` once, then ``__call__`` on a user's rows, each made an item by ``row_item(row, source, line)``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from veracity.infer.report_html import DEFAULT_FLAG_MEANINGS, ReportItem, generic_item
from veracity.models.device import resolve_device

Item = dict[str, Any]
Record = dict[str, Any]


class Pipeline:
    """Base of the four pipelines (a subclass overrides what it has; the defaults are "nothing")."""

    #: the command ``veracity infer <name>`` and the run record's ``job``
    name: ClassVar[str] = ""
    #: the dataclasses its options and YAML recipes fill, in the order the run record lists them
    config_types: ClassVar[tuple[type, ...]] = ()
    #: item fields copied into an error record (R2VC: gold and source, so its scorer counts a failed claim wrong)
    error_fields: ClassVar[tuple[str, ...]] = ()
    #: what an item is, for summary.json's ``<unit>_per_second``
    unit: ClassVar[str] = "items"
    #: the batch output's file stem: ``records.jsonl``, ``records.shard-i-of-n.jsonl``
    records_stem: ClassVar[str] = "records"
    #: what report.html's filters (wrong, abstained, error) mean for this pipeline's items
    report_flags: ClassVar[dict[str, str]] = DEFAULT_FLAG_MEANINGS

    def __init__(self, *configs: Any):
        if len(configs) != len(self.config_types):
            raise TypeError(f"{type(self).__name__} takes {len(self.config_types)} configs, got {len(configs)}")
        self.configs = configs
        self.config = configs[0]
        self.seconds: dict[str, float] = defaultdict(float)  # seconds per stage, summed over the run's batches

    # --- what the run needs to know ----------------------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        """Items per call of :meth:`__call__`."""
        return 1

    def record_extras(self) -> list[dict[str, Any]]:
        """Mappings added to the run record beside the configs (R2VC: the risk-control certificate's scope)."""
        return []

    # --- the steps ---------------------------------------------------------------------------------------------

    def items(self) -> list[Item]:
        raise NotImplementedError

    def row_item(self, row: Item, source: str, line: int) -> Item:
        """A user's row (ids already checked) as an item; a bad one is a DataError naming ``source`` and ``line``."""
        raise NotImplementedError(f"{self.name}: the Python API takes no rows for this pipeline")

    def check(self) -> None:
        """Side files and settings, checked before anything is written."""

    def load(self, run_dir: Path) -> None:
        raise NotImplementedError

    def load_worker(self, run_dir: Path) -> None:
        """Get ready to run batches in another process (a Ray actor) of a run whose driver has already called
        ``items``, ``check``, ``load`` and ``prepare``: load the models, read what ``prepare`` wrote, write nothing.
        Default: :meth:`load`."""
        self.load(run_dir)

    def model_ids(self) -> dict[str, str]:
        """Each model a record depends on, by content; before :meth:`load`, those named from the options alone."""
        return {}

    def decoding(self) -> dict[str, Any] | None:
        return None

    def device(self) -> str:
        """Where this run's models are: its ``--device`` (the engine config's) resolved, for the run record."""
        spec = next((c.device for c in self.configs if isinstance(getattr(c, "device", None), str)), "auto")
        return resolve_device(spec)

    def prepare(self, run_dir: Path) -> dict[str, Any]:
        """Side inputs kept in the run folder; returns facts for summary.json."""
        return {}

    def __call__(self, items: Sequence[Item]) -> list[Record | Exception]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what :meth:`load` holds (engines); a closed pipeline can be loaded again."""

    def finish(self, records: Sequence[Record], run_dir: Path) -> dict[str, Any]:
        """Files made from the records; returns facts for summary.json."""
        return {}

    def score(self, records: Sequence[Record], run_dir: Path) -> dict[str, Any] | None:
        """The pipeline's scorer on the records (None: it has none the run can call)."""
        return None

    def stats(self) -> dict[str, Any]:
        """What the loaded models counted (verifier windows, rerank pairs) for summary.json."""
        return {}

    @classmethod
    def report_item(cls, result: Record) -> ReportItem:
        """One item of ``report.html`` from its output record (an ok record's ``result``): the summary cells, the
        view that opens (HTML from :mod:`veracity.infer.report_html`'s helpers, every text escaped) and its flags.
        The default shows the record as JSON."""
        return generic_item(result)
