"""bench/train.py on the CPU with the tiny Llama-3.1 shape: a correctness check of its counting, not a timing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fixture_data import write_tiny_training_sets
from repo_scripts import load_script


def test_train_bench_prints_every_variant_with_counted_tokens(tiny_lm_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench/train.py")
    sft, dpo = write_tiny_training_sets(tmp_path, records=6)
    out = tmp_path / "rows.json"
    variants = ["shipped", "packing", "padding_free", "no_checkpointing"]
    rows = bench.main(["--variants", *variants, "--architecture", "tiny", "--tokenizer", str(tiny_lm_dir),
                       "--train_file", str(sft),
                       "--dpo_file", str(dpo), "--steps", "1", "--warmup", "1", "--batches", "4", "2",
                       "--batch", "2", "--accumulation", "2", "--max_length", "256", "--device", "cpu",
                       "--json", str(out)])
    table = capsys.readouterr().out
    assert "| job | variant | settings |" in table and "flags:" in table and "trl 1." in table
    by = {(r.job, r.variant): r for r in rows}
    assert set(by) == {(j, v) for j in ("sft", "dpo") for v in ("shipped", "packing", "padding_free",
                                                              "no_checkpointing")}
    measured = [by["sft", v] for v in ("shipped", "packing", "padding_free", "no_checkpointing")] + \
        [by["dpo", "shipped"], by["dpo", "no_checkpointing"]]
    for row in measured:
        assert not row.note and row.steps == 1, row
        assert 0 < row.nonpad_tokens_per_s <= row.total_tokens_per_s and math.isfinite(row.loss), row
        assert row.extra["params"] > 0
    # padded batches count their padding apart; padding-free and packed rows have none
    assert by["sft", "shipped"].extra["nonpad_tokens"] < by["sft", "shipped"].extra["total_tokens"]
    for variant in ("packing", "padding_free"):
        assert by["sft", variant].extra["nonpad_tokens"] == by["sft", variant].extra["total_tokens"]
    # the timed step sees accumulation x batch records: 2 x 2 padded rows of these short records
    assert by["sft", "shipped"].extra["total_tokens"] < 4 * 256
    assert by["sft", "no_checkpointing"].settings.startswith("batch 4 x 1, ckpt False")  # 2 x 2 examples kept
    assert by["dpo", "packing"].note == "not available in TRL's DPO trainer"
    assert by["dpo", "shipped"].loss == pytest.approx(math.log(2), abs=1e-2)  # DPO starts at its reference
    saved = json.loads(out.read_text())
    assert saved["environment"]["device"].startswith("CPU") and len(saved["rows"]) == 8
