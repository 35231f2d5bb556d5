"""Merge a LoRA adapter into its base model and save a plain model folder any engine can load.

Usage: veracity train merge --base embedded --adapter runs/sft/adapter --output_dir runs/sft/merged
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.errors import InputError
from veracity.io import atomic_directory, is_completed
from veracity.made_by import made_by
from veracity.models.model_card import command_line, hub_id, write_model_card
from veracity.models.registry import resolve_model


@dataclass
class MergeArgs:
    adapter: str = field(metadata={"help": "PEFT adapter folder."})
    output_dir: str = field(metadata={"help": "Where the merged model goes."})
    base: str = field(default="embedded", metadata={"help": "Base chat model: 'embedded', 'real', path, hub id."})
    dtype: str = field(default="auto", metadata={
        "help": "Dtype the merge is done and saved in: auto (the base's saved dtype), float32, bfloat16, float16."})

    def __post_init__(self) -> None:
        if self.dtype not in MERGE_DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(MERGE_DTYPES)}, got {self.dtype!r}")


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


def main(argv: Sequence[str] | None = None) -> Path:
    (args,) = parse_config(make_parser(), argv)
    folder = merge_adapter(args.base, args.adapter, args.output_dir, args.dtype)
    print(f"merged model written to {folder}")
    return folder
