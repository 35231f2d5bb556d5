"""Training speed and memory of the LoRA recipes, variant beside variant, in one process (issue #49).

Usage: python bench/train.py [--architecture llama31_8b | tiny | CONFIG.json] [--model FOLDER]
                             [--sft_recipe configs/train/sft_lora_nemotron8b.yaml]
                             [--dpo_recipe configs/train/dpo_lora_nemotron8b.yaml]
                             [--train_file runs/prep/training/sft.jsonl] [--dpo_file runs/prep/training/dpo.jsonl]
                             [--variants shipped packing padding_free no_checkpointing] [--steps 4] [--warmup 1]

Each variant trains the recipe's LoRA with TRL (SFT, then DPO) for ``warmup + steps`` optimizer steps on the same
records with the same seed, on random weights of ``--architecture`` built directly on the device in the recipe's
dtype (no download, no checkpoint: real-scale timings need no weights), or on ``--model``'s weights. It prints the
device, library versions and CPU flags, then per variant: optimizer steps timed, s/step, non-padding and total
tokens/s, peak allocated memory (CUDA), model FLOP utilisation and the mean loss of the timed steps.

Variants (each the recipe plus):
- ``shipped``: nothing changed (the recipe's batch, accumulation and gradient checkpointing);
- ``packing``: ``packing: true`` (TRL's best-fit-decreasing packing, padding-free rows);
- ``padding_free``: ``padding_free: true`` without packing (rows concatenated, no padding);
- ``no_checkpointing``: gradient checkpointing off at the largest of ``--batches`` whose peak stays under
  ``--memory_limit_gib``, accumulation scaled to keep the recipe's examples per step;
- ``packing_no_checkpointing``: both (the batch search as above, over packed rows).
Padding-free rows rely on the attention kernel seeing sequence boundaries: transformers builds a block-diagonal
mask from ``position_ids`` for SDPA and eager attention, and flash attention reads ``cu_seq_lens``.

FLOPs counted per trained token: SFT 4·N (forward 2·N + input gradients 2·N through the frozen base; the LoRA
weight gradients, attention's s² term and checkpointing's recomputed forward are left out), DPO 6·N (the same plus
the reference forward with the adapter off). N = the base's parameters. MFU divides by ``--peak_tflops`` or the
device's dense bf16 peak from :data:`PEAK_TFLOPS`.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import load_config_values

ROOT = Path(__file__).resolve().parents[1]
# dense bf16 peak per device (vendor data sheets, no sparsity): the MFU denominator
PEAK_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "L4": 121.0}
# the tiny shape: the Llama-3.1-8B architecture shrunk (a CPU correctness check, not a timing)
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 16384}
VARIANTS = ("shipped", "packing", "padding_free", "no_checkpointing", "packing_no_checkpointing")


@dataclass
class Row:
    job: str
    variant: str
    settings: str
    steps: int = 0
    seconds_per_step: float | None = None
    nonpad_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None
    peak_gib: float | None = None
    mfu: float | None = None
    loss: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architecture", default="llama31_8b",
                        help="Random weights of this shape: a shipped name (llama31_8b), tiny, or a config.json.")
    parser.add_argument("--model", help="A model folder to train instead of random weights.")
    parser.add_argument("--tokenizer", default="embedded",
                        help="Tokenizer for random weights: a chat_lm role name or folder (ids must fit the vocab).")
    parser.add_argument("--sft_recipe", default=str(ROOT / "configs/train/sft_lora_nemotron8b.yaml"))
    parser.add_argument("--dpo_recipe", default=str(ROOT / "configs/train/dpo_lora_nemotron8b.yaml"))
    parser.add_argument("--train_file", default="runs/prep/training/sft.jsonl", help="SFT records.")
    parser.add_argument("--dpo_file", default="runs/prep/training/dpo.jsonl", help="DPO records; '' skips DPO.")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--steps", type=int, default=4, help="Optimizer steps timed per variant.")
    parser.add_argument("--warmup", type=int, default=1, help="Optimizer steps run first and not timed.")
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 8],
                        help="no_checkpointing: per-device batches tried, largest first.")
    parser.add_argument("--memory_limit_gib", type=float, default=None,
                        help="no_checkpointing: a batch 'fits' when its peak stays under this (default: the device).")
    parser.add_argument("--max_length", type=int, default=None, help="Override the recipes' max_length.")
    parser.add_argument("--batch", type=int, default=None, help="Override the recipes' per-device batch.")
    parser.add_argument("--accumulation", type=int, default=None, help="Override the recipes' accumulation.")
    parser.add_argument("--peak_tflops", type=float, default=None, help="MFU denominator (default: by device name).")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N.")
    parser.add_argument("--json", help="Also write the rows as JSON here.")
    return parser


def environment(device: str) -> dict[str, Any]:
    import peft
    import torch
    import transformers
    import trl

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "transformers": transformers.__version__, "trl": trl.__version__, "peft": peft.__version__}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        info.update(device=props.name, device_memory_gib=round(props.total_memory / 2**30, 1),
                    cuda=torch.version.cuda)
    else:
        flags = set()
        cpuinfo = Path("/proc/cpuinfo")
        if cpuinfo.exists():
            line = next((ln for ln in cpuinfo.read_text().splitlines() if ln.startswith("flags")), "")
            flags = {f for f in line.split() if f.startswith(("avx", "amx"))}
        info.update(device=f"CPU ({platform.processor() or platform.machine()})", cpu_flags=" ".join(sorted(flags)),
                    threads=torch.get_num_threads())
    return info


def peak_tflops(name: str, given: float | None) -> float | None:
    if given:
        return given
    return next((peak for key, peak in PEAK_TFLOPS.items() if key in name), None)


def build_model(args: argparse.Namespace, dtype: Any, attn: str | None, device: str) -> Any:
    """Random weights of the architecture built on the device (or the folder's weights), in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    from veracity.train.memory import load_architecture

    kwargs = {"attn_implementation": attn} if attn else {}
    if args.model:
        return AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, **kwargs).to(device)
    config = load_architecture("llama31_8b" if args.architecture == "tiny" else args.architecture)
    if args.architecture == "tiny":  # the 8B architecture, shrunk
        for key, value in TINY.items():
            setattr(config, key, value)
    for key, value in kwargs.items():
        setattr(config, f"_{key}" if key == "attn_implementation" else key, value)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)


def load_tokenizer(args: argparse.Namespace) -> Any:
    from transformers import AutoTokenizer

    from veracity.models.registry import resolve_model

    if args.model:
        return AutoTokenizer.from_pretrained(args.model)
    folder = args.tokenizer if Path(args.tokenizer).is_dir() else resolve_model("chat_lm", args.tokenizer)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class TokenCounter:
    """Wraps the trainer's collator: non-padding and total tokens of every micro-batch, in order."""

    def __init__(self, collator: Any):
        self.collator, self.counts = collator, []

    def __call__(self, examples: Any) -> Any:
        batch = self.collator(examples)
        mask = batch.get("attention_mask")
        total = int(batch["input_ids"].numel())
        self.counts.append((int(mask.sum()) if mask is not None else total, total))
        return batch


def step_timer() -> Any:
    """A TrainerCallback keeping the wall time at the end of each optimizer step (CUDA synchronised)."""
    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.losses: list[float] = []

        def on_step_end(self, *_: Any, **__: Any) -> None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.ends.append(time.perf_counter())

        def on_log(self, _args: Any, _state: Any, _control: Any, logs: dict[str, float] | None = None,
                   **__: Any) -> None:
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    return StepTimer()


def trainer_args(job: str, recipe: dict[str, Any], overrides: dict[str, Any], steps: int, out: str,
                 device: str) -> Any:
    from trl import DPOConfig, SFTConfig

    keep = {k: v for k, v in recipe.items() if k in {f for f in (SFTConfig if job == "sft" else DPOConfig)
                                                     .__dataclass_fields__}}
    values = {**keep, **overrides, "max_steps": steps, "output_dir": out, "save_strategy": "no", "report_to": "none",
              "logging_steps": 1, "disable_tqdm": True, "dataloader_num_workers": 0, "warmup_steps": 0,
              "use_cpu": device == "cpu"}
    if device == "cpu":
        values["bf16"] = False
    values.pop("num_train_epochs", None)
    return (SFTConfig if job == "sft" else DPOConfig)(**values)


def run_variant(job: str, variant: str, overrides: dict[str, Any], recipe: dict[str, Any], records: list[dict],
                tokenizer: Any, args: argparse.Namespace, device: str, flops_per_token: float | None,
                peak: float | None) -> Row:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    fields = (SFTConfig if job == "sft" else DPOConfig).__dataclass_fields__
    if job == "dpo" and variant not in ("shipped", "no_checkpointing"):  # TRL 1.16's DPO: no packing, padding_free off
        return Row(job, variant, "–", note="not available in TRL's DPO trainer")
    if any(k not in fields for k in overrides):
        return Row(job, variant, "–", note=f"not an option of TRL's {job.upper()} trainer")
    settings = (f"batch {overrides.get('per_device_train_batch_size', recipe['per_device_train_batch_size'])} x "
                f"{overrides.get('gradient_accumulation_steps', recipe['gradient_accumulation_steps'])}, "
                f"ckpt {overrides.get('gradient_checkpointing', recipe.get('gradient_checkpointing', False))}"
                + "".join(f", {k} {v}" for k, v in overrides.items() if k in ("packing", "padding_free") and v))
    row = Row(job, variant, settings)
    dtype = getattr(torch, recipe.get("dtype") or "float32") if device != "cpu" else torch.float32
    if device != "cpu":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model = trainer = None
    try:
        model = build_model(args, dtype, recipe.get("attn_implementation"), device)
        n_params = sum(p.numel() for p in model.parameters())
        lora = LoraConfig(r=recipe["lora_r"], lora_alpha=recipe["lora_alpha"], lora_dropout=recipe["lora_dropout"],
                          target_modules=recipe["lora_target_modules"], task_type="CAUSAL_LM")
        total_steps = args.warmup + args.steps
        with tempfile.TemporaryDirectory() as out:
            config = trainer_args(job, recipe, overrides, total_steps, out, device)
            accumulation = config.gradient_accumulation_steps
            packs = 8 if getattr(config, "packing", False) else 1  # a packed row holds several records
            needed = total_steps * accumulation * config.per_device_train_batch_size * packs
            data = Dataset.from_list((records * (needed // len(records) + 1))[:needed])
            cls = SFTTrainer if job == "sft" else DPOTrainer
            trainer = cls(model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=lora)
            counter = TokenCounter(trainer.data_collator)
            trainer.data_collator = counter
            timer = step_timer()
            trainer.add_callback(timer)
            trainer.train()
        timed = timer.ends[args.warmup:]
        seconds = timed[-1] - timer.ends[args.warmup - 1] if args.warmup else timed[-1] - timed[0]
        n_timed = len(timed) if args.warmup else len(timed) - 1
        per_step = accumulation  # micro-batches per optimizer step, in the order the collator saw them
        counted = counter.counts[args.warmup * per_step if args.warmup else per_step:len(timer.ends) * per_step]
        nonpad, total = sum(c[0] for c in counted), sum(c[1] for c in counted)
        row.steps, row.seconds_per_step = n_timed, seconds / n_timed
        row.nonpad_tokens_per_s, row.total_tokens_per_s = nonpad / seconds, total / seconds
        row.loss = sum(timer.losses[args.warmup:]) / max(len(timer.losses[args.warmup:]), 1)
        if device != "cpu":
            row.peak_gib = torch.cuda.max_memory_allocated(device) / 2**30
        if flops_per_token and peak:
            row.mfu = (flops_per_token * n_params) * total / seconds / (peak * 1e12)
        row.extra = {"params": n_params, "nonpad_tokens": nonpad, "total_tokens": total}
    except Exception as error:  # one variant failing (out of memory, a kernel missing) must not lose the others
        row.note = f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
        if device != "cpu":
            row.peak_gib = torch.cuda.max_memory_allocated(device) / 2**30
    finally:
        del model, trainer
        gc.collect()
        if device != "cpu":
            torch.cuda.empty_cache()
    return row


def variant_overrides(variant: str, recipe: dict[str, Any], batch: int | None = None) -> dict[str, Any]:
    if variant == "packing":
        return {"packing": True}
    if variant == "padding_free":  # TRL truncates only packed or padded rows: records go in whole
        return {"padding_free": True, "max_length": None}
    if variant == "packing_no_checkpointing":
        return {**variant_overrides("no_checkpointing", recipe, batch), "packing": True}
    if variant == "no_checkpointing":
        examples = recipe["per_device_train_batch_size"] * recipe["gradient_accumulation_steps"]
        batch = min(batch or recipe["per_device_train_batch_size"], examples)  # never more examples per step
        return {"gradient_checkpointing": False, "per_device_train_batch_size": batch,
                "gradient_accumulation_steps": max(1, examples // batch)}
    return {}


def read_records(path: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    from veracity.train.common import load_records

    return load_records(path, fields)


def recipe_values(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """The recipe's values with the bench's overrides (a CPU check shrinks batch and accumulation)."""
    values = load_config_values(path)
    for key, given in (("max_length", args.max_length), ("per_device_train_batch_size", args.batch),
                       ("gradient_accumulation_steps", args.accumulation)):
        if given:
            values[key] = given
    return values


def fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(rows: list[Row], info: dict[str, Any], peak: float | None) -> str:
    lines = [f"device: {info['device']}" + (f" ({info['device_memory_gib']} GiB, CUDA {info['cuda']})"
                                            if "cuda" in info else f", threads {info.get('threads')}, "
                                                                   f"flags: {info.get('cpu_flags') or 'none'}"),
             "versions: " + ", ".join(f"{k} {info[k]}" for k in ("python", "torch", "transformers", "trl", "peft")),
             f"MFU: model FLOPs per trained token (SFT 4·N, DPO 6·N) / {peak or '?'} TFLOP/s dense bf16 peak", "",
             "| job | variant | settings | steps | s/step | non-padding tok/s | total tok/s | peak GiB | MFU | loss |"
             " note |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r.job} | {r.variant} | {r.settings} | {r.steps} | {fmt(r.seconds_per_step, '.2f')} | "
                     f"{fmt(r.nonpad_tokens_per_s, ',.0f')} | {fmt(r.total_tokens_per_s, ',.0f')} | "
                     f"{fmt(r.peak_gib, '.1f')} | {fmt(r.mfu and 100 * r.mfu, '.1f')}{'%' if r.mfu else ''} | "
                     f"{fmt(r.loss, '.4f')} | {r.note} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Row]:
    args = make_parser().parse_args(argv)
    if args.architecture == "tiny" and not args.model:  # a correctness check on the CPU: a few short steps
        args.batch, args.accumulation = args.batch or 2, args.accumulation or 1
        args.max_length = args.max_length or 1024
    from veracity.models.device import resolve_device

    device = resolve_device(args.device)
    info = environment(device)
    peak = peak_tflops(info["device"], args.peak_tflops) if device != "cpu" else None
    limit = args.memory_limit_gib or info.get("device_memory_gib")
    tokenizer = load_tokenizer(args)
    jobs = [("sft", args.sft_recipe, args.train_file, ("prompt", "completion"), 4.0)]
    if args.dpo_file:
        jobs.append(("dpo", args.dpo_recipe, args.dpo_file, ("prompt", "chosen", "rejected"), 6.0))
    rows: list[Row] = []
    for job, recipe_path, records_path, fields, flops in jobs:
        recipe = recipe_values(recipe_path, args)
        records = read_records(records_path, fields)
        for variant in args.variants:
            if "no_checkpointing" not in variant:
                rows.append(run_variant(job, variant, variant_overrides(variant, recipe), recipe, records, tokenizer,
                                        args, device, flops, peak))
                continue
            for batch in sorted(args.batches, reverse=True):  # the largest batch whose peak fits
                row = run_variant(job, variant, variant_overrides(variant, recipe, batch), recipe, records, tokenizer,
                                  args, device, flops, peak)
                fits = not row.note and (row.peak_gib is None or limit is None or row.peak_gib <= limit)
                if fits or batch == min(args.batches):
                    if not fits and not row.note:
                        row.note = f"peak over --memory_limit_gib {limit:g}"
                    rows.append(row)
                    break
                print(f"{job} no_checkpointing batch {batch}: does not fit ({row.note or f'{row.peak_gib:.1f} GiB'})",
                      file=sys.stderr)
            print(rows[-1], file=sys.stderr, flush=True)
    print(table(rows, info, peak))
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": info, "rows": [r.__dict__ for r in rows]}, indent=1))
    return rows


if __name__ == "__main__":
    main()
