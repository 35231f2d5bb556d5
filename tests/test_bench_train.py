"""bench/train.py: its arithmetic on hand-made numbers (MFU on non-padding tokens with an injected peak, the rotated
order of the rounds, the median and spread), and a run on the CPU with the tiny Llama-3.1 shape — a correctness check
of its counting, never a timing."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from fixture_data import write_tiny_training_sets
from repo_scripts import load_script


@pytest.fixture(scope="module")
def figures():  # noqa: ANN201 - a module loaded by path
    return load_script("bench/train_figures.py")


def test_mfu_counts_the_non_padding_tokens_only(figures) -> None:  # noqa: ANN001
    import torch

    # two records of 3 and 1 tokens, padded to 4: 4 real tokens, 3 of them with a label, lengths² 9 + 1
    padded = {"input_ids": torch.zeros(2, 4, dtype=torch.long),
              "attention_mask": torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]]),
              "labels": torch.tensor([[-100, 5, 6, -100], [7, -100, -100, -100]])}
    wider = {key: torch.nn.functional.pad(value, (0, 6), value=-100 if key == "labels" else 0)
             for key, value in padded.items()}  # the same records with 6 more padding columns
    counts = figures.batch_counts(padded, unpadded=False)
    assert counts == {"nonpad": 4, "total": 8, "scored": 2, "sum_sq": 10}
    assert figures.batch_counts(wider, unpadded=False) == {**counts, "total": 20}
    assert figures.batch_counts(wider, unpadded=True)["total"] == 4  # DPO unpadded by veracity: the model ran 4
    # padding-free rows (TRL's collator): one row, positions restarting per record, no mask
    flat = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "position_ids": torch.tensor([[0, 1, 2, 0]]),
            "labels": torch.tensor([[-100, 5, 6, -100]])}
    assert figures.batch_counts(flat, unpadded=False) == counts | {"total": 4}
    # SFT: 4 FLOPs per matmul parameter and token, the head on the scored tokens, attention 6·L·d·Σs²
    flops = figures.model_flops("sft", 1000, 100, counts["nonpad"], counts["scored"], counts["sum_sq"], 2, 8)
    assert flops == 4 * 1000 * 4 + 4 * 100 * 2 + 6 * 2 * 8 * 10
    assert figures.model_flops("dpo", 1000, 100, 4, 2, 10, 2, 8) == 6 * 1000 * 4 + 6 * 100 * 2 + 8 * 2 * 8 * 10
    # 17,760 FLOPs in 2 s on a 1e-9 TFLOP/s (1,000 FLOP/s) device: 888%; padding changes none of it
    assert figures.mfu(flops, 2.0, 1e-9) == pytest.approx(flops / 2 / 1000)
    assert figures.mfu(flops, 2.0, None) is None


def test_the_rounds_rotate_the_order(figures) -> None:  # noqa: ANN001
    orders = figures.rotation(["a", "b", "c"], 4)
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert all(sorted(order) == ["a", "b", "c"] for order in orders)
    assert figures.rotation(["a", "b"], 2) == [["a", "b"], ["b", "a"]]  # each variant runs first once


def test_median_and_spread(figures) -> None:  # noqa: ANN001
    assert figures.median_spread([10.0, 12.0, 11.0]) == (11.0, pytest.approx(2 / 11))
    assert figures.median_spread([4.0, 6.0]) == (5.0, pytest.approx(0.4))
    assert figures.median_spread([3.0]) == (3.0, 0.0)


def test_a_variant_is_the_recipe_plus_its_parts(figures) -> None:  # noqa: ANN001
    recipe = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8}
    assert figures.variant_fields("shipped", recipe, None, 2) == {}
    assert figures.variant_fields("no_checkpointing+padding_free+liger", recipe, 16, 2) == {
        "padding_free": True, "use_liger_kernel": True, "checkpointing": "none",
        "per_device_train_batch_size": 16, "gradient_accumulation_steps": 2}  # 32 examples per step kept
    assert figures.variant_fields("selective+flex", recipe, None, 4) == {
        "checkpointing": "selective", "checkpoint_every": 4, "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 8, "attn_implementation": "flex_attention"}
    assert figures.variant_fields("padding_free+compile", recipe, None, 2) == {"padding_free": True,
                                                                                "torch_compile": True}
    with pytest.raises(ValueError, match="unknown part"):
        figures.variant_fields("no_checkpointing+fast", recipe, None, 2)


def test_train_bench_runs_every_variant_in_rounds_with_counted_tokens(tiny_lm_dir: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench/train.py")
    sft, dpo = write_tiny_training_sets(tmp_path, records=6)
    out = tmp_path / "rows.json"
    variants = ["shipped", "packing", "padding_free", "no_checkpointing", "selective"]
    rows = bench.main(["--variants", *variants, "--architecture", "tiny", "--tokenizer", str(tiny_lm_dir),
                       "--train_file", str(sft), "--dpo_file", str(dpo), "--steps", "1", "--warmup", "1",
                       "--batches", "4", "2", "--batch", "2", "--accumulation", "2", "--max_length", "256",
                       "--device", "cpu", "--rounds", "2", "--peak_tflops", "1e-3", "--json", str(out)])
    table = capsys.readouterr().out
    assert "| job | variant | settings | rounds |" in table and "flags:" in table and "trl 1." in table
    by = {(r.job, r.variant): r for r in rows}
    assert set(by) == {(j, v) for j in ("sft", "dpo") for v in variants}
    assert by["dpo", "packing"].note == "packing: not an option of TRL's DPO trainer" and not by["dpo", "packing"].runs
    measured = [r for r in rows if r.runs]
    assert len(measured) == 9
    for row in measured:
        assert not row.note and len(row.runs) == 2, row  # no note: the layers checkpointed are the dry run's
        for run in row.runs:
            assert run.steps == 1 and 0 < run.nonpad <= run.total and math.isfinite(run.loss), row
            assert run.flops > 0 and run.peak_gib is None  # not measured on a CPU
        assert row.runs[0].loss == pytest.approx(row.runs[1].loss, abs=1e-6), "same records, same seed"
        assert row.dry_run_gib and row.dry_run_gib > 0
    # the dry run's layer count is what the trainer ran: every layer, none, or layers 0, 2, ... of the tiny 2
    assert [by["sft", v].runs[0].checkpointed for v in ("shipped", "no_checkpointing", "selective")] == [2, 0, 1]
    # padded batches count their padding apart; padding-free and packed rows have none; DPO's are unpadded
    assert by["sft", "shipped"].runs[0].nonpad < by["sft", "shipped"].runs[0].total
    for job, variant in (("sft", "packing"), ("sft", "padding_free"), ("dpo", "padding_free")):
        assert by[job, variant].runs[0].nonpad == by[job, variant].runs[0].total
    # the same examples per step train the same loss, whatever the batching and checkpointing
    for job in ("sft", "dpo"):
        losses = [by[job, v].runs[0].loss for v in ("shipped", "padding_free", "no_checkpointing", "selective")]
        assert max(losses) - min(losses) < 1e-4, (job, losses)
    assert by["dpo", "shipped"].runs[0].loss == pytest.approx(math.log(2), abs=1e-2)  # DPO starts at its reference
    assert by["sft", "no_checkpointing"].settings.startswith("batch 4 x 1, ckpt none")  # 2 x 2 examples kept
    # FLOPs count the non-padding tokens: the same records padded, unpadded or in other batches count the same
    for job in ("sft", "dpo"):
        assert len({by[job, v].runs[0].flops for v in ("shipped", "padding_free", "no_checkpointing")}) == 1, job
    # the MFU column: the median FLOPs over the median seconds, over the injected 1e-3 TFLOP/s
    runs = by["sft", "shipped"].runs
    use = statistics.median(r.flops for r in runs) / statistics.median(r.seconds for r in runs) / 1e9
    assert f"| {100 * use:.1f}% |" in next(line for line in table.splitlines() if line.startswith("| sft | shipped"))
    saved = json.loads(out.read_text())
    assert saved["environment"]["device"].startswith("CPU") and len(saved["rows"]) == 10


def test_past_max_minutes_no_run_starts_and_the_table_says_so(tiny_lm_dir: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench/train.py")
    sft, dpo = write_tiny_training_sets(tmp_path, records=4)
    rows = bench.main(["--variants", "shipped", "padding_free", "--architecture", "tiny", "--tokenizer",
                       str(tiny_lm_dir), "--train_file", str(sft), "--dpo_file", str(dpo), "--device", "cpu",
                       "--max_minutes", "1e-9"])
    assert [(r.job, r.variant, len(r.runs)) for r in rows] == [("sft", "shipped", 0), ("sft", "padding_free", 0),
                                                                ("dpo", "shipped", 0), ("dpo", "padding_free", 0)]
    assert all(r.note == "runs left out: over --max_minutes 1e-09" for r in rows)
    assert capsys.readouterr().out.count("| runs left out: over --max_minutes 1e-09 |") == 4
