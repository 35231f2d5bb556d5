"""Mean ± spread of accuracy and macro-F1 per dev set over several ``veracity eval checkpoint --kind nli`` runs
(one ``metrics.json`` each, e.g. the seeds of scripts/verifier_seeds.sh); prints a Markdown table.

    python bench/seed_spread.py runs/eval/verifier_seed13/metrics.json runs/eval/verifier_seed14/metrics.json ...
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def spread(values: list[float]) -> str:
    """``mean ± sample standard deviation (min–max)`` of ``values``."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f} ({min(values):.3f}–{max(values):.3f})"


def table(runs: dict[str, dict]) -> str:
    """The table: one row per dev set present in every run, accuracy and macro-F1 over the runs."""
    names = [n for n in next(iter(runs.values())) if all(isinstance(m.get(n), dict) and "accuracy" in m[n]
                                                        for m in runs.values())]
    lines = [f"runs: {', '.join(runs)}", "",
             "| dev set | accuracy, mean ± sd (min–max) | macro-F1, mean ± sd (min–max) |", "|---|---:|---:|"]
    for name in names:
        acc = [m[name]["accuracy"] for m in runs.values()]
        f1 = [m[name]["macro_f1"] for m in runs.values()]
        lines.append(f"| {name} | {spread(acc)} | {spread(f1)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        raise SystemExit("usage: python bench/seed_spread.py METRICS.json [METRICS.json ...]")
    print(table({str(p.parent.name): json.loads(p.read_text()) for p in paths}))


if __name__ == "__main__":
    main()
