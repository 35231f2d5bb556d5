"""Dry runs: build a recipe's model on the meta device, attach its LoRA, and estimate training memory.

No weights and no GPU: the architecture comes from a shipped config (``models/model_configs/``) or the model
folder's ``config.json``. The estimate (per GPU, no sharding) adds:
- weights: all parameters in the training dtype;
- adapters + their gradients: trainable parameters, in the training dtype;
- optimizer: AdamW keeps an fp32 master copy and two fp32 moments per trainable parameter (12 bytes);
- activations: with gradient checkpointing, one hidden state per layer plus one layer's full activations;
  without, every layer's (≈ 34·b·s·h bytes per layer in 16-bit, Korthikanti et al. 2022, flash attention
  assumed so the s² attention term is absent); plus the fp32 logits (b·s·vocab·4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "model_configs"
GIB = 1024**3


@dataclass(frozen=True)
class MemoryEstimate:
    total_params: int
    trainable_params: int
    weights_gib: float
    adapters_gib: float
    optimizer_gib: float
    activations_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.adapters_gib + self.optimizer_gib + self.activations_gib

    def peft_line(self) -> str:
        """The counts as PEFT's ``print_trainable_parameters`` prints them."""
        return peft_parameter_line(self.trainable_params, self.total_params)

    def table(self) -> str:
        rows = [
            ("parameters", f"{self.total_params / 1e9:.3f} B total, {self.trainable_params / 1e6:.2f} M trainable "
                           f"({100 * self.trainable_params / self.total_params:.3f}%)"),
            ("weights", f"{self.weights_gib:.2f} GiB"),
            ("adapters + gradients", f"{self.adapters_gib:.2f} GiB"),
            ("optimizer (AdamW, fp32)", f"{self.optimizer_gib:.2f} GiB"),
            ("activations", f"{self.activations_gib:.2f} GiB"),
            ("total per GPU (no sharding)", f"{self.total_gib:.2f} GiB"),
        ]
        return "\n".join(f"{name:28} {value}" for name, value in rows)


def peft_parameter_line(trainable: int, total: int) -> str:
    """``trainable params: 41,943,040 || all params: 8,072,204,288 || trainable%: 0.5196`` (PEFT's format)."""
    return f"trainable params: {trainable:,d} || all params: {total:,d} || trainable%: {100 * trainable / total:.4f}"


def lora_trainable_params(shapes: dict[str, tuple[int, int]], targets: list[str], rank: int, layers: int) -> int:
    """LoRA adds A (r × in) and B (out × r) to each targeted linear of each layer: r·(in + out)."""
    return layers * sum(rank * (fan_in + fan_out) for name, (fan_in, fan_out) in shapes.items() if name in targets)


def llama_linear_shapes(config: object) -> dict[str, tuple[int, int]]:
    """(in, out) of each linear in a Llama decoder layer."""
    h, i = config.hidden_size, config.intermediate_size  # type: ignore[attr-defined]
    head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads  # type: ignore[attr-defined]
    kv = config.num_key_value_heads * head_dim  # type: ignore[attr-defined]
    q = config.num_attention_heads * head_dim  # type: ignore[attr-defined]
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def activation_bytes(config: object, batch: int, seq: int, checkpointing: bool, bytes_per: int = 2) -> int:
    h, layers = config.hidden_size, config.num_hidden_layers  # type: ignore[attr-defined]
    per_layer_full = 34 * batch * seq * h * bytes_per // 2  # 34·b·s·h bytes at 16 bits
    logits = batch * seq * config.vocab_size * 4  # type: ignore[attr-defined]
    if checkpointing:
        return layers * batch * seq * h * bytes_per + per_layer_full + logits
    return layers * per_layer_full + logits


def load_architecture(model: str | Path) -> object:
    """A transformers config from a shipped name (``llama31_8b``), a folder or a config.json."""
    from transformers import AutoConfig  # lazy here and below: seconds to import

    path = Path(model)
    shipped = SHIPPED / f"{model}.json"
    if shipped.exists():
        path = shipped
    if path.is_file():
        data = json.loads(path.read_text())
        data.pop("_comment", None)
        model_type = data.pop("model_type")
        return AutoConfig.for_model(model_type, **data)
    return AutoConfig.from_pretrained(path)


def dry_run(architecture: str | Path, targets: list[str] | str, rank: int, alpha: int, batch: int, seq: int,
            checkpointing: bool, dtype_bytes: int = 2) -> MemoryEstimate:
    """Build on the meta device, attach LoRA, count, estimate. Raises if LoRA matches no module."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    config = load_architecture(architecture)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets,
                                                  task_type="CAUSAL_LM"))
    trainable, total = peft_model.get_nb_trainable_parameters()  # counted as PEFT counts them
    if trainable == 0:
        raise ValueError(f"LoRA targets {targets} match no module of this architecture")
    return MemoryEstimate(
        total_params=total,
        trainable_params=trainable,
        weights_gib=(total - trainable) * dtype_bytes / GIB,
        adapters_gib=2 * trainable * dtype_bytes / GIB,
        optimizer_gib=12 * trainable / GIB,
        activations_gib=activation_bytes(config, batch, seq, checkpointing) / GIB,
    )
