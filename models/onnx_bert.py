"""Turn a dynamically quantized (INT8) ONNX BERT cross-encoder into a float transformers folder.

The embedded reranker (ms-marco-MiniLM-L-12-v2) ships only as INT8 ONNX. Fine-tuning it (e.g. as the starting
point of our NLI verifier) needs float weights in a ``BertForSequenceClassification`` folder. Weights are
dequantized as ``(q − zero_point) · scale``; ONNX stores linear weights as ``[in, out]`` (MatMul), torch as
``[out, in]``. Which module a ``MatMulInteger`` weight belongs to is read from the node's output name.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from veracity.io import atomic_directory, is_completed

_MODULE = re.compile(r"^/(bert/encoder/layer\.\d+/[a-z_/]+?|bert/pooler/dense|classifier)/(?:MatMul|Gemm)")


def _dequantized(initializers: dict[str, np.ndarray], base: str) -> np.ndarray:
    q = initializers[f"{base}_quantized"].astype(np.float32)
    return (q - initializers[f"{base}_zero_point"].astype(np.float32)) * initializers[f"{base}_scale"]


def onnx_state_dict(onnx_path: Path) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Float state dict in transformers' BERT names, and the architecture read off the shapes."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    state: dict[str, np.ndarray] = {k: v for k, v in inits.items()
                                    if k.startswith(("bert.", "classifier.")) and not k.endswith(
                                        ("_quantized", "_scale", "_zero_point"))}
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        state[f"bert.embeddings.{name}.weight"] = _dequantized(inits, f"bert.embeddings.{name}.weight")
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            continue
        weight = node.input[1].removesuffix("_quantized")
        if f"{weight}_scale" not in inits:
            continue
        if weight.startswith(("bert.", "classifier.")) and weight.endswith(".weight"):  # named (pooler, head)
            state[weight] = _dequantized(inits, weight).T.copy()
            continue
        match = _MODULE.match(node.output[0])  # anonymous (onnx::MatMul_N): the module is in the output name
        if match:
            state[f"{match.group(1).replace('/', '.')}.weight"] = _dequantized(inits, weight).T.copy()
    layers = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"bert\.encoder\.layer\.(\d+)\.", k)))
    shape = {
        "vocab_size": state["bert.embeddings.word_embeddings.weight"].shape[0],
        "hidden_size": state["bert.embeddings.word_embeddings.weight"].shape[1],
        "max_position_embeddings": state["bert.embeddings.position_embeddings.weight"].shape[0],
        "type_vocab_size": state["bert.embeddings.token_type_embeddings.weight"].shape[0],
        "intermediate_size": state["bert.encoder.layer.0.intermediate.dense.weight"].shape[0],
        "num_hidden_layers": layers,
        "num_labels": state["classifier.weight"].shape[0],
    }
    return state, shape


def convert_onnx_cross_encoder(folder: Path, target: Path, num_attention_heads: int = 12) -> Path:
    """Write ``target`` (atomically, once) from an ONNX folder holding ``model.onnx`` and ``tokenizer.json``."""
    if is_completed(target):
        return target
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    state, shape = onnx_state_dict(folder / "model.onnx")
    config = BertConfig(num_attention_heads=num_attention_heads, **shape)
    model = BertForSequenceClassification(config)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()},
                                                  strict=False)  # copies: the ONNX arrays are read-only
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise RuntimeError(f"ONNX conversion mismatch: missing {missing}, unexpected {unexpected}")
    tokenizer = BertTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), do_lower_case=True)
    with atomic_directory(target, f"dequantized from {folder / 'model.onnx'}") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target
