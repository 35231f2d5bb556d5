"""Training speed and memory of the LoRA recipes, variant beside variant, in one process (issues #49, #64).

Usage: python bench/train.py [--architecture llama31_8b | tiny | CONFIG.json] [--model FOLDER]
                             [--sft_recipe configs/train/sft_lora_nemotron8b.yaml]
                             [--dpo_recipe configs/train/dpo_lora_nemotron8b.yaml]
                             [--train_file runs/prep/training/sft.jsonl] [--dpo_file runs/prep/training/dpo.jsonl]
                             [--variants shipped no_checkpointing no_checkpointing+padding_free ...]
                             [--rounds 2] [--steps 4] [--warmup 1] [--max_minutes M]

Each variant trains the recipe's LoRA with TRL (SFT, then DPO) for ``warmup + steps`` optimizer steps on the same
records with the same seed, on random weights of ``--architecture`` built directly on the device in the recipe's
dtype (no download, no checkpoint: real-scale timings need no weights), or on ``--model``'s weights. The variants run
``--rounds`` times, in a rotated order each round (round r starts with the r-th variant), so no variant always pays
for running first; the table gives the median over the rounds and the spread ((max - min) / median). It prints the
device, library versions and CPU flags, then per variant: optimizer steps timed, s/step, non-padding and total
tokens/s (total: the tokens the model ran, padding included), model FLOPs per step and MFU, the peak allocated memory
(``torch.cuda.max_memory_allocated``, reset before each run; on a CPU not measured), the dry run's estimate for the
largest micro-batch the variant ran (train/memory.py) and the mean loss of the timed steps (same records and seed:
variants that train the same examples per step should agree; packing groups other records into its rows).

A variant is ``shipped`` (the recipe) or the recipe plus ``+``-joined parts, each a recipe field (train/speed.py):
``packing`` (SFT: TRL's best-fit packing, padding-free rows), ``padding_free`` (rows concatenated, no padding; DPO:
veracity unpads the pairs), ``liger`` (use_liger_kernel), ``no_checkpointing``, ``selective`` (checkpointing
selective, every ``--checkpoint_every``-th layer), ``flex`` / ``flash`` / ``eager`` (attn_implementation
flex_attention / flash_attention_2 / eager), ``compile`` (the Trainer's ``torch_compile``; not in the GPU check,
whose budget a compilation of unknown length would eat). A variant with ``no_checkpointing`` or ``selective`` takes
the largest of ``--batches`` whose peak stays under ``--memory_limit_gib`` (searched in the first round, kept after),
accumulation scaled to keep the recipe's examples per step.

FLOPs counted per optimizer step (:func:`model_flops`), on the non-padding tokens only: SFT 4 FLOPs per matmul
parameter and token (forward 2 + the input gradients 2 through the frozen base), DPO 6 (plus the reference forward);
the LM head only on the tokens with a label (TRL's fused head scores no other), the embeddings not at all (a lookup);
attention 6·L·d·s² per record of s tokens (causal: forward 2·L·d·s², backward 4·L·d·s²; d = heads x head_dim), DPO
8·L·d·s². Left out: the LoRA adapters' own FLOPs (< 1% at r=16), checkpointing's recomputed forward, and the masked
blocks an SDPA kernel computes for a padded or padding-free row. MFU divides by ``--peak_tflops`` or the device's dense
bf16 peak from :data:`PEAK_TFLOPS`.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from train_figures import (  # bench/train_figures.py: the pure arithmetic, tested on hand-made numbers
    PARTS,
    batch_counts,
    median_spread,
    mfu,
    model_flops,
    rotation,
    searches_batch,
    variant_fields,
)

from veracity.config import load_config_values

ROOT = Path(__file__).resolve().parents[1]
# dense bf16 peak per device (vendor data sheets, no sparsity): the MFU denominator
PEAK_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "L4": 121.0}
# the tiny shape: the Llama-3.1-8B architecture shrunk (a CPU correctness check, not a timing)
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 16384}
VARIANTS = ("shipped", "packing", "padding_free", "no_checkpointing", "no_checkpointing+padding_free")


@dataclass
class Measure:
    """One run of one variant."""

    seconds: float
    steps: int
    nonpad: int
    total: int
    flops: float
    loss: float
    peak_gib: float | None
    max_tokens: int  # the largest micro-batch the model ran
    checkpointed: int  # decoder layers that recomputed their forward, read from the model after training


@dataclass
class Row:
    job: str
    variant: str
    settings: str
    runs: list[Measure] = field(default_factory=list)
    dry_run_gib: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def median(self, rate: str) -> float | None:
        return median_spread([getattr(m, rate) / m.seconds for m in self.runs])[0] if self.runs else None


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architecture", default="llama31_8b",
                        help="Random weights of this shape: a shipped name (llama31_8b), tiny, or a config.json.")
    parser.add_argument("--model", help="A model folder to train instead of random weights.")
    parser.add_argument("--tokenizer", default="embedded",
                        help="Tokenizer for random weights: a chat_lm role name or folder (ids must fit the vocab).")
    parser.add_argument("--sft_recipe", default=str(ROOT / "configs/train/sft_lora_nemotron8b.yaml"))
    parser.add_argument("--dpo_recipe", default=str(ROOT / "configs/train/dpo_lora_nemotron8b.yaml"))
    parser.add_argument("--train_file", default="runs/prep/training/sft.jsonl", help="SFT records; '' skips SFT.")
    parser.add_argument("--dpo_file", default="runs/prep/training/dpo.jsonl", help="DPO records; '' skips DPO.")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS),
                        help=f"shipped, or parts joined by '+': {', '.join(PARTS)}.")
    parser.add_argument("--dpo_variants", nargs="+", default=None, help="DPO's, when not --variants.")
    parser.add_argument("--rounds", type=int, default=2, help="Runs of every variant, in rotated order.")
    parser.add_argument("--steps", type=int, default=4, help="Optimizer steps timed per run.")
    parser.add_argument("--warmup", type=int, default=1, help="Optimizer steps run first and not timed.")
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 8],
                        help="no_checkpointing / selective: per-device batches tried, largest first.")
    parser.add_argument("--dpo_batches", type=int, nargs="+", default=None, help="DPO's (pairs), when not --batches.")
    parser.add_argument("--checkpoint_every", type=int, default=2, help="selective: every n-th layer recomputes.")
    parser.add_argument("--memory_limit_gib", type=float, default=None,
                        help="A searched batch 'fits' when its peak stays under this (default: the device's memory).")
    parser.add_argument("--max_length", type=int, default=None, help="Override the recipes' max_length.")
    parser.add_argument("--batch", type=int, default=None, help="Override the recipes' per-device batch.")
    parser.add_argument("--accumulation", type=int, default=None, help="Override the recipes' accumulation.")
    parser.add_argument("--peak_tflops", type=float, default=None, help="MFU denominator (default: by device name).")
    parser.add_argument("--max_minutes", type=float, default=None,
                        help="Start no run after this many minutes; the runs left out are noted in the table.")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N.")
    parser.add_argument("--json", help="Also write the rows as JSON here.")
    return parser


def environment(device: str) -> dict[str, Any]:
    import importlib.metadata

    import torch

    info: dict[str, Any] = {"python": platform.python_version()}
    for package in ("torch", "transformers", "trl", "peft", "liger-kernel", "flash-attn"):
        try:
            info[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info[package] = "not installed"
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


def architecture(args: argparse.Namespace) -> Any:
    from veracity.train.memory import load_architecture

    config = load_architecture(args.model or ("llama31_8b" if args.architecture == "tiny" else args.architecture))
    if args.architecture == "tiny" and not args.model:  # the 8B architecture, shrunk, its vocabulary the tokenizer's
        for key, value in {**TINY, "vocab_size": getattr(args, "vocab_size", config.vocab_size)}.items():
            setattr(config, key, value)
    return config


def build_model(args: argparse.Namespace, dtype: Any, attn: str | None, device: str) -> Any:
    """Random weights of the architecture built on the device (or the folder's weights), in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {"attn_implementation": attn} if attn else {}
    if args.model:
        return AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, **kwargs).to(device)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(architecture(args), dtype=dtype, **kwargs)


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
    """Wraps the trainer's collator: :func:`batch_counts` of every micro-batch, in order."""

    def __init__(self, collator: Any, unpadded: bool):
        self.collator, self.unpadded, self.counts = collator, unpadded, []

    def __call__(self, examples: Any) -> Any:
        batch = self.collator(examples)
        self.counts.append(batch_counts(batch, self.unpadded))
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


def trainer_args(job: str, recipe: dict[str, Any], fields: dict[str, Any], steps: int, out: str, device: str) -> Any:
    from trl import DPOConfig, SFTConfig

    config_cls = SFTConfig if job == "sft" else DPOConfig
    keep = {k: v for k, v in {**recipe, **fields}.items() if k in config_cls.__dataclass_fields__}
    values = {**keep, "max_steps": steps, "output_dir": out, "save_strategy": "no", "report_to": "none",
              "logging_steps": 1, "disable_tqdm": True, "dataloader_num_workers": 0, "warmup_steps": 0,
              "use_cpu": device == "cpu"}
    if values.get("padding_free") and not values.get("packing") and job == "sft":
        values["max_length"] = None  # TRL cuts only packed or padded rows: records go in whole (train/speed.py)
    if device == "cpu":
        values["bf16"] = False
    values.pop("num_train_epochs", None)
    return config_cls(**values)


def settings_of(config: Any, plan: Any) -> str:
    ckpt = {"none": "none", "every_layer": "every layer", "selective": f"selective n={plan.every_n_layers}"}
    parts = [f"batch {config.per_device_train_batch_size} x {config.gradient_accumulation_steps}",
             f"ckpt {ckpt[plan.checkpointing]}"]
    parts += [name for name, on in (("packing", getattr(config, "packing", False)),
                                    ("padding-free", plan.padding_free), ("liger", plan.liger)) if on]
    return ", ".join(parts + ([plan.attention] if plan.attention not in (None, "sdpa") else []))


def run_once(job: str, fields: dict[str, Any], recipe: dict[str, Any], records: list[dict], tokenizer: Any,
             args: argparse.Namespace, device: str) -> tuple[Measure | None, str, str, Any]:
    """One run: (its measure or None, its settings, a note, the dry run's GiB for its largest micro-batch)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers.trainer_callback import PrinterCallback
    from trl import DPOTrainer, SFTTrainer

    from veracity.data_prep.errors import InputError
    from veracity.train.speed import apply_speed, checkpointed_layers, resolve_speed, trainer_construction

    dtype = getattr(torch, recipe.get("dtype") or "float32") if device != "cpu" else torch.float32
    attention = fields.get("attn_implementation", recipe.get("attn_implementation"))
    model = trainer = None
    if device != "cpu":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with tempfile.TemporaryDirectory() as out:
            config = trainer_args(job, recipe, fields, args.warmup + args.steps, out, device)
            plan = resolve_speed(config, fields.get("checkpointing", recipe.get("checkpointing")),
                                 fields.get("checkpoint_every", args.checkpoint_every), attention, device)
            settings = settings_of(config, plan)
            model = build_model(args, dtype, attention, device)
            embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
            base = sum(p.numel() for p in model.parameters())
            matmul = base - head.numel() - (embed.numel() if embed.data_ptr() != head.data_ptr() else 0)
            lora = LoraConfig(r=recipe["lora_r"], lora_alpha=recipe["lora_alpha"], task_type="CAUSAL_LM",
                              lora_dropout=recipe["lora_dropout"], target_modules=recipe["lora_target_modules"])
            packs = 8 if getattr(config, "packing", False) else 1  # a packed row holds several records
            needed = (args.warmup + args.steps) * config.gradient_accumulation_steps * \
                config.per_device_train_batch_size * packs
            data = Dataset.from_list((records * (needed // len(records) + 1))[:needed])
            with trainer_construction(config, plan):
                trainer = (SFTTrainer if job == "sft" else DPOTrainer)(
                    model=model, args=config, train_dataset=data, processing_class=tokenizer, peft_config=lora)
            apply_speed(trainer, plan)
            trainer.remove_callback(PrinterCallback)  # the logs as dicts on stdout: the table is the output
            counter = TokenCounter(trainer.data_collator, plan.unpad_dpo)
            trainer.data_collator = counter
            timer = step_timer()
            trainer.add_callback(timer)
            trainer.train()
        per_step = config.gradient_accumulation_steps  # micro-batches per optimizer step, as the collator saw them
        first = args.warmup if args.warmup else 1
        seconds = timer.ends[-1] - timer.ends[first - 1]
        counted = counter.counts[first * per_step:len(timer.ends) * per_step]
        sums = {key: sum(c[key] for c in counted) for key in ("nonpad", "total", "scored", "sum_sq")}
        layers = model.config.num_hidden_layers
        flops = model_flops(job, matmul, head.numel(), sums["nonpad"], sums["scored"], sums["sum_sq"], layers,
                            model.config.num_attention_heads * model.config.head_dim)
        losses = timer.losses[args.warmup:]
        checkpointed = sum(bool(getattr(layer, "gradient_checkpointing", False)) for layer in
                           trainer.model.get_base_model().model.layers)
        measure = Measure(seconds=seconds, steps=len(timer.ends) - first, nonpad=sums["nonpad"], total=sums["total"],
                          flops=flops, loss=sum(losses) / max(len(losses), 1),
                          peak_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device != "cpu" else None,
                          max_tokens=max(c["total"] for c in counter.counts), checkpointed=checkpointed)
        dry = dry_run_gib(model.config, base, trainer, recipe, plan, measure.max_tokens, dtype)
        if checkpointed != checkpointed_layers(layers, plan.checkpointing, plan.every_n_layers):
            return measure, settings, f"{checkpointed} layers checkpointed, the dry run assumes otherwise", dry
        return measure, settings, "", dry
    except InputError as error:  # a kernel this device lacks: the recipe would stop the same way
        return None, "–", f"error: {error}", None
    except Exception as error:  # one variant failing (out of memory, a kernel missing) must not lose the others
        peak = f" (peak {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB)" if device != "cpu" else ""
        return None, "–", f"{type(error).__name__}: {' '.join(str(error).split())[:160]}{peak}", None
    finally:
        del model, trainer
        gc.collect()
        if device != "cpu":
            torch.cuda.empty_cache()


def dry_run_gib(config: Any, base_params: int, trainer: Any, recipe: dict[str, Any], plan: Any, tokens: int,
                dtype: Any) -> float:
    """train/memory.py's estimate for this run: its weights, adapters, AdamW and one micro-batch of ``tokens``."""
    from veracity.train.memory import GIB, activation_bytes

    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    size = dtype.itemsize
    activations = activation_bytes(config, 1, tokens, plan.checkpointing, size, recipe["lora_target_modules"],
                                   recipe["lora_dropout"], plan.every_n_layers, plan.liger,
                                   plan.padding_free and (plan.attention or "sdpa") in ("sdpa", "eager"))
    return (base_params * size + trainable * (2 * size + 12) + activations) / GIB


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


def table(rows: list[Row], info: dict[str, Any], peak: float | None, rounds: int) -> str:
    versions = ("python", "torch", "transformers", "trl", "peft", "liger-kernel", "flash-attn")
    lines = [f"device: {info['device']}" + (f" ({info['device_memory_gib']} GiB, CUDA {info['cuda']})"
                                            if "cuda" in info else f", threads {info.get('threads')}, "
                                                                   f"flags: {info.get('cpu_flags') or 'none'}"),
             "versions: " + ", ".join(f"{k} {info[k]}" for k in versions),
             f"rounds: {rounds}, variants in rotated order; tok/s and s/step: the median over the rounds, spread: "
             "(max - min) / median of the non-padding tok/s",
             "FLOPs per step on the non-padding tokens: SFT 4, DPO 6 per matmul parameter and token (the LM head on "
             "scored tokens only) + causal attention SFT 6·L·d·s², DPO 8·L·d·s² per record; "
             f"MFU over {peak or '?'} TFLOP/s dense bf16 peak",
             "peak GiB: torch.cuda.max_memory_allocated, reset before each run (max over the rounds; not measured on "
             "a CPU); dry run: train/memory.py for the largest micro-batch run", "",
             "| job | variant | settings | rounds | steps | s/step | non-padding tok/s | spread | total tok/s | "
             "TFLOP/step | MFU | peak GiB | dry run GiB | loss | note |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        cells = ["–"] * 10
        if r.runs:
            rate, spread = median_spread([m.nonpad / m.seconds for m in r.runs])
            seconds = statistics.median([m.seconds for m in r.runs])
            use = mfu(statistics.median([m.flops for m in r.runs]), seconds, peak)
            peaks = [m.peak_gib for m in r.runs if m.peak_gib is not None]
            cells = [str(r.runs[0].steps), fmt(statistics.median([m.seconds / m.steps for m in r.runs]), ".2f"),
                     fmt(rate, ",.0f"), f"{100 * spread:.1f}%", fmt(r.median("total"), ",.0f"),
                     fmt(statistics.median([m.flops / m.steps for m in r.runs]) / 1e12, ".3g"),
                     f"{100 * use:.1f}%" if use else "–", fmt(max(peaks) if peaks else None, ".1f"),
                     fmt(r.dry_run_gib, ".1f"), fmt(r.runs[0].loss, ".4f")]
        lines.append(f"| {r.job} | {r.variant} | {r.settings} | {len(r.runs)} | " + " | ".join(cells)
                     + f" | {r.note} |")
    return "\n".join(lines)


@dataclass
class Job:
    """One job's variants across the rounds: their rows and the batch each searched variant settled on."""

    name: str
    recipe: dict[str, Any]
    records: list[dict]
    variants: list[str]
    searched: list[int]
    rows: dict[str, Row] = field(default_factory=dict)
    batches: dict[str, int | None] = field(default_factory=dict)


def run_round(job: Job, order: list[str], tokenizer: Any, args: argparse.Namespace, device: str,
              limit: float | None, started: float) -> None:
    """One round of a job's variants in ``order``; a searched batch is found the first time a variant runs."""
    for variant in order:
        row = job.rows.setdefault(variant, Row(job.name, variant, "–"))
        if job.name == "dpo" and "packing" in variant_fields(variant, job.recipe, None, 2):
            row.note = "packing: not an option of TRL's DPO trainer"
            continue
        if row.note and not row.runs:
            continue  # it failed once (or ran out of time): the same again would fail the same
        if args.max_minutes and time.perf_counter() - started > 60 * args.max_minutes:
            row.note = row.note or f"runs left out: over --max_minutes {args.max_minutes:g}"
            continue
        tried = [job.batches[variant]] if variant in job.batches else (
            job.searched if searches_batch(variant) else [None])
        for batch in tried:
            fields = variant_fields(variant, job.recipe, batch, args.checkpoint_every)
            measure, settings, note, dry = run_once(job.name, fields, job.recipe, job.records, tokenizer, args, device)
            fits = measure is not None and (measure.peak_gib is None or limit is None or measure.peak_gib <= limit)
            if fits or batch == tried[-1]:
                job.batches[variant] = batch
                if measure is not None:
                    row.runs.append(measure)
                    row.settings, row.dry_run_gib = settings, max(row.dry_run_gib or 0.0, dry or 0.0) or None
                row.note = note or (f"peak over --memory_limit_gib {limit:g}" if measure and not fits else "")
                break
            print(f"{job.name} {variant} batch {batch}: does not fit ({note or f'{measure.peak_gib:.1f} GiB'})",
                  file=sys.stderr)
        print(f"{job.name} {variant}: {row.runs[-1] if row.runs else row.note}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> list[Row]:
    args = make_parser().parse_args(argv)
    for variant in args.variants + (args.dpo_variants or []):
        variant_fields(variant, {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 1}, None, 2)
    if args.architecture == "tiny" and not args.model:  # a correctness check on the CPU: a few short steps
        args.batch, args.accumulation = args.batch or 2, args.accumulation or 1
        args.max_length = args.max_length or 1024
    from veracity.models.device import resolve_device

    started = time.perf_counter()
    device = resolve_device(args.device)
    info = environment(device)
    peak = peak_tflops(info["device"], args.peak_tflops) if device != "cpu" else args.peak_tflops
    limit = args.memory_limit_gib or info.get("device_memory_gib")
    tokenizer = load_tokenizer(args)
    args.vocab_size = len(tokenizer)  # the tiny shape's (a 128k-entry LM head would dominate a CPU check)
    jobs = []
    if args.train_file:
        jobs.append(("sft", args.sft_recipe, args.train_file, ("prompt", "completion")))
    if args.dpo_file:
        jobs.append(("dpo", args.dpo_recipe, args.dpo_file, ("prompt", "chosen", "rejected")))
    states = [Job(name, recipe_values(recipe_path, args), read_records(records_path, fields),
                  list((args.dpo_variants or args.variants) if name == "dpo" else args.variants),
                  sorted((args.dpo_batches or args.batches) if name == "dpo" else args.batches, reverse=True))
              for name, recipe_path, records_path, fields in jobs]
    for number in range(args.rounds):  # round by round over the jobs: a time limit shortens the last rounds of all
        for job in states:
            run_round(job, rotation(job.variants, args.rounds)[number], tokenizer, args, device, limit, started)
    rows = [job.rows[v] for job in states for v in job.variants]
    print(table(rows, info, peak, args.rounds))
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": info, "rows": [
            {**{k: v for k, v in r.__dict__.items() if k != "runs"}, "runs": [m.__dict__ for m in r.runs]}
            for r in rows]}, indent=1))
    return rows


if __name__ == "__main__":
    main()
