"""The speed fields of the LoRA recipes (issue #64): padding-free batches, Liger kernels and the checkpointing mode,
checked before any weights load (:func:`resolve_speed`) and applied to the trainer once it is built
(:func:`apply_speed`). ``bench/train.py`` runs its variants through the same two functions, so what it measures is
what a recipe trains with.

- **Padding-free batches** (``padding_free: true``): a micro-batch's records are concatenated into one row whose
  ``position_ids`` restart at 0 for each record, with no attention mask; transformers builds a per-record
  (block-diagonal) mask from them for SDPA and eager attention when no cache is passed (training passes none), flash
  attention reads the sequence boundaries, flex attention skips the blocks between records. SFT uses TRL's own
  collator (``packing: true`` with the default best-fit strategy is padding-free too). TRL 1.16's DPO trainer warns
  and pads anyway, so for DPO veracity removes the padding itself: :func:`unpad_forward` flattens the padded pairs
  into one such row before the model and puts the per-token log-probabilities back in their padded places after it.
- **Liger kernels** (``use_liger_kernel: true``, the ``liger`` extra): the Trainer swaps in Liger's RMSNorm, SwiGLU
  and RoPE kernels. TRL 1.16 refuses Liger's fused linear cross-entropy because its own fused LM head already
  computes the log-probabilities tile by tile, never materialising the logits (train/memory.py counts it so).
- **Checkpointing** (``checkpointing: none | every_layer | selective``, unset: TRL's ``gradient_checkpointing``):
  ``selective`` recomputes every ``checkpoint_every``-th decoder layer (layers 0, n, 2n, …) and lets the others keep
  their activations, transformers' own ``every_n_layers``: the memory between none and every layer at a fraction of
  the recompute, sized by the dry run (``--dry_run true`` prints each mode's activations).

Liger and flash attention are Triton/CUDA kernels and flex attention has no backward on a CPU: asked for on a CPU,
the run stops with one ``error:`` line before any weights load.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from veracity.data_prep.errors import InputError

logger = logging.getLogger(__name__)

CHECKPOINTING_MODES = ("none", "every_layer", "selective")
# attention implementations whose training kernels exist only on a CUDA GPU: flash-attn's, and flex attention's
# backward (NotImplementedError on a CPU: ../shared/PLATFORM.md, padding-free batches)
GPU_ONLY_ATTENTION = ("flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True)
class SpeedPlan:
    """What a LoRA run does for speed, resolved from its recipe before any weights load."""

    checkpointing: str = "none"  # one of CHECKPOINTING_MODES
    every_n_layers: int = 1  # selective: layers 0, n, 2n, ... recompute their forward in the backward pass
    padding_free: bool = False  # rows without padding (SFT: TRL's collator; DPO: unpad_forward)
    unpad_dpo: bool = False  # DPO's padded pairs flattened by veracity (TRL 1.16's DPO pads regardless)
    liger: bool = False
    attention: str | None = None

    def describe(self) -> str:
        ckpt = {"none": "none", "every_layer": "every layer",
                "selective": f"selective (layers 0, n, 2n, ... with n={self.every_n_layers})"}[self.checkpointing]
        return (f"checkpointing {ckpt}, padding-free {'yes' if self.padding_free else 'no'}"
                f"{' (veracity unpads DPO pairs)' if self.unpad_dpo else ''}, Liger {'yes' if self.liger else 'no'}, "
                f"attention {self.attention or 'the model default'}")


def checkpointing_mode(checkpointing: str | None, gradient_checkpointing: bool) -> str:
    """The mode a recipe asks for: its ``checkpointing`` field, else TRL's ``gradient_checkpointing`` bool."""
    if checkpointing is None:
        return "every_layer" if gradient_checkpointing else "none"
    if checkpointing not in CHECKPOINTING_MODES:
        raise InputError(f"--checkpointing {checkpointing}: choose one of {', '.join(CHECKPOINTING_MODES)}")
    return checkpointing


def checkpointed_layers(layers: int, mode: str, every_n_layers: int = 1) -> int:
    """How many of ``layers`` decoder layers recompute their forward: none, all, or layers 0, n, 2n, …"""
    if mode == "none":
        return 0
    if mode == "every_layer":
        return layers
    return math.ceil(layers / every_n_layers)


def resolve_speed(training_args: Any, checkpointing: str | None, checkpoint_every: int, attn_implementation: Any,
                  device: str) -> SpeedPlan:
    """Check the recipe's speed fields and set the trainer config's checkpointing to the mode; nothing is loaded.

    Raises:
        InputError: a GPU-only kernel on a CPU, Liger not installed, a selective mode without a layer spacing, or
            SFT's ``padding_free`` without packing while ``max_length`` is set (TRL cannot truncate those rows).
    """
    mode = checkpointing_mode(checkpointing, bool(training_args.gradient_checkpointing))
    if mode == "selective" and checkpoint_every < 2:
        raise InputError(f"--checkpointing selective --checkpoint_every {checkpoint_every}: recompute every n-th "
                         "layer with n >= 2 (n = 1 is every_layer)")
    # transformers 5.24 reads activation_checkpointing, TRL its deprecated alias: both say the mode
    training_args.gradient_checkpointing = training_args.activation_checkpointing = mode != "none"
    on_cpu = not str(device).startswith("cuda")
    attention = attn_implementation if isinstance(attn_implementation, str) else None
    liger = bool(getattr(training_args, "use_liger_kernel", False))
    if liger and on_cpu:
        raise InputError("use_liger_kernel: Liger's kernels are Triton kernels for a CUDA GPU and this run is on the "
                         "CPU: train without use_liger_kernel here")
    if liger and importlib.util.find_spec("liger_kernel") is None:
        raise InputError("use_liger_kernel needs liger-kernel, which is not installed: pip install 'veracity[liger]'")
    if attention in GPU_ONLY_ATTENTION and on_cpu:
        why = "flex attention has no backward pass on a CPU" if attention == "flex_attention" else \
            "flash-attn's kernels need a CUDA GPU"
        raise InputError(f"--attn_implementation {attention}: {why}, and this run is on the CPU: use sdpa "
                         "(padding-free rows are masked per record there too)")
    if attention and attention.startswith("flash_attention") and importlib.util.find_spec("flash_attn") is None:
        raise InputError(f"--attn_implementation {attention} needs the flash-attn package, which is not installed: "
                         "use sdpa or flex_attention")
    padding_free = bool(getattr(training_args, "padding_free", False))
    is_dpo = type(training_args).__name__ == "DPOConfig"
    packing = bool(getattr(training_args, "packing", False))
    # TRL's best-fit packing gives padding-free rows (positions restart per record); "wrapped" packing cuts records
    packed_rows = packing and getattr(training_args, "packing_strategy", "bfd") in ("bfd", "bfd_split")
    if padding_free and not is_dpo and not packing and training_args.max_length is not None:
        raise InputError(f"padding_free without packing: TRL cannot cut unpadded rows at max_length "
                         f"{training_args.max_length}. Set max_length: null (records go in whole) or packing: true "
                         "(records packed into rows of max_length, padding-free as well)")
    plan = SpeedPlan(checkpointing=mode, every_n_layers=checkpoint_every if mode == "selective" else 1,
                     padding_free=padding_free or packed_rows, unpad_dpo=padding_free and is_dpo, liger=liger,
                     attention=attention)
    logger.info("speed: %s", plan.describe())
    return plan


@contextlib.contextmanager
def trainer_construction(training_args: Any, plan: SpeedPlan) -> Iterator[None]:
    """Build the trainer inside this: TRL 1.16's DPO trainer warns that it pads despite ``padding_free`` (veracity
    unpads instead), so the field is off while it is built and back on after, as the run records it."""
    if not plan.unpad_dpo:
        yield
        return
    training_args.padding_free = False
    try:
        yield
    finally:
        training_args.padding_free = True


def apply_speed(trainer: Any, plan: SpeedPlan) -> None:
    """What the trainer does not do by itself: the selective layer spacing, DPO's unpadded rows."""
    model = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    if plan.checkpointing == "selective":
        keep_layer_spacing(model, plan.every_n_layers)
    if plan.unpad_dpo:
        model.forward = unpad_forward(model.forward)


def keep_layer_spacing(model: Any, every_n_layers: int) -> None:
    """Every enabling of checkpointing on ``model`` recomputes layers 0, n, 2n, … only.

    The Trainer enables it with transformers' ``every_n_layers``, but TRL's DPO trainer turns checkpointing off and on
    again around each reference forward with ``gradient_checkpointing_kwargs`` alone, which would checkpoint every
    layer from the second step on; wrapping the model's own entry point (as TRL's selective activation checkpointing
    does) holds the spacing whoever calls it."""
    enable = model.gradient_checkpointing_enable

    def gradient_checkpointing_enable(gradient_checkpointing_kwargs: dict | None = None, **kwargs: Any) -> Any:
        kwargs["every_n_layers"] = every_n_layers
        return enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs, **kwargs)

    model.gradient_checkpointing_enable = gradient_checkpointing_enable


def unpad_forward(forward: Any) -> Any:
    """Wrap a model's fused-LM-head forward (TRL's ``add_fused_lm_head``): a padded batch called with
    ``fused_lm_head=True`` runs as one row of its records, ``position_ids`` restarting at each, and its per-token
    outputs come back in the padded shape — zero where no label is scored, as TRL's padded forward leaves them."""
    import torch

    def forward_unpadded(*args: Any, attention_mask: Any = None, labels: Any = None, fused_lm_head: bool = False,
                         **kwargs: Any) -> Any:
        input_ids = kwargs.get("input_ids")
        if (args or not fused_lm_head or attention_mask is None or labels is None or input_ids is None
                or kwargs.get("inputs_embeds") is not None):
            return forward(*args, attention_mask=attention_mask, labels=labels, fused_lm_head=fused_lm_head, **kwargs)
        mask = attention_mask.bool()
        positions = (mask.long().cumsum(1) - 1)[mask][None]
        flat_labels = labels[mask][None].clone()
        flat_labels[positions == 0] = -100  # a record's first token is never predicted from the one before it
        lengths = mask.sum(1).to(torch.int32)
        bounds = torch.cat([lengths.new_zeros(1), lengths.cumsum(0, dtype=torch.int32)])
        longest = int(lengths.max())
        kwargs.pop("position_ids", None)
        kwargs["input_ids"] = input_ids[mask][None]
        out = forward(labels=flat_labels, fused_lm_head=True, position_ids=positions, cu_seq_lens_q=bounds,
                      cu_seq_lens_k=bounds, max_length_q=longest, max_length_k=longest, **kwargs)
        pairs = mask[:, :-1] & mask[:, 1:]  # (token, next token) inside one record: a scored place of the padded row
        inside = positions[0, 1:] != 0  # the same places in the flat row (its record boundaries left out)

        def padded(value: Any) -> Any:
            if value is None:
                return None
            return value.new_zeros(pairs.shape).masked_scatter(pairs, value[0][inside])

        fields = {name: padded(getattr(out, name)) for name in
                  ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1", "label_mask")}
        return type(out)(loss=out.loss, aux_loss=out.aux_loss, **fields)

    return functools.wraps(forward)(forward_unpadded)  # generate() reads the signature: the model's own
