"""Convert a GGUF chat model (the embedded SmolLM2) into a plain transformers folder, once.

transformers loads GGUF by dequantizing it, but refuses ``save_pretrained`` on such a model; and serving or
re-loading the GGUF every time is slow. So we dequantize once: drop ``quantization_config``, rebuild the model
from its config, load the dequantized state dict, tie weights, save (docs/install.md#facts-the-code-relies-on).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from veracity.io import atomic_directory, is_completed

logger = logging.getLogger(__name__)


def convert_gguf(gguf_dir: Path, gguf_file: str, target: Path) -> Path:
    """Write a transformers folder for ``gguf_dir/gguf_file`` at ``target`` (atomically; skip if done)."""
    if is_completed(target):
        return target
    import torch  # lazy, as transformers: seconds to import, and a conversion runs once
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s/%s into %s (once)", gguf_dir, gguf_file, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    with _bar_follows_transformers():
        quantized = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = model.load_state_dict(quantized.state_dict(), strict=False)
    # Only a tied output head may be absent from the GGUF; anything else means a broken conversion.
    missing = set(result.missing_keys) - {"lm_head.weight"}
    if missing or result.unexpected_keys:
        raise RuntimeError(f"GGUF conversion mismatch: missing {sorted(missing)}, unexpected {result.unexpected_keys}")
    model.tie_weights()
    with atomic_directory(target, f"converted from {gguf_file}") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target


@contextlib.contextmanager
def _bar_follows_transformers() -> Iterator[None]:
    """transformers' GGUF loader draws a plain tqdm bar ("Converting and de-quantizing GGUF tensors") that ignores
    ``disable_progress_bar()``; for the conversion it draws transformers' own tqdm instead, which honours it (so the
    CLI's quiet default hides it and ``--verbose`` shows it)."""
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.utils import logging as hf_logging

    plain = gguf_loader.tqdm
    gguf_loader.tqdm = hf_logging.tqdm
    try:
        yield
    finally:
        gguf_loader.tqdm = plain
