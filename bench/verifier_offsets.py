"""What per-label logit offsets fitted on calib (``train/label_offsets.py``: ``veracity train nli --label_offsets
true`` folds them into the head) move on dev, from the predictions of a verifier trained without them: two
``veracity eval checkpoint --kind nli`` runs, no training. The offsets are added to the aggregated probabilities of
windowed pairs here, to each window's logits in the folded head, so the two can differ on a windowed pair.

    veracity eval checkpoint --kind nli --nli_model M --nli_backend torch --split calib --sources S... \
        --output_dir runs/eval/M_calib
    python bench/verifier_offsets.py runs/eval/M_calib/predictions.jsonl runs/eval/M/predictions.jsonl \
        [--sources climate_fever_evidence]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from veracity.data_prep.readers import read_jsonl
from veracity.data_prep.schema import NLI_LABELS, NLI_TO_TERNARY
from veracity.train.label_offsets import fit_label_offsets, scores

LABELS = tuple(NLI_TO_TERNARY[name] for name in NLI_LABELS)  # the verifier's row order, as verdicts


def read_predictions(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Source → (log-probabilities ``(n, 3)`` in :data:`LABELS` order, gold label indices) of an
    ``eval checkpoint --kind nli`` predictions.jsonl."""
    rows: dict[str, list[dict]] = defaultdict(list)
    for number, row in read_jsonl(path):  # the project's JSONL reader: a bad line names file and line
        if "probabilities" not in row:
            raise SystemExit(f"{path}:{number}: field 'probabilities' missing (not an NLI evaluation)")
        rows[row["source"]].append(row)
    return {source: (np.log(np.clip([[r["probabilities"][label] for label in LABELS] for r in items], 1e-12, 1)),
                     np.array([LABELS.index(r["gold"]) for r in items]))
            for source, items in rows.items()}


def check_sources(sets: dict[str, Any], sources: list[str], path: Path) -> None:
    """Stop with one line naming ``path`` when it holds no pairs of one of ``sources``."""
    if missing := [source for source in sources if source not in sets]:
        raise SystemExit(f"{path}: no pairs of {', '.join(missing)} (it holds {', '.join(sets)})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calib", type=Path, help="predictions.jsonl of the calib split")
    parser.add_argument("dev", type=Path, help="predictions.jsonl of the dev split")
    parser.add_argument("--sources", nargs="+", default=[],
                        help="fit on these sources' calib pairs only (train nli --label_offset_sources); default all")
    args = parser.parse_args(argv)
    calib, dev = read_predictions(args.calib), read_predictions(args.dev)
    check_sources(calib, args.sources, args.calib)
    fitted_on = {source: sets for source, sets in calib.items() if not args.sources or source in args.sources}
    offsets = fit_label_offsets(fitted_on)
    print(f"offsets fitted on calib ({', '.join(f'{s} {len(g)}' for s, (_, g) in fitted_on.items())}): "
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
