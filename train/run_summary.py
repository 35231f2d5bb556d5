"""What a training run measured about itself, written at its end for its report (``train/report.py``).

Every training job calls :func:`finish_training_run` once its model is saved: the trainer's state goes to
``trainer_state.json`` in the run folder (the checkpoints hold it only up to their own step, without the last log
line), ``training_summary.json`` records the device, the step count, the non-padding tokens per second where the
trainer counts tokens, the peak memory, the data and (for LoRA jobs) the dry run's memory estimate for the same
recipe, and ``report.html`` is written from the folder.
"""

from __future__ import annotations

import logging
import resource
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from veracity.io import sha256_file

logger = logging.getLogger(__name__)

SUMMARY_FILE = "training_summary.json"
GIB = 1024**3


def peak_memory(device: str) -> dict[str, Any]:
    """The peak this process reached: on a GPU the memory torch allocated there (``max_memory_allocated``); on the
    CPU the process's peak resident set (Python, the libraries and the data included, not only the training)."""
    if device.startswith("cuda"):
        import torch  # lazy: only a GPU run asks, and it has torch loaded already

        return {"measure": "torch.cuda.max_memory_allocated", "gib": torch.cuda.max_memory_allocated(device) / GIB}
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {"measure": "process peak RSS (ru_maxrss)", "gib": kib * (1 if sys.platform == "darwin" else 1024) / GIB}


def throughput(log_history: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Non-padding tokens per second of this process's training: TRL's ``num_tokens`` (the attention mask's sum,
    counted from 0 by each process, so a resumed run counts only its own) at its last log, over ``train_runtime``
    (logged once, at the end). None when the trainer counts no tokens (the NLI and reranker trainers)."""
    tokens = [e["num_tokens"] for e in log_history if "num_tokens" in e and not any(k.startswith("eval_") for k in e)]
    runtime = next((e["train_runtime"] for e in reversed(log_history) if "train_runtime" in e), None)
    if not tokens or not runtime:
        return None
    return {"non_padding_tokens": int(tokens[-1]), "train_runtime_s": float(runtime),
            "tokens_per_second": float(tokens[-1]) / float(runtime)}


def file_facts(path: str | Path, records: int | None = None) -> dict[str, Any]:
    """A data file as the report names it: its path, how many records the run read (or its lines) and its sha256."""
    path = Path(path)
    if records is None:
        with path.open("rb") as handle:
            records = sum(1 for line in handle if line.strip())
    return {"file": str(path), "records": records, "sha256": sha256_file(path)}
