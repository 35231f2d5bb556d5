"""Engine benchmark: batched transformers generation vs one request at a time, and the cache hit path.

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/engines.py [--model embedded] [--prompts 16] [--max_new_tokens 32]

Side by side in one run on the same prompts (claims from the shipped VitaminC sample, or built-in ones), greedy.
Tokens/s counts generated tokens (EOS included). Read the ratios; absolute numbers move with machine load.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from veracity.models.cache import CachedEngine, ResponseCache
from veracity.models.engine import GenerationRequest
from veracity.models.hf_engine import TransformersEngine

FALLBACK = ["Paris is the capital of France.", "The Moon is made of cheese.", "Water boils at 100 C at sea level."]


def claims(count: int) -> list[str]:
    path = Path("../shared/data/vitaminc/lifelong_icl_sample/test.shared.jsonl")
    rows = [json.loads(line)["claim"] for line in open(path)] if path.exists() else FALLBACK
    return [rows[i % len(rows)] for i in range(count)]


def requests(texts: list[str], max_new_tokens: int) -> list[GenerationRequest]:
    return [GenerationRequest.chat([{"role": "user", "content": f"Is this claim true or false? {t}"}],
                                   max_new_tokens=max_new_tokens) for t in texts]


def run(engine: TransformersEngine, reqs: list[GenerationRequest], one_by_one: bool) -> tuple[float, int]:
    start = time.perf_counter()
    results = [engine.generate([r])[0] for r in reqs] if one_by_one else engine.generate(reqs)
    seconds = time.perf_counter() - start
    return seconds, sum(c.num_tokens or 0 for r in results for c in r.candidates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    args = parser.parse_args()
    reqs = requests(claims(args.prompts), args.max_new_tokens)
    rows = []
    engine = TransformersEngine(args.model, batch_size=1)
    engine.generate(reqs[:1])  # warm-up
    t1, n1 = run(engine, reqs, one_by_one=True)
    rows.append(("one request at a time", t1, n1))
    for batch_size in (4, 8, 16):
        engine.batch_size = batch_size
        t, n = run(engine, reqs, one_by_one=False)
        rows.append((f"batched, batch_size={batch_size}", t, n))
    print(f"{len(reqs)} prompts, greedy, max_new_tokens={args.max_new_tokens}, model {engine.folder.name}")
    print(f"{'mode':28} {'seconds':>8} {'tokens':>7} {'tokens/s':>9} {'vs one-by-one':>14}")
    for name, t, n in rows:
        print(f"{name:28} {t:8.2f} {n:7d} {n / t:9.1f} {(n / t) / (n1 / t1):13.2f}x")
    with tempfile.TemporaryDirectory() as tmp:
        cached = CachedEngine(engine, ResponseCache(Path(tmp) / "cache.sqlite"))
        start = time.perf_counter()
        cached.generate(reqs)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        hits = cached.generate(reqs)
        warm = time.perf_counter() - start
    assert all(r.cached for r in hits)
    print(f"cache: cold {cold:.2f} s, hit {warm * 1e3:.1f} ms for {len(reqs)} requests -> {cold / warm:.0f}x faster")


if __name__ == "__main__":
    main()
