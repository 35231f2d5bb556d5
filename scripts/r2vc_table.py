"""Print a results table (docs/results.md) from R2VC run folders (their ``metrics.json``, as ``veracity eval r2vc``
writes it).

Usage: .venv/bin/python scripts/r2vc_table.py [--source fever_symmetric] [--parse_failures] "label=runs/r2vc/x" ...

A label with `` | `` in it fills several leading columns (``"SFT | full=runs/r2vc/sft"``). Without ``--source``
the run's overall metrics are printed; with it, that source's part of the run. Undefined values (selective
accuracy when nothing was answered) print as "–".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from veracity.infer.eval.r2vc import table_cell

COLUMNS = ("accuracy", "macro_f1", "brier", "ece", "ece_uncalibrated", "coverage", "selective_accuracy", "aurc")


def row(label: str, folder: str, source: str | None, columns: tuple[str, ...]) -> str:
    path = Path(folder) / "metrics.json"
    if not path.is_file():
        sys.exit(f"r2vc_table: {path}: not found (run the row first)")
    metrics = json.loads(path.read_text(encoding="utf-8"))
    if source:
        if source not in metrics.get("by_source", {}):
            sys.exit(f"r2vc_table: {path}: no source {source!r} (has {sorted(metrics.get('by_source', {}))})")
        metrics = metrics["by_source"][source]
    return "| " + " | ".join([*label.split(" | "), *(table_cell(metrics.get(c)) for c in columns)]) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="label=run folder")
    parser.add_argument("--source", help="a prepared source of the runs (by_source in metrics.json)")
    parser.add_argument("--parse_failures", action="store_true", help="add the generator's parse-failure rate")
    args = parser.parse_args()
    columns = COLUMNS + (("parse_failure_rate",) if args.parse_failures else ())
    pairs = [spec.rsplit("=", 1) for spec in args.runs]
    heads = ["run"] if " | " not in pairs[0][0] else ["generator", "recipe"]
    print(f"\n{args.source or 'all sources'} ({len(pairs)} runs)\n")
    print("| " + " | ".join([*heads, *columns]) + " |")
    print("|" + "---|" * len(heads) + "---:|" * len(columns))
    for label, folder in pairs:
        print(row(label, folder, args.source, columns))


if __name__ == "__main__":
    main()
