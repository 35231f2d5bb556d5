"""report.html of a training run (issue #65): written by every `veracity train …` job at its end and by
`veracity report RUN_DIR` for a finished or interrupted run — header, curves from the log history, throughput and
memory beside the dry run's estimate, the checkpoints' task scores, the card, every text escaped; rendered by a real
browser (headless Chromium) where one is installed. Tiny models, a few steps each, one run per module fixture."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from fixture_data import write_tiny_training_sets

from veracity import cli
from veracity.io import sha256_file
from veracity.train.curves import history_curves, read_log_history, series_of

LORA_TARGETS = ["q_proj", "v_proj"]
PAYLOAD = "<script>alert(1)</script>"
PNG = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """What the tests read of a page: each image (alt → src), the header's rows, the visible text, tag counts."""

    def __init__(self, source: str):
        super().__init__()
        self.images: dict[str, str] = {}
        self.tags: dict[str, int] = {}
        self.header: dict[str, str] = {}
        self.summaries: list[str] = []
        self.chosen_rows: list[str] = []
        self._texts: list[str] = []
        self._cell: list[str] | None = None
        self._row: list[str] = []
        self._header_depth = 0
        self._in: list[str] = []
        self._chosen = False
        self.feed(source)
        self.close()
        self.text = "".join(self._texts)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self._in.append(tag)
        if tag == "img":
            self.images[a.get("alt") or ""] = a.get("src") or ""
        if tag == "table" and "header" in (a.get("class") or "").split():
            self._header_depth = len(self._in)
        if tag == "tr":
            self._row, self._chosen = [], a.get("class") == "chosen"
        if tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        if tag == "tr" and self._header_depth and len(self._in) == self._header_depth + 1 and len(self._row) >= 2:
            self.header[self._row[0]] = " ".join(self._row[1:])
        if tag == "tr" and self._chosen:
            self.chosen_rows.append(" | ".join(self._row))
        if tag == "table" and len(self._in) == self._header_depth:
            self._header_depth = 0
        while self._in and self._in.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        if "style" not in self._in and "title" not in self._in:
            self._texts.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._in and self._in[-1] == "summary":
            self.summaries.append(data)


def page_of(run_dir: Path) -> Page:
    return Page((run_dir / "report.html").read_text(encoding="utf-8"))


def png_of(src: str) -> bytes:
    assert src.startswith("data:image/png;base64,"), src[:40]
    return base64.b64decode(src.split(",", 1)[1])


def lora_args(model: Path, out: Path, steps: int) -> list[str]:
    return ["--model_name_or_path", str(model), "--output_dir", str(out), "--max_steps", str(steps),
            "--per_device_train_batch_size", "4", "--learning_rate", "0.01", "--use_peft", "true", "--lora_r", "4",
            "--lora_alpha", "8", "--lora_target_modules", *LORA_TARGETS, "--logging_steps", "1", "--save_steps", "2",
            "--bf16", "false", "--use_cpu", "true", "--max_length", "256", "--seed", "0",
            "--dataloader_num_workers", "0", "--report_to", "auto"]


@pytest.fixture(scope="module")
def sft_dir(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny SFT run through the command line: 4 steps, a checkpoint every 2 (checkpoint-2, -4)."""
    tmp = tmp_path_factory.mktemp("sft_report")
    sft_file, _ = write_tiny_training_sets(tmp)
    out = tmp / "run"
    assert cli.main(["train", "sft", "--train_file", str(sft_file), *lora_args(tiny_lm_dir, out, 4)]) == 0
    return out


def test_a_finished_sft_run_writes_its_report_with_the_header_and_the_curves(sft_dir: Path, tiny_lm_dir: Path) -> None:
    record = yaml.safe_load((sft_dir / "run_config.yaml").read_text())
    page = page_of(sft_dir)
    header = page.header
    assert header["date"] == record["started"] and header["commit"] == (record["git_revision"] or "not recorded")
    assert header["job"] == "train sft" and str(tiny_lm_dir) in header["base model"]
    weights = sha256_file(sft_dir / "adapter" / "adapter_model.safetensors")
    assert str(sft_dir / "adapter") in header["trained model"] and weights[:16] in header["trained model"]
    sft_file = Path(record["config"][0]["train_file"])
    assert f"12 records · sha256 {sha256_file(sft_file)} · {sft_file}" in header["data"]
    assert header["device"] == "cpu" and f"torch {record['versions']['torch']}" in header["libraries"]
    # one curve per quantity, inline PNGs, each the file written under curves/
    for quantity in ("loss", "learning_rate", "grad_norm", "mean_token_accuracy"):
        src = page.images[f"curves/{quantity}.png"]
        assert png_of(src).startswith(PNG) and png_of(src) == (sft_dir / "curves" / f"{quantity}.png").read_bytes()
    # the recipe, every field, behind a click per config; no script, nothing loaded from elsewhere
    assert any(s.startswith("TrainScriptArgs (") for s in page.summaries)
    assert any(s.startswith("SFTConfig (") for s in page.summaries)
    assert any(s.startswith("ModelConfig (") for s in page.summaries)
    assert "script" not in page.tags and all(src.startswith("data:") for src in page.images.values())
    assert "veracity SFT LoRA adapter" in page.text  # the card, as text
    assert "status: completed" not in page.text and "completed · 4 steps logged · 2 checkpoints" in page.text
    assert "checkpoints in the folder: checkpoint-2, checkpoint-4" in page.text


def test_the_curves_are_the_logged_values_and_throughput_the_logged_tokens(sft_dir: Path) -> None:
    history, source = read_log_history(sft_dir)
    assert source == sft_dir / "trainer_state.json", "the run folder's own state, written at the end"
    assert any("train_runtime" in e for e in history), "with the last log line, which no checkpoint holds"
    curves = history_curves(history)
    losses = [(e["step"], e["loss"]) for e in history if "loss" in e]
    assert list(zip(*curves["loss"]["train"], strict=True)) == losses and len(losses) == 4
    assert set(curves) >= {"loss", "learning_rate", "grad_norm", "mean_token_accuracy", "entropy"}
    assert not {"num_tokens", "train_runtime", "epoch", "train_loss"} & set(curves)
    summary = json.loads((sft_dir / "training_summary.json").read_text())
    tokens = [e["num_tokens"] for e in history if "num_tokens" in e][-1]
    runtime = next(e["train_runtime"] for e in history if "train_runtime" in e)
    assert summary["throughput"]["non_padding_tokens"] == tokens > 0
    assert summary["throughput"]["tokens_per_second"] == pytest.approx(tokens / runtime)
    assert summary["peak_memory"]["measure"].startswith("process peak RSS") and summary["peak_memory"]["gib"] > 0.1
    page = page_of(sft_dir)
    assert f"{tokens / runtime:,.1f} ({int(tokens):,} tokens in {runtime:,.1f} s of training" in page.text
    assert f"{summary['peak_memory']['gib']:.2f} GiB (process peak RSS" in page.text


def test_the_dry_run_estimate_is_the_recipes(sft_dir: Path, tiny_lm_dir: Path) -> None:
    """The estimate beside the measured peak is the dry run's for this very recipe: batch 4 rows of 256 tokens,
    LoRA r=4 on q/v, float32 weights (no dtype: TRL loads float32), full-precision training, dropout 0.05 and
    gradient checkpointing (both TRL's defaults)."""
    from veracity.train.memory import dry_run

    estimate = json.loads((sft_dir / "training_summary.json").read_text())["dry_run"]
    expected = dry_run(str(tiny_lm_dir), LORA_TARGETS, 4, 8, 4, 256, True, dtype_bytes=4, lora_dropout=0.05,
                       weight_bytes=4)
    assert estimate["total_gib"] == pytest.approx(expected.total_gib, rel=1e-12)
    assert estimate["trainable_params"] == expected.trainable_params and estimate["batch_rows"] == 4
    assert f"{expected.total_gib:.2f} GiB: weights" in page_of(sft_dir).text


def test_an_interrupted_run_gets_its_report_from_the_command(sft_dir: Path, tmp_path: Path, capsys) -> None:
    """A killed run has its checkpoints and none of the end's files: `veracity report RUN_DIR` draws the curves from
    the newest checkpoint, says nothing was measured, and still gives the dry run's estimate from the record."""
    run = tmp_path / "killed"
    shutil.copytree(sft_dir, run)
    for name in ("adapter", "curves"):
        shutil.rmtree(run / name)
    for name in ("COMPLETED", "trainer_state.json", "training_summary.json", "report.html"):
        (run / name).unlink()
    capsys.readouterr()
    assert cli.main(["report", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "report.html")
    page = page_of(run)
    assert "interrupted: its newest checkpoint is checkpoint-4" in page.text
    assert "from checkpoint-4/trainer_state.json (the newest checkpoint: the run was interrupted)" in page.text
    checkpoint_losses = [e["loss"] for e in json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())[
        "log_history"] if "loss" in e]
    assert len(checkpoint_losses) == 4 and png_of(page.images["curves/loss.png"]).startswith(PNG)
    assert "not measured: no training_summary.json (the run did not finish)" in page.text
    assert page.header["trained model"].startswith("none saved")
    estimate = json.loads((sft_dir / "training_summary.json").read_text())["dry_run"]
    assert f"{estimate['total_gib']:.2f} GiB: weights" in page.text, "estimated from run_config.yaml"
    assert "12 records" in page.header["data"] and "(the files as they are now" in page.header["data"]


def test_the_checkpoints_task_scores_show_with_the_best_marked(sft_dir: Path, tmp_path: Path) -> None:
    """checkpoints/table.json, best.json and one PNG per metric (written by `veracity eval checkpoints`; here by
    hand): the table in row order, the best row marked, the plots inline."""
    from veracity.infer.plots import lines_over_steps

    run = tmp_path / "scored"
    shutil.copytree(sft_dir, run)
    folder = run / "checkpoints"
    folder.mkdir()
    rows = [{"checkpoint": "checkpoint-2", "step": 2, "accuracy": 0.25, "macro_f1": 0.125, "vitaminc/macro_f1": 0.1},
            {"checkpoint": "checkpoint-4", "step": 4, "accuracy": 0.5, "macro_f1": 0.4, "vitaminc/macro_f1": 0.35},
            {"checkpoint": "adapter", "step": 4, "accuracy": 0.5, "macro_f1": 0.375, "vitaminc/macro_f1": 0.3}]
    (folder / "table.json").write_text(json.dumps({"metric": "macro_f1", "best": "checkpoint-4", "kind": "generator",
                                                   "sources": ["vitaminc"], "columns": ["accuracy", "macro_f1"],
                                                   "rows": rows}))
    (folder / "best.json").write_text(json.dumps({"checkpoint": "checkpoint-4", "metric": "macro_f1", "value": 0.4}))
    lines_over_steps({"dev": ([2, 4], [0.125, 0.4])}, folder / "macro_f1.png", title="macro-F1", ylabel="macro_f1")
    assert cli.main(["report", str(run)]) == 0
    page = page_of(run)
    assert page.chosen_rows == ["checkpoint-4 best by macro_f1 | 4 | 0.5000 | 0.4000",  # the means, then per source
                                "checkpoint-4 best by macro_f1 | 4 | 0.3500"]
    text = page.text
    assert text.index("checkpoint-2") < text.index("checkpoint-4 best") < text.index("adapter40.5000")
    assert "best by macro_f1; each metric the mean over vitaminc" in text
    assert png_of(page.images["checkpoints/macro_f1.png"]) == (folder / "macro_f1.png").read_bytes()
    assert "not scored on the task" not in text


@pytest.fixture(scope="module")
def dpo_dir(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("dpo_report")
    _, dpo_file = write_tiny_training_sets(tmp)
    out = tmp / "run"
    assert cli.main(["train", "dpo", "--train_file", str(dpo_file), "--beta", "0.1",
                     *lora_args(tiny_lm_dir, out, 3)]) == 0
    return out


def test_a_dpo_runs_report_has_its_rewards_margin_and_accuracy(dpo_dir: Path) -> None:
    history, _ = read_log_history(dpo_dir)
    curves = history_curves(history)
    assert set(curves["rewards"]) == {"chosen", "rejected"}
    chosen = [(e["step"], e["rewards/chosen"]) for e in history if "rewards/chosen" in e]
    assert list(zip(*curves["rewards"]["chosen"], strict=True)) == chosen and len(chosen) == 3
    page = page_of(dpo_dir)
    for quantity in ("loss", "rewards", "rewards_margins", "rewards_accuracies", "learning_rate", "grad_norm"):
        assert png_of(page.images[f"curves/{quantity}.png"]).startswith(PNG), quantity
    assert page.header["job"] == "train dpo" and any(s.startswith("DPOConfig (") for s in page.summaries)
    summary = json.loads((dpo_dir / "training_summary.json").read_text())
    assert summary["throughput"]["non_padding_tokens"] > 0
    assert summary["dry_run"]["batch_rows"] == 8, "a preference pair is two rows of a batch"


@pytest.fixture(scope="module")
def split_prepared_dir(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hand-made data root with its train / calib / dev splits (conftest's prepared_dir puts every record in
    dev, which the task scores read)."""
    from veracity.data_prep.prepare import PrepConfig, prepare

    out = tmp_path_factory.mktemp("prep")
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(out), datasets=["fever", "vitaminc", "nli"]))
    return out


def test_an_nli_runs_report_has_its_calib_curves_and_dev_scores_per_source(split_prepared_dir: Path,
                                                                            tiny_encoder_dir: Path,
                                                                            tmp_path: Path) -> None:
    out = tmp_path / "nli"
    init = tiny_encoder_dir / ".." / "hf"
    assert cli.main(["train", "nli", "--prepared_dir", str(split_prepared_dir), "--init", str(init),
                     "--claim_sources", "vitaminc", "fever_symmetric", "--eval_sources", "vitaminc", "fever_symmetric",
                     "--output_dir", str(out), "--max_steps", "4",
                     "--per_device_train_batch_size", "4", "--learning_rate", "0.001", "--report_to", "auto",
                     "--use_cpu", "true", "--quick", "true", "--install", "false", "--max_length", "64",
                     "--eval_strategy", "steps", "--eval_steps", "2", "--save_steps", "2", "--logging_steps", "1",
                     "--metric_for_best_model", "eval_calib_macro_f1", "--load_best_model_at_end", "true",
                     "--task_eval_examples", "2"]) == 0
    history, _ = read_log_history(out)
    curves = history_curves(history)
    calib = [(e["step"], e["eval_calib_macro_f1"]) for e in history if "eval_calib_macro_f1" in e]
    assert list(zip(*curves["macro_f1"]["eval calib"], strict=True)) == calib and len(calib) == 2
    assert set(curves["loss"]) == {"train", "eval calib"}
    # each saved checkpoint scored as a verifier on 2 dev examples per source (vitaminc has none here: left out)
    task = json.loads((out / "task_scores" / "checkpoint-4" / "metrics.json").read_text())
    assert task["fever_symmetric"]["examples"] == 2 and task["vitaminc"]["examples"] == 0
    assert curves["accuracy"]["eval task"] == ([2.0, 4.0], [curves["accuracy"]["eval task"][1][0],
                                                            task["fever_symmetric"]["accuracy"]])
    assert "ece" in curves and "eval task" in curves["ece"]
    page = page_of(out)
    for quantity in ("loss", "macro_f1", "accuracy", "learning_rate"):
        assert png_of(page.images[f"curves/{quantity}.png"]).startswith(PNG), quantity
    dev = json.loads((out / "metrics.json").read_text())["dev"]
    for source, scores in dev.items():  # the dev scores per source, the source's prefix gone from their names
        assert f"dev.{source}.accuracy{scores[f'{source}_accuracy']:.4f}" in page.text
        assert f"dev.{source}.macro_f1{scores[f'{source}_macro_f1']:.4f}" in page.text
    assert f"pairs{json.loads((out / 'metrics.json').read_text())['train']['pairs']}" in page.text
    assert "not measured: this trainer counts no tokens" in page.text
    assert page.header["job"] == "train nli" and "training pairs" in page.header["data"]


def test_task_scores_at_each_save_join_the_curves(tiny_lm_dir: Path, prepared_dir: Path, sft_dir: Path,
                                                  tmp_path: Path) -> None:
    """--task_eval_examples N scores each checkpoint as it is saved (eval checkpoint's own evaluation, first N dev
    examples per source): the means join the log history as eval_task_<metric>, drawn with the other curves; off by
    default (the plain SFT run has none)."""
    sft_file, _ = write_tiny_training_sets(tmp_path)
    out = tmp_path / "run"
    assert cli.main(["train", "sft", "--train_file", str(sft_file), *lora_args(tiny_lm_dir, out, 4),
                     "--task_eval_examples", "2", "--task_eval_prepared_dir", str(prepared_dir),
                     "--task_eval_sources", "vitaminc", "fever_symmetric"]) == 0
    history, _ = read_log_history(out)
    logged = {e["step"]: e for e in history if "eval_task_accuracy" in e}
    assert sorted(logged) == [2, 4]
    for step, entry in logged.items():
        scored = json.loads((out / "task_scores" / f"checkpoint-{step}" / "metrics.json").read_text())
        assert set(scored) == {"vitaminc", "fever_symmetric"} and all(m["examples"] == 2 for m in scored.values())
        for metric in ("accuracy", "macro_f1", "parse_failure_rate"):
            assert entry[f"eval_task_{metric}"] == pytest.approx(sum(m[metric] for m in scored.values()) / 2)
    curves = history_curves(history)
    assert curves["accuracy"]["eval task"] == ([2.0, 4.0], [logged[2]["eval_task_accuracy"],
                                                            logged[4]["eval_task_accuracy"]])
    page = page_of(out)
    for quantity in ("accuracy", "macro_f1", "parse_failure_rate"):
        assert png_of(page.images[f"curves/{quantity}.png"]).startswith(PNG), quantity
    plain, _ = read_log_history(sft_dir)
    assert not any(k.startswith("eval_task_") for e in plain for k in e) and not (sft_dir / "task_scores").exists()


def test_every_text_is_escaped(tmp_path: Path) -> None:
    """A recipe value, a card, a logged key and a checkpoint table holding markup show as text: no element of
    theirs reaches the page (the page itself has no script at all)."""
    from veracity.train.report import write_training_report

    run = tmp_path / "run"
    (run / "adapter").mkdir(parents=True)
    (run / "checkpoint-1").mkdir()
    yaml.safe_dump({"job": "train sft", "started": PAYLOAD, "git_revision": PAYLOAD,
                    "config": [{"train_file": PAYLOAD}, {"output_dir": str(run)}, {"model_name_or_path": PAYLOAD}],
                    "versions": {"torch": PAYLOAD}}, (run / "run_config.yaml").open("w"))
    (run / "adapter" / "README.md").write_text(f"---\nbase_model: '{PAYLOAD}'\n---\n# card {PAYLOAD}\n")
    (run / "checkpoint-1" / "trainer_state.json").write_text(json.dumps({"log_history": [
        {"step": 1, "loss": 1.0, PAYLOAD: 2.0}]}))
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "table.json").write_text(json.dumps({"metric": PAYLOAD, "best": PAYLOAD,
                                                                "columns": [PAYLOAD],
                                                                "rows": [{"checkpoint": PAYLOAD, PAYLOAD: PAYLOAD}]}))
    source = write_training_report(run).read_text(encoding="utf-8")
    page = Page(source)
    assert "script" not in page.tags and "<script>alert" not in source
    assert page.text.count(PAYLOAD) >= 8  # date, commit, base model, hub id, card, data, versions, table cells
    assert f"curves/{series_of(PAYLOAD)[0]}" not in page.images  # markup is no file name either
    assert all(alt.startswith("curves/") and "<" not in alt for alt in page.images)


def test_bad_input_is_one_error_line(tmp_path: Path, capsys) -> None:
    for folder, message in ((tmp_path / "nowhere", "no such folder"), (tmp_path, "no run_config.yaml")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:
            cli.main(["report", str(folder)])
        err = capsys.readouterr().err.splitlines()
        assert stop.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {folder}: {message}"), err


def test_the_command_writes_a_pipeline_runs_page_too(tmp_path: Path) -> None:
    run = tmp_path / "pipeline"
    run.mkdir()
    (run / "run_config.yaml").write_text(yaml.safe_dump({"job": "infer uts", "config": {"output_dir": str(run)}}))
    records = [{"id": "a1", "status": "ok", "result": {"id": "a1", "factchecking_article": "x", "cites": []}},
               {"id": "b2", "status": "error", "error": PAYLOAD}]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli.main(["report", str(run)]) == 0
    source = (run / "report.html").read_text(encoding="utf-8")
    assert 'data-id="a1"' in source and 'data-id="b2"' in source and PAYLOAD not in source


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: scripts/setup.sh installs Debian's chromium (as root)")
def test_chromium_renders_the_header_and_the_curves(sft_dir: Path, tmp_path: Path) -> None:
    """A real browser reads the page: its DOM after loading holds the header and every curve as a decoded image."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    url = (sft_dir / "report.html").resolve().as_uri()
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    curves = sorted((sft_dir / "curves").glob("*.png"))
    assert dom.count('src="data:image/png;base64,') == len(curves) >= 4
    assert "<th>commit</th>" in dom and "<td>train sft</td>" in dom and "Curves</h2>" in dom
    shot = tmp_path / "page.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1280,2400", url], capture_output=True,
                   timeout=120, check=True)
    assert shot.read_bytes().startswith(PNG) and shot.stat().st_size > 20_000, "a page drawn, not a blank one"
