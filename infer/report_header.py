"""The top of ``report.html`` (``infer/report_html.py``): what ran, on what, with which models — read from
``run_config.yaml`` — and what each metric name means.

The header answers an error analyst's first questions in one glance: when the run started, at which commit, on
which data (source, split, slice), with which models by id (generator, verifier, calibrator, or "none"), how the
generator decoded, and on which device. Every value comes from the run record (``veracity/rundir.py``), which
never holds a secret (an API key is written ``<redacted>``), and is escaped like any other text of the page.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from veracity.infer.report_text import Html, esc, fmt
from veracity.rundir import MIXED

# Config fields that say where a run's items come from, which split, and how much of it (first found wins).
DATA_SOURCE_FIELDS = ("claims", "items", "posts", "knowledge_store", "prepared_dir", "sources", "collection")
DATA_SLICE_FIELDS = ("max_examples", "subset_seed", "shard")
PREPARED_ONLY_FIELDS = ("prepared_dir", "sources", "split", "max_examples", "subset_seed")  # unused with --claims
MODEL_ROLES = ("generator", "verifier", "calibrator")

# What each metric name means (shown as the name's tooltip and in the glossary under the metrics).
METRIC_DEFINITIONS = {
    "accuracy": "share of items whose prediction equals the gold label (an abstention counts as NOT ENOUGH INFO)",
    "macro_f1": "macro-F1: the F1 of each gold label (precision and recall of that label), averaged with equal "
                "weight over the labels present in gold",
    "label_accuracy_before_abstention": "accuracy of the label each claim would have been given without abstention "
                                        "(the chosen candidate's label)",
    "coverage": "share of items answered (not abstained)",
    "answered": "number of items answered (not abstained)",
    "selective_accuracy": "accuracy over the answered items only",
    "selective_risk": "1 − selective accuracy: the error rate over the answered items",
    "aurc": "AURC: area under the risk–coverage curve (answer the most confident first; lower is better)",
    "ece": "ECE: expected calibration error, |confidence − accuracy| averaged over confidence bins, weighted by "
           "their size (lower is better)",
    "brier": "Brier score: mean squared difference between the confidence and 1 (right) / 0 (wrong); lower is "
             "better",
    "m4": "M4 (UTS): mean of entailment, citation recall, citation precision and coverage of the article",
    "entailment": "share of the article's cited sentences that their evidence entails (M4 part)",
    "citation_recall": "share of the sentences needing a cite that have a supporting one (M4 part)",
    "citation_precision": "share of the cites that support their sentence (M4 part)",
    "old_averitec_score": "old AVeriTeC score: share of claims with the right label whose evidence matches the gold "
                          "questions and answers (Hungarian METEOR ≥ the threshold)",
    "ev2r": "Ev²R: an LLM judge's recall of the gold evidence in the predicted evidence (question only, or question "
            "and answer); the new AVeriTeC score counts a right label only when that recall passes the threshold",
    "mrr@5": "MRR@5: mean over posts of 1 / rank of the first gold paper in the top 5 (0 when none is there)",
    "hit@1": "share of posts with a gold paper at rank 1",
    "hit@5": "share of posts with a gold paper in the top 5",
    "parse_failure_rate": "share of generator answers that did not parse as the answer format",
    "quote_format_rate": "share of parsed generator rationales that keep the trained quote format",
    "n": "number of items scored",
    "n_errors": "items that failed (error records), counted wrong",
}


def metric_definition(name: str) -> str | None:
    """The definition of a (flattened) metric name: ``by_source.fever.ece_uncalibrated`` → ECE's, said of the
    uncalibrated confidence; ``ev2r_qa_recall`` → Ev²R's; None for a name this page does not know."""
    key = name.rsplit(".", 1)[-1].lower()
    if key in METRIC_DEFINITIONS:
        return METRIC_DEFINITIONS[key]
    base = re.sub(r"_uncalibrated$", "", key)
    if base != key and base in METRIC_DEFINITIONS:
        return f"{METRIC_DEFINITIONS[base]}; of the uncalibrated confidence (the chosen candidate's s_ver)"
    for prefix in ("ev2r", "m4", "old_averitec"):
        if key.startswith(prefix):
            return METRIC_DEFINITIONS.get(prefix, METRIC_DEFINITIONS.get(f"{prefix}_score"))
    return None


def glossary_html(names: Sequence[str]) -> Html:
    """A folded block defining each metric this run reports (by its base name, once)."""
    seen: dict[str, str] = {}
    for name in names:
        definition = metric_definition(name)
        key = name.rsplit(".", 1)[-1]
        if definition and definition not in seen.values():
            seen[key] = definition
    if not seen:
        return Html("")
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in seen.items())
    return Html('<details class="glossary"><summary>What the metrics mean (each name\'s tooltip says it too)'
                f"</summary><dl>{rows}</dl></details>")


def confusion_html(matrix: Mapping[str, Mapping[str, Any]]) -> Html:
    """``{gold: {predicted: count}}`` as a table with its axes named: gold down the rows, predicted across."""
    columns = list(dict.fromkeys(p for row in matrix.values() for p in row))
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    parts = [f'<table class="confusion"><tr><th colspan="2" rowspan="2"></th>'
             f'<th colspan="{len(columns)}" class="axis">predicted →</th></tr><tr>{head}</tr>']
    for k, (gold, row) in enumerate(matrix.items()):
        axis = f'<th rowspan="{len(matrix)}" class="axis vertical">gold ↓</th>' if k == 0 else ""
        cells = "".join(f'<td class="n{" diag" if c == gold else ""}">{esc(fmt(row.get(c, 0)))}</td>'
                        for c in columns)
        parts.append(f"<tr>{axis}<th>{esc(gold)}</th>{cells}</tr>")
    return Html("".join(parts) + "</table>")


# --- the header --------------------------------------------------------------------------------------------------


def configs_of(run_config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    configs = run_config.get("config")
    return [c for c in (configs if isinstance(configs, list) else [configs]) if isinstance(c, Mapping)]


def first_field(configs: Sequence[Mapping[str, Any]], name: str) -> Any:
    return next((c[name] for c in configs if c.get(name) not in (None, "", [])), None)


def data_line(configs: Sequence[Mapping[str, Any]]) -> str:
    """``source … · split … · slice …`` from the configs. A claims file is read whole (R2VC's ``max_examples``,
    ``subset_seed``, ``sources`` and ``split`` choose among prepared claims only), so the line names neither."""
    def value(name: str) -> Any:
        return None if own_file and name in PREPARED_ONLY_FIELDS else first_field(configs, name)

    own_file = first_field(configs, "claims") is not None
    sources = [f"{name} {fmt(value(name))}" for name in DATA_SOURCE_FIELDS if value(name) is not None]
    slices = [f"{name} {fmt(value(name))}" for name in DATA_SLICE_FIELDS if value(name) is not None
              and (name != "subset_seed" or value("max_examples") is not None)]  # the seed of max_examples' pick
    if value("max_examples") is None:
        slices.insert(0, "every item")
    return " · ".join([f"source: {'; '.join(sources) or 'not recorded'}", f"split: {value('split') or '–'}",
                       f"slice: {', '.join(slices)}"])


def model_note(role: str, model_id: str) -> str:
    """How a verifier was found, said in words: the pre-built fallback from the models root, or the one
    ``scripts/train_verifier.sh`` installs in the cache ('' for any other model or path)."""
    if role != "verifier":
        return ""
    from veracity.models.registry import VERIFIER_FOLDER, cache_dir, models_roots  # lazy: the page needs no torch

    path = model_id.split("#", 1)[0]
    if VERIFIER_FOLDER not in path:
        return ""
    try:
        if Path(path).resolve().is_relative_to((cache_dir() / "models").resolve()):
            return "the embedded verifier trained here (scripts/train_verifier.sh, in the cache)"
        if any(Path(path).resolve().is_relative_to(Path(root).resolve()) for root in models_roots()):
            return "the pre-built embedded verifier (fallback from the models root: none trained in the cache)"
    except (OSError, ValueError):
        pass
    return "the embedded verifier (folder " + VERIFIER_FOLDER + ")"


def models_rows(run_config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Generator, verifier, calibrator (each by id, or "none"), then any other model the run names."""
    models = {str(k): str(v) for k, v in (run_config.get("models") or {}).items()}
    rows: list[tuple[str, Any]] = []
    for role in [*MODEL_ROLES, *(k for k in models if k not in MODEL_ROLES)]:
        value = models.get(role)
        if value is None:
            rows.append((role, Html('<span class="note">none</span>')))
            continue
        note = model_note(role, value)
        rows.append((role, Html(f'<code>{esc(value)}</code>' + (f' <span class="note">— {esc(note)}</span>'
                                                                 if note else ""))))
    return rows


def engine_line(configs: Sequence[Mapping[str, Any]], run_config: Mapping[str, Any]) -> str:
    """The engine kind and model, then the decoding the run recorded (constrained or not, and the rest)."""
    engine, model = first_field(configs, "engine"), first_field(configs, "model")
    decoding = run_config.get("decoding") or {}
    parts = [f"engine {engine}" + (f" ({model})" if model and not str(model).startswith("/") else "")
             if engine else "no generator engine"]
    if decoding:
        constrained = decoding.get("constrained")
        parts.append("constrained decoding" if constrained is True else "unconstrained decoding"
                     if constrained is False else "mixed decoding" if constrained == MIXED else "decoding")
        parts += [f"{k} {fmt(v)}" for k, v in decoding.items() if k not in ("constrained", MIXED)]
        if decoding.get(MIXED):  # the records disagree: how many were made under what
            parts.append("records: " + "; ".join(
                f"{group['records']} " + ", ".join(f"{k} {fmt(v)}" for k, v in group.items() if k != "records")
                for group in decoding[MIXED]))
    elif engine:
        parts.append("decoding not recorded (no generation, or a run from before decoding was recorded)")
    return " · ".join(parts)


def run_date(run_config: Mapping[str, Any], written: str | None = None) -> str:
    """When the run started (``started``), else when its record was written, else "not recorded"."""
    return run_config.get("started") or (f"{written} (run_config.yaml written)" if written else "not recorded")


def commit_html(run_config: Mapping[str, Any]) -> Html:
    return Html(f"<code>{esc(run_config.get('git_revision') or 'not recorded')}</code>")


def header_table(rows: Sequence[tuple[str, Any]]) -> Html:
    """The header's look for any run (a pipeline's here, a training run's in ``train/report.py``): one row per
    name, values escaped unless Html."""
    return Html('<table class="kv header">' + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>"
                                                       for k, v in rows) + "</table>")


def header_html(run_config: Mapping[str, Any] | None, written: str | None = None) -> Html:
    """The run's header: date, commit, data, models, engine and decoding, device (from ``run_config.yaml``).

    Args:
        run_config: the run record (None: the page says it has none).
        written: when ``run_config.yaml`` was written, for a record from before the start time was kept.
    """
    if not run_config:
        return Html('<p class="note">no run_config.yaml: when, on what and with which models is not known</p>')
    configs = configs_of(run_config)
    return header_table([
        ("date", run_date(run_config, written)), ("commit", commit_html(run_config)),
        ("job", run_config.get("job")), ("data", data_line(configs)), *models_rows(run_config),
        ("engine and decoding", engine_line(configs, run_config)),
        ("device", run_config.get("device") or first_field(configs, "device") or "not recorded")])
