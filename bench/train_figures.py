"""The arithmetic of bench/train.py, pure functions on plain numbers and collated batches (tested on hand-made ones
in tests/test_bench_train.py): the rotated order of the rounds, the median and spread, the model FLOPs of a LoRA step
and MFU, a micro-batch's token counts, and the recipe fields of a variant."""

from __future__ import annotations

import statistics
from typing import Any

PARTS = ("packing", "padding_free", "liger", "no_checkpointing", "selective", "flex", "flash", "eager", "compile")
ATTENTION = {"flex": "flex_attention", "flash": "flash_attention_2", "eager": "eager"}


def rotation(variants: list[str], rounds: int) -> list[list[str]]:
    """The order of each round: round r starts with variant r (mod their number) and keeps the cyclic order."""
    return [variants[r % len(variants):] + variants[:r % len(variants)] for r in range(rounds)]


def median_spread(values: list[float]) -> tuple[float, float]:
    """The median and the spread (max - min) / median of the rounds' values."""
    middle = statistics.median(values)
    return middle, (max(values) - min(values)) / middle if middle else 0.0


def model_flops(job: str, matmul_params: int, head_params: int, tokens: int, scored: int, sum_sq_lengths: int,
                layers: int, attention_width: int) -> float:
    """Model FLOPs of a LoRA step over ``tokens`` non-padding tokens (module docstring): the frozen base's matmuls
    forward and backward to the inputs (DPO: and the reference forward), the LM head on the ``scored`` tokens only,
    causal attention over records whose lengths squared sum to ``sum_sq_lengths``."""
    passes = 3 if job == "dpo" else 2  # forward, input gradients (2x a forward's FLOPs counted as 1 + 1), reference
    linear = 2 * passes * (matmul_params * tokens + head_params * scored)
    attention = (8 if job == "dpo" else 6) * layers * attention_width * sum_sq_lengths
    return float(linear + attention)


def mfu(flops: float, seconds: float, peak_tflops: float | None) -> float | None:
    """Model FLOP utilisation: FLOPs done per second over the device's peak (None without a peak)."""
    return flops / seconds / (peak_tflops * 1e12) if peak_tflops and seconds > 0 else None


def batch_counts(batch: dict[str, Any], unpadded: bool) -> dict[str, int]:
    """Non-padding, total (what the model runs; ``unpadded``: veracity strips DPO's padding before the model),
    scored tokens (a label to predict) and the sum of squared record lengths of one collated micro-batch."""
    ids = batch["input_ids"]
    if batch.get("attention_mask") is not None:
        lengths = batch["attention_mask"].sum(1).tolist()
    else:  # TRL's padding-free rows: one row, position ids restarting at each record
        starts = (batch["position_ids"][0] == 0).nonzero().flatten().tolist() + [ids.shape[1]]
        lengths = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    labels = batch["labels"] if "labels" in batch else batch["completion_mask"].masked_fill(
        batch["completion_mask"] == 0, -100)
    nonpad = int(sum(lengths))
    return {"nonpad": nonpad, "total": nonpad if unpadded else int(ids.numel()),
            "scored": int((labels[:, 1:] != -100).sum()), "sum_sq": int(sum(n * n for n in lengths))}


def variant_fields(variant: str, recipe: dict[str, Any], batch: int | None, checkpoint_every: int) -> dict[str, Any]:
    """The recipe fields a variant sets: trainer fields, ``checkpointing`` / ``checkpoint_every``, attention."""
    parts = [] if variant == "shipped" else variant.split("+")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"variant {variant}: unknown part(s) {unknown}; parts: {', '.join(PARTS)}")
    fields: dict[str, Any] = {}
    if "packing" in parts:
        fields["packing"] = True
    if "padding_free" in parts:
        fields["padding_free"] = True
    if "liger" in parts:
        fields["use_liger_kernel"] = True
    if "compile" in parts:  # the Trainer's torch.compile of the model (its first steps compile: raise --warmup)
        fields["torch_compile"] = True
    if "no_checkpointing" in parts or "selective" in parts:
        fields["checkpointing"] = "none" if "no_checkpointing" in parts else "selective"
        examples = recipe["per_device_train_batch_size"] * recipe["gradient_accumulation_steps"]
        batch = min(batch or recipe["per_device_train_batch_size"], examples)  # never more examples per step
        fields.update(per_device_train_batch_size=batch, gradient_accumulation_steps=max(1, examples // batch))
    if "selective" in parts:
        fields["checkpoint_every"] = checkpoint_every
    for part, implementation in ATTENTION.items():
        if part in parts:
            fields["attn_implementation"] = implementation
    return fields


def searches_batch(variant: str) -> bool:
    return "no_checkpointing" in variant or "selective" in variant
