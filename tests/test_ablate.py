"""`veracity infer ablate`: a pipeline's ablation as a list of recipes run by the driver, one table — rows resume,
a scorer command can replace the pipeline's own, and every shipped ablation recipe builds valid pipeline configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pipeline_inputs import CLAIMS, write_jsonl

from veracity import cli
from veracity.config import load_config_values, parse_config
from veracity.infer.pipelines.ablate import AblationConfig, make_parser
from veracity.infer.pipelines.driver import build_configs
from veracity.infer.pipelines.registry import pipeline_class

REPO = Path(__file__).resolve().parents[1]


def test_rows_run_through_the_driver_into_one_table(tiny_verifier: Path, tmp_path: Path) -> None:
    claims = write_jsonl(tmp_path / "claims.jsonl", CLAIMS)
    recipe = tmp_path / "r2vc_nli.yaml"
    recipe.write_text(yaml.safe_dump({"claims": str(claims), "use_generator": False, "nli_model": str(tiny_verifier),
                                      "calibrator": None, "tau_ver": 0.34}))
    out = tmp_path / "ablation"
    ablation = tmp_path / "ablation.yaml"
    ablation.write_text(yaml.safe_dump({
        "pipeline": "r2vc", "output_dir": str(out), "columns": ["accuracy", "coverage", "n", "summary.json:processed"],
        "progress": False,
        "rows": [{"name": "nli", "recipe": str(recipe), "label": "NLI-only"},
                 {"name": "no_abstention", "recipe": str(recipe), "overrides": {"abstention": "none"}},
                 {"name": "rescored", "label": "NLI-only, scored again",
                  "scorer": ["eval", "r2vc", "--predictions", "{ablation_dir}/nli/records.jsonl", "--output_dir",
                             "{run_dir}", "--plots", "false"]}]}))
    assert cli.main(["infer", "ablate", "--config", str(ablation)]) == 0
    table = json.loads((out / "ablation.json").read_text())["tables"]["all"]
    for label, name in (("NLI-only", "nli"), ("no_abstention", "no_abstention")):
        metrics = json.loads((out / name / "metrics.json").read_text())
        assert table[label] == {**{c: metrics[c] for c in ("accuracy", "coverage", "n")}, "summary.json:processed": 5}
    assert table["no_abstention"]["coverage"] == 1.0  # the row's override took effect
    again = {**table["NLI-only"], "summary.json:processed": None}  # a scorer command on another row's records
    assert table["NLI-only, scored again"] == again
    text = (out / "ablation.md").read_text()
    assert "| run | accuracy | coverage | n | summary.json:processed |" in text and "| NLI-only |" in text
    # again: every row resumes (nothing re-run), and --only runs one row while the table keeps the others
    records = {name: (out / name / "records.jsonl").read_bytes() for name in ("nli", "no_abstention")}
    assert cli.main(["infer", "ablate", "--config", str(ablation), "--only", "no_abstention"]) == 0
    assert {name: (out / name / "records.jsonl").read_bytes() for name in records} == records
    assert set(json.loads((out / "ablation.json").read_text())["tables"]["all"]) == {"NLI-only", "no_abstention"}


def test_an_ablation_recipe_with_a_row_the_config_refuses_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rows need a name each"):
        AblationConfig(rows=[{"recipe": "x.yaml"}], columns=["accuracy"])
    with pytest.raises(ValueError, match="unknown keys"):
        AblationConfig(rows=[{"name": "a", "recipe": "x.yaml", "overide": {}}], columns=["accuracy"])


@pytest.mark.parametrize("path", sorted(REPO.glob("configs/ablations/*.yaml")), ids=lambda p: p.name)
def test_every_shipped_ablation_builds_its_rows_configs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    (config,) = parse_config(make_parser(), ["--config", str(path)])
    cls = pipeline_class(config.pipeline)
    for row in config.rows:
        assert row.get("recipe") or row.get("scorer"), row
        if row.get("recipe"):
            values = {**load_config_values(row["recipe"]), **config.overrides, **(row.get("overrides") or {})}
            build_configs(cls.config_types, values)  # refuses an option the pipeline does not have
