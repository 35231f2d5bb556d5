"""``report.html``: one self-contained page per pipeline run — what ran, how it scored, and why each item came out so.

Usage: python -m veracity.infer.report_html RUN_DIR   (writes RUN_DIR/report.html from the run's files)

The driver calls :func:`write_report_html` once a run is scored. The page needs no network: the run's config and
models (``run_config.yaml``), the metrics (``metrics.json``: nested tables as tables, the rest flattened), the run's
PNG plots inline as ``data:`` URIs, and one row per item that opens to show what decided it. How an item opens is
its pipeline's :meth:`~veracity.infer.pipelines.contract.Pipeline.report_item` (the record as JSON by default).
The filters (all, wrong, abstained, error) are CSS radio buttons; one small inline script sorts and searches.

Every piece of record text is escaped here (evidence is untrusted: a passage holding ``<script>`` shows as text).
Renderers build their HTML with :func:`esc`, :func:`text`, :func:`table` and :func:`kv`, whose output is
:class:`Html` (already safe) and is not escaped twice. A run of thousands of items stays usable: each part is built
once and joined (no quadratic concatenation), long texts show their head with the rest behind "show more", and only
the first ``detail_limit`` items (flagged ones first) carry their opened view.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from veracity.data_prep.errors import InputError
from veracity.infer.report_assets import CSS, SCRIPT
from veracity.infer.report_header import confusion_html, glossary_html, header_html, metric_definition
from veracity.infer.report_text import (  # noqa: F401 - the views import them from here
    TEXT_LIMIT,
    Html,
    esc,
    fmt,
    json_view,
    judged,
    kv,
    link,
    section,
    shown,
    table,
    text,
)
from veracity.io import atomic_writer

logger = logging.getLogger(__name__)

FLAGS = ("wrong", "abstained", "error")  # every page's filters; a pipeline's report_flags may add more
DEFAULT_FLAG_MEANINGS = {"wrong": "the prediction differs from the gold label",
                         "abstained": "the pipeline declined to answer", "error": "the item failed (error record)"}
# How a filter is named on the page when its flag is not one word (a flag is also a CSS class: no spaces).
FLAG_NAMES = {"abstained-right": "abstained, label right", "answered-wrong": "answered, wrong"}
# A row's badge of such a flag, short (beside "abstained" or "wrong"); "" for none: "answered, wrong" is a "wrong"
# badge without "abstained".
FLAG_BADGES = {"abstained-right": "label right", "answered-wrong": ""}
DETAIL_LIMIT = 2000  # items whose opened view the page carries (flagged ones first)
CELL_CHARS = 160  # characters of a summary cell (the opened view has the whole text)


@dataclass
class ReportItem:
    """One item of the page: its summary cells (a short value each, in column order), its opened view (Html made
    with this module's helpers) and its flags (of :data:`FLAGS` and the pipeline's ``report_flags``)."""

    cells: dict[str, Any]
    body: str
    flags: frozenset[str] = frozenset()


def generic_item(result: Mapping[str, Any]) -> ReportItem:
    """Any pipeline's record: its short scalar fields as cells, ``wrong`` when a gold label and a prediction (or
    label) differ, and the whole record as JSON."""
    cells = {k: v for k, v in result.items()
             if k != "id" and isinstance(v, (str, int, float, bool)) and len(str(v)) <= 60}
    cells = dict(list(cells.items())[:5])
    predicted = result.get("prediction", result.get("label"))
    wrong = result.get("gold") is not None and predicted is not None and predicted != result["gold"]
    return ReportItem(cells, json_view(dict(result)), frozenset({"wrong"} if wrong else ()))


def error_item(record: Mapping[str, Any]) -> ReportItem:
    """An error record of the batch runner (the item failed): the error and what the record kept of the item."""
    kept = {k: v for k, v in record.items() if k not in ("id", "status", "error")}
    body = section("error", f"<pre>{text(record.get('error'))}</pre>") + (kv(kept) if kept else "")
    return ReportItem({"gold": record["gold"]} if record.get("gold") is not None else {}, body, frozenset({"error"}))


# --- the page ----------------------------------------------------------------------------------------------------


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings as ``a.b.c`` keys (lists stay values)."""
    if isinstance(value, Mapping) and value:
        return [pair for k, v in value.items() for pair in flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    return [(prefix, value)]


def is_matrix(value: Any) -> bool:
    """A mapping of mappings (by_source, confusion, an ablation's rows): shown as one table."""
    return isinstance(value, Mapping) and len(value) > 1 and all(isinstance(v, Mapping) and v for v in value.values())


def metrics_html(metrics: Mapping[str, Any] | None) -> Html:
    """The metrics: scalars (nested ones flattened) in one table, each name with its definition as a tooltip; each
    mapping of mappings as its own table (the confusion matrix with its gold and predicted axes); then a glossary of
    the metrics reported."""
    if not metrics:
        return Html('<p class="note">not scored: this run wrote no metrics</p>')
    plain = [pair for k, v in metrics.items() if not is_matrix(v) for pair in flatten(v, k)]
    parts = ['<div class="metrics">', *(f'<div><span{defined(k)}>{esc(k)}</span><b>{esc(fmt(v))}</b></div>'
                                        for k, v in plain), '</div><div class="metrics-tables">']
    for name, matrix in metrics.items():
        if is_matrix(matrix) and name == "confusion":
            parts.append(f"<div>{section('confusion matrix', confusion_html(matrix))}</div>")
        elif is_matrix(matrix):
            rows = {str(k): dict(flatten(v)) for k, v in matrix.items()}
            columns = list(dict.fromkeys(c for row in rows.values() for c in row))
            if len(columns) > max(len(rows), 6):  # by_source: a metric per row, a source per column
                rows, columns = {c: {k: r.get(c) for k, r in rows.items()} for c in columns}, list(rows)
            grid = table(["", *columns], [[k, *(r.get(c) for c in columns)] for k, r in rows.items()])
            if len(rows) > 8:  # a long one (by_source transposed) folded, so the items stay near the top
                parts.append(f"<div><details><summary><b>{esc(name)}</b> ({len(rows)} rows)</summary>{grid}</details>"
                             "</div>")
            else:
                parts.append(f"<div>{section(name, grid)}</div>")
    return Html("".join(parts) + "</div>" + glossary_html([k for k, _ in plain]))


def defined(name: str) -> str:
    """A metric name's definition as its ``title`` attribute ('' when the page does not know the name)."""
    definition = metric_definition(name)
    return f' title="{esc(definition)}"' if definition else ""


def run_html(run_config: Mapping[str, Any] | None, summary: Mapping[str, Any] | None,
             config_names: Sequence[str] = ()) -> Html:
    """Each config, the versions, the environment and the run summary behind one click each (the header above the
    metrics says what ran: :func:`~veracity.infer.report_header.header_html`)."""
    if not run_config:
        return Html('<p class="note">no run_config.yaml</p>')
    parts = []
    configs = run_config.get("config")
    configs = configs if isinstance(configs, list) else [configs]
    for k, config in enumerate(configs):
        name = config_names[k] if k < len(config_names) else f"config {k + 1}"
        pairs = flatten(config) if isinstance(config, Mapping) else [("value", config)]
        parts.append(f"<details><summary>{esc(name)} ({len(pairs)} fields)</summary>{kv(pairs)}</details>")
    for title, value in (("versions", run_config.get("versions")), ("environment", run_config.get("env")),
                         ("run summary (summary.json)", summary)):
        if value:
            parts.append(f"<details><summary>{esc(title)}</summary>{kv(flatten(value))}</details>")
    return Html("".join(parts))


def plots_html(plots: Mapping[str, bytes]) -> Html:
    if not plots:
        return Html('<p class="note">this run wrote no plots</p>')
    return Html('<div class="plots">' + "".join(
        f'<figure><img alt="{esc(name)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'
        f"<figcaption>{esc(name)}</figcaption></figure>" for name, data in plots.items()) + "</div>")


def render_items(records: Sequence[Mapping[str, Any]], view: Callable[[dict[str, Any]], ReportItem]
                 ) -> list[tuple[str, ReportItem]]:
    """(id, item) per batch record; a record the view cannot render gets the generic view (logged)."""
    out = []
    for record in records:
        if record.get("status") == "error":
            out.append((str(record["id"]), error_item(record)))
            continue
        result = record.get("result", record)
        if not isinstance(result, Mapping):  # not a record any view reads: shown as it is, never a failed run
            result = {"result": result}
        try:
            item = view(result)
        except Exception as error:  # noqa: BLE001 - one odd record must not cost the run its report
            logger.warning("report.html: item %s shown as JSON (%s: %s)", record.get("id"), type(error).__name__,
                           error)
            item = generic_item(result)
        out.append((str(record["id"]), item))
    return out


def items_html(rendered: Sequence[tuple[str, ReportItem]], detail_limit: int,
               flags_shown: Sequence[str] = FLAGS) -> tuple[Html, list[str]]:
    """The item rows and the columns of their summary (the id in full: it wraps rather than being cut)."""
    columns = list(dict.fromkeys(c for _, item in rendered for c in item.cells))
    detailed = sorted(range(len(rendered)), key=lambda k: not rendered[k][1].flags)[:detail_limit]
    detailed_set = set(detailed)
    parts = []
    for k, (item_id, item) in enumerate(rendered):
        flags = " ".join(f for f in flags_shown if f in item.flags)
        cells = [f'<span data-v="{k}">{k + 1}</span>',
                 f'<span class="id" title="{esc(item_id)}">{esc(item_id)}</span>']
        for c in columns:
            value = item.cells.get(c)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            cell = fmt(value, 3) if number else ("" if value is None else shown(str(value)))
            sort_value = f' data-v="{value}"' if number else ""
            cells.append(f'<span{sort_value} title="{esc(cell[:500])}">{esc(cell[:CELL_CHARS])}</span>')
        badges = "".join(f'<b class="flag {esc(f)}">{esc(FLAG_BADGES.get(f, f))}</b>' for f in flags.split()
                         if FLAG_BADGES.get(f, f))
        cells.append(f'<span class="flags">{badges}</span>')
        body = item.body if k in detailed_set else (
            f'<p class="note">details left out: this page opens the first {detail_limit:,} items (flagged ones '
            "first); the record is in the run's records file</p>")
        parts.append(f'<details class="item {esc(flags)}" data-id="{esc(item_id)}"><summary class="grid">'
                     f'{"".join(cells)}</summary><div class="body">{body}</div></details>')
    return Html("".join(parts)), columns


def render_report(pipeline_name: str, records: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any] | None,
                  run_config: Mapping[str, Any] | None = None, plots: Mapping[str, bytes] | None = None,
                  summary: Mapping[str, Any] | None = None,
                  view: Callable[[dict[str, Any]], ReportItem] = generic_item,
                  flag_meanings: Mapping[str, str] | None = None, config_names: Sequence[str] = (),
                  title: str = "", detail_limit: int = DETAIL_LIMIT, written: str | None = None) -> str:
    """The whole page as a string (pure: no file is read). ``written``: when run_config.yaml was written (the
    header's date for a run record from before the start time was kept)."""
    meanings = {**DEFAULT_FLAG_MEANINGS, **(flag_meanings or {})}
    flags = [*FLAGS, *(f for f in meanings if f not in FLAGS)]
    rendered = render_items(records, view)
    rows, columns = items_html(rendered, detail_limit, flags)
    counts = {f: sum(f in item.flags for _, item in rendered) for f in flags}
    radios = "".join(f'<input type="radio" name="filter" id="f-{esc(f)}"{" checked" if f == "all" else ""}>'
                     for f in ("all", *flags))
    labels = f'<label for="f-all">all ({len(rendered):,})</label>' + "".join(
        f'<label for="f-{esc(f)}" title="{esc(meanings[f])}">{esc(FLAG_NAMES.get(f, f))} ({counts[f]:,})</label>'
        for f in flags)
    legend = "; ".join(f"<b>{esc(FLAG_NAMES.get(f, f))}</b>: {esc(meanings[f])}" for f in flags)
    head = "".join(f'<button type="button" data-k="{k}">{esc(c)}</button>'
                   for k, c in enumerate(["#", "id", *columns, "flags"]))
    head_rows = rendered[:200]
    id_width = column_width([i for i, _ in head_rows], "id")  # a long id wraps in a column of its own size
    grid = " ".join(["3em", id_width.replace("4fr", "1.5fr").replace("1fr", "2fr"),
                     *(column_width([item.cells.get(c, "") for _, item in head_rows], c) for c in columns),
                     "14em"])
    heading = title or f"{pipeline_name} run"
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(heading)} — report</title>",
        f"<style>{CSS}{filter_css(flags)}.grid{{grid-template-columns:{grid}}}</style></head><body>",
        f"<h1>{esc(heading)}</h1>",
        f'<p class="note">pipeline <b>{esc(pipeline_name)}</b> · {len(rendered):,} items · '
        + " · ".join(f"{esc(FLAG_NAMES.get(f, f))} {counts[f]:,}" for f in flags) + "</p>",
        header_html(run_config, written),
        part("metrics", "Metrics", metrics_html(metrics)), part("plots", "Plots", plots_html(plots or {})),
        part("run", "Run: every setting, versions and summary", run_html(run_config, summary, config_names)),
        f'<h2 id="items-title">Items</h2><p class="note">Click a row to open it, a column name to sort. {legend}.</p>',
        f'<section class="items-section">{radios}<div class="sticky"><div class="filters" id="filters">{labels}',
        '<input id="search" type="search" placeholder="search (id, text)"></div>',
        f'<div class="grid head">{head}</div></div><div id="items">{rows}</div></section>',
        f"<script>{SCRIPT}</script></body></html>\n",
    ])


def filter_css(flags: Sequence[str]) -> str:
    """The filters without a script: the checked radio button's label dark, the rows without its flag hidden."""
    checked = ",".join(f"#f-{f}:checked ~ .sticky label[for=f-{f}]" for f in ("all", *flags))
    hidden = ",".join(f"#f-{f}:checked ~ #items .item:not(.{f})" for f in flags)
    return f"{checked}{{background:#24292f;color:#fff;border-color:#24292f}}{hidden}{{display:none}}"


def part(anchor: str, title: str, body: str) -> Html:
    """A top section of the page, folded by a click on its title (or by the link's ``#fold=…``)."""
    return Html(f'<details class="part" id="{anchor}" open><summary><h2>{esc(title)}</h2></summary>{body}</details>')


def column_width(values: Iterable[Any], name: str) -> str:
    """A text column (a claim, a post, an article) takes the room; a label or a score gets about its width (each
    row is a grid of its own, so the widths are fixed here, from the first rows' values)."""
    longest = max((len(fmt(v, 3) if isinstance(v, float) else str(v)) for v in values), default=0)
    if longest > 40:
        return "minmax(12em, 4fr)"
    return f"minmax({min(max(longest, len(name)) * 0.6 + 1, 14):.1f}em, 1fr)"


# --- the file ----------------------------------------------------------------------------------------------------


def read_yaml(path: Path) -> dict[str, Any] | None:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, yaml.YAMLError) as error:
        logger.warning("report.html: %s unreadable (%s)", path, error)
        return None


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError) as error:
        logger.warning("report.html: %s unreadable (%s)", path, error)
        return None


def written_time(path: Path) -> str | None:
    """When ``path`` was last written (UTC, to the second), or None when it is not there."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")
    except OSError:
        return None


def run_summary(run_dir: Path) -> Any:
    """``summary.json``, or a sharded run's summaries by file (each shard writes its own: no sibling overwrites it)."""
    whole = read_json(run_dir / "summary.json")
    if whole is not None:
        return whole
    return {p.name: read_json(p) for p in sorted(run_dir.glob("summary.shard-*-of-*.json"))} or None


def run_plots(run_dir: Path) -> dict[str, bytes]:
    """The PNG files the run wrote: in its folder and in an ``eval`` subfolder (AIC's scorer); not a screenshot of
    the report itself (scripts/screenshot_report.sh writes ``report*.png`` beside it)."""
    paths = [p for p in sorted(run_dir.glob("*.png")) + sorted((run_dir / "eval").glob("*.png"))
             if not p.name.startswith("report")]
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in paths}


def write_report_html(run_dir: str | Path, pipeline: Any, records: Sequence[Mapping[str, Any]],
                      metrics: Mapping[str, Any] | None, *, filename: str = "report.html",
                      detail_limit: int = DETAIL_LIMIT) -> Path:
    """Write ``run_dir/report.html`` (module docstring) and return its path.

    Args:
        run_dir: the run folder (``run_config.yaml``, ``summary.json`` and the plots are read from it).
        pipeline: the run's pipeline (an instance or class of the contract), or its name (``r2vc``, ``aic``, …).
        records: the batch records of the run's items (``{"id", "status", "result" | "error"}``), in item order.
        metrics: what the scorer returned (None: not scored).
        filename: the page's name in ``run_dir`` (a shard's run may use ``report.shard-i-of-n.html``).
        detail_limit: the items whose opened view the page carries (flagged ones first); others show their row.
    """
    run_dir = Path(run_dir)
    cls = pipeline_type(pipeline)
    page = render_report(
        cls.name if cls else str(pipeline), records, metrics, read_yaml(run_dir / "run_config.yaml"),
        run_plots(run_dir), run_summary(run_dir),
        view=cls.report_item if cls else generic_item, flag_meanings=cls.report_flags if cls else None,
        config_names=[t.__name__ for t in cls.config_types] if cls else (), title=f"{run_dir.name}",
        detail_limit=detail_limit, written=written_time(run_dir / "run_config.yaml"))
    path = run_dir / filename
    with atomic_writer(path) as handle:
        handle.write(page)
    logger.info("wrote %s (%d items, %.1f MB)", path, len(records), len(page) / 1e6)
    return path


def pipeline_type(pipeline: Any) -> type | None:
    """The contract class of ``pipeline`` (an instance, a class or a name); None for an unknown name."""
    if isinstance(pipeline, str):
        from veracity.infer.pipelines.registry import PIPELINES, pipeline_class  # lazy: a name is rare

        return pipeline_class(pipeline) if pipeline in PIPELINES else None
    return pipeline if isinstance(pipeline, type) else type(pipeline)


def report_run(run_dir: str | Path) -> Path:
    """Write ``report.html`` of a finished pipeline run from its files (records, metrics, config); the records of
    every shard for a run made as ``--shard i/n``.

    Raises:
        InputError: the folder holds no records, or shards of several layouts.
    """
    from veracity.infer.batch import found_layout, latest_records  # lazy: only this command reads records

    run_dir = Path(run_dir)
    job = (read_yaml(run_dir / "run_config.yaml") or {}).get("job", "")
    name = job.split()[-1] if job.startswith("infer ") else ""
    try:  # records.jsonl, or a sharded run's shards (which the driver does not score or report)
        files = found_layout(run_dir, "records")
    except (FileNotFoundError, ValueError) as error:
        raise InputError(str(error)) from None
    records = [r for path in files for r in latest_records(path)]
    metrics = read_json(run_dir / "metrics.json") or read_json(run_dir / "eval" / "metrics.json")
    return write_report_html(run_dir, name or "generic", records, metrics)


def main(argv: Sequence[str] | None = None) -> Path:
    """Write ``report.html`` of the finished run in ``argv[0]`` (``veracity report RUN_DIR`` does the same for any
    run folder, training runs too)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        raise SystemExit(__doc__.split("\n\n")[1])
    try:
        path = report_run(args[0])
    except InputError as error:
        raise SystemExit(f"error: {error}") from None
    print(path)
    return path


if __name__ == "__main__":
    main()
