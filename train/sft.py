"""Supervised fine-tuning of the R2VC generator with LoRA (TRL SFTTrainer + PEFT).

Usage: veracity train sft --config configs/train/sft_lora_smollm2_cpu.yaml [--dry_run true] [--max_steps 10]

Reads ``sft.jsonl`` from ``veracity prep training-sets`` (conversational prompt/completion; the model's chat
template renders it, loss on the completion only). The run directory (``output_dir``) gets ``run_config.yaml``
first, then checkpoints (a rerun resumes from the newest), the final adapter (safetensors) and a COMPLETED
marker. ``--dry_run`` builds the model on the meta device and prints parameter counts and a memory estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.train.lora import TrainScriptArgs, prepare_run, run_job, train_lora


def make_parser() -> Any:
    # lazy here and below: trl brings transformers (seconds); `veracity demo` imports this module
    from trl import ModelConfig, SFTConfig

    return parser_for((TrainScriptArgs, SFTConfig, ModelConfig), "veracity train sft")


def main(argv: Sequence[str] | None = None) -> Any:
    return run_job(make_parser(), argv, train_sft)


def train_sft(script: TrainScriptArgs, training_args: Any, model_args: Any) -> Path:
    from trl import SFTTrainer

    model_dir = prepare_run(script, training_args, model_args, job="train sft")
    return train_lora(SFTTrainer, ("prompt", "completion"), model_dir, script, training_args, model_args)
