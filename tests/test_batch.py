"""Batch runner: kill -9 and resume, torn lines, shards, per-item error isolation, one writer per output,
--retry_errors; the generate job's outcomes and its errors through the command."""

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
import yaml

from veracity.infer.batch import in_shard, parse_shard, record_line, recover_output, run_batch

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
    # the tiny model writes no JSON in 6 tokens: each candidate records the failure (a cut-off, named as one), never
    # a guess or a neighbour's answer
    assert all(c["parsed"] is None and c["parse_error"] == "length: no_json_object" for c in candidates)
    assert (tmp_path / "run" / "run_config.yaml").exists() and (tmp_path / "run" / "summary.json").exists()
    again = main(args)  # resume: nothing left to do
    assert again["already_done"] == 4 and again["processed"] == 0
    # one folder, one run: another shard layout is refused before the model loads, and nothing there changes
    from veracity.rundir import RunConfigMismatchError

    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    with pytest.raises(RunConfigMismatchError, match="predictions.jsonl is there of another shard layout"):
        main([*args, "--shard", "0/2"])
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before


# --- one writer per output, and --retry_errors ------------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_file_and_the_holders_pid(tmp_path: Path) -> None:
    from veracity.infer.batch import OutputLockedError

    output = tmp_path / "out.jsonl"
    script = textwrap.dedent(f"""
        import time
        from veracity.infer.batch import run_batch
        items = [{{"id": f"item-{{i:03d}}", "x": i}} for i in range(300)]
        def slow(batch):
            time.sleep(0.05)
            return [{{"x": item["x"]}} for item in batch]
        run_batch(items, slow, {str(output)!r}, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 60
        while time.time() < deadline and (not output.exists() or not output.read_bytes()):
            time.sleep(0.05)
        with pytest.raises(OutputLockedError) as info:
            run_batch(ITEMS, lambda b: [{"x": it["x"]} for it in b], output, progress=False)
        assert str(output) in str(info.value) and f"pid {proc.pid}" in str(info.value)
        assert proc.poll() is None, "the first run goes on"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    ids = _ids(output)
    assert len(ids) == len(set(ids)), "the refused run wrote nothing"
    run_batch(ITEMS, lambda b: [{"x": it["x"]} for it in b], output, progress=False)  # a killed holder frees it
    assert sorted(_ids(output)) == sorted(i["id"] for i in ITEMS)
    assert not (tmp_path / "out.jsonl.lock").exists()


def test_the_lock_also_refuses_a_thread_and_is_released_after_the_run(tmp_path: Path) -> None:
    import threading

    from veracity.infer.batch import OutputLockedError, output_lock

    output = tmp_path / "o.jsonl"
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with output_lock(output):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    try:
        with pytest.raises(OutputLockedError, match=rf"o.jsonl is being written by another run \(pid {os.getpid()}"):
            run_batch(ITEMS[:3], lambda b: b, output, progress=False)
    finally:
        release.set()
        thread.join()
    assert run_batch(ITEMS[:3], lambda b: [{} for _ in b], output, progress=False).ok == 3


def test_retry_errors_reruns_exactly_the_failed_ids_and_the_last_record_wins(tmp_path: Path) -> None:
    from veracity.infer.batch import latest_records

    output = tmp_path / "o.jsonl"
    calls: list[str] = []

    def flaky(batch):
        calls.extend(item["id"] for item in batch)
        return [ValueError("boom") if item["x"] % 3 == 0 else {"x": item["x"]} for item in batch]

    first = run_batch(ITEMS[:10], flaky, output, batch_size=4, progress=False)
    failed = [f"item-{i:03d}" for i in (0, 3, 6, 9)]
    assert first.errors == 4
    again = run_batch(ITEMS[:10], flaky, output, progress=False)  # a plain resume leaves the errors alone
    assert again.processed == 0 and again.already_done == 10
    calls.clear()

    def fixed(batch):
        calls.extend(item["id"] for item in batch)
        return [{"x": item["x"]} for item in batch]

    retried = run_batch(ITEMS[:10], fixed, output, retry_errors=True, progress=False)
    assert calls == failed, "exactly the failed ids, nothing else"
    assert retried.retried == 4 and retried.already_done == 6 and retried.ok == 4
    assert _ids(output) == [f"item-{i:03d}" for i in range(10)] + failed, "append-only: new records at the end"
    latest = latest_records(output)
    assert [r["id"] for r in latest] == [f"item-{i:03d}" for i in range(10)]
    assert all(r["status"] == "ok" for r in latest)
    assert recover_output(output) == {f"item-{i:03d}" for i in range(10)}
    assert run_batch(ITEMS[:10], flaky, output, retry_errors=True, progress=False).processed == 0


def _generate_args(source: Path, out: Path, model: Path) -> list[str]:
    return ["infer", "generate", "--input", str(source), "--output_dir", str(out), "--template", "Claim: {claim}",
            "--model", str(model), "--max_new_tokens", "4", "--progress", "false"]


def test_generate_retry_errors_and_a_locked_output_through_the_command(tiny_lm_dir: Path, tmp_path: Path,
                                                                       capsys) -> None:
    from veracity import cli
    from veracity.infer.batch import latest_records, output_lock

    source, out = tmp_path / "items.jsonl", tmp_path / "run"
    source.write_text(json.dumps({"id": "a", "claim": "The sky is blue."}) + "\n"
                      + json.dumps({"id": "b", "claim": " "}) + "\n")
    assert cli.main(_generate_args(source, out, tiny_lm_dir)) == 1  # an item failed: the exit status says so
    assert "1 item(s) failed" in capsys.readouterr().err
    assert [r["status"] for r in latest_records(out / "predictions.jsonl")] == ["ok", "error"]
    assert cli.main(_generate_args(source, out, tiny_lm_dir)) == 1  # a resume that does not retry it: still failed
    source.write_text(json.dumps({"id": "a", "claim": "The sky is blue."}) + "\n"
                      + json.dumps({"id": "b", "claim": "Grass is green."}) + "\n")  # the user fixed item b
    assert cli.main(_generate_args(source, out, tiny_lm_dir) + ["--retry_errors", "true"]) == 0
    assert _ids(out / "predictions.jsonl") == ["a", "b", "b"]
    assert [r["status"] for r in latest_records(out / "predictions.jsonl")] == ["ok", "ok"]
    record = (out / "run_config.yaml").read_bytes()
    capsys.readouterr()
    with output_lock(out / "predictions.jsonl"), pytest.raises(SystemExit) as info:
        cli.main(_generate_args(source, out, tiny_lm_dir))
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "predictions.jsonl is being written by another run" in err
    assert len(err.splitlines()) == 1 and (out / "run_config.yaml").read_bytes() == record


def test_generate_on_a_torn_input_line_exits_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    from veracity import cli

    source = tmp_path / "items.jsonl"
    source.write_text(json.dumps({"id": "a", "claim": "x"}) + "\n" + '{"id": "b", "claim": "tor')
    with pytest.raises(SystemExit) as info:
        cli.main(_generate_args(source, tmp_path / "run", Path("unused")))
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {source}:2: malformed JSON") and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_generate_json_schema_reports_parse_failures_and_a_bad_schema_exits_2(tiny_lm_dir: Path, tmp_path: Path,
                                                                               capsys) -> None:
    from veracity import cli
    from veracity.infer.generate import main

    source, out = tmp_path / "items.jsonl", tmp_path / "run"
    source.write_text(json.dumps({"id": "a", "claim": "The sky is blue."}) + "\n")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"label": {"enum": ["SUPPORTS", "REFUTES"]}},
                                  "required": ["label"], "additionalProperties": False}))
    summary = main(_generate_args(source, out, tiny_lm_dir)[2:] + ["--json_schema", str(schema), "--n", "2",
                                                                 "--temperature", "0.7", "--max_new_tokens", "24"])
    # decoding is constrained to the schema: even the random tiny model answers with it
    assert summary["parsing"] == {"candidates": 2, "failures": 0, "rate": 0.0, "reasons": {}}
    record = json.loads((out / "predictions.jsonl").read_text())
    assert all(c["parsed"]["label"] in ("SUPPORTS", "REFUTES") for c in record["result"]["candidates"])
    decoding = yaml.safe_load((out / "run_config.yaml").read_text())["decoding"]
    assert decoding["constrained"] is True
    # a budget too small for the answer: the cut-off is a failure, named as one
    cut = main(_generate_args(source, tmp_path / "cut", tiny_lm_dir)[2:] + ["--json_schema", str(schema),
                                                                          "--max_new_tokens", "4"])
    assert cut["parsing"]["failures"] == 1 and all(r.startswith("length: ") for r in cut["parsing"]["reasons"])
    schema.write_text("{not json")
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        cli.main(_generate_args(source, tmp_path / "other", tiny_lm_dir) + ["--json_schema", str(schema)])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().startswith(f"error: {schema}:1: not a JSON schema: malformed JSON")
    assert not (tmp_path / "other").exists()


def test_generate_regex_and_choice(tiny_lm_dir: Path, tmp_path: Path, capsys) -> None:
    from veracity import cli
    from veracity.infer.generate import main

    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps({"id": str(i), "claim": f"claim {i}"}) + "\n" for i in range(3)))
    regex = main(_generate_args(source, tmp_path / "regex", tiny_lm_dir)[2:] + ["--regex", "(10|[0-9])", "--n", "2",
                                                                              "--temperature", "1.0"])
    choice = main(_generate_args(source, tmp_path / "choice", tiny_lm_dir)[2:] + ["--choice", "yes", "no"])
    assert regex["parsing"]["failures"] == 0 and regex["parsing"]["candidates"] == 6
    assert choice["parsing"]["failures"] == 0
    answers = [c["text"] for line in (tmp_path / "choice" / "predictions.jsonl").read_text().splitlines()
               for c in json.loads(line)["result"]["candidates"]]
    assert answers and set(answers) <= {"yes", "no"}
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        cli.main(_generate_args(source, tmp_path / "both", tiny_lm_dir) + ["--regex", "a", "--choice", "a"])
    assert info.value.code == 2 and "at most one of" in capsys.readouterr().err
    assert not (tmp_path / "both").exists()


def test_generate_resume_refuses_records_made_under_other_settings(tiny_lm_dir: Path, tmp_path: Path,
                                                                   capsys) -> None:
    from veracity import cli

    source, out = tmp_path / "items.jsonl", tmp_path / "run"
    source.write_text(json.dumps({"id": "a", "claim": "The sky is blue."}) + "\n")
    assert cli.main(_generate_args(source, out, tiny_lm_dir)) == 0
    records = (out / "predictions.jsonl").read_bytes()
    assert cli.main(_generate_args(source, out, tiny_lm_dir) + ["--progress", "true"]) == 0  # how, not what
    record = (out / "run_config.yaml").read_bytes()
    source.write_text(json.dumps({"id": "a", "claim": "The sky is blue."}) + "\n"
                      + json.dumps({"id": "b", "claim": "Grass is green."}) + "\n")
    capsys.readouterr()
    for changed, shown in ((["--max_new_tokens", "5"], "max_new_tokens: 4 → 5"),
                           (["--template", "True? {claim}"], "template: 'Claim: {claim}' → 'True? {claim}'"),
                           (["--temperature", "0.9"], "temperature:")):
        with pytest.raises(SystemExit) as info:
            cli.main(_generate_args(source, out, tiny_lm_dir) + changed)
        assert info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "made under another run config" in err and shown in err, err
    assert (out / "predictions.jsonl").read_bytes() == records, "a refused run adds no record"
    assert (out / "run_config.yaml").read_bytes() == record, "and keeps the record of the run that made them"


@pytest.mark.parametrize(("rows", "message"), [
    ([{"id": "a", "claim": "x"}, {"id": "a", "claim": "y"}], ":2: field 'id': duplicate id 'a' (first on line 1)"),
    ([{"claim": "x"}], ":1: field 'id': missing id"),
    ([], ": no items: the file is empty"),
])
def test_generate_input_ids_are_checked_before_anything_is_written(tmp_path: Path, capsys, rows: list[dict],
                                                                   message: str) -> None:
    from veracity import cli

    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(SystemExit) as info:
        cli.main(_generate_args(source, tmp_path / "run", Path("unused")))
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {source}{message}") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_a_record_holding_a_lone_surrogate_is_written_escaped_and_reads_back_the_same(tmp_path: Path) -> None:
    record = {"id": "c1", "status": "ok", "result": {"passage": "half an emoji: \ud83d", "claim": "café"}}
    line = record_line(record)
    path = tmp_path / "records.jsonl"
    path.write_text(line, encoding="utf-8")  # what the writer does: UTF-8 text
    assert json.loads(path.read_text(encoding="utf-8")) == record
    assert record_line({"id": "c2", "claim": "café"}) == '{"id": "c2", "claim": "café"}\n'  # UTF-8 kept otherwise
