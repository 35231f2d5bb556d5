"""UTS ablation on AVeriTeC-built Task-3 items: stub, +HostCite, +ShadowVal, +both, +selective emission, and the
M4 sub-metrics of the human reference articles themselves (the upper reference), one Markdown table.

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/uts_ablation.py [--max_examples 30] [--output_root runs/uts]
                                                                  [--judge llm|nli]

The recipe is ``configs/ablations/uts.yaml`` (``veracity infer ablate --config configs/ablations/uts.yaml`` runs it
as it stands); this front sets its three options. Every arm drafts the same first N items of ``averitec_task3_dev``
(the official AVeriTeC dev claims) through the pipeline driver (resumable) and is scored by ``veracity eval m4``
with the embedded judge (SmolLM2-135M through the engine layer, shared response cache) and the embedded NLI
verifier; the table goes to ``<output_root>/ablation.md``.
"""

from __future__ import annotations

import argparse

from veracity.config import load_config_values
from veracity.infer.pipelines.ablate import AblationConfig, run
from veracity.logs import setup_logging

RECIPE = "configs/ablations/uts.yaml"


def main() -> None:
    setup_logging()
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_examples", type=int, default=30)
    parser.add_argument("--output_root", default="runs/uts")
    parser.add_argument("--judge", choices=("llm", "nli"), default="llm",
                        help="llm: SmolLM2 answers yes/no; nli: the NLI verifier's P(entailment) >= 0.5 (a proxy)")
    args = parser.parse_args()
    values = load_config_values(RECIPE)
    values.update(max_examples=args.max_examples, output_dir=args.output_root,
                  overrides={**values.get("overrides", {}), "judge": args.judge})
    run(AblationConfig(**values))


if __name__ == "__main__":
    main()
