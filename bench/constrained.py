"""Constrained vs free decoding with the transformers engine, side by side on the same prompts.

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/constrained.py [--model embedded] [--claims 4] [--n 3]
           [--aic_records runs/aic/embedded_dev8/records.jsonl]

Prompts are R2VC's (claim + numbered passages, n sampled candidates; VitaminC claims of the shipped sample) and, with
``--aic_records``, AIC's (claim + the 10 sources an ``infer aic`` run retrieved for it, one greedy answer, the
embedded recipe's bounds), built by each pipeline's own prompt code. Each row: answers that parse, seconds per claim,
generated tokens per second, and the grammar's share of generation time (its mask work, timed inside the logits
processor). Read the ratios; absolute numbers move with machine load. The first constrained call compiles the
grammar (seconds for a bounded schema): it is timed apart and left out of the rows.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from veracity.infer.batch import latest_records
from veracity.infer.pipelines.aic import prompt as aic
from veracity.infer.pipelines.r2vc.prompt import RATIONALE_MAX_CHARS, answer_schema, parse_r2vc_answer, prompt_messages
from veracity.infer.structured import schema_text, token_budget
from veracity.models import decoding
from veracity.models.engine import GenerationRequest
from veracity.models.hf_engine import TransformersEngine

VITAMINC = Path("../shared/data/vitaminc/lifelong_icl_sample/test.shared.jsonl")


def r2vc_items(count: int) -> list[tuple[str, list[str]]]:
    rows = [json.loads(line) for line in VITAMINC.open()][: count * 3]
    evidence = [r["evidence"] for r in rows]
    return [(rows[i]["claim"], [evidence[i], evidence[(i + 1) % len(evidence)]]) for i in range(count)]


class GrammarTimer:
    """Wraps GrammarMask.__call__ to add up the seconds spent masking."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.original = decoding.GrammarMask.__call__
        timer = self

        def timed(mask, input_ids, scores):  # noqa: ANN001, ANN202
            start = time.perf_counter()
            out = timer.original(mask, input_ids, scores)
            timer.seconds += time.perf_counter() - start
            return out

        decoding.GrammarMask.__call__ = timed


def run(engine: TransformersEngine, requests: list[GenerationRequest], parse) -> dict[str, float]:  # noqa: ANN001
    start = time.perf_counter()
    results = engine.generate(requests)
    seconds = time.perf_counter() - start
    candidates = [c for r in results for c in r.candidates]
    return {"parsed": sum(parse(c.text) for c in candidates), "answers": len(candidates), "seconds": seconds,
            "tokens": sum(c.num_tokens or 0 for c in candidates)}


def table(engine: TransformersEngine, timer: GrammarTimer, name: str, claims: int,
          requests: dict[bool, list[GenerationRequest]], parser) -> None:  # noqa: ANN001
    """Print the free and the constrained row of one prompt; ``parser()`` gives a fresh ``text -> parses?``."""
    for constrained in (False, True):
        timer.seconds = 0.0
        row = run(engine, requests[constrained], parser())
        share = f"{timer.seconds / row['seconds']:.1%}" if constrained else "—"
        print(f"| {name} | {'constrained' if constrained else 'free'} | {row['parsed']} of {row['answers']} | "
              f"{row['seconds'] / claims:.1f} | {row['tokens'] / row['seconds']:.1f} | {share} |")


def aic_requests(path: str, count: int) -> tuple[dict[bool, list[GenerationRequest]], dict[str, int]]:
    """Greedy AIC requests over the sources an ``infer aic`` run retrieved, free (256 new tokens, the embedded
    recipe's unconstrained budget) and constrained (its schema: 3 questions of <= 120 characters, answers <= 180)."""
    records = [r["result"] for r in latest_records(path) if r["status"] == "ok"][:count]
    sources = {r["id"]: len(r["sources"]) for r in records}
    requests: dict[bool, list[GenerationRequest]] = {False: [], True: []}
    for r in records:
        messages = aic.prompt_messages(r["claim"], r["sources"], context_chars=400)
        schema = aic.answer_schema(len(r["sources"]), 3, 120, 180)
        requests[False].append(GenerationRequest.chat(messages, max_new_tokens=256))
        requests[True].append(GenerationRequest.chat(messages, json_schema=schema_text(schema),
                                                     max_new_tokens=aic.answer_budget(len(r["sources"]), 3, 120, 180)))
    return requests, sources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--claims", type=int, default=4)
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--rationale_max_chars", type=int, default=RATIONALE_MAX_CHARS)
    parser.add_argument("--free_max_new_tokens", type=int, default=160,
                        help="Budget of the free rows (R2VC's unconstrained default); constrained rows get the "
                             "schema's budget, which a constrained answer never needs in full.")
    parser.add_argument("--aic_records", default=None, help="records.jsonl of an `infer aic` run: adds AIC rows.")
    args = parser.parse_args()
    engine = TransformersEngine(args.model, batch_size=4)
    timer = GrammarTimer()
    items = r2vc_items(args.claims)
    schema = answer_schema(2, args.rationale_max_chars)
    start = time.perf_counter()
    engine.grammars.compiled("json_schema", schema_text(schema))
    compile_seconds = time.perf_counter() - start
    budget = token_budget(schema)
    r2vc = {constrained: [GenerationRequest.chat(
        prompt_messages(claim, passages), n=args.n, temperature=0.7, seed=13,
        **({"json_schema": schema_text(schema), "max_new_tokens": budget} if constrained
           else {"max_new_tokens": args.free_max_new_tokens})) for claim, passages in items]
        for constrained in (False, True)}

    print(f"model {engine.model_id}; R2VC: {args.claims} VitaminC claims x {args.n} candidates (schema: rationale <= "
          f"{args.rationale_max_chars} chars, budget {budget} tokens, compiled in {compile_seconds:.2f} s)")
    print("| prompt | decoding | parsed | s/claim | tokens/s | grammar share of time |")
    print("|---|---|---:|---:|---:|---:|")
    table(engine, timer, "R2VC", args.claims, r2vc,
          lambda: lambda text: parse_r2vc_answer(text, num_passages=2)[0] is not None)
    if args.aic_records:
        requests, sources = aic_requests(args.aic_records, args.claims)
        for request in requests[True]:  # compiled before timing (each source count is a schema of its own)
            engine.grammars.compiled(*request.params.constraint)

        def aic_parser():  # noqa: ANN202 - answers come one per request, in order: each with its source count
            counts = iter(sources.values())
            return lambda text: aic.parse_aic_answer(text, next(counts), 3)[0] is not None

        table(engine, timer, "AIC", len(sources), requests, aic_parser)

if __name__ == "__main__":
    main()
