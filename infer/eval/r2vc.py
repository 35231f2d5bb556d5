"""Metrics and report of an R2VC run, from its records alone.

Usage: veracity eval r2vc --predictions runs/r2vc/records.jsonl --output_dir runs/r2vc

Reads the records ``veracity infer r2vc`` writes (batch records, or the ``predictions.jsonl`` this job writes)
and writes ``metrics.json``, ``predictions.jsonl`` (``id, gold, prediction, abstained, confidence`` plus the
full record), ``report.md``, ``risk_coverage.png`` and ``reliability.png``.

Definitions: ``accuracy`` / ``macro_f1`` count an abstention as NOT ENOUGH INFO (docs/pipelines/r2vc.md#abstention),
macro-F1 over the labels present in gold; ``brier`` / ``ece`` score the calibrated confidence that the chosen
candidate's label is right, ``ece_uncalibrated`` / ``brier_uncalibrated`` the same for the uncalibrated confidence (the
chosen candidate's s_ver clipped to [0, 1]); ``coverage`` is the share answered and ``selective_accuracy`` the accuracy
over the answered claims; ``aurc`` the area under the risk–coverage curve of the calibrated confidence.

Errors (the one rule of every scorer here, as ``veracity eval averitec`` counts a claim without a prediction): a
claim whose record is an error (the pipeline raised on it) is a wrong answer. It is in ``n``, wrong in
``accuracy``, ``macro_f1`` (a miss of its gold label), ``label_accuracy_before_abstention`` and the confusion
table (column "(none)"), and an answered, wrong claim in ``coverage`` / ``selective_accuracy`` /
``selective_risk``; it has no confidence, so ``brier``, ``ece`` and ``aurc`` are over the other ``n − n_errors``
claims. ``n_errors`` counts those errors (``outcomes`` lists them as ``error``); ``errors`` counts every error
record, also those without a gold label (an unlabelled claim, or a record written before error records carried
their gold), which are left out of the metrics and counted in ``n_unlabelled``. A claim without a gold label (your
own claims need none) is not scored either: ``n_unlabelled`` counts every such record, and the printed summary and
``report.md`` say how many and name the first of them.

``quote_format_rate``: the share of parsed generator answers whose rationale keeps the trained quote format; a record
made before candidates carried ``quote_format`` is read from its rationale (``infer/quote_format.py``).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.errors import DataError
from veracity.data_prep.schema import TERNARY_LABELS
from veracity.infer.batch import latest_records
from veracity.infer.metrics import (
    accuracy,
    aurc,
    binary_brier,
    confusion,
    expected_calibration_error,
    macro_f1,
    risk_coverage,
    selective_metrics,
)
from veracity.infer.plots import reliability_diagram, risk_coverage_plot
from veracity.infer.quote_format import keeps_quote_format
from veracity.io import write_json, write_jsonl, write_text


@dataclass
class R2VCEvalArgs:
    predictions: str = field(metadata={"help": "records.jsonl of `veracity infer r2vc` (or its predictions.jsonl)."})
    output_dir: str = field(metadata={"help": "Where metrics.json, predictions.jsonl, report.md and plots go."})
    plots: bool = field(default=True, metadata={"help": "Write the plots (PNG) beside metrics.json."})


def make_parser() -> Any:
    return parser_for((R2VCEvalArgs,), prog="veracity eval r2vc")


def read_r2vc_records(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(claim records, error records) of an R2VC records file; the last record for an id wins (a re-run replaces
    a failed one)."""
    records, errors = [], []
    for row in latest_records(path, what="an R2VC record"):
        if row.get("status") == "error":
            errors.append(row)
        else:
            records.append(row.get("result", row) if "status" in row else row)
    return records, errors


def evaluate(records: Sequence[dict[str, Any]], errors: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Metrics of the claims that carry a gold label (pure: reads only the records). ``errors`` are the error
    records (``read_r2vc_records``): each one with a gold label counts as a wrong answer (module docstring)."""
    scored = [r for r in records if r.get("gold")]
    failed = [e for e in errors if e.get("gold")]
    gold = [r["gold"] for r in scored] + [e["gold"] for e in failed]
    prediction = [r["prediction"] for r in scored] + [None] * len(failed)
    label_right = [r["label"] == r["gold"] for r in scored]
    confidence = [float(r["confidence"]) for r in scored]
    uncalibrated = [float(r["confidence_uncalibrated"]) for r in scored]
    labels = [lab for lab in TERNARY_LABELS if lab in set(gold)]
    with_confidence = bool(scored)  # no claim with a confidence: the calibration numbers are undefined, not 0

    def calibration(value: float) -> float | None:
        return value if with_confidence else None

    outcomes = Counter(r["outcome"] for r in scored)
    if failed:
        outcomes["error"] = len(failed)
    metrics: dict[str, Any] = {
        "n": len(gold), "n_errors": len(failed),
        "n_unlabelled": len(records) - len(scored) + len(errors) - len(failed),
        "accuracy": accuracy(gold, prediction), "macro_f1": macro_f1(gold, prediction, labels),
        "brier": calibration(binary_brier(confidence, label_right)),
        "ece": calibration(expected_calibration_error(confidence, label_right)),
        "brier_uncalibrated": calibration(binary_brier(uncalibrated, label_right)),
        "ece_uncalibrated": calibration(expected_calibration_error(uncalibrated, label_right)),
        "label_accuracy_before_abstention": accuracy(gold, [r["label"] for r in scored] + [None] * len(failed)),
        **selective_metrics([not r["abstained"] for r in scored] + [True] * len(failed),
                            label_right + [False] * len(failed)),
        "aurc": calibration(aurc(confidence, label_right)),
        "aurc_uncalibrated": calibration(aurc(uncalibrated, label_right)),
        "outcomes": dict(sorted(outcomes.items())),
        "confusion": confusion(gold, prediction, list(TERNARY_LABELS)),
        "parse_failure_rate": _parse_failure_rate(scored),
        "quote_format_rate": _quote_format_rate(scored),
    }
    sources = sorted({r.get("source", "") for r in scored} | {e.get("source", "") for e in failed})
    if len(sources) > 1:
        metrics["by_source"] = {
            s: {k: v for k, v in evaluate([r for r in scored if r.get("source", "") == s],
                                          [e for e in failed if e.get("source", "") == s]).items()
                if k not in ("confusion", "by_source")} for s in sources}
    return metrics


def _quote_format_rate(records: Sequence[dict[str, Any]]) -> float | None:
    """Share of the parsed generator answers whose rationale keeps the trained quote format (None: none parsed)."""
    parsed = [c for r in records for c in r.get("candidates", []) if c.get("from") == "generator" and c.get("label")]
    kept = [c["quote_format"] if "quote_format" in c else keeps_quote_format(c.get("rationale") or "") for c in parsed]
    return sum(map(bool, kept)) / len(parsed) if parsed else None


def _parse_failure_rate(records: Sequence[dict[str, Any]]) -> float:
    generated = [c for r in records for c in r.get("candidates", []) if c.get("from") == "generator"]
    return sum(c.get("parse_error") is not None for c in generated) / len(generated) if generated else 0.0


def unlabelled_line(records: Sequence[dict[str, Any]], errors: Sequence[dict[str, Any]], count: int,
                    shown: int = 5) -> str:
    """How many records carry no gold label (not scored), naming the first ``shown`` ids."""
    ids = [str(r.get("id")) for r in [*records, *errors] if not r.get("gold")]
    named = ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")
    return f"n_unlabelled {count}: {'claim' if count == 1 else 'claims'} without a gold label, not scored ({named})"


def report_markdown(metrics: dict[str, Any], title: str, notes: Sequence[str] = ()) -> str:
    keys = ("n", "accuracy", "macro_f1", "brier", "ece", "ece_uncalibrated", "coverage", "selective_accuracy", "aurc")
    lines = [f"# {title}", "", "| " + " | ".join(keys) + " |", "|" + "---:|" * len(keys),
             "| " + " | ".join(table_cell(metrics[k]) for k in keys) + " |", ""]
    lines += [*notes, *([""] if notes else []),
              "Outcomes: " + ", ".join(f"{k} {v}" for k, v in metrics["outcomes"].items()),
              f"Generator parse-failure rate: {metrics['parse_failure_rate']:.3f}", "",
              "Confusion (gold → prediction, abstentions count as NOT ENOUGH INFO):", "",
              "| gold | " + " | ".join(TERNARY_LABELS) + " |", "|---|" + "---:|" * len(TERNARY_LABELS)]
    lines += [f"| {g} | " + " | ".join(str(row[p]) for p in TERNARY_LABELS) + " |"
              for g, row in metrics["confusion"].items() if sum(row.values())]
    for source, m in metrics.get("by_source", {}).items():
        lines += ["", f"## {source}", "", "| " + " | ".join(keys) + " |", "|" + "---:|" * len(keys),
                  "| " + " | ".join(table_cell(m[k]) for k in keys) + " |"]
    return "\n".join(lines) + "\n"


def table_cell(value: Any) -> str:
    """A table cell: floats to 3 decimals, an undefined value (nothing answered) as "–"."""
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    (args,) = parse_config(make_parser(), argv)
    try:  # a record that is not one is a DataError naming its line; veracity.cli prints it (exit status 2)
        records, errors = read_r2vc_records(args.predictions)
    except OSError as error:
        raise DataError(args.predictions, None, f"cannot read the records ({error.strerror or error})") from None
    out = Path(args.output_dir)
    metrics = {**evaluate(records, errors), "errors": len(errors)} if records or errors else \
        {"n": 0, "n_errors": 0, "errors": 0}
    if len(errors) > metrics["n_errors"]:
        print(f"warning: {len(errors) - metrics['n_errors']} error records carry no gold label: not scored "
              "(counted in n_unlabelled)", file=sys.stderr)
    rows = [{"id": r["id"], "gold": r.get("gold"), "prediction": r["prediction"], "abstained": r["abstained"],
             "confidence": r["confidence"], **r} for r in records]
    write_jsonl(out / "predictions.jsonl", rows)
    write_json(out / "metrics.json", metrics)
    if metrics["n"]:
        scored = [r for r in records if r.get("gold")]
        right = [r["label"] == r["gold"] for r in scored]
        calibrated = [r["confidence"] for r in scored]
        raw = [r["confidence_uncalibrated"] for r in scored]
        unlabelled = [unlabelled_line(records, errors, metrics["n_unlabelled"])] if metrics["n_unlabelled"] else []
        write_text(out / "report.md", report_markdown(metrics, f"R2VC — {args.predictions}", unlabelled))
        if args.plots and scored:
            risk_coverage_plot({"calibrated": risk_coverage(calibrated, right),
                                "uncalibrated (s_ver)": risk_coverage(raw, right)}, out / "risk_coverage.png")
            reliability_diagram({"calibrated": (calibrated, right), "uncalibrated (s_ver)": (raw, right)},
                                out / "reliability.png")
        print(report_markdown(metrics, "R2VC").split("\n\nOutcomes")[0].split("\n", 2)[2])
    if metrics.get("n_unlabelled"):
        print(unlabelled_line(records, errors, metrics["n_unlabelled"]))
    print(f"wrote metrics.json, predictions.jsonl, report.md and plots to {out}")
    return metrics
