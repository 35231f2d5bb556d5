"""``veracity train sft|dpo --dry_run true``: the weights it counts are those the loader gets (the recipe's and the
command line's dtype and quantization), and the model it names is resolved as every loader resolves it, never from
the network."""

from __future__ import annotations

from pathlib import Path

import pytest

from veracity import cli

REPO = Path(__file__).resolve().parents[1]
GPU_RECIPE = REPO / "configs/train/sft_lora_nemotron8b.yaml"
LLAMA_8B_FROZEN = 8_030_261_248  # the Llama-3.1-8B shape's parameters (PEFT's count less the adapters)
GIB = 1024**3


def weights_gib(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[float, str]:
    """The dry run's weights (GiB, as printed) and its first line, run through the command line."""
    assert cli.main(["train", "sft", *argv, "--dry_run", "true"]) == 0
    out = capsys.readouterr().out.splitlines()
    weights = next(line for line in out if line.startswith("weights "))
    return float(weights.split()[1]), next(line for line in out if line.startswith("dry run:"))


def test_the_weights_follow_the_dtype_the_loader_gets(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bf16, line = weights_gib(["--config", str(GPU_RECIPE)], capsys)
    assert bf16 == pytest.approx(LLAMA_8B_FROZEN * 2 / GIB, abs=0.01) and "weights in bfloat16" in line
    fp32, line = weights_gib(["--config", str(GPU_RECIPE), "--dtype", "float32"], capsys)
    assert fp32 == pytest.approx(LLAMA_8B_FROZEN * 4 / GIB, abs=0.01) and "weights in float32" in line
    # a recipe without dtype: TRL loads a model by path in float32, bf16 training or not
    no_dtype = tmp_path / "no_dtype.yaml"
    no_dtype.write_text("".join(line for line in GPU_RECIPE.read_text().splitlines(keepends=True)
                                if not line.startswith("dtype:")))
    assert weights_gib(["--config", str(no_dtype)], capsys)[0] == fp32


def test_quantized_linear_layers_count_at_their_bits(capsys: pytest.CaptureFixture[str]) -> None:
    bf16 = weights_gib(["--config", str(GPU_RECIPE)], capsys)[0]
    four, line = weights_gib(["--config", str(GPU_RECIPE), "--load_in_4bit", "true"], capsys)
    eight = weights_gib(["--config", str(GPU_RECIPE), "--load_in_8bit", "true"], capsys)[0]
    assert "linear layers 4-bit" in line
    # embeddings and lm_head (2 x 128,256 x 4,096) stay bf16; the decoder's linear layers take 0.5 or 1 byte
    kept = 2 * 128_256 * 4096 * 2 / GIB
    assert four == pytest.approx(kept + (bf16 - kept) / 4, abs=0.05)
    assert eight == pytest.approx(kept + (bf16 - kept) / 2, abs=0.05)


def test_a_model_folder_is_read_locally_and_a_hub_id_not_in_the_cache_is_one_error_line(
        tiny_lm_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = str(REPO / "configs/train/sft_lora_smollm2_cpu.yaml")
    weights, line = weights_gib(["--config", recipe, "--model_name_or_path", str(tiny_lm_dir)], capsys)
    assert f"dry run: {tiny_lm_dir}, weights in float32" in line and weights < 0.01  # a tiny model: 0.00
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "sft", "--config", recipe, "--model_name_or_path", "someone/not-a-model", "--dry_run",
                  "true"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --dry_run: no local config for 'someone/not-a-model'") and len(err.splitlines()) == 1


@pytest.mark.slow
def test_the_cpu_recipe_dry_run_resolves_the_embedded_model(embedded_cache: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The usage line of train/sft.py: the embedded role, as every loader resolves it (no hub lookup of a model
    named "embedded")."""
    monkeypatch.setenv("VERACITY_CACHE", str(embedded_cache))
    weights, line = weights_gib(["--config", str(REPO / "configs/train/sft_lora_smollm2_cpu.yaml")], capsys)
    assert line.startswith("dry run: embedded, weights in float32") and weights == pytest.approx(0.50, abs=0.01)
