"""Mistakes a new user makes, through the command line: each is one ``error:`` line that says what is wrong and what
fixes it, exit status 2, and nothing written (issue #63) — a misspelt recipe field (its file, line and the closest
field), a ``base:`` that names no file (the path it resolved to), an abbreviated option, a YAML syntax error,
``--max_examples`` with ``--claims``, ``train merge`` on a folder that does not exist, and a trained model or
calibrator a recipe names that is not there yet (the commands that make it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veracity import cli
from veracity.config import load_config_values
from veracity.made_by import made_by

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh clone's working directory: the shipped configs, a claims file, nothing under runs/."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "configs").symlink_to(REPO / "configs")
    (work / "my.jsonl").write_text(json.dumps({"id": "a", "claim": "Cats purr.", "evidence": "Cats purr."}) + "\n")
    monkeypatch.chdir(work)
    return work


def fails(argv: list[str], capsys: pytest.CaptureFixture[str], work: Path) -> str:
    """``veracity ARGV``: exit status 2, one ``error:`` line (returned without ``error: ``), nothing written."""
    before = sorted(p.name for p in work.iterdir())
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert sorted(p.name for p in work.iterdir()) == before, "a refused run must write nothing, not even a folder"
    return err.removeprefix("error: ")


# --- recipe mistakes -------------------------------------------------------------------------------------------

def test_a_misspelt_field_names_the_file_line_and_closest_field(workdir: Path, capsys) -> None:
    (workdir / "mine.yaml").write_text("sources: [vitaminc]\nn_candidate: 2\n")
    assert fails(["infer", "r2vc", "--config", "mine.yaml"], capsys, workdir) == (
        "veracity infer r2vc: mine.yaml:2: field 'n_candidate': not an option of this command (did you mean "
        "'n_candidates'?)")
    # in a base recipe, the base file's line is named; a field close to nothing says where the options are listed
    (workdir / "child.yaml").write_text("base: mine.yaml\nsplit: calib\n")
    assert fails(["infer", "r2vc", "--config", "child.yaml"], capsys, workdir) == (
        "veracity infer r2vc: mine.yaml:2: field 'n_candidate': not an option of this command (did you mean "
        "'n_candidates'?)")
    assert fails(["train", "merge", "--config", "child.yaml"], capsys, workdir) == (
        "veracity train merge: mine.yaml:1: field 'sources': not an option of this command (`--help` lists the "
        "options)")


def test_a_base_that_names_no_file_shows_the_path_it_resolved_to(workdir: Path, capsys) -> None:
    (workdir / "sub").mkdir()
    (workdir / "sub" / "ablation.yaml").write_text("n_candidates: 2\nbase: r2vc_embedded.yaml\n")
    error = fails(["infer", "r2vc", "--config", "sub/ablation.yaml"], capsys, workdir)
    assert error == (f"veracity infer r2vc: sub/ablation.yaml:2: field 'base': no recipe {workdir}/sub/r2vc_embedded."
                     "yaml (a base path is relative to the recipe that names it)")
    # the same base written relative to the recipe (not to the working directory) is found
    (workdir / "sub" / "ablation.yaml").write_text("n_candidates: 3\nbase: ../configs/pipelines/r2vc_embedded.yaml\n")
    values = load_config_values("sub/ablation.yaml")
    assert values["n_candidates"] == 3 and values["sources"] == ["fever_symmetric", "vitaminc"]


def test_a_recipe_that_is_not_yaml_names_its_line(workdir: Path, capsys) -> None:
    (workdir / "broken.yaml").write_text("split: dev\nsources: [vitaminc\n")
    error = fails(["infer", "r2vc", "--config", "broken.yaml"], capsys, workdir)
    assert error.startswith("veracity infer r2vc: broken.yaml:3: not YAML: ")
    (workdir / "list.yaml").write_text("- split\n")
    assert fails(["infer", "r2vc", "--config", "list.yaml"], capsys, workdir) == (
        "veracity infer r2vc: list.yaml:1: a recipe must be a mapping of field: value")


@pytest.mark.parametrize("argv", [["infer", "r2vc", "--max_example", "3"],
                                  ["train", "merge", "--adapter", "a", "--output_dir", "o", "--dtyp", "auto"],
                                  ["eval", "r2vc", "--predictions", "p", "--output_dir", "o", "--plot", "false"],
                                  ["models", "resolve", "chat_lm", "--nam", "x"]])
def test_long_options_are_taken_only_in_full(argv: list[str], workdir: Path, capsys) -> None:
    error = fails(argv, capsys, workdir)
    assert "unrecognized arguments" in error and argv[-2] in error
    if argv[-2] == "--max_example":  # a near miss names the option meant
        assert error.endswith("unrecognized arguments: --max_example 3 (did you mean --max_examples?)")


def test_max_examples_is_refused_with_a_claims_file(workdir: Path, capsys) -> None:
    assert fails(["infer", "r2vc", "--claims", "my.jsonl", "--max_examples", "3"], capsys, workdir) == (
        "veracity infer r2vc: --max_examples caps prepared sources, not a --claims file: give a file of the claims "
        "to run (the first N: head -n N my.jsonl)")


# --- messages that pointed the wrong way ---------------------------------------------------------------------------

def test_merge_of_a_folder_that_does_not_exist_names_the_command_that_makes_one(workdir: Path, capsys) -> None:
    error = fails(["train", "merge", "--adapter", "runs/train/sft_smollm2/adapter", "--output_dir", "m"], capsys,
                  workdir)
    assert error == ("--adapter runs/train/sft_smollm2/adapter: no such folder; `veracity prep` then `veracity prep "
                     "training-sets` then `veracity train sft --config configs/train/sft_lora_smollm2_cpu.yaml` make "
                     "it (docs/training.md#sft-and-dpo)")
    error = fails(["train", "merge", "--adapter", "elsewhere/adapter", "--output_dir", "m"], capsys, workdir)
    assert error.startswith("--adapter elsewhere/adapter: no such folder; `veracity train sft --config RECIPE`")
    (workdir / "empty").mkdir()
    assert fails(["train", "merge", "--adapter", "empty", "--output_dir", "m"], capsys, workdir) == (
        "empty: not a LoRA adapter folder (no adapter_config.json)")


# --- a trained model or file that a recipe names and a fresh clone lacks ---------------------------------------------

def test_the_embedded_recipe_on_a_fresh_clone_names_what_makes_its_generator(workdir: Path, capsys) -> None:
    """The error rule, one for every role: a path the recipe names that is not there is one line naming the
    commands that make it and the installed default that does without; no runs/ folder is left behind."""
    claims = ["infer", "r2vc", "--config", "configs/pipelines/r2vc_embedded.yaml", "--claims", "my.jsonl",
              "--output_dir", "runs/r2vc/mine"]
    error = fails(claims, capsys, workdir)
    assert error == (
        "model path 'runs/train/sft_smollm2/merged' for role 'chat_lm' does not exist: `veracity prep` then "
        "`veracity prep training-sets` then `veracity train sft --config configs/train/sft_lora_smollm2_cpu.yaml` "
        "then `veracity train merge --adapter runs/train/sft_smollm2/adapter --output_dir runs/train/sft_smollm2/"
        "merged` make it (docs/training.md#sft-and-dpo); 'embedded' names the role's installed default instead")
    error = fails([*claims, "--model", "embedded"], capsys, workdir)  # then the calibrator, with its own recipe
    assert error.startswith("runs/train/calibrator_r2vc_embedded/calibrator.json: no calibrator file here: "
                            "`veracity prep` then ")
    assert error.endswith("then `veracity train calibrator --config configs/train/calibrator_r2vc_embedded.yaml` "
                          "make it (docs/training.md#calibrator); --calibrator none ranks by s_ver instead")
    nli_only = fails(["infer", "r2vc", "--config", "configs/pipelines/r2vc_nli_only.yaml", "--claims", "my.jsonl"],
                     capsys, workdir)
    assert nli_only.endswith(": no calibrator file here: `veracity prep` then `veracity train calibrator --config "
                             "configs/train/calibrator_r2vc_nli_only.yaml` make it (docs/training.md#calibrator); "
                             "--calibrator none ranks by s_ver instead")  # no generator in that recipe: none trained
    verifier = fails([*claims, "--nli_model", "runs/train/nli_minilm_stage2/model"], capsys, workdir)
    assert verifier.startswith("model path 'runs/train/nli_minilm_stage2/model' for role 'nli_verifier' does not "
                               "exist: `veracity prep` then `veracity train nli --config configs/train/nli_minilm_cpu"
                               ".yaml` then `veracity train nli --config configs/train/nli_minilm_cpu_stage2.yaml` "
                               "make it (docs/training.md#nli-verifier)")  # stage 2 starts from stage 1's model


@pytest.mark.parametrize(("job", "missing", "made"), [
    ("sft", "runs/prep/training/sft.jsonl", "`veracity prep` then `veracity prep training-sets` make it "
                                            "(docs/training.md#training-sets)"),
    ("dpo", "runs/train/sft_smollm2/adapter", "`veracity prep` then `veracity prep training-sets` then `veracity "
                                              "train sft --config configs/train/sft_lora_smollm2_cpu.yaml` make it "
                                              "(docs/training.md#sft-and-dpo)")])
def test_a_training_recipe_on_a_fresh_clone_names_what_makes_its_input(job: str, missing: str, made: str,
                                                                       workdir: Path, capsys) -> None:
    if job == "dpo":  # its training set is there: the SFT adapter is what is missing
        (workdir / "runs/prep/training").mkdir(parents=True)
        (workdir / "runs/prep/training/dpo.jsonl").write_text("")
    assert fails(["train", job, "--config", f"configs/train/{job}_lora_smollm2_cpu.yaml"], capsys, workdir) == \
        f"{missing}: not found; {made}"


def test_made_by_follows_a_recipe_to_what_it_reads_first(workdir: Path) -> None:
    """What makes a path, read from the shipped recipes: the DPO generator needs the SFT adapter first, and a
    step whose output is there already is left out."""
    dpo = made_by("runs/train/dpo_nemotron8b/merged")
    assert dpo == ("`veracity prep` then `veracity prep training-sets` then `veracity train sft --config configs/"
                   "train/sft_lora_nemotron8b.yaml` then `veracity train dpo --config configs/train/dpo_lora_"
                   "nemotron8b.yaml` then `veracity train merge --adapter runs/train/dpo_nemotron8b/adapter --base "
                   "runs/train/dpo_nemotron8b/sft_merged --output_dir runs/train/dpo_nemotron8b/merged` make it "
                   "(docs/training.md#sft-and-dpo)")
    (workdir / "runs/train/sft_smollm2/adapter").mkdir(parents=True)
    (workdir / "runs/prep/training").mkdir(parents=True)
    (workdir / "runs/prep/training/sft.jsonl").write_text("")
    assert made_by("runs/train/sft_smollm2/merged") == (
        "`veracity train merge --adapter runs/train/sft_smollm2/adapter --output_dir runs/train/sft_smollm2/merged` "
        "makes it (docs/training.md#sft-and-dpo)")
    assert made_by(workdir / "runs/prep/fever_symmetric.jsonl") == "`veracity prep` makes it (docs/data.md#preparing)"
    assert made_by("somewhere/else/model") is None


def test_the_calibrator_on_a_fresh_clone_names_what_it_lacks_and_writes_nothing(workdir: Path, capsys) -> None:
    """``train calibrator`` checks its models and inputs before it records its run folder."""
    error = fails(["train", "calibrator", "--config", "configs/train/calibrator_r2vc_embedded.yaml"], capsys, workdir)
    assert error.startswith("model path 'runs/train/sft_smollm2/merged' for role 'chat_lm' does not exist")


def test_a_late_refusal_removes_every_folder_the_run_made(workdir: Path, capsys) -> None:
    """A run refused after the driver made its output folder (here: a verifier role with nothing installed, found
    when the pipeline loads) leaves none of the folders it made, however deep."""
    fails(["infer", "r2vc", "--claims", "my.jsonl", "--use_generator", "false", "--calibrator", "none",
           "--nli_model", "embedded", "--output_dir", "runs/deep/er/run"], capsys, workdir)
