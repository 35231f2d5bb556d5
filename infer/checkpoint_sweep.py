"""Every checkpoint of a training run scored on the task, and the best one picked.

Usage: veracity eval checkpoints RUN_DIR [--sources vitaminc fever_symmetric] [--max_examples 50]
                                         [--metric macro_f1] [--output_dir RUN_DIR/checkpoints]

RUN_DIR is the folder of a ``veracity train sft|dpo`` run (a generator: each ``checkpoint-*`` adapter and the final
``adapter`` on its base model, the transformers engine) or of a ``veracity train nli`` run (a verifier: each
``checkpoint-*`` and the final ``model``); the run's ``run_config.yaml`` says which, and which base model. Each is
scored by ``veracity eval checkpoint``'s own evaluation (:func:`~veracity.infer.checkpoint_eval.evaluate_checkpoint`:
accuracy, macro-F1, the majority baseline; a generator's parse-failure and quote-format rates; a verifier's ECE and
Brier) on the prepared split, into ``<output_dir>/<checkpoint>/`` — a generator's base model too, as step 0 (what
training started from: did it help?); then:

- ``table.json`` and ``table.md``: one row per checkpoint by training step, each metric averaged over the sources
  (``<metric>``) and per source (``<source>/<metric>``);
- ``<metric>.png``: each metric against the training step, one line per source and their mean;
- ``best.json``: the trained checkpoint with the highest ``--metric`` (mean over the sources; the lowest for a metric
  where lower is better: ECE, Brier, parse failures), what ``veracity train merge --checkpoint best`` merges.

Resumable: a checkpoint already scored under the same data slice, engine and decoding options, whose weights have not
changed, is not scored again; a changed slice, engine or option scores every checkpoint again. The final adapter is
left out when its weights are the last checkpoint's.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.errors import InputError
from veracity.infer.checkpoint_eval import CheckpointEvalArgs, evaluate_checkpoint, mean_over_sources
from veracity.infer.plots import lines_over_steps
from veracity.io import write_json
from veracity.models.engine import EngineConfig
from veracity.models.fingerprint import model_fingerprint
from veracity.models.registry import resolve_model
from veracity.rundir import checkpoint_dirs, checkpoint_step, read_run_config, to_plain

logger = logging.getLogger(__name__)

LOWER_IS_BETTER = frozenset({"ece", "brier", "parse_failure_rate"})
# what each kind's table shows, in this order (eval checkpoint's metrics of that kind)
COLUMNS = {"generator": ("accuracy", "macro_f1", "parse_failure_rate", "quote_format_rate"),
           "nli": ("accuracy", "macro_f1", "ece", "brier")}
# what a run's final weights are called, by kind
FINAL = {"generator": "adapter", "nli": "model"}
BASE = "base"  # the row of a generator's base model, without an adapter


@dataclass
class SweepArgs(CheckpointEvalArgs):
    """``eval checkpoint``'s options (the data slice, decoding) plus the run to sweep and the metric that picks."""

    run_dir: str = field(default="", metadata={"help": "The training run folder (or RUN_DIR, first)."})
    kind: str = field(default="auto", metadata={
        "help": "auto (from the run: train sft/dpo → generator, train nli → nli), generator or nli."})
    output_dir: str | None = field(default=None, metadata={
        "help": "Where the scores go (default RUN_DIR/checkpoints)."})
    include_base: bool = field(default=True, metadata={
        "help": "Score the generator's base model too, as step 0 (what training started from; never chosen best)."})
    metric: str = field(default="macro_f1", metadata={
        "help": "The metric that picks the best checkpoint (its mean over the sources): accuracy, macro_f1, or "
                "parse_failure_rate / quote_format_rate (generator), ece / brier (nli)."})

    def __post_init__(self) -> None:
        if not self.run_dir:
            raise ValueError("give the training run folder: veracity eval checkpoints RUN_DIR")
        if self.kind not in ("auto", "generator", "nli"):
            raise ValueError(f"kind must be auto, generator or nli, got {self.kind!r}")
        if self.metric not in {m for columns in COLUMNS.values() for m in columns}:
            raise ValueError(f"--metric {self.metric}: one of {sorted({m for c in COLUMNS.values() for m in c})}")


@dataclass(frozen=True)
class Checkpoint:
    name: str  # checkpoint-50, or the final folder's name
    step: int
    path: Path


def run_kind(job: str) -> str:
    """generator for ``train sft|dpo``, nli for ``train nli``."""
    if job in ("train sft", "train dpo"):
        return "generator"
    if job == "train nli":
        return "nli"
    raise InputError(f"a run of `{job or 'an unknown job'}` has no checkpoints to score: eval checkpoints takes a "
                     "train sft, train dpo or train nli run folder")


def base_model(run_dir: Path, run_config: dict[str, Any]) -> str:
    """The model a generator run's adapters sit on: its merged SFT model for DPO from an SFT adapter, else the
    recipe's ``model_name_or_path``."""
    if (run_dir / "sft_merged" / "config.json").is_file():
        return str(run_dir / "sft_merged")
    for config in run_config.get("config") or []:
        if isinstance(config, dict) and config.get("model_name_or_path"):
            return str(config["model_name_or_path"])
    return "embedded"


def weights_digest(folder: Path) -> str:
    """sha256 of a folder's weight files (not its optimizer state): equal for a checkpoint and the final adapter
    saved from the same step."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def find_checkpoints(run_dir: Path, kind: str) -> list[Checkpoint]:
    """The run's ``checkpoint-*`` folders by step, then its final weights (when they differ from the last one), at
    the run's last step (its trainer state's ``max_steps``)."""
    found = [Checkpoint(p.name, checkpoint_step(p), p) for p in checkpoint_dirs(run_dir)]
    final = run_dir / FINAL[kind]
    if final.is_dir() and not (found and weights_digest(final) == weights_digest(found[-1].path)):
        state = found[-1].path / "trainer_state.json" if found else None
        total = json.loads(state.read_text()).get("max_steps") if state and state.is_file() else None
        found.append(Checkpoint(final.name, int(total or (found[-1].step if found else 0) + 1), final))
    return found


def checkpoint_configs(args: SweepArgs, engine_config: EngineConfig, kind: str, base: str, checkpoint: Checkpoint,
                       out: Path) -> tuple[CheckpointEvalArgs, EngineConfig]:
    """``eval checkpoint``'s configs for one checkpoint: its folder as the adapter (generator) or verifier (nli);
    the base row, the base model alone."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(CheckpointEvalArgs)}
    values.update(kind=kind, output_dir=str(out / checkpoint.name))
    if kind == "nli":
        values["nli_model"] = str(checkpoint.path)
        return CheckpointEvalArgs(**values), engine_config
    adapter = None if checkpoint.name == BASE else str(checkpoint.path)
    return CheckpointEvalArgs(**values), dataclasses.replace(engine_config, model=base, adapter=adapter)


def sweep_key(args: CheckpointEvalArgs, engine_config: EngineConfig, checkpoint: Checkpoint) -> dict[str, Any]:
    """What one checkpoint's scores depend on: the data slice and options, the engine, and its weights."""
    plain = {k: v for k, v in to_plain(args).items() if k != "output_dir"}
    engine = {k: v for k, v in to_plain(engine_config).items() if k not in ("api_key", "cache", "batch_size")}
    return {"eval": plain, "engine": engine, "weights": model_fingerprint(checkpoint.path)}


def score(checkpoint: Checkpoint, args: CheckpointEvalArgs, engine_config: EngineConfig) -> dict[str, Any]:
    """The checkpoint's ``{source: metrics}``: read back when scored before under the same key, else scored."""
    folder = Path(args.output_dir)
    key = sweep_key(args, engine_config, checkpoint)
    kept = folder / "sweep_key.json"
    if kept.is_file() and (folder / "metrics.json").is_file() and json.loads(kept.read_text()) == key:
        logger.info("%s: scored before under the same data, engine and weights", checkpoint.name)
        return json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    kept.unlink(missing_ok=True)  # an interrupted scoring is never read back as done
    logger.info("scoring %s (step %d)", checkpoint.name, checkpoint.step)
    metrics = evaluate_checkpoint(args, engine_config, quiet=True)
    write_json(kept, key)
    return metrics


def table(scores: dict[Checkpoint, dict[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """One row per checkpoint: each metric's mean over the sources, then per source."""
    rows = []
    for checkpoint, by_source in scores.items():
        row: dict[str, Any] = {"checkpoint": checkpoint.name, "step": checkpoint.step,
                               **mean_over_sources(by_source, columns)}
        for source, metrics in by_source.items():
            row.update({f"{source}/{metric}": metrics.get(metric) for metric in columns})
        rows.append(row)
    return rows


def best_row(rows: Sequence[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The trained row with the best ``metric`` (lowest for :data:`LOWER_IS_BETTER`); the earliest step on a tie.
    The base row is there to compare with, never chosen."""
    scored = [r for r in rows if r.get(metric) is not None and r["checkpoint"] != BASE]
    if not scored:
        return None
    sign = -1 if metric in LOWER_IS_BETTER else 1
    return max(scored, key=lambda r: (sign * r[metric], -r["step"]))


def markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str], best: str | None) -> str:
    heads = ["checkpoint", "step", *columns]
    lines = ["| " + " | ".join(heads) + " |", "|---|---:|" + "---:|" * len(columns)]
    for row in rows:
        name = f"**{row['checkpoint']}** (best)" if row["checkpoint"] == best else row["checkpoint"]
        cells = ["–" if row[c] is None else f"{row[c]:.3f}" for c in columns]
        lines.append("| " + " | ".join([name, str(row["step"]), *cells]) + " |")
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], columns: Sequence[str], sources: Sequence[str], out: Path) -> list[Path]:
    """``<metric>.png`` per metric: one line per source and their mean, against the training step."""
    paths = []
    for metric in columns:
        series = {}
        for name, key in [*((s, f"{s}/{metric}") for s in sources), *([("mean", metric)] if len(sources) > 1 else [])]:
            points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            if points:
                series[name] = ([p[0] for p in points], [p[1] for p in points])
        if series:
            paths.append(lines_over_steps(series, out / f"{metric}.png", title=f"{metric} by checkpoint",
                                          ylabel=metric))
    return paths


def make_parser() -> Any:
    parser = parser_for((SweepArgs, EngineConfig), "veracity eval checkpoints")
    # `veracity eval checkpoints RUN_DIR`: the positional sets the same field as --run_dir
    parser.add_argument("run_dir", nargs="?", metavar="RUN_DIR", default=argparse.SUPPRESS,
                        help="The training run folder.")
    parser.usage = "%(prog)s RUN_DIR [--config YAML] [options]"
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args, engine_config = parse_config(make_parser(), argv)
    return sweep(args, engine_config)


def sweep(args: SweepArgs, engine_config: EngineConfig) -> dict[str, Any]:
    """Score every checkpoint of ``args.run_dir`` (module docstring); returns ``{"rows", "best"}``."""
    run_dir = Path(args.run_dir)
    if not (run_dir / "run_config.yaml").is_file():
        raise InputError(f"{run_dir}: not a training run folder (no run_config.yaml)")
    run_config = read_run_config(run_dir / "run_config.yaml", run_dir)
    kind = run_kind(run_config.get("job", ""))
    if args.kind not in ("auto", kind):
        raise InputError(f"--kind {args.kind}: {run_dir} is a `{run_config['job']}` run, whose checkpoints are "
                         f"{'verifiers' if kind == 'nli' else 'generator adapters'}")
    if kind == "generator" and engine_config.engine != "transformers":
        raise InputError(f"--engine {engine_config.engine}: eval checkpoints loads each adapter on its base with the "
                         "transformers engine")
    checkpoints = find_checkpoints(run_dir, kind)
    if not checkpoints:
        raise InputError(f"{run_dir}: no checkpoint-* folders and no final {FINAL[kind]}/ to score")
    out = Path(args.output_dir) if args.output_dir else run_dir / "checkpoints"
    base = base_model(run_dir, run_config)
    if kind == "generator" and args.include_base:  # what training started from: did it help the verdicts?
        checkpoints.insert(0, Checkpoint(BASE, 0, resolve_model("chat_lm", base)))
    scores = {}
    for checkpoint in checkpoints:
        eval_args, eval_engine = checkpoint_configs(args, engine_config, kind, base, checkpoint, out)
        scores[checkpoint] = score(checkpoint, eval_args, eval_engine)
    columns = COLUMNS[kind]
    rows = table(scores, columns)
    best = best_row(rows, args.metric)
    best_checkpoint = next((c for c in checkpoints if best and c.name == best["checkpoint"]), None)
    write_json(out / "table.json", {"metric": args.metric, "best": best and best["checkpoint"], "kind": kind,
                                    "sources": list(args.sources), "columns": list(columns), "rows": rows})
    text = markdown(rows, columns, best and best["checkpoint"])
    (out / "table.md").write_text(text + "\n", encoding="utf-8")
    plot(rows, columns, list(args.sources), out)
    if best_checkpoint is not None:
        write_json(out / "best.json", {"metric": args.metric, "value": best[args.metric], "checkpoint":
                                       best_checkpoint.name, "step": best_checkpoint.step,
                                       "path": str(best_checkpoint.path), "kind": kind, "base": base,
                                       "sources": list(args.sources), "split": args.split})
    print(text)
    print(f"best by {args.metric} (mean over {', '.join(args.sources)}): "
          f"{best_checkpoint.name if best_checkpoint else 'none (no checkpoint has the metric)'} → {out}")
    return {"rows": rows, "best": best and best["checkpoint"]}
