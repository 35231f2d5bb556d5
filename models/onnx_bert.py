"""Turn a dynamically quantized (INT8) ONNX BERT into a float transformers or sentence-transformers folder.

The embedded reranker (ms-marco-MiniLM-L-12-v2) and the second embedded encoder (bge-small-en-v1.5) ship only as
INT8 ONNX. Fine-tuning the reranker (the starting point of our NLI verifier) needs float weights in a
``BertForSequenceClassification`` folder; the encoder is served through sentence-transformers like every other
embedder, so it becomes a ``BertModel`` + pooling + normalization folder. Weights are dequantized as
``(q − zero_point) · scale``; ONNX stores linear weights as ``[in, out]`` (MatMul), torch as ``[out, in]``. Which
module a ``MatMulInteger`` weight belongs to is read from the node's output name. A cross-encoder's weights are
named ``bert.*`` and ``classifier.*``; a bare encoder's have no prefix.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np

from veracity.io import atomic_directory, is_completed

_MODULE = re.compile(r"^/((?:bert/)?encoder/layer\.\d+/[a-z_/]+?|(?:bert/)?pooler/dense|classifier)/(?:MatMul|Gemm)")
_WEIGHT_PREFIXES = ("bert.", "classifier.", "embeddings.", "encoder.", "pooler.")


def _dequantized(initializers: dict[str, np.ndarray], base: str) -> np.ndarray:
    q = initializers[f"{base}_quantized"].astype(np.float32)
    return (q - initializers[f"{base}_zero_point"].astype(np.float32)) * initializers[f"{base}_scale"]


def onnx_state_dict(onnx_path: Path) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Float state dict in transformers' BERT names, and the architecture read off the shapes.

    A cross-encoder's names carry the ``bert.`` prefix and a ``classifier`` (``num_labels`` in the shape); a bare
    encoder's (``BertModel``) have neither.
    """
    import onnx  # lazy: 0.15 s, and a conversion runs once (the registry imports this module)
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    prefix = "bert." if "bert.embeddings.word_embeddings.weight_quantized" in inits else ""
    state: dict[str, np.ndarray] = {k: v for k, v in inits.items()
                                    if k.startswith(_WEIGHT_PREFIXES) and not k.endswith(
                                        ("_quantized", "_scale", "_zero_point"))}
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        state[f"{prefix}embeddings.{name}.weight"] = _dequantized(inits, f"{prefix}embeddings.{name}.weight")
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            continue
        weight = node.input[1].removesuffix("_quantized")
        if f"{weight}_scale" not in inits:
            continue
        if weight.startswith(_WEIGHT_PREFIXES) and weight.endswith(".weight"):  # named (pooler, head)
            state[weight] = _dequantized(inits, weight).T.copy()
            continue
        match = _MODULE.match(node.output[0])  # anonymous (onnx::MatMul_N): the module is in the output name
        if match:
            state[f"{match.group(1).replace('/', '.')}.weight"] = _dequantized(inits, weight).T.copy()
    layers = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"(?:bert\.)?encoder\.layer\.(\d+)\.", k)))
    embeddings = f"{prefix}embeddings"
    shape = {
        "vocab_size": state[f"{embeddings}.word_embeddings.weight"].shape[0],
        "hidden_size": state[f"{embeddings}.word_embeddings.weight"].shape[1],
        "max_position_embeddings": state[f"{embeddings}.position_embeddings.weight"].shape[0],
        "type_vocab_size": state[f"{embeddings}.token_type_embeddings.weight"].shape[0],
        "intermediate_size": state[f"{prefix}encoder.layer.0.intermediate.dense.weight"].shape[0],
        "num_hidden_layers": layers,
    }
    if "classifier.weight" in state:
        shape["num_labels"] = state["classifier.weight"].shape[0]
    return state, shape


def _load_float(model, state: dict[str, np.ndarray]):  # noqa: ANN001, ANN202 - a transformers BERT module
    import torch  # lazy: seconds to import, only a conversion (once) needs it

    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()},
                                                  strict=False)  # copies: the ONNX arrays are read-only
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise RuntimeError(f"ONNX conversion mismatch: missing {missing}, unexpected {unexpected}")
    return model


def convert_onnx_cross_encoder(folder: Path, target: Path, num_attention_heads: int = 12) -> Path:
    """Write ``target`` (atomically, once) from an ONNX folder holding ``model.onnx`` and ``tokenizer.json``."""
    if is_completed(target):
        return target
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast  # lazy: seconds, once

    state, shape = onnx_state_dict(folder / "model.onnx")
    model = _load_float(BertForSequenceClassification(BertConfig(num_attention_heads=num_attention_heads, **shape)),
                        state)
    tokenizer = BertTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), do_lower_case=True)
    with atomic_directory(target, f"dequantized from {folder / 'model.onnx'}") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target


def convert_onnx_sentence_encoder(folder: Path, target: Path, pooling: str = "cls", max_seq_length: int = 512,
                                  num_attention_heads: int = 12) -> Path:
    """Write a sentence-transformers folder (BERT → ``pooling`` → L2 normalization) from an ONNX encoder folder.

    Written atomically, once; ``pooling`` is the model's own (bge pools the [CLS] token, e5 the mean).
    """
    if is_completed(target):
        return target
    from sentence_transformers import SentenceTransformer  # lazy, as transformers: seconds, for a conversion (once)
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    state, shape = onnx_state_dict(folder / "model.onnx")
    if "num_labels" in shape:
        raise ValueError(f"{folder / 'model.onnx'} has a classification head: it is a cross-encoder, not an encoder")
    config = BertConfig(num_attention_heads=num_attention_heads, **shape)
    # The pooler is unused (sentence-transformers reads the token states) but BertModel.from_pretrained builds one:
    # zeros, so the folder loads without freshly initialized weights and converts to the same bytes every time.
    state["pooler.dense.weight"] = np.zeros((config.hidden_size, config.hidden_size), dtype=np.float32)
    state["pooler.dense.bias"] = np.zeros(config.hidden_size, dtype=np.float32)
    model = _load_float(BertModel(config), state)
    tokenizer = BertTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), do_lower_case=True)
    with tempfile.TemporaryDirectory() as bert, atomic_directory(target, f"dequantized from {folder}") as tmp:
        model.save_pretrained(bert)
        tokenizer.save_pretrained(bert)
        encoder = Transformer(bert, max_seq_length=max_seq_length)
        modules = [encoder, Pooling(encoder.get_embedding_dimension(), pooling_mode=pooling), Normalize()]
        SentenceTransformer(modules=modules, device="cpu").save(str(tmp))
    return target
