"""The LoRA training harness shared by ``train sft`` and ``train dpo``: parse, dry-run or train, save, card.

A job hands :func:`run_job` its parser (script args, TRL trainer config, ``ModelConfig``) and a ``train``
function; :func:`train_lora` runs any TRL trainer on prompt/completion or preference records, resumes from the
newest checkpoint, saves the adapter with its model card and marks the run done.

Launched as several processes (``accelerate launch``, DDP; docs/training-multiprocess.md) every process runs this
code: only the one that ``TrainingArguments.should_save`` names writes the run directory (run_config.yaml, the
adapter, its card, COMPLETED; the Trainer saves checkpoints by the same rule), the others log warnings only, and
every process returns once the adapter is on disk.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from veracity.config import load_config_values
from veracity.data_prep.errors import InputError
from veracity.data_prep.readers import check_input
from veracity.io import mark_completed, sha256_file, write_json
from veracity.models.model_card import command_line, data_licences, hub_id, write_model_card
from veracity.models.registry import resolve_model
from veracity.rundir import write_run_config
from veracity.train.common import (
    last_checkpoint,
    load_records,
    model_init_kwargs,
    parse_training_config,
    resolve_reporting,
)
from veracity.train.memory import activations_by_mode, estimate_memory, estimate_record, peft_parameter_line
from veracity.train.report import finish_training_run
from veracity.train.run_summary import file_facts
from veracity.train.speed import SpeedPlan, apply_speed, resolve_speed, trainer_construction

logger = logging.getLogger(__name__)


@dataclass
class TrainScriptArgs:
    train_file: str = field(default="runs/prep/training/sft.jsonl", metadata={"help": "Training records (JSONL)."})
    eval_file: str | None = field(default=None, metadata={"help": "Optional evaluation records."})
    max_train_examples: int | None = field(default=None, metadata={"help": "Cap (quick runs)."})
    dry_run: bool = field(default=False, metadata={"help": "Meta-device build + memory estimate; no training."})
    architecture: str | None = field(
        default=None, metadata={"help": "Config for --dry_run: a shipped name (llama31_8b), folder or config.json."}
    )
    record_ranks: bool = field(
        default=False, metadata={"help": "Each process writes ranks/rank<k>.json: the examples it trained on at each "
                                         "step and a digest of its final weights (checks a multi-process launch)."}
    )
    task_eval_examples: int = field(default=0, metadata={
        "help": "Score each saved checkpoint on this many dev examples per source of task_eval_sources (eval "
                "checkpoint's accuracy, macro-F1, parse failures), into the log history and the report's curves; "
                "0 = off (train/task_scores.py)."})
    task_eval_sources: list[str] = field(default_factory=lambda: ["vitaminc", "fever_symmetric"], metadata={
        "help": "With task_eval_examples: the prepared sources whose dev split is scored."})
    task_eval_prepared_dir: str = field(default="runs/prep", metadata={
        "help": "With task_eval_examples: the output folder of veracity prep."})
    checkpointing: str | None = field(default=None, metadata={
        "help": "Activation checkpointing: none, every_layer or selective (every checkpoint_every-th decoder layer "
                "recomputes, the others keep their activations); unset: gradient_checkpointing decides "
                "(train/speed.py; the dry run prints each mode's memory).",
        "choices": ["none", "every_layer", "selective"]})
    checkpoint_every: int = field(default=2, metadata={
        "help": "With checkpointing selective: layers 0, n, 2n, ... recompute their forward (n >= 2)."})


def dry_run_argv(argv: Sequence[str] | None) -> tuple[list[str] | None, bool]:
    """A dry run parses GPU recipes on any machine: bf16 / fp16 training is read from the recipe (its ``base`` chain
    resolved) and the command line, then switched off for parsing (TrainingArguments refuses bf16 without a GPU).
    Returns the argv to parse and whether training is half precision (the adapters, gradients and activations)."""
    from transformers.hf_argparser import string_to_bool  # lazy: seconds to import (as below)

    args = list(sys.argv[1:] if argv is None else argv)
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--dry_run", type=string_to_bool, nargs="?", const=True, default=False)
    peek.add_argument("--config")
    for flag in ("--bf16", "--fp16"):
        peek.add_argument(flag, type=string_to_bool, nargs="?", const=True, default=None)
    known, _ = peek.parse_known_args(args)
    if not known.dry_run:
        return (None if argv is None else args), False
    recipe = load_config_values(known.config) if known.config else {}
    half = any(bool(recipe.get(name)) if given is None else given
               for name, given in (("bf16", known.bf16), ("fp16", known.fp16)))
    return args + ["--bf16", "false", "--fp16", "false", "--use_cpu", "true"], half


def print_dry_run(script: TrainScriptArgs, training_args: Any, model_args: Any, half: bool) -> Any:
    estimate, assumed = estimate_memory(script, training_args, model_args, half,
                                        pairs=type(training_args).__name__ == "DPOConfig")
    ckpt = assumed["checkpointing"].replace("_", " ") + (f" (layers 0, n, 2n, ... with n={assumed['every_n_layers']})"
                                                        if assumed["checkpointing"] == "selective" else "")
    print(f"dry run: {assumed['architecture']}, weights in {assumed['weights']}, LoRA r={model_args.lora_r} on "
          f"{model_args.lora_target_modules}, batch {assumed['batch_rows']} rows x {training_args.max_length} tokens, "
          f"gradient checkpointing {ckpt}, {'half' if half else 'full'} precision training, padding-free rows "
          f"{'yes' if assumed['padding_free'] else 'no'}, Liger kernels {'yes' if assumed['liger'] else 'no'}")
    print("counts: weights as the loader gets them, the adapters and their gradients, AdamW's fp32 states, and the "
          "activations of one micro-batch with every row max_length tokens long (packed rows are; padded batches of "
          "shorter records use less), TRL's fused LM head (no fp32 logits)"
          + (" and the padding-free row's per-record attention mask" if assumed["packed_mask"] else "")
          + "; not the CUDA context or allocator slack (≈ 1-3 GiB)")
    print(estimate.peft_line())
    print(estimate.table())
    rest = estimate.total_gib - estimate.activations_gib
    modes = activations_by_mode(assumed["architecture"], assumed, model_args.lora_dropout)
    print(f"\n{'checkpointing (this batch)':28} {'layers recomputed':>17} {'activations':>12} {'total per GPU':>14}")
    for mode, kept, gib in modes:
        print(f"{mode:28} {kept:>17} {gib:>8.2f} GiB {rest + gib:>10.2f} GiB")
    return estimate


def prepare_run(script: TrainScriptArgs, training_args: Any, model_args: Any, job: str) -> Path:
    """Check the inputs, resolve the model, record the run, and return the model folder."""
    if not model_args.use_peft:
        raise ValueError("veracity trains LoRA adapters: set use_peft: true")
    check_input(Path(script.train_file))  # the inputs before the model: a first use converts the embedded one
    model_dir = resolve_model("chat_lm", model_args.model_name_or_path or "embedded")
    if training_args.should_save:  # one writer per run directory in a multi-process launch
        write_run_config(training_args.output_dir, script, training_args, model_args, job=job)
    return model_dir


def run_job(parser: Any, argv: Sequence[str] | None, train: Any) -> Any:
    """The entry point of a LoRA job: parse (script, trainer config, ModelConfig) with the job's parser, then
    dry-run or train."""
    argv, half = dry_run_argv(argv)
    script, training_args, model_args = parse_training_config(parser, argv)
    if script.dry_run:
        return print_dry_run(script, training_args, model_args, half)
    script.speed = resolve_speed(training_args, script.checkpointing, script.checkpoint_every,  # a GPU-only kernel
                                 model_args.attn_implementation, str(training_args.device))  # on a CPU stops here
    resolve_reporting(training_args)  # `auto`: TensorBoard where installed; a missing asked-for one stops here
    quantization_config(model_args)  # a quantized recipe without bitsandbytes stops here, before anything is written
    check_process_group(training_args)
    quiet_replicas(training_args)
    return train(script, training_args, model_args)


def check_process_group(training_args: Any) -> None:
    """Refuse a launch whose processes did not join one group. torchrun (``accelerate launch``) says how many it
    started in ``WORLD_SIZE``; on a machine without a GPU they form a (gloo) group only with ``use_cpu: true`` —
    without it each would train alone on all the data and write the same run directory (seen here)."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and training_args.world_size != launched:
        raise InputError(f"launched as {launched} processes, but this one sees a world of {training_args.world_size}: "
                         "they did not join one process group (without a GPU set use_cpu: true, which uses gloo)")


def quiet_replicas(training_args: Any) -> None:
    """In a multi-process launch every process runs the same code: all but the logging one (``should_log``) log at
    ``log_level_replica`` (a TrainingArguments field, warning by default), as the Trainer does for transformers'
    own logs, so each line appears once."""
    if training_args.world_size > 1 and not training_args.should_log:
        logging.getLogger("veracity").setLevel(training_args.get_process_log_level())


def train_lora(trainer_cls: Any, fields: tuple[str, ...], model_dir: Path, script: TrainScriptArgs,
               training_args: Any, model_args: Any) -> Path:
    """Train a LoRA adapter with a TRL trainer on ``fields`` records; resume, save the adapter, mark the run done.

    Shared by SFT (prompt/completion) and DPO (prompt/chosen/rejected); returns the adapter folder.
    """
    from datasets import Dataset  # lazy, as transformers and trl: seconds to import, only training needs them
    from transformers import AutoTokenizer
    from trl import get_peft_config

    from veracity.train.rank_record import RankRecorder  # lazy: brings peft and transformers

    train = Dataset.from_list(load_records(script.train_file, fields, script.max_train_examples))
    evaluation = Dataset.from_list(load_records(script.eval_file, fields)) if script.eval_file else None
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    quantization = quantization_config(model_args)
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args.model_init_kwargs)
    scoring = task_scoring(script, model_dir, str(training_args.device))  # its data checked before any weights load
    speed = getattr(script, "speed", None) or SpeedPlan()
    with trainer_construction(training_args, speed):
        trainer = trainer_cls(model=str(model_dir), args=training_args, train_dataset=train, eval_dataset=evaluation,
                              processing_class=tokenizer, peft_config=get_peft_config(model_args),
                              quantization_config=quantization)
    apply_speed(trainer, speed)  # the selective layer spacing, DPO's unpadded rows
    # TRL writes its own README.md into the run folder at every checkpoint (a card of "[None]" and a generic quick
    # start); the run's card is the project's, written beside the adapter (write_adapter_card)
    trainer.create_model_card = lambda *args, **kwargs: None
    loaded = describe_loaded(trainer.model)
    logger.info("base weights loaded as %s", loaded)
    if hasattr(trainer.model, "get_nb_trainable_parameters"):  # the line PEFT prints, in the log at training start
        logger.info("%s", peft_parameter_line(*trainer.model.get_nb_trainable_parameters()))
    if script.record_ranks:
        RankRecorder().attach(trainer)
    if scoring is not None:
        trainer.add_callback(scoring)
    trainer.train(resume_from_checkpoint=last_checkpoint(training_args.output_dir))
    adapter = Path(training_args.output_dir) / "adapter"
    trainer.save_model(str(adapter))  # the Trainer writes on the should_save process only, as below
    if training_args.should_save:
        tokenizer.save_pretrained(adapter)
        (Path(training_args.output_dir) / "base_model.txt").write_text(f"{model_dir}\n")
        write_json(Path(training_args.output_dir) / "loaded_model.json", loaded)
        write_adapter_card(adapter, trainer, model_dir, script, training_args, model_args, len(train))
        mark_completed(training_args.output_dir, f"adapter in {adapter} on base {model_dir}")
        logger.info("adapter saved to %s", adapter)
        data = {Path(script.train_file).name: file_facts(script.train_file, len(train))}
        if evaluation is not None:
            data[f"{Path(script.eval_file).name} (evaluation)"] = file_facts(script.eval_file, len(evaluation))
        finish_training_run(training_args.output_dir, trainer, device=str(training_args.device), data=data,
                            dry_run=recipe_estimate(script, training_args, model_args))
    trainer.accelerator.wait_for_everyone()  # no process returns an adapter folder that is still being written
    return adapter


def recipe_estimate(script: TrainScriptArgs, training_args: Any, model_args: Any) -> dict[str, Any] | None:
    """The dry run's estimate for the recipe this run trained (its report puts the measured peak beside it); None,
    logged, where it cannot be made (an architecture the dry run does not know)."""
    half = bool(training_args.bf16 or training_args.fp16)
    try:
        return estimate_record(*estimate_memory(script, training_args, model_args, half,
                                                pairs=type(training_args).__name__ == "DPOConfig"))
    except (ValueError, OSError, KeyError, AttributeError) as error:  # InputError is a ValueError
        logger.info("no dry-run estimate for the report (%s)", error)
        return None


def task_scoring(script: TrainScriptArgs, model_dir: Path, device: str) -> Any:
    """The callback scoring each saved checkpoint on the task (``task_eval_examples``), or None when off; a
    prepared source that is not there stops the run here, not at its first save."""
    if script.task_eval_examples <= 0:
        return None
    from veracity.infer.checkpoint_eval import CheckpointEvalArgs, load_examples
    from veracity.train.task_scores import task_score_callback

    checked = CheckpointEvalArgs(prepared_dir=script.task_eval_prepared_dir, sources=script.task_eval_sources)
    for source in script.task_eval_sources:
        load_examples(checked, source)
    return task_score_callback("generator", script.task_eval_prepared_dir, script.task_eval_sources,
                               script.task_eval_examples, base=model_dir, device=device)


def quantization_config(model_args: Any) -> Any:
    """The recipe's ``load_in_4bit`` / ``load_in_8bit`` (QLoRA) as TRL builds it, or None. bitsandbytes is an
    optional extra: asked for without it, the run stops here with one line, before any weights load."""
    if not (model_args.load_in_4bit or model_args.load_in_8bit):
        return None
    flag = "--load_in_4bit" if model_args.load_in_4bit else "--load_in_8bit"
    if importlib.util.find_spec("bitsandbytes") is None:
        raise InputError(f"{flag} needs bitsandbytes, which is not installed: pip install 'veracity[bitsandbytes]' "
                         "(a CUDA GPU), or train without quantization")
    from trl import get_quantization_config  # lazy: brings transformers

    return get_quantization_config(model_args)


def describe_loaded(model: Any) -> dict[str, Any]:
    """What the trainer really loaded: the base weights' dtypes (parameters not trained), device, attention
    implementation and quantization, from the model object itself (``loaded_model.json`` in the run folder)."""
    base = [p for p in model.parameters() if not p.requires_grad] or list(model.parameters())
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in base})
    config = getattr(model, "config", None)
    quantization = getattr(config, "quantization_config", None)
    if quantization is not None and not isinstance(quantization, dict):
        quantization = quantization.to_dict()
    return {"dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
            "device": str(next(model.parameters()).device),
            "attn_implementation": getattr(config, "_attn_implementation", None),
            "quantization": (quantization or {}).get("quant_method") if quantization else None}


def write_adapter_card(adapter: Path, trainer: Any, model_dir: Path, script: TrainScriptArgs, training_args: Any,
                       model_args: Any, records: int) -> Path:
    """The adapter's model card: base model (hub id), the training file (and the prepared sources it was built
    from, with their licences, when ``prep training-sets`` wrote it), the command and the last logged losses."""
    job = "train dpo" if "dpo" in type(trainer).__name__.lower() else "train sft"
    data = {Path(script.train_file).name: f"{records} records, sha256 {sha256_file(script.train_file)[:12]}…"}
    licences: dict[str, str] = {}
    built_by = Path(script.train_file).parent / "run_config.yaml"  # `veracity prep training-sets` records this
    if built_by.is_file():
        config = (yaml.safe_load(built_by.read_text(encoding="utf-8")) or {}).get("config", {})
        sources = list(config.get("sources") or [])
        for source in sources:
            data[source] = f"the {config.get('split', 'train')} split, through `veracity prep training-sets`"
        licences = data_licences(config.get("prepared_dir", ""), sources) if sources else {}
    logged: dict[str, float] = {}
    for entry in trainer.state.log_history:  # the last value of each loss the trainer logged
        logged.update({k: v for k, v in entry.items() if "loss" in k or k.startswith("eval_")})
    return write_model_card(
        adapter, title=f"veracity {job.split()[1].upper()} LoRA adapter (r={model_args.lora_r})", kind="peft",
        base_model=hub_id(model_args.model_name_or_path, model_dir), base_dir=model_dir,
        command=command_line(None, job), data=data, licences=licences, metrics=logged)
