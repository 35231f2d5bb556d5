"""UTS ablation on AVeriTeC-built Task-3 items: stub, +HostCite, +ShadowVal, +both, +selective emission, and the
M4 sub-metrics of the human reference articles themselves (the upper reference), one Markdown table.

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/uts_ablation.py [--max_examples 30] [--output_root runs/uts]
                                                                  [--judge llm|nli]

Every arm drafts the same first N items of ``averitec_task3_dev`` (the official AVeriTeC dev claims) and is scored
by ``veracity eval m4`` with the embedded judge (SmolLM2-135M through the engine layer, shared response cache)
and the embedded NLI verifier.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ARMS = [("stub", "uts_stub"), ("+HostCite", "uts_hostcite"), ("+ShadowVal", "uts_shadowval"),
        ("+both (HostCite + ShadowVal)", "uts_embedded"), ("+both + selective emission", "uts_selective")]
CACHE = "runs/cache/uts_judge_embedded.sqlite"


def main() -> None:
    from veracity.infer.eval.m4 import main as score
    from veracity.infer.pipelines.uts.run import main as draft
    from veracity.logs import setup_logging

    setup_logging()
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_examples", type=int, default=30)
    parser.add_argument("--output_root", default="runs/uts")
    parser.add_argument("--judge", choices=("llm", "nli"), default="llm",
                        help="llm: SmolLM2 answers yes/no; nli: the NLI verifier's P(entailment) >= 0.5 (a proxy)")
    args = parser.parse_args()
    judge = ["--judge", args.judge]
    rows = []
    for name, config in ARMS:
        out = Path(args.output_root) / config
        start = time.perf_counter()
        summary = draft(["--config", f"configs/pipelines/{config}.yaml", "--max_examples", str(args.max_examples),
                         "--output_dir", str(out), "--progress", "false", *judge])
        metrics = score(["--articles", str(out / "articles.jsonl"), "--items", str(out / "items.jsonl"),
                         "--output_dir", str(out / "m4"), "--cache", CACHE, *judge])
        details = json.loads((out / "m4" / "details.json").read_text())
        rows.append((name, metrics, details, summary["cite_outcomes"], time.perf_counter() - start))
    reference_out = Path(args.output_root) / "reference" / "m4"
    items = Path(args.output_root) / ARMS[0][1] / "items.jsonl"
    metrics = score(["--items", str(items), "--reference_as_article", "true", "--output_dir", str(reference_out),
                     "--cache", CACHE, *judge])
    rows.append(("human reference (upper reference)", metrics,
                 json.loads((reference_out / "details.json").read_text()), {}, 0.0))
    print(f"\n{args.max_examples} items of averitec_task3_dev; judge {rows[0][2]['judge']}\n")
    print("| arm | M4 | entailment | citation recall | citation precision | coverage | n | cites emitted | "
          "judge yes / asked (scoring) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, m, d, _outcomes, _ in rows:
        answers = d["judge_answers"]
        print(f"| {name} | {m['m4']:.3f} | {m['entailment']:.3f} | {m['citation_recall']:.3f} | "
              f"{m['citation_precision']:.3f} | {m['coverage']:.3f} | {m['n']} | {d['cite_sentences']} | "
              f"{answers['yes']} / {answers['asked']} |")
    print("\ncite outcomes per arm: " + "; ".join(f"{n}: {o}" for n, _, _, o, _ in rows[:-1]))


if __name__ == "__main__":
    main()
