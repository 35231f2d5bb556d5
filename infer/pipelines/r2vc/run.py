"""R2VC batch inference: retrieval-augmented, verified, calibrated fact-checking (docs/pipelines/r2vc.md).

Usage: veracity infer r2vc --config configs/pipelines/r2vc_embedded.yaml [--sources fever_symmetric vitaminc]
                           [--split dev] [--max_examples 50] [--output_dir runs/r2vc] [--shard 0/4]
       veracity infer r2vc --config configs/pipelines/r2vc_embedded.yaml --claims my_claims.jsonl
                           --index_dir runs/index/my_corpus --output_dir runs/r2vc_mine

Claims come from prepared sources (their own evidence, or hybrid retrieval for Climate-FEVER claims and FEVER
paper_dev) or from ``--claims`` (JSONL ``{id, claim[, evidence, label]}``; ``evidence`` a string, a list of
strings or of ``{text, title}``; claims without evidence retrieve from ``--index_dir``). Writes
``records.jsonl`` (one record per claim, resumable; ``records.shard-i-of-n.jsonl`` when sharded),
``summary.json`` (throughput and seconds per stage) and ``run_config.yaml``; unsharded runs end with
``veracity eval r2vc`` on the records (``metrics.json``, ``predictions.jsonl``, ``report.md``, plots). The run is
the driver's (``infer/pipelines/driver.py``); the pipeline is :class:`~veracity.infer.pipelines.r2vc.pipeline.R2VC`.

Bad input stops the run before anything is written, with exit status 2 and one line naming the file (and line): a
malformed claims row, a repeated or missing id, a claims file (or a prepared selection) without claims, a
calibrator file that is missing or unreadable, a generator or verifier path that is not there (each names the command
that makes it). ``max_examples`` keeps the first claims of each source in an order
seeded by ``subset_seed``; ``seed`` seeds sampling only. With ``abstention: risk_control`` the run record,
``metrics.json`` and ``report.md`` carry ``risk_control_guarantee``: the sources τ_cal was certified on, the ones
evaluated, and that the guarantee assumes the two are exchangeable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from veracity.config import parse_config
from veracity.infer.pipelines.driver import entry
from veracity.infer.pipelines.r2vc.items import check_model_paths
from veracity.infer.pipelines.r2vc.pipeline import R2VC

make_parser, run, _ = entry(R2VC, "--config configs/pipelines/r2vc_embedded.yaml")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``veracity infer r2vc``: a generator or verifier path that is not there stops the run before the driver makes
    its folder (one line naming the command that makes the model)."""
    *configs, executor = parse_config(make_parser(), argv)
    config, _, engine_config = configs
    check_model_paths(config, engine_config)
    return run(*configs, executor=executor)
