"""``veracity eval checkpoints RUN_DIR``: every checkpoint of a tiny SFT run scored through the command line — the
table, one plot per metric, ``best.json``; a second call scores nothing again, another data slice scores all again;
``train merge --run_dir RUN --checkpoint best`` merges the one chosen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixture_data import write_tiny_training_sets

from veracity import cli

LORA = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def sft_run(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny SFT run of 4 steps that saved checkpoint-2 and checkpoint-4 (and its final adapter, checkpoint-4's
    weights)."""
    tmp = tmp_path_factory.mktemp("sweep")
    sft_file, _ = write_tiny_training_sets(tmp)
    run = tmp / "run"
    argv = ["train", "sft", "--train_file", str(sft_file), "--model_name_or_path", str(tiny_lm_dir), "--output_dir",
            str(run), "--max_steps", "4", "--save_steps", "2", "--per_device_train_batch_size", "4", "--learning_rate",
            "0.01", "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", *LORA,
            "--logging_steps", "1", "--report_to", "none", "--bf16", "false", "--use_cpu", "true", "--max_length",
            "256", "--seed", "0", "--dataloader_num_workers", "0"]
    assert cli.main(argv) == 0
    return run


def sweep(run: Path, prepared_dir: Path, *extra: str) -> int:
    return cli.main(["eval", "checkpoints", str(run), "--prepared_dir", str(prepared_dir), "--sources", "vitaminc",
                     "fever_symmetric", "--max_examples", "2", "--rationale_max_chars", "16", *extra])


def test_every_checkpoint_is_scored_and_the_best_is_merged(sft_run: Path, prepared_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import veracity.infer.checkpoint_sweep as sweep_module

    scored: list[str] = []
    real = sweep_module.evaluate_checkpoint

    def counted(args, engine_config, quiet=False):  # noqa: ANN001, ANN202
        scored.append(Path(args.output_dir).name)
        return real(args, engine_config, quiet)

    monkeypatch.setattr(sweep_module, "evaluate_checkpoint", counted)
    assert sweep(sft_run, prepared_dir) == 0
    assert scored == ["base", "checkpoint-2", "checkpoint-4"], "the final adapter is checkpoint-4's: not twice"
    out = sft_run / "checkpoints"
    table = json.loads((out / "table.json").read_text())
    assert [(r["checkpoint"], r["step"]) for r in table["rows"]] == [("base", 0), ("checkpoint-2", 2),
                                                                      ("checkpoint-4", 4)]
    for row in table["rows"]:  # each metric: the mean of its two sources
        metrics = {s: json.loads((out / row["checkpoint"] / "metrics.json").read_text())[s]
                   for s in ("vitaminc", "fever_symmetric")}
        assert row["macro_f1"] == pytest.approx((metrics["vitaminc"]["macro_f1"]
                                                 + metrics["fever_symmetric"]["macro_f1"]) / 2)
        assert row["vitaminc/parse_failure_rate"] == metrics["vitaminc"]["parse_failure_rate"]
        assert "quote_format_rate" in row
    best = json.loads((out / "best.json").read_text())
    top = max(table["rows"][1:], key=lambda r: (r["macro_f1"], -r["step"]))  # the base row is never chosen
    assert best["checkpoint"] == table["best"] == top["checkpoint"] and best["metric"] == "macro_f1"
    assert best["path"] == str(sft_run / top["checkpoint"])
    assert {p.name for p in out.glob("*.png")} == {f"{m}.png" for m in table["columns"]}
    assert "(best)" in (out / "table.md").read_text()

    # a second call scores nothing again; another data slice scores every checkpoint again
    scored.clear()
    assert sweep(sft_run, prepared_dir) == 0 and scored == []
    assert sweep(sft_run, prepared_dir, "--max_examples", "1") == 0
    assert scored == ["base", "checkpoint-2", "checkpoint-4"]

    # the best by another metric
    assert sweep(sft_run, prepared_dir, "--max_examples", "1", "--metric", "parse_failure_rate") == 0
    chosen = json.loads((out / "best.json").read_text())
    rows = json.loads((out / "table.json").read_text())["rows"]
    assert chosen["value"] == min(r["parse_failure_rate"] for r in rows[1:])

    # train merge --checkpoint best merges that one, on the run's own base
    capsys.readouterr()
    merged = tmp_path / "merged"
    assert cli.main(["train", "merge", "--run_dir", str(sft_run), "--checkpoint", "best", "--output_dir",
                     str(merged)]) == 0
    assert f"(adapter {chosen['path']})" in capsys.readouterr().out
    assert f"merged from the LoRA adapter {chosen['path']}" in (merged / "README.md").read_text()


def test_bad_sweeps_are_one_error_line(sft_run: Path, prepared_dir: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    def fails(argv: list[str]) -> str:
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:
            cli.main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: "), err
        return err

    assert "not a training run folder" in fails(["eval", "checkpoints", str(tmp_path)])
    assert "--metric" in fails(["eval", "checkpoints", str(sft_run), "--metric", "loss"])
    assert "not a training run folder" in fails(["train", "merge", "--run_dir", str(tmp_path / "r"), "--checkpoint",
                                                 "best", "--output_dir", str(tmp_path / "m")])
    other = tmp_path / "other"
    other.mkdir()
    (other / "run_config.yaml").write_text("job: train sft\n")
    assert "no best checkpoint chosen yet; `veracity eval checkpoints" in fails(
        ["train", "merge", "--run_dir", str(other), "--checkpoint", "best", "--output_dir", str(tmp_path / "m")])
    assert "checkpoint-9: no such folder in the run (its checkpoints: checkpoint-2, checkpoint-4)" in fails(
        ["train", "merge", "--run_dir", str(sft_run), "--checkpoint", "checkpoint-9", "--output_dir",
         str(tmp_path / "m")])
    assert not (tmp_path / "m").exists()
