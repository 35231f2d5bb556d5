"""What per-label logit offsets fitted on calib would move on dev: an experiment for the verifier recipe (issue #28),
not a step of it. The verifier's label priors come from its training mix; the dev sets' differ from it and from
each other, and a 3-way head's argmax is sensitive to that. Two offsets (NOT ENOUGH INFO and REFUTES, relative to
SUPPORTS) are added to the log-probabilities and chosen on the calib split by grid search, maximising the mean
over sources of (accuracy + macro-F1) / 2 — each source weighs the same, whatever its size; ties go to the
smaller shift. Dev is only scored with them.

    veracity eval checkpoint --kind nli --nli_model M --nli_backend torch --split calib --sources S... \
        --output_dir runs/eval/M_calib
    python bench/verifier_offsets.py runs/eval/M_calib/predictions.jsonl runs/eval/M/predictions.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from veracity.infer.metrics import accuracy, macro_f1

LABELS = ("SUPPORTS", "NOT ENOUGH INFO", "REFUTES")


def read_predictions(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Source → (log-probabilities ``(n, 3)`` in :data:`LABELS` order, gold label indices) of an
    ``eval checkpoint --kind nli`` predictions.jsonl."""
    rows: dict[str, list[dict]] = defaultdict(list)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        row = json.loads(line)
        if "probabilities" not in row:
            raise SystemExit(f"{path}:{number}: field 'probabilities' missing (not an NLI evaluation)")
        rows[row["source"]].append(row)
    return {source: (np.log(np.clip([[r["probabilities"][label] for label in LABELS] for r in items], 1e-12, 1)),
                     np.array([LABELS.index(r["gold"]) for r in items]))
            for source, items in rows.items()}


def scores(predicted: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """Accuracy and macro-F1 (over the labels present in ``gold``, as ``veracity eval checkpoint`` counts them) of
    label indices."""
    gold_names, predicted_names = [LABELS[i] for i in gold], [LABELS[i] for i in predicted]
    return accuracy(gold_names, predicted_names), macro_f1(gold_names, predicted_names)


def objective(sets: dict[str, tuple[np.ndarray, np.ndarray]], offsets: np.ndarray) -> float:
    """Mean over sources of (accuracy + macro-F1) / 2 with ``offsets`` added to the log-probabilities."""
    return float(np.mean([sum(scores((logp + offsets).argmax(1), gold)) / 2 for logp, gold in sets.values()]))


def fit_offsets(sets: dict[str, tuple[np.ndarray, np.ndarray]], span: float = 1.5, step: float = 0.05) -> np.ndarray:
    """The offsets ``[0, b_nei, b_refutes]`` on a grid over ``[-span, span]`` that maximise :func:`objective`;
    of equal ones, the smallest shift (so no offsets when nothing beats none)."""
    grid = np.round(np.arange(-span, span + step / 2, step), 6)
    candidates = sorted(itertools.product(grid, grid), key=lambda b: (abs(b[0]) + abs(b[1]), b))
    best, best_value = np.zeros(3), objective(sets, np.zeros(3))
    for nei, refutes in candidates:
        offsets = np.array([0.0, nei, refutes])
        value = objective(sets, offsets)
        if value > best_value + 1e-12:
            best, best_value = offsets, value
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calib", type=Path, help="predictions.jsonl of the calib split")
    parser.add_argument("dev", type=Path, help="predictions.jsonl of the dev split")
    args = parser.parse_args(argv)
    calib, dev = read_predictions(args.calib), read_predictions(args.dev)
    offsets = fit_offsets(calib)
    print(f"offsets fitted on calib ({', '.join(f'{s} {len(g)}' for s, (_, g) in calib.items())}): "
          f"NOT ENOUGH INFO {offsets[1]:+.2f}, REFUTES {offsets[2]:+.2f} (SUPPORTS 0)\n")
    print("| split | set | pairs | accuracy / macro-F1 | with offsets |")
    print("|---|---|---:|---:|---:|")
    for split, sets in (("calib", calib), ("dev", dev)):
        for source, (logp, gold) in sets.items():
            before, after = scores(logp.argmax(1), gold), scores((logp + offsets).argmax(1), gold)
            print(f"| {split} | {source} | {len(gold)} | {before[0]:.3f} / {before[1]:.3f} | "
                  f"{after[0]:.3f} / {after[1]:.3f} |")


if __name__ == "__main__":
    main()
