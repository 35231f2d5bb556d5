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
calibrator file that is missing or unreadable. ``max_examples`` keeps the first claims of each source in an order
seeded by ``subset_seed``; ``seed`` seeds sampling only. With ``abstention: risk_control`` the run record,
``metrics.json`` and ``report.md`` carry ``risk_control_guarantee``: the sources τ_cal was certified on, the ones
evaluated, and that the guarantee assumes the two are exchangeable.
"""

from __future__ import annotations

from veracity.infer.pipelines.driver import entry
from veracity.infer.pipelines.r2vc.pipeline import R2VC

make_parser, run, main = entry(R2VC, "--config configs/pipelines/r2vc_embedded.yaml")
