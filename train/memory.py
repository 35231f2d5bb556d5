"""Dry runs: build a recipe's model on the meta device, attach its LoRA, and estimate training memory.

No weights, no GPU and no network: the architecture comes from a shipped config (``models/model_configs/``), a
folder's or file's ``config.json``, a model role (``embedded``: the local embedded model, as every loader resolves
it) or a hub id already in the local cache. The estimate (per GPU, no sharding) adds:
- weights: the frozen parameters in the dtype the loader gets (``--dtype``; none is float32, as TRL loads a model
  by path), the linear layers at 4 or 8 bits under ``--load_in_4bit`` / ``--load_in_8bit`` (bitsandbytes leaves
  the embeddings, norms and ``lm_head`` in the loader's dtype);
- adapters + their gradients: trainable parameters, in the training dtype;
- optimizer: AdamW keeps an fp32 master copy and two fp32 moments per trainable parameter (12 bytes);
- activations (:func:`activation_bytes`): a checkpointed layer keeps its input hidden state, the others everything
  :func:`token_layer_bytes` counts (what a Llama decoder layer with frozen weights and LoRA adapters keeps for the
  backward pass, SDPA/flash attention so no s² term; Liger's RMSNorm and SwiGLU keep less), plus one layer's full
  activations while it is recomputed — checkpointing ``none``, ``every_layer`` or ``selective`` (layers 0, n, 2n, …;
  train/speed.py); plus the LM head: TRL ≥ 1.16 computes the log-probabilities tile by tile (its fused head), so no
  fp32 logits (b·s·vocab·4) exist, only the fp32 gradient of the last hidden state and one 4096 × 32768 tile;
  plus, for padding-free rows under SDPA or eager attention, the per-record mask transformers builds from the
  position ids (a T × T mask for a row of T tokens, which SDPA turns into a float bias each layer keeps).
  Every row counts as ``max_length`` tokens (packed rows are; padded batches of shorter records use less).
  Checked against peaks measured on an H200 with bench/train.py (docs/training.md#gpu-memory-and-speed).
Not counted: the CUDA context and allocator slack (≈ 1–3 GiB).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import InputError
from veracity.train.common import model_init_kwargs
from veracity.train.speed import checkpointed_layers, checkpointing_mode

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


def token_layer_bytes(config: object, targets: list[str] | str, lora_dropout: float, bytes_per: int = 2,
                      liger: bool = False) -> int:
    """Bytes one token keeps in one decoder layer for the backward pass, base weights frozen, LoRA on ``targets``.

    The frozen projections keep nothing for their own matmuls (no weight gradient); what is kept: q, k, v and the
    attention output; each RMSNorm's float32 input and normalised copy and its output; the gated MLP's gate, up and
    activation outputs; and each adapter's input — one copy per distinct input without dropout, one per adapter
    plus its 1-byte mask with dropout. Measured on an H200 (Llama-3.1-8B shape, bf16): within ≈ 5% of the peaks
    bench/train.py records without checkpointing (docs/training.md#gpu-memory-and-speed).

    ``liger``: Liger's RMSNorm keeps its input in the training dtype and one float32 scale per token instead of two
    float32 copies, and its SwiGLU keeps gate and up, recomputing the activation (liger_kernel.ops: rms_norm,
    swiglu); not measured on a GPU yet."""
    shapes = llama_linear_shapes(config)
    h, i = config.hidden_size, config.intermediate_size  # type: ignore[attr-defined]
    q, kv = shapes["q_proj"][1], shapes["k_proj"][1]
    chosen = set(shapes) if targets == "all-linear" else set(targets)
    attention = bytes_per * (q + 2 * kv) + bytes_per * q
    norms = 2 * (bytes_per * h + 4 + bytes_per * h) if liger else 2 * (4 * h + 4 * h + bytes_per * h)
    mlp = (2 if liger else 3) * bytes_per * i
    if lora_dropout > 0:
        lora = sum((bytes_per + 1) * fan_in for name, (fan_in, _) in shapes.items() if name in chosen)
    else:  # q, k, v share the attention input, gate and up the MLP input
        inputs = {"q_proj": "attn", "k_proj": "attn", "v_proj": "attn", "o_proj": "o", "gate_proj": "mlp",
                  "up_proj": "mlp", "down_proj": "down"}
        distinct = {inputs[name]: shapes[name][0] for name in chosen if name in inputs}
        lora = bytes_per * sum(distinct.values())
    return attention + norms + mlp + lora


# TRL's fused LM head (trl/kernels/chunked_logprob.py): tiles of 4096 tokens x 32768 vocabulary entries
HEAD_TILE = 4096 * 32768


def lm_head_bytes(config: object, tokens: int) -> int:
    """What TRL ≥ 1.16's fused LM head holds beyond the layers: the float32 gradient of the last hidden state and
    one float32 logits tile — not the ``tokens x vocab`` logits, which it never materialises."""
    return tokens * config.hidden_size * 4 + min(tokens, 4096) * (HEAD_TILE // 4096) * 4  # type: ignore[attr-defined]


def activation_bytes(config: object, batch: int, seq: int, checkpointing: bool | str, bytes_per: int = 2,
                     targets: list[str] | str = "all-linear", lora_dropout: float = 0.0, every_n_layers: int = 1,
                     liger: bool = False, packed_mask: bool = False) -> int:
    """Activation memory of one micro-batch of ``batch`` rows of ``seq`` tokens (module docstring).

    ``checkpointing``: ``none``, ``every_layer``, ``selective`` (layers 0, n, 2n, … with n = ``every_n_layers``) or
    a bool (every layer / none); ``packed_mask``: the rows are one padding-free row under SDPA or eager attention,
    whose per-record mask (T² bytes as a boolean, a float bias of ``bytes_per`` bytes per entry inside SDPA) every
    layer that is not recomputed keeps."""
    mode = {True: "every_layer", False: "none"}.get(checkpointing, checkpointing)  # type: ignore[call-overload]
    h, layers = config.hidden_size, config.num_hidden_layers  # type: ignore[attr-defined]
    tokens = batch * seq
    kept = checkpointed_layers(layers, mode, every_n_layers)
    full = tokens * token_layer_bytes(config, targets, lora_dropout, bytes_per, liger=liger)
    if packed_mask:  # the boolean mask once, and a float copy per layer that keeps its activations
        full += tokens * tokens * bytes_per
    recomputed = full if kept else 0  # one checkpointed layer's activations while its backward runs
    mask = tokens * tokens if packed_mask else 0
    return kept * tokens * h * bytes_per + (layers - kept) * full + recomputed + lm_head_bytes(config, tokens) + mask


def load_architecture(model: str | Path) -> object:
    """A transformers config from a shipped name (``llama31_8b``), a folder or a config.json, a chat model role
    (``embedded``, ``embedded:<variant>``, ``real``) or a hub id whose config is in the local cache — never from the
    network.

    Raises:
        InputError: a name none of these resolve (one ``error:`` line on the command line).
    """
    from transformers import AutoConfig  # lazy here and below: seconds to import

    from veracity.data_prep.errors import InputError
    from veracity.models.registry import EMBEDDED, REAL, ROLES, resolve_model

    path = Path(model)
    shipped = SHIPPED / f"{model}.json"
    if shipped.exists():
        path = shipped
    if path.is_file():
        data = json.loads(path.read_text())
        data.pop("_comment", None)
        model_type = data.pop("model_type")
        return AutoConfig.for_model(model_type, **data)
    name = str(model)
    if path.is_dir() or name == EMBEDDED or name.startswith(f"{EMBEDDED}:"):
        return AutoConfig.from_pretrained(resolve_model("chat_lm", name) if not path.is_dir() else path)
    hub_id = ROLES["chat_lm"].real_scale if name == REAL else name
    try:
        return AutoConfig.from_pretrained(hub_id, local_files_only=True)
    except (OSError, ValueError):
        raise InputError(
            f"--dry_run: no local config for {name!r} (not a shipped architecture, folder, config.json or model "
            f"role, nor a hub id in the local cache; the dry run never downloads). Give --architecture one of "
            f"{sorted(p.stem for p in SHIPPED.glob('*.json'))}, a folder or a config.json") from None


def dry_run(architecture: str | Path, targets: list[str] | str, rank: int, alpha: int, batch: int, seq: int,
            checkpointing: bool | str, dtype_bytes: int = 2, lora_dropout: float = 0.0,
            weight_bytes: float | None = None, quantized_bytes: float | None = None, every_n_layers: int = 1,
            liger: bool = False, packed_mask: bool = False) -> MemoryEstimate:
    """Build on the meta device, attach LoRA, count, estimate. Raises if LoRA matches no module.

    ``dtype_bytes``: the adapters', their gradients' and the activations' (2 under bf16/fp16 training);
    ``weight_bytes``: the frozen weights' as loaded (default ``dtype_bytes``); ``quantized_bytes``: a quantized
    linear layer's weights per parameter (0.5 for 4-bit, 1 for 8-bit; ``lm_head`` stays at ``weight_bytes``);
    ``checkpointing``, ``every_n_layers``, ``liger``, ``packed_mask``: as :func:`activation_bytes` takes them."""
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
    frozen = total - trainable
    weights = frozen * (weight_bytes or dtype_bytes)
    if quantized_bytes is not None:  # bitsandbytes quantizes the base linear layers, lm_head aside
        linear = sum(m.weight.numel() for name, m in peft_model.named_modules()  # each adapter's base_layer too
                     if isinstance(m, torch.nn.Linear) and "lm_head" not in name and "lora_" not in name)
        weights -= linear * ((weight_bytes or dtype_bytes) - quantized_bytes)
    return MemoryEstimate(
        total_params=total,
        trainable_params=trainable,
        weights_gib=weights / GIB,
        adapters_gib=2 * trainable * dtype_bytes / GIB,
        optimizer_gib=12 * trainable / GIB,
        activations_gib=activation_bytes(config, batch, seq, checkpointing, dtype_bytes, targets, lora_dropout,
                                         every_n_layers, liger, packed_mask) / GIB,
    )


# bytes per parameter of the weights as the loader gets them (model_init_kwargs' dtype)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def loaded_weight_bytes(model_args: Any, config: Any) -> tuple[float, float | None, str]:
    """(bytes per frozen parameter, bytes per quantized linear parameter or None, a description) of the weights as
    the trainer's loader gets them: the recipe's and the command line's ``dtype`` (none: float32, as TRL loads a
    model by path; ``auto``: the architecture's own) and ``load_in_4bit`` / ``load_in_8bit``."""
    dtype = model_init_kwargs(model_args)["dtype"]
    if dtype == "auto":
        dtype = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32")
    dtype = dtype.removeprefix("torch.")
    if dtype not in DTYPE_BYTES:
        raise InputError(f"--dtype {dtype}: the dry run knows {sorted(DTYPE_BYTES)} and auto")
    if model_args.load_in_4bit:
        return DTYPE_BYTES[dtype], 0.5, f"{dtype}, linear layers 4-bit"
    if model_args.load_in_8bit:
        return DTYPE_BYTES[dtype], 1.0, f"{dtype}, linear layers 8-bit"
    return DTYPE_BYTES[dtype], None, dtype


def recipe_speed(script: Any, training_args: Any, model_args: Any) -> dict[str, Any]:
    """The speed fields of a recipe as the dry run counts them (train/speed.py); a run record written before they
    existed reads as the recipe it was: checkpointing from ``gradient_checkpointing``, padded rows, no Liger."""
    mode = checkpointing_mode(getattr(script, "checkpointing", None), bool(training_args.gradient_checkpointing))
    unpadded = bool(getattr(training_args, "padding_free", False) or getattr(training_args, "packing", False)
                    and getattr(training_args, "packing_strategy", "bfd") in ("bfd", "bfd_split"))
    attention = getattr(model_args, "attn_implementation", None) or "sdpa"
    return {"checkpointing": mode, "every_n_layers": getattr(script, "checkpoint_every", 2) if mode == "selective"
            else 1, "padding_free": unpadded, "liger": bool(getattr(training_args, "use_liger_kernel", False)),
            "packed_mask": unpadded and attention in ("sdpa", "eager")}


def estimate_memory(script: Any, training_args: Any, model_args: Any, half: bool, pairs: bool) -> tuple[Any, dict]:
    """The dry run's memory estimate for a recipe (``train/memory.py``) and what it assumed. ``pairs``: DPO runs a
    preference pair's chosen and rejected answers as two rows of one batch. Works on parsed configs and on a run
    record's plain values alike (``train/report.py`` estimates an interrupted run from its run_config.yaml)."""
    architecture = script.architecture or model_args.model_name_or_path or "embedded"
    weight_bytes, quantized, weights = loaded_weight_bytes(model_args, load_architecture(architecture))
    batch = training_args.per_device_train_batch_size * (2 if pairs else 1)
    speed = recipe_speed(script, training_args, model_args)
    estimate = dry_run(architecture, model_args.lora_target_modules or "all-linear", model_args.lora_r,
                       model_args.lora_alpha, batch, training_args.max_length or 1024, speed["checkpointing"],
                       dtype_bytes=2 if half else 4, lora_dropout=model_args.lora_dropout, weight_bytes=weight_bytes,
                       quantized_bytes=quantized, every_n_layers=speed["every_n_layers"], liger=speed["liger"],
                       packed_mask=speed["packed_mask"])
    assumed = {"architecture": str(architecture), "weights": weights, "lora_r": model_args.lora_r,
               "lora_target_modules": model_args.lora_target_modules, "batch_rows": batch,
               "max_length": training_args.max_length,
               "gradient_checkpointing": speed["checkpointing"] != "none",
               "precision": "half" if half else "full", **speed}
    return estimate, assumed


def activations_by_mode(architecture: str | Path, assumed: dict[str, Any], lora_dropout: float,
                        spacings: tuple[int, ...] = (2, 4, 8)) -> list[tuple[str, int, float]]:
    """(mode, layers recomputed, activation GiB) of the assumed batch under each checkpointing mode: none, selective
    at each spacing that recomputes a different number of layers, every layer — what sizes a selective recipe."""
    config = load_architecture(architecture)
    layers = config.num_hidden_layers  # type: ignore[attr-defined]
    modes = [("none", 1), *(("selective", n) for n in spacings if 1 < n < layers), ("every_layer", 1)]
    rows, seen = [], set()
    for mode, n in modes:
        kept = checkpointed_layers(layers, mode, n)
        if kept in seen:
            continue
        seen.add(kept)
        gib = activation_bytes(config, assumed["batch_rows"], assumed["max_length"] or 1024, mode,
                               2 if assumed["precision"] == "half" else 4, assumed["lora_target_modules"] or
                               "all-linear", lora_dropout, n, assumed["liger"], assumed["packed_mask"]) / GIB
        rows.append((mode if mode != "selective" else f"selective n={n}", kept, gib))
    return rows


def estimate_record(estimate: Any, assumed: dict[str, Any]) -> dict[str, Any]:
    """The estimate as ``training_summary.json`` keeps it: what it assumed, each part and the total in GiB."""
    return {**assumed, "total_params": estimate.total_params, "trainable_params": estimate.trainable_params,
            "weights_gib": estimate.weights_gib, "adapters_gib": estimate.adapters_gib,
            "optimizer_gib": estimate.optimizer_gib, "activations_gib": estimate.activations_gib,
            "total_gib": estimate.total_gib}
