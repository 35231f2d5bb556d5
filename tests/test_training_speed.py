"""The speed fields of the LoRA recipes (issue #64, train/speed.py) on the tiny Llama-3.1 shape: padding-free batches
train the loss of padded ones, selective checkpointing recomputes the layers it says through DPO's reference forward,
and a GPU-only kernel asked for on a CPU is one ``error:`` line before any weights load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fixture_data import write_tiny_training_sets
from tiny_models import build_llama_shape

from veracity.cli import main as cli


@pytest.fixture(scope="module")
def four_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_llama_shape(tmp_path_factory.mktemp("llama31_shape") / "model", num_hidden_layers=4)


@pytest.fixture(scope="module")
def training_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_tiny_training_sets(tmp_path_factory.mktemp("sets"), records=8)


def train_tiny(job: str, model_dir: Path, files: tuple[Path, Path], out: Path, steps: int = 3,
               **speed: Any) -> tuple[list[float], Any, list[tuple[int, ...]]]:
    """``steps`` optimizer steps of 4 records through TRL's trainer, with the recipe's speed fields resolved and
    applied as train/lora.py does; returns the logged losses, the trainer and the (rows, tokens) each forward of the
    base model saw."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    from veracity.train.common import load_records
    from veracity.train.speed import apply_speed, resolve_speed, trainer_construction

    sft = job == "sft"
    config_cls, trainer_cls = (SFTConfig, SFTTrainer) if sft else (DPOConfig, DPOTrainer)
    padding_free = speed.pop("padding_free", False)
    args = config_cls(output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-3,
                      logging_steps=1, report_to="none", use_cpu=True, bf16=False, seed=0, save_strategy="no",
                      disable_tqdm=True, dataloader_num_workers=0, padding_free=padding_free,
                      max_length=None if padding_free and sft else 256,
                      gradient_checkpointing=speed.pop("gradient_checkpointing", False))
    plan = resolve_speed(args, speed.pop("checkpointing", None), speed.pop("checkpoint_every", 2), "sdpa", "cpu")
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa")
    seen: list[tuple[int, ...]] = []
    model.model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(tuple(kw["input_ids"].shape)),
                                          with_kwargs=True)
    fields = ("prompt", "completion") if sft else ("prompt", "chosen", "rejected")
    data = Dataset.from_list(load_records(files[0] if sft else files[1], fields))
    with trainer_construction(args, plan):
        trainer = trainer_cls(model=model, args=args, train_dataset=data,
                              processing_class=AutoTokenizer.from_pretrained(model_dir),
                              peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                     task_type="CAUSAL_LM"))
    apply_speed(trainer, plan)
    trainer.train()
    return [e["loss"] for e in trainer.state.log_history if "loss" in e], trainer, seen


@pytest.mark.parametrize("job", ["sft", "dpo"])
def test_padding_free_batches_train_the_loss_of_padded_ones(job: str, four_layers: Path,
                                                            training_files: tuple[Path, Path], tmp_path: Path) -> None:
    """Same records, same seed, three optimizer steps: the losses agree within 1e-4 (so do the updates between
    them), while the padding-free run fed the model one row per forward (SFT: TRL's collator; DPO: veracity's
    unpadding of the chosen and rejected rows)."""
    padded, _, padded_rows = train_tiny(job, four_layers, training_files, tmp_path / "padded")
    flat, _, flat_rows = train_tiny(job, four_layers, training_files, tmp_path / "flat", padding_free=True)
    assert len(padded) == len(flat) == 3
    assert flat == pytest.approx(padded, abs=1e-4), (padded, flat)
    assert padded[0] != pytest.approx(padded[-1], abs=1e-4), "the weights moved between the losses compared"
    rows = 4 if job == "sft" else 8  # DPO: 4 pairs, chosen and rejected rows
    assert {shape[0] for shape in padded_rows} == {rows} and {shape[0] for shape in flat_rows} == {1}
    # the flat row holds the records' tokens only: fewer than the padded batch's rows x longest
    assert all(f[1] < p[0] * p[1] for f, p in zip(flat_rows, padded_rows, strict=True))


def test_selective_checkpointing_holds_its_layers_through_dpos_reference_forward(
        four_layers: Path, training_files: tuple[Path, Path], tmp_path: Path) -> None:
    """DPO turns checkpointing off and on around each reference forward; layers 0 and 2 of 4 stay the checkpointed
    ones (every 2nd), as the dry run counts them, and checkpointing leaves the losses as they were."""
    from veracity.train.speed import checkpointed_layers

    plain, _, _ = train_tiny("dpo", four_layers, training_files, tmp_path / "plain", steps=2)
    losses, trainer, _ = train_tiny("dpo", four_layers, training_files, tmp_path / "selective", steps=2,
                                    checkpointing="selective", checkpoint_every=2)
    layers = trainer.model.get_base_model().model.layers
    flags = [layer.gradient_checkpointing for layer in layers]
    assert flags == [True, False, True, False]
    assert sum(flags) == checkpointed_layers(len(layers), "selective", 2)
    assert losses == pytest.approx(plain, abs=1e-5)


def _args(model: Path, out: Path) -> list[str]:
    return ["--model_name_or_path", str(model), "--output_dir", str(out), "--max_steps", "1",
            "--per_device_train_batch_size", "2", "--use_peft", "true", "--lora_r", "2", "--lora_alpha", "4",
            "--report_to", "none", "--bf16", "false", "--use_cpu", "true", "--max_length", "128"]


@pytest.mark.parametrize(("job", "extra", "starts"), [
    ("sft", ["--use_liger_kernel", "true"], "error: use_liger_kernel: Liger's kernels are Triton kernels"),
    ("dpo", ["--use_liger_kernel", "true"], "error: use_liger_kernel: Liger's kernels are Triton kernels"),
    ("sft", ["--attn_implementation", "flash_attention_2"], "error: --attn_implementation flash_attention_2: "),
    ("dpo", ["--attn_implementation", "flex_attention"], "error: --attn_implementation flex_attention: "),
    ("sft", ["--padding_free", "true"], "error: padding_free without packing: TRL cannot cut unpadded rows"),
    ("sft", ["--checkpointing", "selective", "--checkpoint_every", "1"], "error: --checkpointing selective "),
])
def test_a_gpu_only_kernel_on_a_cpu_is_one_error_line_before_any_weights_load(
        job: str, extra: list[str], starts: str, four_layers: Path, training_files: tuple[Path, Path],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    records = training_files[0] if job == "sft" else training_files[1]
    with pytest.raises(SystemExit) as stop:
        cli(["train", job, "--train_file", str(records), *_args(four_layers, out), *extra])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(starts), err
    assert not out.exists(), "nothing written before the refusal"


def test_the_speed_fields_reach_a_dpo_run_through_the_command_line(
        four_layers: Path, training_files: tuple[Path, Path], tmp_path: Path) -> None:
    """train_lora builds the trainer with them: the run finishes, records the fields as given, and its summary's dry
    run estimate is the one for selective checkpointing of padding-free rows."""
    import json

    import yaml

    out = tmp_path / "dpo"
    assert cli(["train", "dpo", "--train_file", str(training_files[1]), *_args(four_layers, out), "--max_steps", "2",
                "--padding_free", "true", "--checkpointing", "selective", "--checkpoint_every", "2",
                "--attn_implementation", "sdpa", "--learning_rate", "0.001"]) == 0
    assert (out / "COMPLETED").exists() and (out / "adapter" / "adapter_model.safetensors").exists()
    recorded = yaml.safe_load((out / "run_config.yaml").read_text())
    flat = {k: v for part in recorded["config"] for k, v in part.items()}  # script, trainer and model fields
    assert flat["padding_free"] is True and flat["checkpointing"] == "selective" and flat["checkpoint_every"] == 2
    estimate = json.loads((out / "training_summary.json").read_text())["dry_run"]
    assert estimate["checkpointing"] == "selective" and estimate["every_n_layers"] == 2
    assert estimate["padding_free"] and estimate["packed_mask"] and not estimate["liger"]
