"""Multi-process training for real: `accelerate launch` of `veracity train sft|dpo` as two DDP processes on the CPU
(gloo), checked against one process with the same global batch; the GPU accelerate configs parsed by accelerate.

The two-process runs are `slow` (each launch starts two Python processes that import torch, transformers and TRL;
the SFT and the DPO test take 20-60 s each here); CI runs them (scripts/test.sh deselects only `gpu`).
docs/training-multiprocess.md says what was run here and what was not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fixture_data import write_tiny_training_sets

REPO = Path(__file__).resolve().parents[1]
ACCELERATE = REPO / "configs" / "accelerate"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
RECORDS = 12  # global batch 4 (2 ranks x 2, or 1 x 4): 3 steps an epoch, so 6 steps cross an epoch boundary
STEPS = 6
# Per-step logged loss, two processes vs one: both see the same examples at every step (asserted by index) from
# the same weights, and DDP averages the two ranks' gradients, token-weighted across ranks as one process weighs
# them, so only float32 summation order differs. Measured here over 6 steps: |diff| <= 9.5e-7 (SFT), 1.5e-6 (DPO);
# final adapters <= 1.8e-6 apart (weights of about 0.1). A run whose steps see other data moves far more: one
# process stepping on half the global batch (batch 2) logged a loss 1.2e-2 away at step 2. 1e-5 sits between.
LOSS_TOLERANCE = 1e-5
WEIGHT_TOLERANCE = 1e-5


def _args(model: Path, train_file: Path, out: Path, per_device_batch: int) -> list[str]:
    # lora_dropout 0: dropout draws from each process's RNG, which no single-process run can reproduce
    return ["--model_name_or_path", str(model), "--train_file", str(train_file), "--output_dir", str(out),
            "--max_steps", str(STEPS), "--per_device_train_batch_size", str(per_device_batch),
            "--learning_rate", "0.01", "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8",
            "--lora_dropout", "0", "--lora_target_modules", *LORA_TARGETS, "--logging_steps", "1",
            "--save_steps", "3", "--report_to", "none", "--bf16", "false", "--use_cpu", "true", "--max_length", "256",
            "--seed", "0", "--dataloader_num_workers", "0", "--record_ranks", "true"]


def _launch_two_processes(job: str, args: list[str], home: Path) -> str:
    """`accelerate launch --config_file configs/accelerate/ddp_cpu.yaml -m veracity.cli train <job> ...`: the
    command docs/training-multiprocess.md gives. Returns its output (stdout and stderr)."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCELERATE / "ddp_cpu.yaml"),
               "-m", "veracity.cli", "train", job, *args, "--ddp_find_unused_parameters", "false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(home / "hf_home"),
           "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"the two-process launch failed ({done.returncode}):\n{output[-4000:]}"
    return output


def _ranks(run: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((run / "ranks").glob("rank*.json"))]


def _logged(run: Path, key: str) -> list[float]:
    state = json.loads((run / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    return [entry[key] for entry in state["log_history"] if "loss" in entry and key in entry]


def _adapter(run: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(run / "adapter" / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def sft_runs(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """SFT as two processes x batch 2 and as one process x batch 4."""
    from veracity.train.sft import main

    home = tmp_path_factory.mktemp("multiprocess")
    sft_file, dpo_file = write_tiny_training_sets(home, RECORDS, numbered=True)
    with pytest.MonkeyPatch.context() as patch:  # the session's cache isolation, for this module-wide fixture
        patch.setenv("HF_HOME", str(home / "hf_home"))
        adapter = main(_args(tiny_lm_dir, sft_file, home / "sft_one", 4))
        log = _launch_two_processes("sft", _args(tiny_lm_dir, sft_file, home / "sft_two", 2), home)
    return {"home": home, "log": log, "adapter": adapter, "dpo_file": dpo_file}


@pytest.fixture(scope="module")
def dpo_runs(sft_runs: dict[str, Any], tiny_lm_dir: Path) -> dict[str, Any]:
    """DPO from the one-process SFT adapter (merged first), as two processes x batch 2 and one process x batch 4."""
    from veracity.train.dpo import main

    home, dpo_file = sft_runs["home"], sft_runs["dpo_file"]
    extra = ["--sft_adapter", str(sft_runs["adapter"]), "--beta", "0.1"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(home / "hf_home"))
        main([*_args(tiny_lm_dir, dpo_file, home / "dpo_one", 4), *extra])
        log = _launch_two_processes("dpo", [*_args(tiny_lm_dir, dpo_file, home / "dpo_two", 2), *extra], home)
    return {"home": home, "log": log}


def _check_two_processes_match_one(one: Path, two: Path, log: str) -> None:
    from veracity.train.rank_record import state_digest

    ranks, single = _ranks(two), _ranks(one)
    assert [r["world_size"] for r in ranks] == [2, 2] and [r["process_index"] for r in ranks] == [0, 1]
    assert [len(r["steps"]) for r in ranks] == [STEPS, STEPS] and single[0]["world_size"] == 1

    # Disjoint batches: at every step the two ranks trained on different records, and together on the records one
    # process with the same global batch trained on at that step.
    epoch: list[int] = []
    for step, (first, second, alone) in enumerate(zip(ranks[0]["steps"], ranks[1]["steps"], single[0]["steps"],
                                                      strict=True), start=1):
        assert first["step"] == second["step"] == alone["step"] == step
        (mine,), (theirs,), (together,) = first["micro_batches"], second["micro_batches"], alone["micro_batches"]
        assert len(mine) == len(theirs) == 2 and not set(mine) & set(theirs), (step, mine, theirs)
        assert sorted(mine + theirs) == sorted(together), (step, mine, theirs, together)
        epoch += mine + theirs
        if step % 3 == 0:  # each epoch (3 global batches of 4) trains on every record once
            assert sorted(epoch) == list(range(RECORDS)), epoch
            epoch = []

    # Saved once, equal on both ranks: one process writes the run directory, both end with the weights it saved.
    assert [r["writes_run_directory"] for r in ranks] == [True, False]
    saved = state_digest(_adapter(two))
    assert ranks[0]["trainable_sha256"] == ranks[1]["trainable_sha256"] == saved
    assert log.count("adapter saved to") == 1 and log.count("(config recorded)") == 1, "one writer, one log line"
    assert (two / "COMPLETED").is_file() and (two / "run_config.yaml").is_file()
    assert sorted(p.name for p in (two / f"checkpoint-{STEPS}").glob("rng_state*")) == ["rng_state_0.pth",
                                                                                       "rng_state_1.pth"]

    # The loss curve of the two processes is the one-process curve.
    losses_two, losses_one = _logged(two, "loss"), _logged(one, "loss")
    assert len(losses_two) == len(losses_one) == STEPS
    differences = [abs(a - b) for a, b in zip(losses_two, losses_one, strict=True)]
    assert max(differences) <= LOSS_TOLERANCE, list(zip(losses_two, losses_one, strict=True))
    assert len(set(losses_one)) > 1, "the loss moved: the comparison covers updates, not only the first step"
    one_weights, two_weights = _adapter(one), _adapter(two)
    weight_difference = max(float((one_weights[k] - two_weights[k]).abs().max()) for k in one_weights)
    assert weight_difference <= WEIGHT_TOLERANCE
    print(f"{two.name}: per-step loss, two processes vs one: "
          + ", ".join(f"{a:.7f}/{b:.7f}" for a, b in zip(losses_two, losses_one, strict=True))
          + f"; max |diff| {max(differences):.1e}; adapters max |diff| {weight_difference:.1e}")


@pytest.mark.slow
def test_two_process_sft_is_one_process_with_the_same_global_batch(sft_runs: dict[str, Any]) -> None:
    home = sft_runs["home"]
    _check_two_processes_match_one(home / "sft_one", home / "sft_two", sft_runs["log"])


@pytest.mark.slow
def test_two_process_dpo_is_one_process_with_the_same_global_batch(dpo_runs: dict[str, Any]) -> None:
    home = dpo_runs["home"]
    _check_two_processes_match_one(home / "dpo_one", home / "dpo_two", dpo_runs["log"])
    merged = home / "dpo_two" / "sft_merged"  # the SFT adapter merged into the base: whole, no half-written copy
    assert (merged / "COMPLETED").is_file() and not list(merged.parent.glob(".sft_merged.*"))


# --- the GPU configs: parsed by accelerate's own launcher, not run (no GPU here) ---------------------------------

def _launch_args(config: str) -> Any:
    """What `accelerate launch --config_file <config> -m veracity.cli train sft` resolves before it starts anything:
    accelerate's own parser and config loader, and the validation that picks the launcher."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    parsed = launch_command_parser().parse_args(["--config_file", str(ACCELERATE / config), "-m", "veracity.cli",
                                                 "train", "sft"])
    args, defaults, _ = _validate_launch_command(parsed)  # private, but it is the launch path itself
    return args, defaults


def test_deepspeed_zero3_config_parses_to_a_zero3_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher side (config → torchrun environment) and the process side (environment → DeepSpeedPlugin) both
    read the config; DeepSpeed itself is not installed here, so the launch would stop at `deepspeed_launcher`."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DeepSpeedPlugin, DistributedType
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    config = load_config_from_file(str(ACCELERATE / "deepspeed_zero3.yaml"))
    assert config.distributed_type == DistributedType.DEEPSPEED and config.deepspeed_config["zero_stage"] == 3
    args, defaults = _launch_args("deepspeed_zero3.yaml")
    assert args.use_deepspeed and not args.use_fsdp and args.num_processes == 8 and args.mixed_precision == "bf16"
    args.deepspeed_fields_from_accelerate_config = ",".join([*defaults.deepspeed_config, "mixed_precision"])
    _, env = prepare_deepspeed_cmd_env(args)  # as launch_command does
    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == 3 and plugin.zero3_init_flag and plugin.zero3_save_16bit_model
    zero = plugin.deepspeed_config["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_param"]["device"] == zero["offload_optimizer"]["device"] == "none"


def test_fsdp_config_parses_to_an_fsdp2_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    config = load_config_from_file(str(ACCELERATE / "fsdp.yaml"))
    assert config.distributed_type == DistributedType.FSDP
    args, _ = _launch_args("fsdp.yaml")
    assert args.use_fsdp and not args.use_deepspeed and args.num_processes == 8
    env = prepare_multi_gpu_env(args)  # raises on contradictory FSDP options (e.g. RAM-efficient loading unsynced)
    for key, value in env.items():
        if key.startswith(("ACCELERATE_", "FSDP_")):
            monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert plugin.transformer_cls_names_to_wrap == ["LlamaDecoderLayer"]
    assert plugin.state_dict_type.name == "SHARDED_STATE_DICT"
    assert plugin.activation_checkpointing and plugin.cpu_ram_efficient_loading


@pytest.mark.parametrize(("config", "processes"), [("ddp.yaml", 8), ("ddp_cpu.yaml", 2)])
def test_ddp_configs_launch_one_process_per_rank(config: str, processes: int) -> None:
    """Both DDP configs go through accelerate's torchrun launcher (one process per rank); the CPU one with two
    processes on a free loopback port. (accelerate's MULTI_CPU type would start one process without mpirun.)"""
    from accelerate.utils.launch import prepare_multi_gpu_env

    args, _ = _launch_args(config)
    assert args.multi_gpu and not (args.use_fsdp or args.use_deepspeed or args.cpu)
    assert args.num_processes == processes and args.num_machines == 1
    prepare_multi_gpu_env(args)
    assert args.nproc_per_node == str(processes)
    if config == "ddp_cpu.yaml":
        assert args.use_cpu and args.mixed_precision == "no" and args.main_process_ip == "127.0.0.1"
        assert args.main_process_port > 0, "port 0 in the config: a free port chosen at launch"


# --- the rank record's bookkeeping, on hand-made inputs ------------------------------------------------------------

def test_rank_recorder_assigns_consumed_micro_batches_to_steps() -> None:
    """Batches fetched ahead (accelerate's loader collates one batch early, the Trainer a step's micro-batches at
    once) are not trained on until the trainer says so: a step gets exactly the micro-batches consumed in it."""
    from types import SimpleNamespace

    from veracity.train.rank_record import RankRecorder, token_digest

    recorder = RankRecorder()
    rows = [{"input_ids": [i, i + 1], "labels": [0]} for i in range(8)]
    recorder.position = {token_digest(row): i for i, row in enumerate(rows)}
    collate = recorder.wrap(lambda features: len(features))
    state = SimpleNamespace(global_step=0)
    recorder.on_train_begin(None, state, None)
    for batch in ([0, 1], [2, 3], [4, 5]):  # step 1's two micro-batches and one fetched ahead
        assert collate([rows[i] for i in batch]) == 2
    recorder.on_substep_end(None, state, None)
    state.global_step = 1
    recorder.on_step_end(None, state, None)
    assert recorder.steps == [{"step": 1, "micro_batches": [[0, 1], [2, 3]]}]
    collate([rows[6], rows[7]])
    recorder.on_substep_end(None, state, None)
    state.global_step = 2
    recorder.on_step_end(None, state, None)
    assert recorder.steps[1] == {"step": 2, "micro_batches": [[4, 5], [6, 7]]}


def test_rank_recorder_leaves_evaluation_batches_out() -> None:
    """An evaluation inside training (eval_strategy) collates through the same collator: its batches are neither
    assigned to a training step nor looked up among the training examples (a KeyError before)."""
    from types import SimpleNamespace

    from veracity.train.rank_record import RankRecorder

    train = [{"input_ids": [i]} for i in range(4)]
    held_out = [{"input_ids": [100 + i]} for i in range(2)]

    class Trainer(SimpleNamespace):
        def evaluate(self, **kwargs: Any) -> dict[str, float]:
            self.data_collator(held_out)
            return {"eval_loss": 1.0}

    trainer = Trainer(args=SimpleNamespace(dataloader_num_workers=0), train_dataset=train,
                      data_collator=lambda features: len(features), add_callback=lambda callback: None)
    recorder = RankRecorder()
    recorder.attach(trainer)
    state = SimpleNamespace(global_step=0)
    assert trainer.data_collator(train[:2]) == 2
    assert trainer.evaluate(metric_key_prefix="eval") == {"eval_loss": 1.0}  # the step's end evaluation
    assert trainer.data_collator(train[2:]) == 2
    state.global_step = 1
    recorder.on_step_end(None, state, None)
    state.global_step = 2
    recorder.on_step_end(None, state, None)
    assert recorder.steps == [{"step": 1, "micro_batches": [[0, 1]]}, {"step": 2, "micro_batches": [[2, 3]]}]
    assert not recorder.evaluating


def test_digests_read_token_ids_and_every_weight_bit() -> None:
    import torch

    from veracity.train.rank_record import state_digest, token_digest

    assert token_digest({"input_ids": [1, 2], "labels": [5]}) == token_digest({"input_ids": [1, 2], "labels": [6]})
    assert token_digest({"prompt_ids": [1], "chosen_ids": [2]}) != token_digest({"prompt_ids": [1], "chosen_ids": [3]})
    with pytest.raises(ValueError, match="no token-id column"):
        token_digest({"text": "x"})
    weights = {"b": torch.ones(2, 3), "a": torch.arange(4, dtype=torch.bfloat16)}
    assert state_digest(weights) == state_digest({k: v.clone() for k, v in reversed(weights.items())})
    nudged = {**weights, "b": weights["b"].clone()}
    nudged["b"][1, 2] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))  # one float32 ulp
    assert state_digest(nudged) != state_digest(weights)
    assert state_digest({"b": weights["b"].reshape(3, 2), "a": weights["a"]}) != state_digest(weights)


def test_processes_that_did_not_join_one_group_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen here: `accelerate launch` of a CPU recipe without use_cpu starts two processes that each see a world of
    one and would train alone into the same run directory; the job stops before writing anything."""
    from types import SimpleNamespace

    from veracity.data_prep.errors import InputError
    from veracity.train.lora import check_process_group

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(InputError, match="launched as 2 processes, but this one sees a world of 1"):
        check_process_group(SimpleNamespace(world_size=1))
    check_process_group(SimpleNamespace(world_size=2))
    monkeypatch.delenv("WORLD_SIZE")
    check_process_group(SimpleNamespace(world_size=1))
