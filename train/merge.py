"""Merge a LoRA adapter into its base model and save a plain model folder any engine can load.

Usage: veracity train merge --base embedded --adapter runs/sft/adapter --output_dir runs/sft/merged
       veracity train merge --run_dir runs/sft --checkpoint best --output_dir runs/sft/merged_best

``--run_dir`` takes the adapter from a training run folder: its final ``adapter``, a ``--checkpoint checkpoint-N``,
or ``--checkpoint best``, the one ``veracity eval checkpoints RUN_DIR`` chose (``checkpoints/best.json``); the base
is then the run's own unless ``--base`` says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.errors import InputError
from veracity.io import atomic_directory, is_completed
from veracity.made_by import made_by
from veracity.models.model_card import command_line, hub_id, write_model_card
from veracity.models.registry import resolve_model
from veracity.rundir import checkpoint_dirs


@dataclass
class MergeArgs:
    output_dir: str = field(metadata={"help": "Where the merged model goes."})
    adapter: str | None = field(default=None, metadata={"help": "PEFT adapter folder (or --run_dir)."})
    run_dir: str | None = field(default=None, metadata={
        "help": "A train sft/dpo run folder: its final adapter, or the one --checkpoint names."})
    checkpoint: str | None = field(default=None, metadata={
        "help": "With --run_dir: best (what `veracity eval checkpoints RUN_DIR` chose) or a checkpoint-N folder."})
    base: str | None = field(default=None, metadata={
        "help": "Base chat model: 'embedded', 'real', path, hub id (default: the run's, with --run_dir; else "
                "embedded)."})
    dtype: str = field(default="auto", metadata={
        "help": "Dtype the merge is done and saved in: auto (the base's saved dtype), float32, bfloat16, float16."})

    def __post_init__(self) -> None:
        if self.dtype not in MERGE_DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(MERGE_DTYPES)}, got {self.dtype!r}")
        if (self.adapter is None) == (self.run_dir is None):
            raise ValueError("give --adapter FOLDER, or --run_dir RUN_DIR (with --checkpoint best or checkpoint-N)")
        if self.checkpoint and not self.run_dir:
            raise ValueError("--checkpoint names a checkpoint of a --run_dir")


MERGE_DTYPES = ("auto", "float32", "bfloat16", "float16")


def merge_adapter(base: str, adapter: str | Path, output_dir: str | Path, dtype: str = "auto") -> Path:
    """Write ``output_dir`` (atomically, with a COMPLETED marker); an existing complete merge is reused.

    ``dtype`` is the dtype the base is loaded, merged and saved in (``auto``: the base's saved dtype): DPO passes
    its recipe's, so an 8B bf16 recipe merges and trains in bf16 rather than writing a 30 GiB float32 copy."""
    out = Path(output_dir)
    if is_completed(out):
        return out
    if not Path(adapter).exists():  # checked before seconds of imports and loading
        made = made_by(adapter) or ("`veracity train sft --config RECIPE` (or `train dpo`) makes one, as the recipe's "
                                    "output_dir/adapter (docs/training.md#sft-and-dpo)")
        raise InputError(f"--adapter {adapter}: no such folder; {made}")
    if not (Path(adapter) / "adapter_config.json").is_file():
        raise InputError(f"{adapter}: not a LoRA adapter folder (no adapter_config.json)")
    import torch  # lazy, as peft and transformers: seconds to import; `train dpo` imports this module
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir = resolve_model("chat_lm", base)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype if dtype == "auto" else getattr(torch, dtype))
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    tokenizer_source = adapter if (Path(adapter) / "tokenizer_config.json").exists() else base_dir
    with atomic_directory(out, f"base {base_dir} + adapter {adapter}") as tmp:
        merged.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(tmp)
        write_merged_card(tmp, base, base_dir, Path(adapter))
    return out


def write_merged_card(folder: Path, base: str, base_dir: Path, adapter: Path) -> Path:
    """The merged model's card: the base (hub id) and the adapter's own card (data, command, metrics) below."""
    adapter_card = adapter / "README.md"
    appendix = ""
    if adapter_card.is_file():  # the adapter's data, command and metrics, one heading level down
        body = adapter_card.read_text(encoding="utf-8").split("---", 2)[-1].strip()
        appendix = "## The adapter's card\n\n" + "\n".join("#" + line if line.startswith("#") else line
                                                           for line in body.splitlines())
    return write_model_card(folder, title="veracity merged model (base + LoRA adapter)", kind="transformers",
                            base_model=hub_id(base, base_dir), base_dir=base_dir,
                            command=command_line(None, "train merge"), data={"adapter": str(adapter)},
                            notes=[f"merged from the LoRA adapter {adapter} into its base (merge_and_unload)"],
                            appendix=appendix)


def make_parser() -> Any:
    return parser_for((MergeArgs,), "veracity train merge")


def run_adapter(run_dir: Path, checkpoint: str | None) -> tuple[Path, str | None]:
    """(adapter folder, the run's base model or None) of a training run folder: its final adapter, a named
    ``checkpoint-N``, or the best one ``veracity eval checkpoints`` chose.

    Raises:
        InputError: no such run, checkpoint or choice.
    """
    if not (run_dir / "run_config.yaml").is_file():
        raise InputError(f"--run_dir {run_dir}: not a training run folder (no run_config.yaml)")
    if checkpoint == "best":
        chosen = run_dir / "checkpoints" / "best.json"
        if not chosen.is_file():
            raise InputError(f"{chosen}: no best checkpoint chosen yet; `veracity eval checkpoints {run_dir}` "
                             "scores them and chooses")
        best = json.loads(chosen.read_text(encoding="utf-8"))
        return Path(best["path"]), best.get("base")
    adapter = run_dir / (checkpoint or "adapter")
    if not adapter.is_dir():
        kept = [p.name for p in checkpoint_dirs(run_dir)]
        raise InputError(f"{adapter}: no such folder in the run (its checkpoints: {', '.join(kept) or 'none'})")
    from veracity.infer.checkpoint_sweep import base_model  # lazy: the sweep's one rule for a run's base

    return adapter, base_model(run_dir, yaml.safe_load((run_dir / "run_config.yaml").read_text()) or {})


def main(argv: Sequence[str] | None = None) -> Path:
    (args,) = parse_config(make_parser(), argv)
    adapter, base = (Path(args.adapter), None) if args.adapter else run_adapter(Path(args.run_dir), args.checkpoint)
    folder = merge_adapter(args.base or base or "embedded", adapter, args.output_dir, args.dtype)
    print(f"merged model written to {folder} (adapter {adapter})")
    return folder
