"""Batch runner: kill -9 and resume, torn lines, shards, per-item error isolation; the generate job's outcomes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from veracity.infer.batch import in_shard, parse_shard, recover_output, run_batch

ITEMS = [{"id": f"item-{i:03d}", "x": i} for i in range(300)]


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_kill_9_mid_run_then_resume_gives_every_item_exactly_once(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    script = textwrap.dedent(f"""
        import time
        from veracity.infer.batch import run_batch
        items = [{{"id": f"item-{{i:03d}}", "x": i}} for i in range(300)]
        def slow(batch):
            time.sleep(0.02)
            return [{{"double": item["x"] * 2}} for item in batch]
        run_batch(items, slow, {str(output)!r}, batch_size=3, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 60
    while time.time() < deadline and (not output.exists() or len(output.read_bytes().splitlines()) < 40):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _ids(output)
    assert 40 <= len(before) < 300, "the kill must land mid-run"
    summary = run_batch(ITEMS, lambda batch: [{"double": it["x"] * 2} for it in batch], output, progress=False)
    ids = _ids(output)
    assert sorted(ids) == sorted(i["id"] for i in ITEMS) and len(ids) == len(set(ids)) == 300
    assert summary.already_done == len(before) and summary.processed == 300 - len(before)
    assert all(json.loads(line)["result"]["double"] % 2 == 0 for line in output.read_text().splitlines())


def test_a_torn_last_line_is_dropped_and_redone(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    run_batch(ITEMS[:5], lambda b: [{"ok": True} for _ in b], output, progress=False)
    with open(output, "ab") as handle:
        handle.write(b'{"id": "item-005", "status": "ok", "resu')  # what a crash mid-write leaves
    assert recover_output(output) == {f"item-{i:03d}" for i in range(5)}
    run_batch(ITEMS[:8], lambda b: [{"ok": True} for _ in b], output, progress=False)
    assert _ids(output) == [f"item-{i:03d}" for i in range(8)]


def test_foreign_output_file_is_refused(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    output.write_text('{"id": "a"}\nnot json\n')
    with pytest.raises(ValueError, match=r"out.jsonl:2: not a batch output record"):
        run_batch(ITEMS[:2], lambda b: b, output, progress=False)


def test_failing_item_becomes_an_error_record_and_the_batch_goes_on(tmp_path: Path) -> None:
    def process(batch):
        if any(item["x"] == 3 for item in batch):
            raise ValueError("cannot handle 3")
        return [{"x": item["x"]} for item in batch]

    summary = run_batch(ITEMS[:8], process, tmp_path / "o.jsonl", batch_size=4, progress=False)
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "o.jsonl").read_text().splitlines())}
    assert summary.ok == 7 and summary.errors == 1
    assert records["item-003"]["status"] == "error" and "cannot handle 3" in records["item-003"]["error"]
    assert records["item-002"]["result"] == {"x": 2}, "neighbours of a bad item still succeed"


def test_shards_partition_the_items() -> None:
    shards = [parse_shard(f"{i}/3") for i in range(3)]
    owners = [[s for s in shards if in_shard(item["id"], s)] for item in ITEMS]
    assert all(len(o) == 1 for o in owners)
    counts = [sum(1 for o in owners if o[0] == s) for s in shards]
    assert all(70 < c < 130 for c in counts)
    with pytest.raises(ValueError, match="i/n"):
        parse_shard("3")
    with pytest.raises(ValueError, match="0 <= i < n"):
        parse_shard("3/3")


def test_duplicate_or_missing_ids_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duplicate id 'a'"):
        run_batch([{"id": "a"}, {"id": "a"}], lambda b: b, tmp_path / "o.jsonl", progress=False)
    with pytest.raises(ValueError, match="item 1: missing id"):
        run_batch([{"x": 1}], lambda b: b, tmp_path / "o.jsonl", progress=False)


def test_generate_job_outcomes(tiny_lm_dir: Path, tmp_path: Path) -> None:
    from veracity.infer.generate import main

    items = [
        {"id": "ok", "claim": "The sky is blue."},
        {"id": "empty", "claim": "   "},
        {"id": "oversized", "claim": "y" * 1200},
        {"id": "chat", "messages": [{"role": "user", "content": "hi"}]},
    ]
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in items))
    args = ["--input", str(source), "--output_dir", str(tmp_path / "run"), "--template", "Claim: {claim}",
            "--model", str(tiny_lm_dir), "--max_new_tokens", "6", "--parse_json", "true", "--progress", "false",
            "--n", "2", "--temperature", "0.8"]
    summary = main(args)
    assert summary["ok"] == 2 and summary["errors"] == 2
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "run" / "predictions.jsonl").read_text().splitlines())}
    assert records["empty"]["status"] == "error" and "empty item" in records["empty"]["error"]
    assert records["oversized"]["status"] == "error" and "context_overflow" in records["oversized"]["error"]
    candidates = records["ok"]["result"]["candidates"]
    assert len(candidates) == 2
    # the tiny model writes no JSON: each candidate records the failure, never a guess or a neighbour's answer
    assert all(c["parsed"] is None and c["parse_error"] == "no_json_object" for c in candidates)
    assert (tmp_path / "run" / "run_config.yaml").exists() and (tmp_path / "run" / "summary.json").exists()
    again = main(args)  # resume: nothing left to do
    assert again["already_done"] == 4 and again["processed"] == 0
