"""``report.html`` of a training run: what was trained, on what, how it went, and how its checkpoints score.

Usage: veracity report RUN_DIR   (any run folder; every ``veracity train …`` job writes its page at its end)

One self-contained page in the pipelines' style (``infer/report_html.py``: its CSS, sections and helpers, the
header's look): when the run started, its commit, job, base model and the model it made (by id and weights hash),
the data (files with record counts and sha256), device and library versions; the run's throughput and peak memory
beside the dry run's estimate for the recipe (``training_summary.json``, written at the end of the run); one curve
per quantity of the trainer's log history (``train/curves.py``); the checkpoints' task scores when
``checkpoints/table.json`` is there; the job's ``metrics.json``; the model card; every setting of the recipe.
An interrupted run (no ``trainer_state.json`` of its own, no summary) is drawn from its newest checkpoint. Every
text is escaped (a card or a record holding ``<script>`` shows as text); the page has no script and loads nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from veracity.data_prep.errors import InputError
from veracity.infer.report_assets import CSS
from veracity.infer.report_header import commit_html, configs_of, data_line, header_table, run_date
from veracity.infer.report_html import (
    flatten,
    metrics_html,
    part,
    plots_html,
    read_json,
    read_yaml,
    run_html,
    written_time,
)
from veracity.infer.report_text import Html, esc, fmt, kv, table, text
from veracity.io import atomic_writer, is_completed, sha256_file, write_json
from veracity.rundir import checkpoint_dirs
from veracity.train.curves import history_curves, read_log_history, write_curves
from veracity.train.run_summary import SUMMARY_FILE, file_facts, peak_memory, throughput

logger = logging.getLogger(__name__)

# The configs each job records in run_config.yaml, in order (the names of the recipe's sections on the page).
CONFIG_NAMES = {
    "train sft": ("TrainScriptArgs", "SFTConfig", "ModelConfig"),
    "train dpo": ("DPOScriptArgs", "DPOConfig", "ModelConfig"),
    "train nli": ("NLIDataArgs", "TrainingArguments"),
    "train reranker": ("RerankerArgs", "CrossEncoderTrainingArguments"),
    "train calibrator": ("CalibratorArgs", "R2VCConfig", "SignalSettings", "EngineConfig"),
}
LORA_JOBS = ("train sft", "train dpo")
# What each job saves, in its run folder: the folder (or file) and the weights file hashed as its id.
TRAINED = (("adapter", "adapter_model.safetensors"), ("model", "model.safetensors"),
           ("calibrator.json", ""))
VERSIONS_SHOWN = ("python", "torch", "transformers", "trl", "peft", "accelerate", "sentence-transformers")


def is_training_run(run_config: Mapping[str, Any] | None) -> bool:
    return str((run_config or {}).get("job", "")).startswith("train ")


# --- what the folder says ----------------------------------------------------------------------------------------


def card_of(run_dir: Path) -> tuple[Path | None, dict[str, Any]]:
    """The model card the job wrote beside its model, and its front matter ({} without one)."""
    for folder, _ in TRAINED:
        card = run_dir / folder / "README.md"
        if card.is_file():
            head = card.read_text(encoding="utf-8").split("---", 2)
            try:
                front = yaml.safe_load(head[1]) if len(head) == 3 and not head[0].strip() else None
            except yaml.YAMLError:
                front = None
            return card, front if isinstance(front, dict) else {}
    return None, {}


def trained_model(run_dir: Path) -> Html:
    """The model the run made, by path and its weights' sha256 (what a fingerprint compares), or why none."""
    for name, weights in TRAINED:
        path = run_dir / name
        hashed = path / weights if weights else path
        if hashed.is_file():
            return Html(f"<code>{esc(path)}</code> <span class=\"note\">— sha256 of {esc(hashed.name)} "
                        f"{esc(sha256_file(hashed)[:16])}…</span>")
    return Html('<span class="note">none saved: the run did not finish (its checkpoints are below)</span>')


def base_model(run_dir: Path, run_config: Mapping[str, Any], front: Mapping[str, Any]) -> Html:
    """The model the run started from: as the recipe named it, the folder it resolved to, its hub id (the card's
    ``base_model``) and, for DPO, the SFT adapter merged into it first."""
    configs = configs_of(run_config)
    named = next((c[k] for c in configs for k in ("model_name_or_path", "init") if c.get(k)), None)
    if run_config.get("job") == "train calibrator":
        named = next((c["model"] for c in configs if c.get("model")), None)
    parts = [f"<code>{esc(named or 'not recorded')}</code>"]
    resolved = run_dir / "base_model.txt"
    if resolved.is_file():
        parts.append(f"folder <code>{esc(resolved.read_text(encoding='utf-8').strip())}</code>")
    if front.get("base_model"):
        parts.append(f"hub id <code>{esc(front['base_model'])}</code>")
    sft = next((c["sft_adapter"] for c in configs if c.get("sft_adapter")), None)
    if sft:
        parts.append(f"with the SFT adapter <code>{esc(sft)}</code> merged in first")
    return Html(" · ".join(parts))


def data_html(run_config: Mapping[str, Any], summary: Mapping[str, Any]) -> Html:
    """The training data: each file with the records the run read and its sha256 (from the run's summary; for an
    interrupted run the files as they are now), or the prepared sources the job reads."""
    data = dict(summary.get("data") or {})
    configs = configs_of(run_config)
    now = ""
    if not data and run_config.get("job") in LORA_JOBS:
        cap = next((c["max_train_examples"] for c in configs if c.get("max_train_examples")), None)
        for field in ("train_file", "eval_file"):
            path = next((c[field] for c in configs if c.get(field)), None)
            if path and Path(path).is_file():
                facts = file_facts(path)
                if field == "train_file" and cap:  # the run read the first max_train_examples records
                    facts["records"] = min(facts["records"], cap)
                data[Path(path).name] = facts
                now = " (the files as they are now: the run wrote no summary)"
    if not data:
        return Html(esc(data_line(configs)))
    lines = [f"{name}: " + (f"{facts['records']:,} records · sha256 {facts['sha256']} · {facts['file']}"
                            if isinstance(facts, Mapping) and "sha256" in facts else fmt(facts))
             for name, facts in data.items()]
    return Html("<br>".join(esc(line) for line in lines) + (f' <span class="note">{esc(now)}</span>' if now else ""))


def device_of(run_config: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    use_cpu = next((c.get("use_cpu") for c in configs_of(run_config) if "use_cpu" in c), None)
    return summary.get("device") or run_config.get("device") or ("cpu" if use_cpu else "not recorded")


def versions_line(run_config: Mapping[str, Any]) -> str:
    versions = run_config.get("versions") or {}
    return " · ".join(f"{name} {versions[name]}" for name in VERSIONS_SHOWN if name in versions) or "not recorded"


def header(run_dir: Path, run_config: Mapping[str, Any], summary: Mapping[str, Any],
           front: Mapping[str, Any]) -> Html:
    return header_table([
        ("date", run_date(run_config, written_time(run_dir / "run_config.yaml"))),
        ("commit", commit_html(run_config)), ("job", run_config.get("job")),
        ("base model", base_model(run_dir, run_config, front)), ("trained model", trained_model(run_dir)),
        ("data", data_html(run_config, summary)), ("device", device_of(run_config, summary)),
        ("libraries", versions_line(run_config))])


# --- the sections ------------------------------------------------------------------------------------------------


def status_line(run_dir: Path, history: Sequence[Mapping[str, Any]]) -> str:
    """Finished (the COMPLETED marker, or the summary only the end of a run writes: the calibrator has no marker),
    interrupted (checkpoints, no end), steps logged and checkpoints kept."""
    checkpoints = checkpoint_dirs(run_dir)
    steps = max((e["step"] for e in history if isinstance(e.get("step"), (int, float))), default=None)
    if is_completed(run_dir) or (run_dir / SUMMARY_FILE).is_file():
        state = "completed"
    elif checkpoints:
        state = f"interrupted: its newest checkpoint is {checkpoints[-1].name}"
    else:
        state = "not finished (no COMPLETED marker, no checkpoint)"
    return (f"{state} · {fmt(steps) if steps is not None else 'no'} steps logged · "
            f"{len(checkpoints)} checkpoint{'s' * (len(checkpoints) != 1)} in the folder")


def estimate_from_record(run_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The dry run's estimate from a LoRA run's record (an interrupted run wrote no summary holding it)."""
    from veracity.train.memory import estimate_memory, estimate_record  # lazy: brings transformers

    configs = configs_of(run_config)
    if run_config.get("job") not in LORA_JOBS or len(configs) < 3:
        return None
    script, training, model = (SimpleNamespace(**c) for c in configs[:3])
    try:
        half = bool(getattr(training, "bf16", False) or getattr(training, "fp16", False))
        return estimate_record(*estimate_memory(script, training, model, half, pairs=run_config["job"] == "train dpo"))
    except (ValueError, OSError, KeyError, AttributeError, TypeError) as error:
        logger.info("report.html: no dry-run estimate (%s)", error)
        return None


def training_html(run_dir: Path, run_config: Mapping[str, Any], summary: Mapping[str, Any],
                  history: Sequence[Mapping[str, Any]]) -> Html:
    """Status, throughput and peak memory as measured, beside the dry run's estimate for the same recipe."""
    none = "not measured: no training_summary.json (the run did not finish)" if not summary else None
    speed = summary.get("throughput")
    memory = summary.get("peak_memory")
    rows: list[tuple[str, Any]] = [("status", status_line(run_dir, history))]
    rows.append(("non-padding tokens/s", none or (
        f"{speed['tokens_per_second']:,.1f} ({speed['non_padding_tokens']:,} tokens in "
        f"{speed['train_runtime_s']:,.1f} s of training, this process)" if speed else
        "not measured: this trainer counts no tokens (TRL's SFT and DPO trainers do)")))
    rows.append(("peak memory", none or (f"{memory['gib']:.2f} GiB ({memory['measure']})" if memory
                                         else "not measured")))
    if run_config.get("job") in LORA_JOBS:
        estimate = summary.get("dry_run") or estimate_from_record(run_config)
        rows.append(("dry-run estimate", (
            f"{estimate['total_gib']:.2f} GiB: weights {estimate['weights_gib']:.2f} ({estimate['weights']}), "
            f"adapters + gradients {estimate['adapters_gib']:.2f}, optimizer {estimate['optimizer_gib']:.2f}, "
            f"activations {estimate['activations_gib']:.2f} — batch {estimate['batch_rows']} rows × "
            f"{estimate['max_length']} tokens, gradient checkpointing {fmt(estimate['gradient_checkpointing'])}, "
            f"{estimate['precision']} precision; it counts the training state on one GPU, while a CPU's peak RSS "
            "also holds Python, the libraries and the data") if estimate else "not available"))
    shown = {"written", "device", "global_step", "throughput", "peak_memory", "data", "dry_run"}
    rows += [(k, v) for k, v in summary.items() if k not in shown]
    return kv(rows)


def curves_html(run_dir: Path, history: Sequence[Mapping[str, Any]], source: Path | None) -> Html:
    if not history:
        return Html('<p class="note">no trainer_state.json in the folder or its checkpoints: no curves (the '
                    "calibrator has no trainer; its numbers are under Metrics)</p>")
    written = write_curves(history_curves(history), run_dir / "curves")
    where = source.relative_to(run_dir) if source else ""
    note = f'<p class="note">from <code>{esc(where)}</code>' + (
        " (the newest checkpoint: the run was interrupted)" if source and source.parent != run_dir else "") + "</p>"
    return Html(note + plots_html({f"curves/{p.name}": p.read_bytes() for p in written.values()}))


def checkpoints_html(run_dir: Path) -> Html:
    """The checkpoints' task scores (``checkpoints/table.json``, written by ``veracity eval checkpoints``), the best
    row marked, with ``best.json`` and the plots of each metric against the step."""
    folder = run_dir / "checkpoints"
    scores = read_json(folder / "table.json")
    names = [c.name for c in checkpoint_dirs(run_dir)]
    present = f"checkpoints in the folder: {', '.join(names) or 'none'}"
    if not isinstance(scores, Mapping) or not isinstance(scores.get("rows"), list):
        return Html(f'<p class="note">not scored on the task ({esc(present)}): <code>veracity eval checkpoints '
                    f"{esc(run_dir)}</code> scores each one</p>")
    columns = [str(c) for c in scores.get("columns") or []]
    rows = [row for row in scores["rows"] if isinstance(row, Mapping)]
    best, metric = scores.get("best"), scores.get("metric")
    per_source = list(dict.fromkeys(str(k) for row in rows for k in row if "/" in str(k)))
    sources = scores.get("sources") if isinstance(scores.get("sources"), list) else []
    over = f"; each metric the mean over {', '.join(map(str, sources))}" if sources else ""
    note = f'<p class="note">best by {esc(metric)}{esc(over)}</p>'

    def grid(names: Sequence[str]) -> Html:
        cells = [[Html(f'{esc(row.get("checkpoint"))} <span class="ok">best by {esc(metric)}</span>')
                  if row.get("checkpoint") == best else row.get("checkpoint"), row.get("step"),
                  *(row.get(c) for c in names)] for row in rows]
        return table(["checkpoint", "step", *names], cells, ["chosen" if r.get("checkpoint") == best else ""
                                                            for r in rows])

    best_json = read_json(folder / "best.json")
    plots = {f"checkpoints/{p.name}": p.read_bytes() for p in sorted(folder.glob("*.png"))}
    return Html(note + grid(columns)
                + (f"<details><summary>per source</summary>{grid(per_source)}</details>" if per_source else "")
                + (f"<details><summary>best.json</summary>{kv(flatten(best_json))}</details>"
                   if isinstance(best_json, Mapping) else "") + plots_html(plots))


def unprefixed(metrics: Any) -> Any:
    """Per-source tables without the source repeated in their keys (the NLI job's ``dev.vitaminc.vitaminc_accuracy``
    → ``dev.vitaminc.accuracy``), so the sources share columns."""
    if not isinstance(metrics, Mapping):
        return metrics
    out = {}
    for name, value in metrics.items():
        prefix = f"{name}_"
        if isinstance(value, Mapping) and any(str(k).startswith(prefix) for k in value):
            value = {str(k).removeprefix(prefix): v for k, v in value.items()}
        out[name] = unprefixed(value)
    return out


def job_outputs_html(run_dir: Path) -> Html:
    """The job's own ``metrics.json`` (the NLI verifier's dev scores per source, the reranker's MRR before and after,
    the calibrator's fit) and the plots it wrote (the calibrator's simulation: reliability, risk–coverage)."""
    metrics = read_json(run_dir / "metrics.json")
    plots = {str(p.relative_to(run_dir)): p.read_bytes() for pattern in ("*.png", "simulation/*.png")
             for p in sorted(run_dir.glob(pattern)) if not p.name.startswith("report")}
    link = ('<p class="note">the calibrator\'s simulated pipeline run has its own page: '
            '<a href="simulation/report.html">simulation/report.html</a></p>'
            if (run_dir / "simulation" / "report.html").is_file() else "")
    if not isinstance(metrics, Mapping) or not metrics:
        shown = Html('<p class="note">this job writes no metrics.json: its losses are the curves above, its '
                     "checkpoints' task scores the table above</p>")
    else:  # the training set's counts (NLI, reranker) are data, not scores: a table of their own
        counts = metrics.get("train")
        shown = metrics_html(unprefixed({k: v for k, v in metrics.items() if k != "train"}))
        if isinstance(counts, Mapping):
            shown = Html(shown + f"<details><summary>training set (metrics.json: train)</summary>"
                                 f"{kv(flatten(counts))}</details>")
    return Html(shown + link + (plots_html(plots) if plots else ""))


def card_html(card: Path | None, run_dir: Path) -> Html:
    if card is None:
        calibrator = run_dir / "calibrator.json"
        if calibrator.is_file():
            return Html('<p class="note">the calibrator is a JSON file (no card):</p>'
                        f"<pre>{text(calibrator.read_text(encoding='utf-8'), 4000, literal=True)}</pre>")
        return Html('<p class="note">no model card: the run did not save its model</p>')
    return Html(f'<p class="note"><code>{esc(card.relative_to(run_dir))}</code></p>'
                f"<pre>{text(card.read_text(encoding='utf-8'), 20000, literal=True)}</pre>")


# --- the page ----------------------------------------------------------------------------------------------------


def render_training_report(run_dir: str | Path) -> str:
    """The page of the training run in ``run_dir`` as a string (writes the curves' PNGs under ``curves/``)."""
    run_dir = Path(run_dir)
    run_config = read_yaml(run_dir / "run_config.yaml") or {}
    summary = read_json(run_dir / SUMMARY_FILE) or {}
    history, source = read_log_history(run_dir)
    card, front = card_of(run_dir)
    job = str(run_config.get("job", ""))
    title = f"{run_dir.name} — {job}"
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)} — report</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>", f'<p class="note">training run · {esc(status_line(run_dir, history))}</p>',
        header(run_dir, run_config, summary, front),
        part("training", "Training: throughput and memory", training_html(run_dir, run_config, summary, history)),
        part("curves", "Curves", curves_html(run_dir, history, source)),
        part("checkpoints", "Checkpoints scored on the task", checkpoints_html(run_dir)),
        part("metrics", "Metrics (metrics.json)", job_outputs_html(run_dir)),
        part("card", "Model card", card_html(card, run_dir)),
        part("run", "Run: every setting of the recipe, versions and summary",
             run_html(run_config, summary, CONFIG_NAMES.get(job, ()))),
        "</body></html>\n"])


def write_training_report(run_dir: str | Path) -> Path:
    """Write ``run_dir/report.html`` for a finished or interrupted training run and return its path.

    Raises:
        InputError: ``run_dir`` is no folder or holds no training run's ``run_config.yaml``.
    """
    run_dir = Path(run_dir)
    run_config = read_yaml(run_dir / "run_config.yaml")
    if not run_dir.is_dir() or not is_training_run(run_config):
        raise InputError(f"{run_dir}: not a training run folder (no run_config.yaml of a `veracity train` job)")
    page = render_training_report(run_dir)
    path = run_dir / "report.html"
    with atomic_writer(path) as handle:
        handle.write(page)
    logger.info("wrote %s (%.1f MB)", path, len(page) / 1e6)
    return path


def finish_training_run(output_dir: str | Path, trainer: Any | None, *, device: str,
                        data: Mapping[str, Any] | None = None, dry_run: Mapping[str, Any] | None = None,
                        extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``trainer_state.json`` (when there is a trainer), ``training_summary.json`` and ``report.html`` into
    ``output_dir``. A report that fails to render is a warning, never a failed training run: ``veracity report
    RUN_DIR`` writes it again.

    Args:
        output_dir: the run folder.
        trainer: the Trainer that trained (its state and log history), or None (the calibrator has none).
        device: where the job trained (``cpu``, ``cuda:0``).
        data: the training data by name: :func:`file_facts` of a file, or a description.
        dry_run: the dry run's estimate for the same recipe (LoRA jobs: ``train/lora.py``), or None.
        extra: anything else the job measured (shown in the report's training section).
    """
    folder = Path(output_dir)
    summary: dict[str, Any] = {"written": datetime.now(UTC).isoformat(timespec="seconds"), "device": device}
    if trainer is not None:
        trainer.state.save_to_json(str(folder / "trainer_state.json"))
        summary["global_step"] = trainer.state.global_step
        summary["throughput"] = throughput(trainer.state.log_history)
    summary["peak_memory"] = peak_memory(device)
    summary["data"] = dict(data or {})
    summary["dry_run"] = dict(dry_run) if dry_run else None
    summary.update(extra or {})
    write_json(folder / SUMMARY_FILE, summary)
    try:
        return write_training_report(folder)
    except Exception as error:  # noqa: BLE001 - the trained model is what the run is for; its page can be remade
        logger.warning("report.html of %s not written (%s: %s); `veracity report %s` writes it", folder,
                       type(error).__name__, error, folder)
        return folder / "report.html"
