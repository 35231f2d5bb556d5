"""The main job end to end on the hand-made data root and the embedded models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_runs_every_stage(data_root: Path, tmp_path: Path, embedded_cache: Path,
                               monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli

    monkeypatch.setenv("VERACITY_CACHE", str(embedded_cache))
    for name in ("TRANSFORMERS_VERBOSITY", "HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS",
                 "TRANSFORMERS_NO_ADVISORY_WARNINGS", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(name, raising=False)  # restored after the test: quiet mode sets them
    # through the command, as a person runs it: quiet by default
    argv = ["demo", "--data_root", str(data_root), "--output_dir", str(tmp_path / "demo"), "--sft_steps", "2",
            "--nli_quick_steps", "1", "--dpo_steps", "1"]
    cli.main(argv)
    captured = capsys.readouterr()
    out = captured.out
    # what a person sees fits on a few screens: stage headers and tables, no third-party bars or warnings (220: the
    # SFT run's checkpoint table and the dry run's checkpointing modes joined stage 5; 211 lines at a406f4c)
    assert len(out.splitlines()) < 220, len(out.splitlines())
    for noise in ("Loading weights", "Map:", "Tokenizing train dataset", "Writing model shards", "FutureWarning",
                  "UserWarning"):
        assert noise not in captured.err, noise
    for stage in ("== 1. data preparation", "== 2. embedded models", "== 3. retrieval", "== 4. offline batch",
                  "== 5. training", "== 6. R2VC", "== 7. DPO", "== 8. AIC, SciClaimSeekers and UTS", "== 9. "):
        assert stage in out
    assert "'What is the capital of France?' → 'The capital of France is Paris.'" in out  # a check it gets right
    assert (tmp_path / "demo" / "run_config.yaml").exists()
    assert json.loads((tmp_path / "demo" / "prep" / "manifest.json").read_text())["outputs"]
    metrics = json.loads((tmp_path / "demo" / "retrieval" / "metrics.json").read_text())
    assert "BM25" in metrics["fever_evidence"]["rows"]
    assert "hybrid (RRF) search for 'Colombiana is a French film.'" in out
    predictions = (tmp_path / "demo" / "generate" / "predictions.jsonl").read_text().splitlines()
    assert predictions and all(json.loads(line)["status"] == "ok" for line in predictions)
    # decoding is constrained to the answer's schema: the base SmolLM2 answers in the format asked, every time
    assert all(c["parsed"]["label"] in ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
               for line in predictions for c in json.loads(line)["result"]["candidates"])
    assert f"parse failures: 0 of {len(predictions)} candidates" in out
    assert (tmp_path / "demo" / "sft" / "adapter" / "adapter_model.safetensors").exists()
    # the SFT smoke run keeps two checkpoints, both scored on a few claims; its report is on disk
    sweep = json.loads((tmp_path / "demo" / "sft" / "checkpoints" / "table.json").read_text())
    assert [r["checkpoint"] for r in sweep["rows"]] == ["base", "checkpoint-1", "checkpoint-2"] and sweep["best"]
    assert (tmp_path / "demo" / "sft" / "report.html").exists()
    assert "QUICK version" in out and "41.94 M trainable" in out
    assert json.loads((tmp_path / "demo" / "nli_eval" / "metrics.json").read_text())
    for run in ("full", "nli_only"):  # R2VC written like any `infer r2vc` run
        metrics = json.loads((tmp_path / "demo" / "r2vc" / run / "metrics.json").read_text())
        assert metrics["n"] > 0 and 0.0 <= metrics["coverage"] <= 1.0
        assert (tmp_path / "demo" / "r2vc" / run / "risk_coverage.png").exists()
        assert f"-> {tmp_path / 'demo' / 'r2vc' / run / 'report.html'} (open in a browser" in out
    assert "| full |" in out and "| nli_only |" in out
    full_records = (tmp_path / "demo" / "r2vc" / "full" / "records.jsonl").read_text().splitlines()
    full = [json.loads(line) for line in full_records]
    generated = [c for r in full for c in r["result"]["candidates"] if c["from"] == "generator"]
    assert generated and all(c["label"] is not None for c in generated)  # the generator's answers parse
    # the DPO smoke step trains a fresh LoRA on the SFT model of stage 5
    assert (tmp_path / "demo" / "dpo" / "adapter" / "adapter_model.safetensors").exists()
    assert "DPO adapter (a 1-step smoke run of the recipe" in out
    # the closing table: one row per pipeline run, its headline metric a number, its report on disk
    table = out.split("== 9. ")[1]
    lines = [line.split(" | ") for line in table.splitlines() if line.startswith("| ")]
    rows = {cells[0].strip("| "): cells for cells in lines}
    for pipeline, folder, metric in (("SFT (2 steps)", "sft", "best checkpoint's macro-F1"),
                                     ("R2VC (full)", "r2vc/full", "accuracy"),
                                     ("R2VC (nli_only)", "r2vc/nli_only", "accuracy"),
                                     ("AIC", "aic", "old AVeriTeC score"),
                                     ("SciClaimSeekers", "sciclaimseekers", "MRR@5"), ("UTS", "uts", "M4")):
        cells = rows[pipeline]
        report = tmp_path / "demo" / folder / "report.html"
        assert cells[2] == metric and 0.0 <= float(cells[3]) <= 1.0, cells
        assert cells[-1].strip(" |") == str(report) and report.exists(), cells
    assert json.loads((tmp_path / "demo" / "uts" / "m4" / "metrics.json").read_text())["n"] > 0
    assert "R2VC: the full pipeline" in table  # the line that says what the R2VC rows mean
    # the next run reuses every finished step (same models, same settings: the resume checks let it through)
    cli.main(argv)
    again = capsys.readouterr().out
    r2vc_again = again.split("== 6. R2VC")[1].split("== 7. DPO")[0]
    assert r2vc_again.count(" already done, 0 processed") == 4  # two calibrator simulations, full, nli_only
    assert again.split("== 8. ")[1].count(" already done, 0 processed") == 3  # AIC, SciClaimSeekers, UTS


@pytest.mark.parametrize(("full", "nli", "says"), [
    ({"coverage": 0.0, "accuracy": 0.03}, {"coverage": 0.56, "accuracy": 0.41}, "answered no claim"),
    ({"coverage": 0.47, "accuracy": 0.44}, {"coverage": 0.56, "accuracy": 0.41}, "beats its NLI-only ablation"),
    ({"coverage": 0.47, "accuracy": 0.38}, {"coverage": 0.56, "accuracy": 0.41}, "does not beat"),
])
def test_the_demos_r2vc_line_says_what_the_rows_mean(full: dict, nli: dict, says: str) -> None:
    """The full row answering nothing is said as such (it did at 24 calib claims a source), not as "does not beat"."""
    from veracity.demo_tour import verdict_line

    assert says in verdict_line({"full": {"metrics": full}, "nli_only": {"metrics": nli}})
