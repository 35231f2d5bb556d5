"""bench/verifier_offsets.py: per-label offsets fitted on calib predictions, scored on dev."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from repo_scripts import load_script


@pytest.fixture(scope="module")
def offsets():
    return load_script("bench/verifier_offsets.py")


def predictions(path: Path, source: str, gold: list[str], probabilities: list[list[float]]) -> Path:
    labels = ("SUPPORTS", "NOT ENOUGH INFO", "REFUTES")
    rows = [{"id": f"{source}-{i}", "source": source, "gold": g, "prediction": None,
             "probabilities": dict(zip(labels, p, strict=True))} for i, (g, p) in enumerate(zip(gold, probabilities,
                                                                                             strict=True))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_verifier_that_underrates_refutes_gets_a_refutes_offset_that_fixes_dev(offsets, tmp_path, capsys) -> None:
    # REFUTES pairs score REFUTES 0.30 against SUPPORTS 0.40: a prior shift of log(0.40 / 0.30) ≈ 0.29 fixes them
    gold = ["SUPPORTS"] * 4 + ["REFUTES"] * 4
    probs = [[0.7, 0.1, 0.2]] * 4 + [[0.4, 0.3, 0.3]] * 4
    calib = predictions(tmp_path / "calib.jsonl", "fever_symmetric", gold, probs)
    dev = predictions(tmp_path / "dev.jsonl", "fever_symmetric", gold, probs)
    fitted = offsets.fit_label_offsets(offsets.read_predictions(calib))
    assert fitted[0] == 0 and 0.29 < fitted[2] <= 0.35  # the smallest REFUTES shift on the grid that flips them
    assert fitted[1] <= 0  # NOT ENOUGH INFO must not take the REFUTES pairs instead
    offsets.main([str(calib), str(dev)])
    assert "| dev | fever_symmetric | 8 | 0.500 / 0.333 | 1.000 / 1.000 |" in capsys.readouterr().out


def test_no_offsets_when_none_helps(offsets, tmp_path) -> None:
    calib = predictions(tmp_path / "calib.jsonl", "vitaminc", ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"],
                        [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1]])
    assert np.array_equal(offsets.fit_label_offsets(offsets.read_predictions(calib)), np.zeros(3))


def test_rows_without_probabilities_name_the_file_and_line(offsets, tmp_path) -> None:
    path = tmp_path / "generator.jsonl"
    path.write_text(json.dumps({"source": "vitaminc", "gold": "SUPPORTS", "prediction": "SUPPORTS"}) + "\n")
    with pytest.raises(SystemExit, match=r"generator.jsonl:1: field 'probabilities' missing"):
        offsets.read_predictions(path)
