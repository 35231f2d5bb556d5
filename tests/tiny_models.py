"""Tiny offline models built from nothing: a byte-level BPE tokenizer with a ChatML template and a 2-layer Llama."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] }}<|im_end|>{% endgeneration %}"
    "{% else %}{{ message['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<pad>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_llama(folder: Path, seed: int = 0, max_positions: int = 1024, **generation: object) -> Path:
    """Save a random tiny Llama (hidden 64, 2 layers) with the byte tokenizer; loadable by from_pretrained.
    ``generation``: extra ``generation_config`` fields (what some chat models ship, e.g. ``repetition_penalty``)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **generation,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_nli(folder: Path, tokenizer_dir: Path, id2label: dict[int, str], permutation: list[int] | None = None,
                   **config_keys: object) -> Path:
    """A tiny random BERT 3-way classifier (the tokenizer of ``tokenizer_dir``), saved like any verifier folder;
    ``permutation`` reorders the head's rows (the same network under another label order)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    tokenizer = BertTokenizerFast.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, num_labels=3, max_position_embeddings=128)
    model = BertForSequenceClassification(config)
    if permutation is not None:  # the same network with its output rows reordered
        with torch.no_grad():
            model.classifier.weight.copy_(model.classifier.weight[permutation])
            model.classifier.bias.copy_(model.classifier.bias[permutation])
    model.config.id2label = id2label
    model.config.label2id = {v: k for k, v in id2label.items()}
    for key, value in config_keys.items():
        setattr(model.config, key, value)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_llama_shape(folder: Path, architecture: str = "llama31_8b", seed: int = 0, **shrink: int) -> Path:
    """Random weights of a shipped architecture (``models/model_configs/<architecture>.json``), shrunk to a tiny
    size but keeping its type and every other field (RoPE scaling, GQA ratio, untied head), with the byte
    tokenizer; saved in float32 like a downloaded checkpoint folder."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from veracity.train.memory import load_architecture

    tokenizer = build_tokenizer()
    config = load_architecture(architecture)
    sizes = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 16384, **shrink}
    for key, value in {**sizes, "vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
                       "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                                               eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
