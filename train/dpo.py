"""DPO of the R2VC generator with LoRA, starting from the SFT result (TRL DPOTrainer + PEFT).

Usage: veracity train dpo --config configs/train/dpo_lora_smollm2_cpu.yaml [--sft_adapter runs/sft/adapter]

Starting point (our choice, SPEC §1 is silent): the SFT adapter is merged into the base first, and DPO trains a
fresh LoRA on the merged model. With ``peft_config`` and no ``ref_model``, TRL's reference is the same model with
the adapter disabled — exactly the SFT policy, which is the reference DPO's objective assumes — and no second
copy of the 8B weights is held in memory. (Continuing the SFT adapter as the policy would need a frozen copy of
it as the reference: twice the adapter state and a PeftModel that TRL refuses alongside ``peft_config``.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.train.sft import TrainScriptArgs, dry_run_argv, prepare_run, print_dry_run

logger = logging.getLogger(__name__)


@dataclass
class DPOScriptArgs(TrainScriptArgs):
    train_file: str = field(default="runs/prep/training/dpo.jsonl", metadata={"help": "Preference records."})
    sft_adapter: str | None = field(
        default=None, metadata={"help": "SFT adapter to merge into the base before DPO (the reference policy)."}
    )


def main(argv: Sequence[str] | None = None) -> Any:
    from trl import DPOConfig, ModelConfig

    from veracity.config import parse_config

    argv, half = dry_run_argv(argv)
    script, training_args, model_args = parse_config((DPOScriptArgs, DPOConfig, ModelConfig), argv,
                                                     prog="veracity train dpo")
    if script.dry_run:
        return print_dry_run(script, training_args, model_args, half)
    return train_dpo(script, training_args, model_args)


def train_dpo(script: DPOScriptArgs, training_args: Any, model_args: Any) -> Path:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOTrainer, get_peft_config

    from veracity.train.common import last_checkpoint, load_records, mark_completed
    from veracity.train.merge import merge_adapter

    model_dir = prepare_run(script, training_args, model_args, job="train dpo")
    if script.sft_adapter:
        model_dir = merge_adapter(str(model_dir), script.sft_adapter, Path(training_args.output_dir) / "sft_merged")
    fields = ("prompt", "chosen", "rejected")
    train = Dataset.from_list(load_records(script.train_file, fields, script.max_train_examples))
    evaluation = Dataset.from_list(load_records(script.eval_file, fields)) if script.eval_file else None
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = DPOTrainer(model=str(model_dir), args=training_args, train_dataset=train, eval_dataset=evaluation,
                         processing_class=tokenizer, peft_config=get_peft_config(model_args))
    trainer.train(resume_from_checkpoint=last_checkpoint(training_args.output_dir))
    adapter = Path(training_args.output_dir) / "adapter"
    trainer.save_model(str(adapter))
    tokenizer.save_pretrained(adapter)
    (Path(training_args.output_dir) / "base_model.txt").write_text(f"{model_dir}\n")
    mark_completed(training_args.output_dir, f"DPO adapter in {adapter} on base {model_dir}")
    return adapter
