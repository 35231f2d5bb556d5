"""The curves of a training run, from its trainer's log history: which logged values make one plot, and the PNGs.

Every Trainer keeps ``log_history`` in ``trainer_state.json``: one entry per log (``loss``, ``learning_rate``,
``grad_norm``; TRL's SFT adds ``mean_token_accuracy`` and ``num_tokens``, DPO ``rewards/chosen``,
``rewards/rejected``, ``rewards/margins``, ``rewards/accuracies``) and per evaluation (``eval_loss``, or
``eval_<set>_<metric>`` for a named evaluation set: the NLI verifier's ``eval_calib_macro_f1``). One plot per
quantity: a training value and its evaluation counterpart share a plot, as do DPO's chosen and rejected rewards.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from veracity.rundir import checkpoint_dirs
from veracity.train.task_scores import TASK_SET

# Logged values that are no curve: counters, timings, the run's mean loss (one number, logged at the end).
SKIPPED = frozenset({"step", "epoch", "total_flos", "train_loss", "num_tokens", "num_input_tokens_seen"})
# The plots first on the page, in this order; the others follow by name.
ORDER = ("loss", "learning_rate", "grad_norm", "mean_token_accuracy", "rewards", "rewards/margins",
         "rewards/accuracies", "accuracy", "macro_f1")
PAIRED = ("chosen", "rejected")  # DPO logs these of rewards, log-probs and logits: one plot each, two lines
TITLES = {
    "loss": "Loss", "learning_rate": "Learning rate", "grad_norm": "Gradient norm (before clipping)",
    "mean_token_accuracy": "Token accuracy (completion tokens)",  # the most likely token is the target
    "rewards": "DPO rewards: β · log π/π_ref",
    "rewards/margins": "DPO reward margin (chosen − rejected)",
    "rewards/accuracies": "DPO reward accuracy (chosen > rejected)",
    "entropy": "Entropy of the next-token distribution",
}

Curves = dict[str, dict[str, tuple[list[float], list[float]]]]  # quantity → series → (steps, values)


def read_log_history(run_dir: str | Path) -> tuple[list[dict[str, Any]], Path | None]:
    """``log_history`` and the file it came from: the run folder's ``trainer_state.json`` (written at the end of a
    run), else the newest checkpoint's (an interrupted run: logged up to that checkpoint); ``([], None)`` when
    neither is there or readable."""
    run_dir = Path(run_dir)
    for path in [run_dir / "trainer_state.json", *(c / "trainer_state.json" for c in checkpoint_dirs(run_dir)[::-1])]:
        try:
            return list(json.loads(path.read_text(encoding="utf-8"))["log_history"]), path
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return [], None


def evaluation_sets(keys: Sequence[str]) -> list[str]:
    """Named evaluation sets, read from the ``eval_<set>_loss`` the Trainer logs for each (``calib`` in
    ``eval_calib_loss``; a set-less evaluation logs plain ``eval_loss``), and ``task`` for the checkpoints' task
    scores (``train/task_scores.py``: ``eval_task_<metric>``, no loss)."""
    sets = {k[len("eval_"):-len("_loss")] for k in keys if k.startswith("eval_") and k.endswith("_loss")
            and k != "eval_loss"}
    sets |= {TASK_SET for k in keys if k.startswith(f"eval_{TASK_SET}_")}
    return sorted(sets, key=len, reverse=True)


def series_of(key: str, sets: Sequence[str] = ()) -> tuple[str, str] | None:
    """(quantity, series) a logged key is drawn as, or None for a value that is no curve: ``eval_loss`` →
    ``("loss", "eval")``, ``eval_calib_macro_f1`` → ``("macro_f1", "eval calib")``, ``rewards/chosen`` →
    ``("rewards", "chosen")``."""
    if key.endswith(("_runtime", "_per_second")) or key.startswith("train_"):
        return None
    series = "train"
    if key.startswith("eval_"):
        key, series = key[len("eval_"):], "eval"
        named = next((s for s in sets if key.startswith(f"{s}_")), None)
        if named:
            key, series = key[len(named) + 1:], f"eval {named}"
    if key in SKIPPED:
        return None
    base, _, part = key.partition("/")
    if part in PAIRED:
        return base, part if series == "train" else f"{series} {part}"
    return key, series


def history_curves(history: Sequence[Mapping[str, Any]]) -> Curves:
    """Every curve of a log history: finite numbers only, each at the step it was logged at."""
    sets = evaluation_sets([k for entry in history for k in entry])
    curves: Curves = {}
    for entry in history:
        step = entry.get("step")
        if not isinstance(step, (int, float)):
            continue
        for key, value in entry.items():
            drawn = series_of(key, sets)
            if drawn is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isfinite(value):
                continue
            steps, values = curves.setdefault(drawn[0], {}).setdefault(drawn[1], ([], []))
            steps.append(float(step))
            values.append(float(value))
    first = [q for q in ORDER if q in curves]
    return {q: curves[q] for q in [*first, *sorted(q for q in curves if q not in first)]}


def plot_name(quantity: str) -> str:
    """A file name for a quantity's plot (``rewards/margins`` → ``rewards_margins.png``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", quantity).strip("_") + ".png"


def write_curves(curves: Curves, folder: str | Path) -> dict[str, Path]:
    """One PNG per quantity in ``folder`` (the plots' look: ``infer/plots.py``); quantity → its file."""
    from veracity.infer.plots import lines_over_steps  # lazy: matplotlib takes seconds to import

    return {quantity: lines_over_steps(series, Path(folder) / plot_name(quantity),
                                       title=TITLES.get(quantity, quantity), ylabel=quantity)
            for quantity, series in curves.items()}
