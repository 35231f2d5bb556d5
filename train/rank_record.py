"""What each process of a training run trained on and ended with: ``<output_dir>/ranks/rank<k>.json``.

Opt-in (``--record_ranks true`` on ``veracity train sft|dpo``), for checking a multi-process launch
(``accelerate launch``, DDP): every process writes its own file with

- ``world_size``, ``process_index`` and ``writes_run_directory`` (``TrainingArguments.should_save``: whether this
  process writes checkpoints, the adapter and the run files — one process in a correct launch);
- ``steps``: for every optimizer step, the examples of each micro-batch this process trained on, named by their
  position in the trainer's training set (the records of ``train_file`` in file order; TRL drops records that its
  truncation leaves empty, which shifts later positions; identical examples are named by the first of them);
- ``trainable_sha256``: a digest of the trainable weights it holds at the end (:func:`state_digest` of PEFT's
  adapter state dict, the tensors ``save_pretrained`` writes to ``adapter_model.safetensors``).

In a correct data-parallel run the ranks' examples of a step are disjoint, together they are the global batch a
single process with ``world_size x per_device_train_batch_size`` takes at that step, and every rank ends with the
weights of the saved adapter. The examples are noted where the collator builds a batch and assigned to steps as
the trainer consumes them (batches fetched ahead but never trained on are dropped), so the collator has to run in
the training process: ``dataloader_num_workers`` 0.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from peft import get_peft_model_state_dict
from transformers import TrainerCallback

RANKS_FOLDER = "ranks"


def token_digest(example: Mapping[str, Any]) -> str:
    """A content key for a tokenized example: its token-id columns (``input_ids`` for SFT; ``prompt_ids``,
    ``chosen_ids``, ``rejected_ids`` for DPO), which the trainer's dataset rows and the collator's features share."""
    ids = {key: list(example[key]) for key in sorted(example) if key.endswith("ids")}
    if not ids:
        raise ValueError(f"no token-id column (a name ending in 'ids') among {sorted(example)}")
    return hashlib.sha1(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


def state_digest(tensors: Mapping[str, Any]) -> str:
    """sha256 over a state dict's names, dtypes, shapes and bytes, in name order: equal digests, equal weights."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())  # raw bytes of any dtype (bf16 too)
    return digest.hexdigest()


class RankRecorder(TrainerCallback):
    """Notes which examples this process trains on at each step and writes :data:`RANKS_FOLDER`/``rank<k>.json``.

    Attach with :meth:`attach` after the trainer is built (its tokenized ``train_dataset`` names the examples).
    """

    def __init__(self) -> None:
        self.position: dict[str, int] = {}
        self.collated: list[list[int]] = []  # every batch the collator built, in order
        self.consumed = 0  # micro-batches the trainer has trained on
        self.steps: list[dict[str, Any]] = []
        self.first_step = 0
        self.evaluating = False  # the collator also builds the evaluation batches: those are not training steps

    def attach(self, trainer: Any) -> None:
        if trainer.args.dataloader_num_workers:
            raise ValueError("record_ranks needs dataloader_num_workers 0: the collator must run in the training "
                             "process to note what it batches")
        for position, row in enumerate(trainer.train_dataset):
            self.position.setdefault(token_digest(row), position)
        trainer.data_collator = self.wrap(trainer.data_collator)
        evaluate = trainer.evaluate  # the training loop evaluates through it (eval_strategy), as a user call does

        def evaluate_unrecorded(*args: Any, **kwargs: Any) -> Any:
            self.evaluating = True
            try:
                return evaluate(*args, **kwargs)
            finally:
                self.evaluating = False

        trainer.evaluate = evaluate_unrecorded
        trainer.add_callback(self)

    def wrap(self, collate: Callable[[list[dict[str, Any]]], Any]) -> Callable[[list[dict[str, Any]]], Any]:
        def recording(features: list[dict[str, Any]]) -> Any:
            if not self.evaluating:
                self.collated.append([self.position[token_digest(f)] for f in features])
            return collate(features)

        return recording

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.first_step = state.global_step  # after a resume: the checkpoint's step

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.consumed += 1

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.consumed += 1
        done = sum(len(step["micro_batches"]) for step in self.steps)
        self.steps.append({"step": state.global_step, "micro_batches": self.collated[done:self.consumed]})

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        record = {
            "process_index": args.process_index, "world_size": args.world_size,
            "writes_run_directory": args.should_save, "first_step": self.first_step,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "steps": self.steps, "trainable_sha256": state_digest(get_peft_model_state_dict(model)),
        }
        folder = Path(args.output_dir) / RANKS_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        # each process writes only its own file: the one exception to "the main process writes the run directory"
        (folder / f"rank{args.process_index}.json").write_text(json.dumps(record, indent=1) + "\n")
