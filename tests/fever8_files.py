"""FEVER-8 leaderboard CSVs (``id,claim,evi,label,split``) from hand-made rows, for the AVeriTeC scorer tests."""

from __future__ import annotations

import csv
from pathlib import Path

from veracity.data_prep.averitec import format_fever8_evidence
from veracity.data_prep.schema import QAPair


def write_fever8_csv(path: Path, rows: list[tuple[str, str, list[QAPair], str]], split: str) -> Path:
    """One CSV row per (id, claim, QA pairs, label), every row in ``split``."""
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "claim", "evi", "label", "split"])
        writer.writerows([(i, claim, format_fever8_evidence(qa), label, split) for i, claim, qa, label in rows])
    return path
