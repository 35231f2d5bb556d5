"""SciClaimSeekers batch inference: source retrieval for social-media posts, and its ablation table
(docs/pipelines/sciclaimseekers.md).

Usage: veracity infer sciclaim --config configs/pipelines/sciclaimseekers_embedded.yaml --posts posts.tsv
                               --collection collection.jsonl --output_dir runs/sciclaim [--reranker cross_encoder]
       veracity infer sciclaim --config configs/pipelines/sciclaimseekers_embedded.yaml --prepared_dir runs/prep
                               --task climate_fever --split dev --ablation true --output_dir runs/sciclaim/cf

Writes ``submission.tsv`` (``post_id<TAB>[uid1, …, uid5]``), ``records.jsonl`` (one batch record per post, its
``result``: both retrievers' heads, the RRF candidates with scores, every LLM answer and its parsed score or every
cross-encoder score, the final ranking; resumable, ``records.shard-i-of-n.jsonl`` with ``--shard i/n``),
``summary.json`` (seconds, pairs/s, unparsable answers), ``run_config.yaml`` and, unsharded, when the posts carry
gold ids, ``metrics.json`` (the CheckThat MRR@5, hit@1, hit@5 of ``veracity eval sciclaim``; a failed post scores
0). With ``--ablation true``: each post's record holds every configuration's top ids, one submission per
configuration under ``submissions/`` and ``metrics.json`` with ``rows: {configuration: {mrr@5, hit@1, hit@5}}``
(+ ``results.md``); see ``ablation.py``. The run is the driver's (``infer/pipelines/driver.py``); the pipeline is
:class:`~veracity.infer.pipelines.sciclaimseekers.pipeline.SciClaim`.
"""

from __future__ import annotations

from veracity.infer.pipelines.driver import entry
from veracity.infer.pipelines.sciclaimseekers.pipeline import SciClaim

make_parser, run, main = entry(SciClaim, "--config configs/pipelines/sciclaimseekers_embedded.yaml")
