"""What a run's files say was done is what was done: each record keeps the decoding facts it was made under, and the
run record and the report summarise them across resume, the response cache and Ray actors; a server that is down
makes error records and a failing exit status, never "ok" abstentions; the API key reaches Ray actors without being
written anywhere; the tests' Ray is their own whatever else runs on the machine.

Each run goes through the command line (``veracity.cli.main``) against a scripted OpenAI-compatible server on
loopback (``openai_stub``) that refuses the constraint (as vLLM does a schema its grammar backend cannot compile) or
accepts it, and answers the UTS judge's question.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from openai_stub import Stub, openai_stub
from pipeline_inputs import CLAIMS, ITEMS, write_jsonl

from veracity import cli
from veracity.infer.batch import latest_records

REPO = Path(__file__).resolve().parents[1]


def uts_argv(items: Path, out: Path, url: str, *extra: str) -> list[str]:
    """UTS with ShadowVal's LLM judge served by ``url`` (vLLM-like: the yes/no choice sent as its structured
    output), one item per batch."""
    return ["infer", "uts", "--items", str(items), "--frame", "plain", "--shadowval", "true", "--max_tries", "1",
            "--engine", "openai", "--server", "vllm", "--model", "m", "--base_url", url, "--max_retries", "0",
            "--concurrency", "1", "--items_per_call", "1", "--output_dir", str(out), "--progress", "false", *extra]


class Judge(Stub):
    """A judge server that answers yes; while ``refusing``, a 400 to any request carrying a structured output (one
    server, one URL: a run's config and the cache key name it)."""

    def __init__(self, refusing: bool) -> None:
        super().__init__(answer=lambda body: "yes", refuse=lambda body: self.refusing and "structured_outputs" in body)
        self.refusing = refusing


def run_config(out: Path) -> dict[str, Any]:
    return yaml.safe_load((out / "run_config.yaml").read_text(encoding="utf-8"))


def constrained_by_id(out: Path) -> dict[str, Any]:
    return {r["id"]: r["result"]["decoding"]["constrained"] for r in latest_records(out / "records.jsonl")}


def test_a_resumed_run_keeps_what_its_earlier_records_were_made_under(tmp_path: Path) -> None:
    items, out = write_jsonl(tmp_path / "items.jsonl", ITEMS), tmp_path / "run"
    with openai_stub(Judge(refusing=True)) as stub:
        assert cli.main(uts_argv(items, out, stub.url, "--max_examples", "2")) == 0  # run 1: refused; two items
        first = run_config(out)
        assert first["decoding"]["constrained"] is False
        stub.refusing, seen = False, len(stub.seen)
        assert cli.main(uts_argv(items, out, stub.url)) == 0  # run 2, resumed: the choice enforced; the other two
        assert all("structured_outputs" in body for body in stub.seen[seen:])
    assert constrained_by_id(out) == {"i1": False, "i2": False, "i3": True, "i4": True}
    decoding = run_config(out)["decoding"]
    assert decoding["constrained"] == "mixed" and decoding["server"] == "vllm"
    assert decoding["mixed"] == [{"constrained": False, "records": 2}, {"constrained": True, "records": 2}]
    header = (out / "report.html").read_text(encoding="utf-8")
    assert "mixed decoding" in header and "2 constrained false" in header
    # the run began with run 1: its start and revision stay, the resume is listed
    second = run_config(out)
    assert second["started"] == first["started"] and second["git_revision"] == first["git_revision"]
    assert len(second["resumes"]) == 1 and set(second["resumes"][0]) == {"started", "git_revision"}


def test_a_replayed_answer_keeps_what_it_was_made_under(tmp_path: Path) -> None:
    items, cache = write_jsonl(tmp_path / "items.jsonl", ITEMS[:2]), tmp_path / "judge.sqlite"
    with openai_stub(Judge(refusing=True)) as stub:
        assert cli.main(uts_argv(items, tmp_path / "a", stub.url, "--cache", str(cache))) == 0  # run A: refused
        stub.refusing, seen = False, len(stub.seen)
        assert cli.main(uts_argv(items, tmp_path / "b", stub.url, "--cache", str(cache))) == 0  # run B
    # every question of run B that run A asked the same way is replayed with run A's facts; the one it asks anew
    # (bridge 2's cite: run A asked it with the free budget once refused, run B's engine starts hopeful) goes to the
    # server, which now enforces it — but i2's other cite (the same sentence as i1's) was replayed unconstrained
    assert len(stub.seen) == seen + 1 and "structured_outputs" in stub.seen[-1]
    assert constrained_by_id(tmp_path / "b") == {"i1": False, "i2": False}
    assert run_config(tmp_path / "b")["decoding"]["constrained"] is False
    assert "unconstrained decoding" in (tmp_path / "b" / "report.html").read_text(encoding="utf-8")


def test_a_cache_entry_that_does_not_say_how_it_was_made_is_asked_again(tmp_path: Path) -> None:
    from veracity.models.cache import CachedEngine, ResponseCache, request_key
    from veracity.models.engine import GenerationRequest
    from veracity.models.openai_engine import OpenAIEngine

    cache = ResponseCache(tmp_path / "c.sqlite")
    request = GenerationRequest.chat([{"role": "user", "content": "q"}], choice=("yes", "no"), max_new_tokens=2)
    with openai_stub(Judge(refusing=False)) as stub:
        engine = OpenAIEngine("m", base_url=stub.url, max_retries=0, server="vllm")
        old = {"candidates": [{"text": "no", "finish_reason": "stop", "token_logprobs": None, "num_tokens": 1}],
               "prompt_tokens": 3, "error": None}  # an entry kept before decoding facts were
        cache.put_many({request_key(engine, request): old})
        result = CachedEngine(engine, cache).generate([request])[0]
        assert len(stub.seen) == 1 and not result.cached and result.constrained is True
        again = CachedEngine(engine, cache).generate([request])[0]
        assert len(stub.seen) == 1 and again.cached and again.constrained is True


def test_ray_actors_records_say_the_constraint_went_unenforced(ray_cluster: Any, tmp_path: Path) -> None:
    items = write_jsonl(tmp_path / "items.jsonl", ITEMS[:2])
    with openai_stub(Judge(refusing=True)) as stub:
        for name, executor in (("local", []), ("ray", ["--executor", "ray"])):
            assert cli.main(uts_argv(items, tmp_path / name, stub.url, *executor)) == 0
    for name in ("local", "ray"):
        out = tmp_path / name
        assert constrained_by_id(out) == {"i1": False, "i2": False}, name
        assert run_config(out)["decoding"]["constrained"] is False, name
        assert "unconstrained decoding" in (out / "report.html").read_text(encoding="utf-8"), name
        assert {r["device"] for r in latest_records(out / "records.jsonl")} == {"cpu"}, name
        assert run_config(out)["device"] == "cpu", name


def r2vc_argv(claims: Path, out: Path, verifier: Path, url: str, *extra: str) -> list[str]:
    return ["infer", "r2vc", "--claims", str(claims), "--calibrator", "none", "--nli_model", str(verifier),
            "--engine", "openai", "--model", "m", "--base_url", url, "--max_retries", "0", "--n_candidates", "1",
            "--output_dir", str(out), "--progress", "false", *extra]


def test_a_server_that_is_down_makes_error_records_and_a_failing_exit_status(
        tmp_path: Path, tiny_verifier: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims, out = write_jsonl(tmp_path / "claims.jsonl", CLAIMS[:2]), tmp_path / "r2vc"
    dead = "http://127.0.0.1:9/v1"  # nothing listens there: the connection is refused
    assert cli.main(r2vc_argv(claims, out, tiny_verifier, dead)) == 1
    err = capsys.readouterr()
    assert "2 processed (0 ok, 2 errors)" in err.out and "error: 2 item(s) failed" in err.err
    records = latest_records(out / "records.jsonl")
    assert [r["status"] for r in records] == ["error", "error"]
    assert all("server_error" in r["error"] and "APIConnectionError" in r["error"] for r in records)
    assert [r["gold"] for r in records] == ["SUPPORTS", "SUPPORTS"], "kept: a failed claim is scored wrong"
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["errors"], summary["failed_items"]) == (2, 2)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_errors"] == 2 and metrics["outcomes"] == {"error": 2}, "failed, not abstained"
    assert cli.main(r2vc_argv(claims, out, tiny_verifier, dead)) == 1, "a resume that does not retry them: failed"


def test_claims_a_server_failed_on_are_run_again_on_request(tmp_path: Path, tiny_verifier: Path) -> None:
    claims, out = write_jsonl(tmp_path / "claims.jsonl", CLAIMS[:2]), tmp_path / "r2vc"
    down = [True]
    answer = '{"label": "SUPPORTS", "rationale": "r", "evidence_ids": [1]}'
    with openai_stub(Stub(answer=lambda body: answer, fail=lambda body: 503 if down[0] else None)) as stub:
        assert cli.main(r2vc_argv(claims, out, tiny_verifier, stub.url)) == 1  # 503: the server is overloaded
        assert [r["status"] for r in latest_records(out / "records.jsonl")] == ["error", "error"]
        down[0] = False
        assert cli.main(r2vc_argv(claims, out, tiny_verifier, stub.url, "--retry_errors", "true")) == 0
    assert [r["status"] for r in latest_records(out / "records.jsonl")] == ["ok", "ok"]
    assert json.loads((out / "summary.json").read_text())["retried"] == 2


def test_a_model_that_answers_unparsably_still_abstains(tmp_path: Path, tiny_verifier: Path) -> None:
    claims, out = write_jsonl(tmp_path / "claims.jsonl", CLAIMS[:1]), tmp_path / "r2vc"
    with openai_stub(Stub(answer=lambda body: "I cannot say.")) as stub:
        assert cli.main(r2vc_argv(claims, out, tiny_verifier, stub.url)) == 0
    (record,) = latest_records(out / "records.jsonl")
    assert record["status"] == "ok" and record["result"]["outcome"] == "no_parsable_candidate"
    assert record["result"]["abstained"] is True


# --- the API key on a `ray start` cluster -------------------------------------------------------------------------


def ray_start_head(system_temp: Path) -> tuple[subprocess.Popen, str]:
    """A Ray head started as a user does (`ray start --head`), in its own process group, with ``system_temp`` as the
    machine's temporary folder (Ray's is its ``ray`` folder, where the head's address file goes: what a process
    with ``RAY_TMPDIR=system_temp`` finds): the process and the head's address."""
    ray = Path(sys.executable).with_name("ray")
    head = subprocess.Popen([str(ray), "start", "--head", "--port", "0", "--num-cpus", "1", "--include-dashboard",
                             "false", "--temp-dir", str(system_temp / "ray"), "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address_file = system_temp / "ray" / "ray_current_cluster"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if address_file.is_file() and address_file.read_text().strip():
            return head, address_file.read_text().strip()
        time.sleep(0.2)
    stop(head)
    pytest.fail("ray start --head did not come up in 90 s")


def stop(head: subprocess.Popen, temp_dir: Path | None = None) -> None:
    """Stop every process of the head (its group: gcs, raylet, workers; `ray stop` would stop the tests' Ray too)
    and remove its temporary folder."""
    os.killpg(head.pid, signal.SIGTERM)
    head.wait(timeout=60)
    if temp_dir is not None:
        shutil.rmtree(temp_dir, ignore_errors=True)


# The tests' own Ray, in a fresh process: beside the live head (RAY_TMPDIR its machine temp folder, where `ray.init`
# looks for a cluster to join), then beside a stale address file (another temp folder, no head behind it).
STARTS_ITS_OWN = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from local_ray import start_local_ray
for temp in sys.argv[1:]:
    os.environ["RAY_TMPDIR"] = temp
    ray = start_local_ray()
    print(ray.get_runtime_context().gcs_address)
    ray.shutdown()
"""


@pytest.mark.slow
def test_a_ray_start_cluster_gets_the_key_and_the_tests_ray_stays_their_own(tmp_path: Path) -> None:
    """One head started as a user does: a pipeline's actors on it send the driver's OPENAI_API_KEY, which no file or
    output of the run holds; and the tests' own Ray joins neither that head nor a stale address file."""
    key = "sk-veracity-test-0123456789"
    items = write_jsonl(tmp_path / "items.jsonl", ITEMS[:2])
    temp_dir = Path("/tmp") / f"ray-key-{os.getpid()}"  # short: Ray's socket paths have a length limit
    stale = Path("/tmp") / f"ray-stale-{os.getpid()}"
    head, address = ray_start_head(temp_dir)
    try:
        with openai_stub(Judge(refusing=False)) as stub:
            # Ray 2.60's `ray start` turns token authentication on: a driver joins with RAY_AUTH_MODE=token
            env = {**os.environ, "OPENAI_API_KEY": key, "RAY_AUTH_MODE": "token"}
            done = subprocess.run([sys.executable, "-m", "veracity.cli", *uts_argv(
                items, tmp_path / "run", stub.url, "--executor", "ray", "--ray_address", address)],
                env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        (stale / "ray").mkdir(parents=True)
        (stale / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")  # a head killed long ago
        own = subprocess.run([sys.executable, "-c", STARTS_ITS_OWN, str(temp_dir), str(stale)],
                             capture_output=True, text=True, timeout=180)
    finally:
        stop(head, temp_dir)
        shutil.rmtree(stale, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert stub.headers and {h["authorization"] for h in stub.headers} == {f"Bearer {key}"}
    written = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert written and not [p for p in written if key in p.read_text(encoding="utf-8", errors="replace")]
    assert key not in done.stdout + done.stderr
    assert own.returncode == 0, own.stderr[-2000:]
    started = own.stdout.strip().splitlines()[-2:]
    assert len(started) == 2 and address not in started and "127.0.0.1:9" not in started
