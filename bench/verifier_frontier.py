"""How far per-label offsets alone can move one dev set (issue #47): the best macro-F1 on ``--source`` at each
accuracy floor, with the two offsets (NOT ENOUGH INFO and REFUTES, relative to SUPPORTS; ``train/label_offsets.py``)
searched on that dev set itself. That is an oracle bound, not a rule: no offsets chosen on calib can do better on dev,
so a floor whose best macro-F1 stays under a target says that no decision rule on this verifier's probabilities
reaches it there. The other sets are scored at the same offsets (the verifier is one model for all of them).

    python bench/verifier_frontier.py runs/eval/M/predictions.jsonl [more.jsonl ...] \
        [--source climate_fever_evidence] [--floors 0.657 0.665 0.675]

Several files (``veracity eval checkpoint --kind nli`` predictions of the same split and sources): their
probabilities are averaged pair by pair, the frontier of an ensemble of the verifiers that wrote them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from verifier_offsets import check_sources, read_predictions

from veracity.train.label_offsets import Sets, offset_grid, scores


def ensemble(runs: list[Sets], names: list[Path]) -> Sets:
    """The sets of several verifiers' predictions with their probabilities averaged pair by pair; every run must
    hold the same sources with the same gold labels in the same order."""
    first = runs[0]
    for run, name in zip(runs[1:], names[1:], strict=True):
        for source, (_, gold) in first.items():
            if source not in run or not np.array_equal(run[source][1], gold):
                raise SystemExit(f"{name}: {source} does not hold the pairs of {names[0]} in the same order")
    return {source: (np.log(np.mean([np.exp(run[source][0]) for run in runs], axis=0)), gold)
            for source, (_, gold) in first.items()}


def frontier(sets: Sets, source: str, floors: list[float], span: float = 1.5, step: float = 0.1
             ) -> dict[float, tuple[float, float, np.ndarray] | None]:
    """Floor → (macro-F1, accuracy, offsets) of the offsets on the grid with the highest macro-F1 on ``source`` whose
    accuracy there is at least the floor (of equal ones the smallest shift), or None when none reaches the floor."""
    logp, gold = sets[source]
    best: dict[float, tuple[float, float, np.ndarray] | None] = dict.fromkeys(floors)
    for offsets in offset_grid(span, step):
        accuracy, f1 = scores((logp + offsets).argmax(1), gold)
        for floor in floors:
            if accuracy >= floor - 1e-12 and (best[floor] is None or f1 > best[floor][0] + 1e-12):
                best[floor] = (f1, accuracy, offsets)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", type=Path, nargs="+", help="predictions.jsonl of dev (several: averaged)")
    parser.add_argument("--source", default="climate_fever_evidence")
    parser.add_argument("--floors", type=float, nargs="+", default=[0.657, 0.665, 0.675],
                        help="accuracy floors on --source (default: stage 3's Climate-FEVER accuracy, and above it)")
    args = parser.parse_args(argv)
    sets = ensemble([read_predictions(path) for path in args.predictions], args.predictions)
    check_sources(sets, [args.source], args.predictions[0])
    others = [source for source in sets if source != args.source]

    def row(name: str, offsets: np.ndarray) -> str:
        cells = [f"{a:.3f} / {f:.3f}" for a, f in (scores((sets[s][0] + offsets).argmax(1), sets[s][1])
                                                    for s in [args.source, *others])]
        return f"| {name} | {offsets[1]:+.1f} | {offsets[2]:+.1f} | " + " | ".join(cells) + " |"

    print(f"{len(args.predictions)} verifier(s); offsets searched on {args.source} itself (an oracle bound)\n")
    print(f"| {args.source} accuracy ≥ | NEI offset | REFUTES offset | {args.source} | " + " | ".join(others) + " |")
    print("|---|---:|---:|" + "---:|" * (1 + len(others)))
    print(row("argmax, no offsets", np.zeros(3)))
    for floor, best in frontier(sets, args.source, args.floors).items():
        print(row(f"{floor:.3f}", best[2]) if best else f"| {floor:.3f} | – | – | nothing reaches it |")


if __name__ == "__main__":
    main()
