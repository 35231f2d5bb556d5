"""vLLM replicas as Ray actors (``--engine vllm --executor ray --workers 2``, issue 48): R2VC on shipped VitaminC dev
claims, seeded sampling, gives the records of one in-process replica (``-m server``: .venv-vllm, with Ray).

Each actor builds the pipeline once (its own vLLM engine, the embedded SmolLM2 in float32, the engine core in the
actor's process: ``VLLM_*`` settings reach the actors with the run's other settings). The driver names the generator
but does not load it. Sampling is seeded per request (``--seed``), so which replica answers a claim, and beside which
others, does not change its answer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from vllm_real import LLM_KWARGS, need_vllm, prepare_vitaminc, set_env, shipped

pytestmark = pytest.mark.server
need_vllm()

CLAIMS = 8
# the same engine and kernels on both sides: answers equal; their mean log-probs equal up to batch-order sums
LOGPROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, ray_cluster: Any) -> dict[str, Any]:
    from veracity import cli

    set_env()
    prepared = prepare_vitaminc(tmp_path_factory.mktemp("prep"))
    verifier = shipped("models", "VERACITY_MODELS_ROOT") / "nli-verifier-minilm"
    if not verifier.is_dir():
        pytest.skip(f"no trained embedded verifier at {verifier}")
    common = ["--prepared_dir", str(prepared), "--sources", "vitaminc", "--split", "dev", "--max_examples",
              str(CLAIMS), "--temperature", "0.7", "--seed", "13", "--n_candidates", "2", "--claims_per_call", "2",
              "--nli_model", str(verifier), "--nli_backend", "torch", "--engine", "vllm", "--model", "embedded",
              "--dtype", "float32", "--vllm_args", json.dumps(LLM_KWARGS), "--progress", "false"]
    out: dict[str, Any] = {}
    for name, executor in (("one", []), ("replicas", ["--executor", "ray", "--workers", "2"])):
        folder = tmp_path_factory.mktemp(name)
        cli.main(["infer", "r2vc", "--output_dir", str(folder), *common, *executor])
        summary = json.loads((folder / "summary.json").read_text())
        lines = (folder / "records.jsonl").read_text().splitlines()
        out[name] = {"summary": summary, "records": {r["id"]: r for r in map(json.loads, lines)}}
    return out


def test_two_vllm_replicas_on_ray_write_one_replicas_records(runs: dict[str, Any]) -> None:
    one, replicas = runs["one"]["records"], runs["replicas"]["records"]
    assert sorted(one) == sorted(replicas) and len(one) == CLAIMS
    assert all(r["status"] == "ok" for r in [*one.values(), *replicas.values()])
    gaps = []
    for claim, record in one.items():
        ours, theirs = record["result"], replicas[claim]["result"]
        assert ours["prediction"] == theirs["prediction"], claim
        assert [c["text"] for c in ours["candidates"]] == [c["text"] for c in theirs["candidates"]], claim
        gaps += [abs(a["mean_logprob"] - b["mean_logprob"])
                 for a, b in zip(ours["candidates"], theirs["candidates"], strict=True)]
    assert max(gaps) <= LOGPROB_TOLERANCE, max(gaps)
    workers = runs["replicas"]["summary"].get("stats_per_worker", {})
    assert len(workers) == 2, f"both replicas ran batches: {sorted(workers)}"
