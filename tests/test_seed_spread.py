"""bench/seed_spread.py: mean ± sample standard deviation and range per dev set over several eval runs."""

from __future__ import annotations

import json

import pytest
from repo_scripts import load_script


@pytest.fixture(scope="module")
def seed_spread():
    return load_script("bench/seed_spread.py")


def test_the_table_has_mean_sd_and_range_of_every_dev_set_all_runs_share(seed_spread, tmp_path, capsys) -> None:
    runs = {13: (0.6, 0.5), 14: (0.7, 0.55), 15: (0.8, 0.6)}
    paths = []
    for seed, (acc, f1) in runs.items():
        metrics = {"fever_symmetric": {"accuracy": acc, "macro_f1": f1},
                   "vitaminc": {"accuracy": 0.5, "macro_f1": 0.4}, "n_examples": 3}
        if seed == 15:
            del metrics["vitaminc"]  # a set missing from one run is left out, not averaged over fewer runs
        path = tmp_path / f"seed{seed}" / "metrics.json"
        path.parent.mkdir()
        path.write_text(json.dumps(metrics))
        paths.append(str(path))
    seed_spread.main(paths)
    out = capsys.readouterr().out
    assert "| fever_symmetric | 0.700 ± 0.100 (0.600–0.800) | 0.550 ± 0.050 (0.500–0.600) |" in out
    assert "vitaminc" not in out and "runs: seed13, seed14, seed15" in out
