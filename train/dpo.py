"""DPO of the R2VC generator with LoRA, starting from the SFT result (TRL DPOTrainer + PEFT).

Usage: veracity train dpo --config configs/train/dpo_lora_smollm2_cpu.yaml [--sft_adapter runs/sft/adapter]

Starting point (our choice, the paper is silent: docs/design.md#r2vc-decisions): the SFT adapter is merged into the
base first, and DPO trains a fresh LoRA on the merged model. With ``peft_config`` and no ``ref_model``, TRL's
reference is the same model with the adapter disabled — exactly the SFT policy, which is the reference DPO's
objective assumes — and no second copy of the 8B weights is held in memory. (Continuing the SFT adapter as the
policy would need a frozen copy of it as the reference: twice the adapter state and a PeftModel that TRL refuses
alongside ``peft_config``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.data_prep.readers import check_input
from veracity.train.lora import TrainScriptArgs, prepare_run, run_job, train_lora
from veracity.train.merge import merge_adapter


@dataclass
class DPOScriptArgs(TrainScriptArgs):
    train_file: str = field(default="runs/prep/training/dpo.jsonl", metadata={"help": "Preference records."})
    sft_adapter: str | None = field(
        default=None, metadata={"help": "SFT adapter to merge into the base before DPO (the reference policy)."}
    )


def make_parser() -> Any:
    from trl import DPOConfig, ModelConfig  # lazy here and below: trl brings transformers (seconds)

    return parser_for((DPOScriptArgs, DPOConfig, ModelConfig), "veracity train dpo")


def main(argv: Sequence[str] | None = None) -> Any:
    return run_job(make_parser(), argv, train_dpo)


def train_dpo(script: DPOScriptArgs, training_args: Any, model_args: Any) -> Path:
    from trl import DPOTrainer

    if script.sft_adapter:  # checked before prepare_run resolves (and may convert) the model
        check_input(Path(script.sft_adapter), directory=True)
    model_dir = prepare_run(script, training_args, model_args, job="train dpo")
    if script.sft_adapter:  # merged by the writing process; the others wait, then find it complete and reuse it
        with training_args.main_process_first(local=training_args.save_on_each_node, desc="merging the SFT adapter"):
            model_dir = merge_adapter(str(model_dir), script.sft_adapter,
                                      Path(training_args.output_dir) / "sft_merged", dtype=model_args.dtype or "auto")
    return train_lora(DPOTrainer, ("prompt", "chosen", "rejected"), model_dir, script, training_args, model_args)
