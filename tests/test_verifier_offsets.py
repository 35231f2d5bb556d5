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


def test_offsets_fitted_on_one_source_are_scored_on_every_source(offsets, tmp_path, capsys) -> None:
    calib = tmp_path / "calib.jsonl"
    predictions(tmp_path / "fs.jsonl", "fever_symmetric", ["SUPPORTS", "REFUTES"], [[0.7, 0.1, 0.2], [0.4, 0.3, 0.3]])
    predictions(tmp_path / "vc.jsonl", "vitaminc", ["SUPPORTS", "SUPPORTS"], [[0.4, 0.3, 0.3], [0.4, 0.3, 0.3]])
    calib.write_text((tmp_path / "fs.jsonl").read_text() + (tmp_path / "vc.jsonl").read_text())
    offsets.main([str(calib), str(calib), "--sources", "fever_symmetric"])
    out = capsys.readouterr().out
    assert "offsets fitted on calib (fever_symmetric 2): NOT ENOUGH INFO +0.00, REFUTES +0.30" in out
    assert "| dev | vitaminc | 2 | 1.000 / 1.000 | 0.000 / 0.000 |" in out  # the shift hurts the set it ignored
    with pytest.raises(SystemExit, match=r"calib.jsonl: no pairs of climate_fever_evidence \(it holds fever_sym"):
        offsets.main([str(calib), str(calib), "--sources", "climate_fever_evidence"])


def test_no_offsets_when_none_helps(offsets, tmp_path) -> None:
    calib = predictions(tmp_path / "calib.jsonl", "vitaminc", ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"],
                        [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1]])
    assert np.array_equal(offsets.fit_label_offsets(offsets.read_predictions(calib)), np.zeros(3))


def test_rows_without_probabilities_name_the_file_and_line(offsets, tmp_path) -> None:
    path = tmp_path / "generator.jsonl"
    path.write_text(json.dumps({"source": "vitaminc", "gold": "SUPPORTS", "prediction": "SUPPORTS"}) + "\n")
    with pytest.raises(SystemExit, match=r"generator.jsonl:1: field 'probabilities' missing"):
        offsets.read_predictions(path)


@pytest.fixture(scope="module")
def frontier():
    return load_script("bench/verifier_frontier.py")


def test_the_frontier_finds_the_best_macro_f1_each_accuracy_floor_allows(frontier, tmp_path, capsys) -> None:
    # two REFUTES pairs read as NOT ENOUGH INFO (REFUTES-over-NEI margins log(.48/.32) ≈ 0.41 and log(.63/.27) ≈ 0.85)
    # and an NEI pair whose REFUTES margin is smaller (log(.4/.3) ≈ 0.29): no offsets get all three right
    gold = ["NOT ENOUGH INFO"] * 3 + ["REFUTES"] * 2 + ["SUPPORTS"]
    probs = [[0.1, 0.8, 0.1], [0.1, 0.8, 0.1], [0.3, 0.4, 0.3], [0.2, 0.48, 0.32], [0.1, 0.63, 0.27], [0.8, 0.1, 0.1]]
    dev = predictions(tmp_path / "dev.jsonl", "climate_fever_evidence", gold, probs)
    best = frontier.frontier(frontier.read_predictions(dev), "climate_fever_evidence", [0.8, 0.6, 0.99])
    assert best[0.99] is None
    # 5 of 6 either way, but both REFUTES right (NEI F1 0.8, REFUTES 0.8) beats one (6/7, 2/3) in macro-F1
    f1, accuracy, offsets = best[0.8]
    assert (accuracy, round(f1, 3)) == (5 / 6, 0.867) and offsets[2] - offsets[1] > 0.85
    assert best[0.6][0] >= f1  # a lower floor never has a lower best
    frontier.main([str(dev), str(dev), "--floors", "0.99"])  # the same file twice: an ensemble equal to one
    out = capsys.readouterr().out
    assert "| argmax, no offsets | +0.0 | +0.0 | 0.667 / 0.583 |" in out and "| 0.990 | – | – | nothing" in out


def test_an_ensemble_of_predictions_over_other_pairs_is_refused(frontier, tmp_path) -> None:
    one = predictions(tmp_path / "one.jsonl", "vitaminc", ["SUPPORTS", "REFUTES"], [[0.8, 0.1, 0.1]] * 2)
    other = predictions(tmp_path / "other.jsonl", "vitaminc", ["REFUTES", "SUPPORTS"], [[0.8, 0.1, 0.1]] * 2)
    with pytest.raises(SystemExit, match=r"other.jsonl: vitaminc does not hold the pairs of .*one.jsonl"):
        frontier.main([str(one), str(other), "--source", "vitaminc"])
