"""Task scores during training: each checkpoint, as it is saved, scored on a small dev slice on the task itself.

The loss does not say which checkpoint writes the best verdicts (docs/results.md: an SFT generator at loss 0.12
below the majority label). With ``task_eval_examples: N`` (off by default: 0) a training job scores each checkpoint
it saves with ``veracity eval checkpoint``'s own evaluation (``infer/checkpoint_eval.py``'s ``evaluate_checkpoint``:
the generator as an adapter on its base, the verifier as its folder) on the first N dev examples of each source, into
``<output_dir>/task_scores/checkpoint-N/``, and adds the means over the sources to the trainer's log history as
``eval_task_<metric>``: the run's report draws them beside the loss (``train/curves.py``: series "eval task"). A
generator checkpoint is loaded a second time from disk — on a GPU that is a second copy of the base weights; on the
CPU recipes it costs seconds per save, hence off by default. ``veracity eval checkpoints RUN_DIR`` scores every
checkpoint on the whole split after training.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

TASK_SET = "task"  # the evaluation set's name in the log history: eval_task_<metric>
SCORED = ("accuracy", "macro_f1", "parse_failure_rate", "quote_format_rate", "ece", "brier")


def mean_scores(results: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Each scored metric's mean (``mean_over_sources``) over the sources with dev examples (one without any is
    left out rather than counted as 0); metrics none of them has, left out."""
    from veracity.infer.checkpoint_eval import mean_over_sources  # lazy, as below: the evaluation is loaded to score

    scored = {source: r for source, r in results.items() if r.get("examples")}
    return {k: v for k, v in mean_over_sources(scored, SCORED).items() if v is not None}


def task_score_callback(kind: str, prepared_dir: str, sources: Sequence[str], examples: int,
                        base: str | Path | None = None, device: str = "auto") -> Any:
    """A TrainerCallback scoring each saved checkpoint (module docstring).

    Args:
        kind: ``generator`` (each checkpoint an adapter on ``base``) or ``nli`` (each checkpoint a verifier folder).
        prepared_dir: ``veracity prep``'s output folder; the ``dev`` split of ``sources`` is scored.
        examples: the first this many examples of each source.
        base: the generator's base model folder (the one the adapters were trained on).
        device: where the scored model runs.
    """
    from transformers import TrainerCallback  # lazy, as below: seconds to import, training has them loaded

    from veracity.infer.checkpoint_eval import CheckpointEvalArgs, evaluate_checkpoint
    from veracity.models.engine import EngineConfig

    class TaskScores(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not state.is_world_process_zero:  # one process scores; the others train on
                return
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            eval_args = CheckpointEvalArgs(kind=kind, prepared_dir=prepared_dir, sources=list(sources), split="dev",
                                           max_examples=examples,
                                           output_dir=str(Path(args.output_dir) / "task_scores" / checkpoint.name),
                                           nli_model=str(checkpoint))
            engine = EngineConfig(model=str(base or "embedded"), adapter=str(checkpoint) if kind == "generator"
                                  else None, device=device)
            means = mean_scores(evaluate_checkpoint(eval_args, engine, quiet=True))
            # after the checkpoint's own trainer_state.json: the next checkpoints and the run's final state hold it
            state.log_history.append({"step": state.global_step, **{f"eval_{TASK_SET}_{k}": v
                                                                    for k, v in means.items()}})
            logger.info("task scores of %s on %d dev examples per source: %s", checkpoint.name, examples,
                        ", ".join(f"{k} {v:.3f}" for k, v in means.items()))

    return TaskScores()
