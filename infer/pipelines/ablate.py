"""A pipeline's ablation, one way: a list of recipes (and overrides) run by the driver, one table.

Usage: veracity infer ablate --config configs/ablations/r2vc.yaml [--max_examples 60] [--output_dir runs/r2vc]
                             [--only embedded nli_only]
       veracity infer ablate --config configs/ablations/uts.yaml --max_examples 30

The recipe (``configs/ablations/*.yaml``) names the pipeline, the rows — each ``{name, recipe[, label,
overrides]}``, a pipeline recipe and the options it changes — the options every row shares (``overrides``), and
the ``metrics.json`` keys the table shows (``columns``, dotted; ``file.json:key`` reads another file of the row's
folder, e.g. ``m4/details.json:cite_sentences``; ``sections``: one table per metrics part, e.g.
``by_source.vitaminc``). Each row is a run of the pipeline in ``<output_dir>/<name>`` through the driver
(``driver.py``): resumable, and refused when its folder holds records made under other settings. A row scores
with the pipeline's own scorer, or with ``scorer`` (a ``veracity`` command, ``{run_dir}``, ``{ablation_dir}`` and
any option name in braces filled in: UTS's M4); a row without a recipe only runs its ``scorer`` (a reference
row). Writes ``<output_dir>/<table>.md`` (the tables) and ``<output_dir>/<table>.json`` (``tables: {section: {row
label: {column: value}}}``) and prints the tables.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import load_config_values, parse_config
from veracity.config import make_parser as parser_over
from veracity.infer.pipelines.driver import build_configs, run_pipeline
from veracity.infer.pipelines.registry import PIPELINES, SCORERS, pipeline_class, scorer_main
from veracity.io import write_json

logger = logging.getLogger(__name__)
ALL = "all"  # the section of a row's whole metrics


@dataclass
class AblationConfig:
    """What `veracity infer ablate` runs (the fields of a ``configs/ablations/*.yaml`` recipe)."""

    pipeline: str = field(default="r2vc", metadata={"help": f"The pipeline: one of {sorted(PIPELINES)}."})
    title: str = field(default="", metadata={"help": "The table's title."})
    table: str = field(default="ablation", metadata={
        "help": "The table's file name: <output_dir>/<table>.md and .json (several ablations may share a folder)."})
    output_dir: str = field(default="runs/ablation", metadata={"help": "Rows run in <output_dir>/<name>."})
    rows: list[dict] = field(default_factory=list, metadata={
        "help": "{name, recipe[, label, overrides, scorer]} per row, in the table's order."})
    overrides: dict[str, Any] = field(default_factory=dict, metadata={"help": "Options every row shares."})
    max_examples: int | None = field(default=None, metadata={"help": "Every row's max_examples (over the recipe's)."})
    columns: list[str] = field(default_factory=list, metadata={"help": "metrics.json keys the table shows."})
    sections: list[str] = field(default_factory=list, metadata={
        "help": "Parts of metrics.json (dotted, e.g. by_source.vitaminc), one table each; none: the whole."})
    scorer: list[str] = field(default_factory=list, metadata={
        "help": "A veracity command scoring each row instead of the pipeline's scorer ({run_dir}, {option})."})
    only: list[str] = field(default_factory=list, metadata={"help": "Run only these rows (by name)."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def __post_init__(self) -> None:
        if self.pipeline not in PIPELINES:
            raise ValueError(f"pipeline must be one of {sorted(PIPELINES)}, got {self.pipeline!r}")
        names = [row.get("name") for row in self.rows]
        if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"rows need a name each, none twice (got {names})")
        for row in self.rows:
            if not row.get("recipe") and not (row.get("scorer") or []):
                raise ValueError(f"row {row['name']!r}: a recipe, or a scorer for a row that only scores")
            if row.get("scorer"):
                check_scorer(row["scorer"])
            unknown = set(row) - {"name", "recipe", "label", "overrides", "scorer"}
            if unknown:
                raise ValueError(f"row {row['name']!r}: unknown keys {sorted(unknown)}")
        missing = set(self.only) - set(names)
        if missing:
            raise ValueError(f"--only names rows the recipe does not have: {sorted(missing)} (rows: {names})")
        if self.scorer:
            check_scorer(self.scorer)
        if not self.columns:
            raise ValueError("columns: name the metrics.json keys the table shows")


def make_parser() -> Any:
    return parser_over((AblationConfig,), prog="veracity infer ablate")


def lookup(metrics: dict[str, Any], path: str) -> Any:
    """``metrics["a"]["b"]`` for ``"a.b"``; None when a part is missing."""
    value: Any = metrics
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def cell(value: Any) -> str:
    """A table cell: floats to 3 decimals, a missing or undefined value as "–"."""
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def check_scorer(argv: Sequence[str]) -> None:
    """A scorer is a ``veracity eval <name> …`` command line without ``veracity`` (ValueError otherwise)."""
    if len(argv) < 2 or argv[0] != "eval" or argv[1] not in SCORERS:
        raise ValueError(f"scorer {' '.join(map(str, argv[:2]))!r}: a scorer is `eval <name> …`, <name> one of "
                         f"{sorted(SCORERS)}")


def run_scorer(argv: Sequence[str]) -> dict[str, Any]:
    """A scorer command (``eval m4 …``) run in this process; returns what its ``main`` returns."""
    check_scorer(argv)
    return scorer_main(argv[1])(list(argv[2:])) or {}


def row_metrics(config: AblationConfig, row: dict[str, Any]) -> dict[str, Any]:
    """Run one row (its recipe through the driver, then its scorer) and return the metrics the table reads."""
    run_dir = Path(config.output_dir) / row["name"]
    values = {**config.overrides, **(row.get("overrides") or {})}
    metrics: dict[str, Any] = {}
    if row.get("recipe"):
        cls = pipeline_class(config.pipeline)
        values = {**load_config_values(row["recipe"]), **values, "output_dir": str(run_dir),
                  "progress": config.progress}
        if config.max_examples is not None:
            values["max_examples"] = config.max_examples
        report = run_pipeline(cls(*build_configs(cls.config_types, values)))
        metrics = report.get("metrics") or {}
        if not metrics and (run_dir / "metrics.json").is_file():  # a resumed row: the metrics of its run
            metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    scorer = row.get("scorer") or config.scorer
    if scorer:
        fill = {**{k: str(v) for k, v in values.items()}, "run_dir": str(run_dir), "ablation_dir": config.output_dir}
        metrics = run_scorer([arg.format_map(fill) for arg in scorer])
    return metrics


def value(run_dir: Path, metrics: dict[str, Any], section: str, column: str) -> Any:
    """A column's value for one row: a key of its metrics (of ``section``), or ``file.json:key`` of its folder."""
    if ":" in column:
        name, key = column.split(":", 1)
        path = run_dir / name
        return lookup(json.loads(path.read_text(encoding="utf-8")), key) if path.is_file() else None
    return lookup(metrics, f"{section}.{column}" if section != ALL else column)


def table(config: AblationConfig, labels: dict[str, str], results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{section: {row label: {column: value}}}`` over the rows run."""
    out = Path(config.output_dir)
    return {section: {labels[name]: {c: value(out / name, metrics, section, c) for c in config.columns}
                      for name, metrics in results.items()}
            for section in config.sections or [ALL]}


def markdown(config: AblationConfig, tables: dict[str, Any]) -> str:
    """The tables as Markdown (a label with `` | `` in it fills several leading columns)."""
    parts = [f"# {config.title}"] if config.title else []
    for section, rows in tables.items():
        labels = list(rows)
        heads = ["run"] * (1 + max((label.count(" | ") for label in labels), default=0))
        lines = [f"{section} ({len(rows)} runs)" if section != ALL else f"{len(rows)} runs", "",
                 "| " + " | ".join([*heads, *config.columns]) + " |",
                 "|" + "---|" * len(heads) + "---:|" * len(config.columns)]
        for label, values in rows.items():
            cells = label.split(" | ") + [""] * (len(heads) - 1 - label.count(" | "))
            lines.append("| " + " | ".join([*cells, *(cell(values[c]) for c in config.columns)]) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def run(config: AblationConfig) -> dict[str, Any]:
    """Run the rows (all, or ``only``) and write the tables of every row that has metrics."""
    out = Path(config.output_dir)
    labels = {row["name"]: row.get("label") or row["name"] for row in config.rows}
    results: dict[str, dict[str, Any]] = {}
    for row in config.rows:
        if config.only and row["name"] not in config.only:
            previous = out / row["name"] / "metrics.json"  # a row run before keeps its place in the table
            if row.get("recipe") and not row.get("scorer") and not config.scorer and previous.is_file():
                results[row["name"]] = json.loads(previous.read_text(encoding="utf-8"))
            continue
        logger.info("ablation row %s", row["name"])
        results[row["name"]] = row_metrics(config, row)
    tables = table(config, labels, results)
    write_json(out / f"{config.table}.json", {"pipeline": config.pipeline, "columns": config.columns,
                                              "tables": tables})
    text = markdown(config, tables)
    (out / f"{config.table}.md").write_text(text, encoding="utf-8")
    print(text)
    return {"tables": tables}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    (config,) = parse_config(make_parser(), argv)
    return run(config)
