"""The recipe's model fields reach the loader: dtype and attention through `train sft` / `train dpo`, the merge's
dtype, quantization refused in one line without bitsandbytes (issue #49)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from fixture_data import write_tiny_training_sets
from tiny_models import build_llama_shape

from veracity.cli import main as cli

LORA = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def llama_shape(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_llama_shape(tmp_path_factory.mktemp("llama31_shape") / "model")


@pytest.fixture(scope="module")
def training_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_tiny_training_sets(tmp_path_factory.mktemp("sets"))


def _args(model: Path, out: Path, dtype: str) -> list[str]:
    return ["--model_name_or_path", str(model), "--output_dir", str(out), "--max_steps", "2",
            "--per_device_train_batch_size", "2", "--learning_rate", "0.01", "--use_peft", "true", "--lora_r", "2",
            "--lora_alpha", "4", "--lora_target_modules", *LORA, "--save_steps", "10", "--report_to", "none",
            "--bf16", "false", "--use_cpu", "true", "--max_length", "128", "--seed", "0",
            "--dataloader_num_workers", "0", "--dtype", dtype, "--attn_implementation", "eager"]


def _saved_dtypes(folder: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {str(f.get_slice(k).get_dtype()) for k in f.keys()}  # noqa: SIM118 - safe_open has no iteration


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sft_loads_the_base_in_the_recipes_dtype(llama_shape: Path, training_files: tuple[Path, Path],
                                                 tmp_path: Path, dtype: str) -> None:
    sft_file, _ = training_files
    out = tmp_path / "sft"
    assert cli(["train", "sft", "--train_file", str(sft_file), *_args(llama_shape, out, dtype)]) == 0
    loaded = json.loads((out / "loaded_model.json").read_text())
    # the checkpoint folder is float32: a bfloat16 recipe that loaded float32 weights is what #49 found on the GPU
    assert loaded == {"dtype": dtype, "device": "cpu", "attn_implementation": "eager", "quantization": None}


def test_dpo_merges_and_trains_in_the_recipes_dtype(llama_shape: Path, training_files: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    sft_file, dpo_file = training_files
    assert cli(["train", "sft", "--train_file", str(sft_file), *_args(llama_shape, tmp_path / "sft", "bfloat16")]) == 0
    out = tmp_path / "dpo"
    assert cli(["train", "dpo", "--train_file", str(dpo_file), "--sft_adapter", str(tmp_path / "sft" / "adapter"),
                "--beta", "0.1", *_args(llama_shape, out, "bfloat16")]) == 0
    assert _saved_dtypes(out / "sft_merged") == {"BF16"}, "a bf16 recipe's merge is bf16"
    assert json.loads((out / "loaded_model.json").read_text())["dtype"] == "bfloat16"
    # `train merge` keeps the base's saved dtype by default, and --dtype sets it
    assert cli(["train", "merge", "--base", str(llama_shape), "--adapter", str(out / "adapter"),
                "--output_dir", str(tmp_path / "m32")]) == 0
    assert _saved_dtypes(tmp_path / "m32") == {"F32"}
    assert cli(["train", "merge", "--base", str(out / "sft_merged"), "--adapter", str(out / "adapter"),
                "--output_dir", str(tmp_path / "m16")]) == 0
    assert _saved_dtypes(tmp_path / "m16") == {"BF16"}


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed")
@pytest.mark.parametrize("flag", ["--load_in_4bit", "--load_in_8bit"])
def test_quantized_recipe_without_bitsandbytes_is_one_error_line(llama_shape: Path, training_files: tuple[Path, Path],
                                                                 tmp_path: Path, flag: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    sft_file, _ = training_files
    out = tmp_path / "q"
    with pytest.raises(SystemExit) as stop:
        cli(["train", "sft", "--train_file", str(sft_file), *_args(llama_shape, out, "bfloat16"), flag, "true"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag} needs bitsandbytes"), err
    assert not out.exists(), "nothing written before the refusal"
