"""Checkpoint evaluation: label accuracy and macro-F1 of a generator checkpoint or an NLI verifier.

Usage: veracity eval checkpoint --kind generator --model runs/train/dpo_smollm2/merged [--split dev]
       veracity eval checkpoint --kind nli --nli_model cross-encoder/nli-deberta-v3-large [--sources fever_symmetric]

Examples are prepared claim/evidence pairs (``<prepared_dir>/<source>.jsonl``, the chosen hash split).
- generator: the R2VC prompt with the evidence as passage [1], greedy; the answer is parsed back. A parse failure
  counts as a wrong answer and is reported as the parse-failure rate.
- nli: (evidence, claim) through a sequence-classification model (evidence prefixed with article titles if the
  verifier was trained so); entailment / neutral / contradiction map to SUPPORTS / NOT ENOUGH INFO / REFUTES; also
  ECE and Brier of its probabilities, and the majority-class baseline.
Both: where examples carry annotator votes (Climate-FEVER evidence, ``meta.votes``), accuracy by gold label and
agreement ("SUPPORTS, unanimous" / "SUPPORTS, split"), since a label out of split votes is partly a coin toss.
Writes ``metrics.json``, ``results.md`` and ``predictions.jsonl`` (one row per example: id, source, gold, prediction,
and the verifier's probabilities or the generator's raw answer), for error analysis.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.prepared import read_prepared
from veracity.data_prep.schema import NLI_LABELS, NLI_TO_TERNARY, TERNARY_LABELS, TERNARY_TO_NLI, ClaimExample
from veracity.infer.metrics import (
    accuracy,
    accuracy_by_group,
    brier_score,
    confusion,
    expected_calibration_error,
    macro_f1,
)
from veracity.infer.parsing import name_cut_off
from veracity.infer.pipelines.r2vc.config import NLI_BACKEND_HELP
from veracity.infer.pipelines.r2vc.prompt import (
    RATIONALE_MAX_CHARS,
    answer_constraint,
    parse_r2vc_answer,
    prompt_messages,
)
from veracity.infer.quote_format import keeps_quote_format
from veracity.io import write_json, write_jsonl
from veracity.models.device import resolve_device
from veracity.models.engine import Engine, EngineConfig, GenerationRequest, record_decoding, unavailable_error
from veracity.models.engine_factory import make_engine
from veracity.models.nli import NLIVerifier
from veracity.rundir import record_facts, summarise_facts, write_run_config

logger = logging.getLogger(__name__)


@dataclass
class CheckpointEvalArgs:
    kind: str = field(default="generator", metadata={"help": "generator or nli."})
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep."})
    sources: list[str] = field(default_factory=lambda: ["vitaminc", "fever_symmetric", "climate_fever_evidence"],
                               metadata={"help": "Prepared sources evaluated, each reported on its own."})
    split: str = field(default="dev", metadata={"help": "Hash split to evaluate on."})
    max_examples: int | None = field(default=None, metadata={"help": "Cap per source (quick runs)."})
    output_dir: str = field(default="runs/eval_checkpoint", metadata={"help": "Run directory."})
    nli_model: str = field(default="embedded", metadata={"help": "NLI verifier: 'embedded', 'real', path, hub id."})
    nli_backend: str = field(default="auto", metadata={"help": NLI_BACKEND_HELP})
    max_new_tokens: int = field(default=160, metadata={
        "help": "Generator answer budget when unconstrained (constrained: sized to the longest answer the schema "
                "allows)."})
    constrained: bool = field(default=True, metadata={
        "help": "Constrain the generator's decoding to the answer's JSON schema where the engine can (the parser "
                "stays the final check)."})
    rationale_max_chars: int = field(default=RATIONALE_MAX_CHARS, metadata={
        "help": "Longest rationale the answer schema allows."})
    nli_batch_size: int = field(default=32, metadata={"help": "Pairs per verifier batch (--kind nli)."})

    def __post_init__(self) -> None:
        if self.kind not in ("generator", "nli"):
            raise ValueError(f"kind must be generator or nli, got {self.kind!r}")


def load_examples(args: CheckpointEvalArgs, source: str) -> list[ClaimExample]:
    rows = read_prepared(args.prepared_dir, source, [args.split])
    examples = [e for e in rows if isinstance(e, ClaimExample) and e.evidence_text.strip()]
    return examples[: args.max_examples] if args.max_examples else examples


def agreement_group(example: ClaimExample) -> str | None:
    """"<gold>, unanimous" or "<gold>, split" from the example's annotator votes; None without votes."""
    votes = example.meta.get("votes")
    if not votes:
        return None
    return f"{example.label}, {'unanimous' if len(set(votes)) == 1 else 'split'}"


def label_metrics(examples: list[ClaimExample], pred: list[str | None]) -> dict[str, Any]:
    gold = [e.label for e in examples]
    labels = [lab for lab in TERNARY_LABELS if lab in set(gold)]
    majority = Counter(gold).most_common(1)[0][0] if gold else None
    metrics = {
        "examples": len(gold),
        "accuracy": accuracy(gold, pred),
        "macro_f1": macro_f1(gold, pred, labels),
        "majority_class_accuracy": accuracy(gold, [majority] * len(gold)),
        "confusion": confusion(gold, pred, list(TERNARY_LABELS)),
    }
    by_agreement = accuracy_by_group(gold, pred, [agreement_group(e) for e in examples])
    if by_agreement:
        metrics["by_agreement"] = by_agreement
    return metrics


Evaluation = tuple[dict[str, Any], list[dict[str, Any]]]  # metrics, one prediction row per example


def prediction_row(example: ClaimExample, pred: str | None, **extra: Any) -> dict[str, Any]:
    return {"id": example.id, "source": example.source, "split": example.split, "gold": example.label,
            "prediction": pred, "agreement": agreement_group(example), **extra}


def evaluate_generator(engine: Engine, examples: list[ClaimExample], max_new_tokens: int,
                       constrained: bool = True, rationale_max_chars: int = RATIONALE_MAX_CHARS) -> Evaluation:
    """The generator's label on each example's gold evidence (one passage). Constrained, the answer follows the
    R2VC schema and ``max_new_tokens`` is its token budget; a parse failure of an answer cut by the budget is
    named ``length``. Each row keeps the decoding facts its answer was made under (``decoding``).

    Raises:
        EngineUnavailableError: the engine made no answer for some example (a server down): nothing is scored.
    """
    constraint = answer_constraint(1, rationale_max_chars, constrained, max_new_tokens, engine)
    requests = [GenerationRequest.chat(prompt_messages(e.claim, [e.evidence_text]), **constraint) for e in examples]
    results = engine.generate(requests)
    failed = unavailable_error(results)
    if failed is not None:
        raise failed
    kinds = ["json_schema"] if constrained else []
    predictions: list[str | None] = []
    rows = []
    failures: Counter[str] = Counter()
    kept_format = []  # per parsed answer: whether its rationale keeps the trained quote format
    for example, result in zip(examples, results, strict=True):
        text, answer, error = None, None, result.error
        if result.ok:
            text = result.candidates[0].text
            answer, error = parse_r2vc_answer(text, num_passages=1)
            error = name_cut_off(error, result.candidates[0].finish_reason)
        if error:
            failures[error.split(":")[0]] += 1
        if answer is not None:
            kept_format.append(keeps_quote_format(answer.rationale))
        predictions.append(answer.label if answer else None)
        rows.append(prediction_row(example, predictions[-1], answer=text, error=error,
                                   decoding=record_decoding(engine, kinds, [result])))
    metrics = label_metrics(examples, predictions)
    metrics["parse_failure_rate"] = sum(failures.values()) / len(examples) if examples else 0.0
    metrics["failures"] = dict(failures)
    metrics["quote_format_rate"] = sum(kept_format) / len(kept_format) if kept_format else None
    return metrics, rows


def evaluate_nli(scorer: NLIVerifier, examples: list[ClaimExample]) -> Evaluation:
    probs = scorer.predict([e.premise(scorer.evidence_titles) for e in examples], [e.claim for e in examples])
    predictions = [NLI_TO_TERNARY[NLI_LABELS[i]] for i in probs.argmax(1)]
    gold = [e.label for e in examples]
    metrics = label_metrics(examples, predictions)
    gold_index = [NLI_LABELS.index(TERNARY_TO_NLI[g]) for g in gold]
    metrics["ece"] = expected_calibration_error(probs.max(1), [p == g for p, g in zip(predictions, gold,
                                                                                          strict=True)])
    metrics["brier"] = brier_score(probs, gold_index)
    rows = [prediction_row(e, pred, probabilities={NLI_TO_TERNARY[name]: round(float(x), 6)
                                                   for name, x in zip(NLI_LABELS, row, strict=True)})
            for e, pred, row in zip(examples, predictions, probs, strict=True)]
    return metrics, rows


def mean_over_sources(results: Mapping[str, Mapping[str, Any]], metrics: Sequence[str]) -> dict[str, float | None]:
    """Each of ``metrics`` averaged over the sources of ``results`` (``{source: metrics}``) where it is a number: a
    metric that is None there (a generator's quote_format_rate when nothing parsed) is left out rather than counted
    as 0; None where no source has it. What a checkpoint sweep's table and the task scores during training report."""
    means: dict[str, float | None] = {}
    for metric in metrics:
        values = [float(r[metric]) for r in results.values() if isinstance(r.get(metric), (int, float))]
        means[metric] = sum(values) / len(values) if values else None
    return means


def markdown(results: dict[str, dict[str, Any]], kind: str) -> str:
    extra = "parse_failure_rate" if kind == "generator" else "ece"
    lines = [f"| source | examples | accuracy | macro-F1 | majority | {extra} |", "|---|---:|---:|---:|---:|---:|"]
    for source, m in results.items():
        lines.append(f"| {source} | {m['examples']} | {m['accuracy']:.3f} | {m['macro_f1']:.3f} | "
                     f"{m['majority_class_accuracy']:.3f} | {m[extra]:.3f} |")
    for source, m in results.items():
        if m.get("by_agreement"):
            lines += ["", f"{source}, accuracy by gold label and annotator agreement:", "",
                      "| gold, votes | examples | accuracy |", "|---|---:|---:|"]
            lines += [f"| {group} | {g['examples']} | {g['accuracy']:.3f} |" for group, g in m["by_agreement"].items()]
    return "\n".join(lines)


def make_parser() -> Any:
    return parser_for((CheckpointEvalArgs, EngineConfig), "veracity eval checkpoint")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args, engine_config = parse_config(make_parser(), argv)
    return evaluate_checkpoint(args, engine_config)


def evaluate_checkpoint(args: CheckpointEvalArgs, engine_config: EngineConfig, quiet: bool = False
                        ) -> dict[str, Any]:
    """Score one generator (``engine_config``: model and adapter) or NLI verifier (``args.nli_model``) on each
    source, into ``args.output_dir`` (module docstring); returns ``{source: metrics}``. ``quiet``: no table printed
    (a sweep prints its own)."""
    # the data, then the model, then the run folder: a bad input stops the run before a first use converts the
    # embedded model, and a model that is not there before anything is written
    examples_of = {source: load_examples(args, source) for source in args.sources}
    engine = make_engine(engine_config) if args.kind == "generator" else None
    if engine is not None:
        evaluate = partial(evaluate_generator, engine, max_new_tokens=args.max_new_tokens,
                           constrained=args.constrained, rationale_max_chars=args.rationale_max_chars)
    else:
        evaluate = partial(evaluate_nli, NLIVerifier(args.nli_model, args.nli_batch_size, backend=args.nli_backend,
                                                     device=engine_config.device))
    decoding = engine.decoding(["json_schema"] if args.constrained else []) if engine is not None else None
    write_run_config(args.output_dir, args, engine_config, job="eval checkpoint", decoding=decoding,
                     device=resolve_device(engine_config.device))
    results: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    for source, examples in examples_of.items():
        started = time.perf_counter()
        results[source], source_rows = evaluate(examples)
        seconds = time.perf_counter() - started  # model time: examples scored per second on --device
        results[source].update(seconds=round(seconds, 2), examples_per_second=round(len(examples) / seconds, 3))
        rows += source_rows
    if engine is not None:  # what the answers were made under (a server that rejected the schema: unconstrained)
        record_facts(args.output_dir, decoding=summarise_facts(row.get("decoding") for row in rows))
    write_jsonl(Path(args.output_dir) / "predictions.jsonl", rows)
    write_json(Path(args.output_dir) / "metrics.json", results)
    table = markdown(results, args.kind)
    (Path(args.output_dir) / "results.md").write_text(table + "\n", encoding="utf-8")
    if engine is not None:
        engine.close()
    if not quiet:
        print(table)
        print("examples/s: " + ", ".join(f"{source} {m['examples_per_second']:.2f}" for source, m in results.items())
              + f" (device {resolve_device(engine_config.device)})")
    return results
