"""Verifier backbone benchmark: one full fine-tuning step of each embedded starting point as a 3-way classifier.

Usage: OMP_NUM_THREADS=2 .venv/bin/python bench/verifier_backbones.py [--batch 32] [--length 96] [--steps 3]

Side by side in one run on the same batch (Climate-FEVER train pairs from ``runs/prep`` when prepared, else built-in
pairs, padded to ``--length``): the ms-marco MiniLM-L12 cross-encoder the verifier starts from, the all-MiniLM-L6
embedder, and SmolLM2-135M (the only larger model that installs offline) with a fresh 3-way head, AdamW, fp32.
Prints the best step time and the ratio to the MiniLM-L12 step; absolute numbers move with machine load.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

FALLBACK = [("Arctic sea ice has declined in every decade since 1979.", "Arctic sea ice is shrinking."),
            ("Bees are insects.", "Global warming drives polar bears to extinction.")]


def pairs(count: int) -> list[tuple[str, str]]:
    path = Path("runs/prep/climate_fever_evidence.jsonl")
    rows = [json.loads(line) for line in open(path)] if path.exists() else []
    found = [(r["evidence_text"], r["claim"]) for r in rows if r["split"] == "train"] or FALLBACK
    return [found[i % len(found)] for i in range(count)]


def backbones() -> dict[str, Path]:
    from veracity.models.registry import resolve_model
    from veracity.train.nli import initial_model

    return {"ms-marco MiniLM-L12 (verifier start)": initial_model("reranker"),
            "all-MiniLM-L6 (embedder)": initial_model("embedder"),
            "SmolLM2-135M (chat LM)": resolve_model("chat_lm")}


def step_seconds(folder: Path, batch: list[tuple[str, str]], length: int, steps: int) -> tuple[float, float]:
    """(parameters in millions, best seconds per optimizer step after one warm-up step)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=3, ignore_mismatched_sizes=True)
    model.config.pad_token_id = tokenizer.pad_token_id
    inputs = tokenizer([p for p, _ in batch], [h for _, h in batch], padding="max_length", truncation=True,
                       max_length=length, return_tensors="pt")
    labels = torch.arange(len(batch)) % 3
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        model(**inputs, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return sum(p.numel() for p in model.parameters()) / 1e6, min(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=96)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    batch = pairs(args.batch)
    rows = [(name, *step_seconds(folder, batch, args.length, args.steps)) for name, folder in backbones().items()]
    base = rows[0][2]
    print(f"\nbatch {args.batch} × {args.length} tokens, best of {args.steps} steps\n")
    print("| backbone | parameters | s / step | pairs / s | × MiniLM-L12 step |")
    print("|---|---:|---:|---:|---:|")
    for name, params, seconds in rows:
        print(f"| {name} | {params:.1f} M | {seconds:.2f} | {args.batch / seconds:.1f} | {seconds / base:.2f} |")


if __name__ == "__main__":
    main()
