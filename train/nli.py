"""Fine-tune the NLI verifier: a 3-way cross-encoder (entailment / neutral / contradiction) on premise–hypothesis
pairs, kept as a standard transformers sequence-classification folder with its label map.

Usage: veracity train nli --config configs/train/nli_minilm_cpu.yaml [--quick true] [--init reranker|embedder|PATH]
       veracity train nli --config configs/train/nli_minilm_cpu_stage2.yaml   (continues from stage 1)

No 3-way NLI model installs offline, so the embedded verifier is ours. Data: the ``train`` hash split of the
prepared NLI sources (``nli_*``) plus FEVER-family claim/evidence examples (SUPPORTS→entailment,
NOT ENOUGH INFO→neutral, REFUTES→contradiction); ``calib`` and ``dev`` stay out, so the claims the verifier is
evaluated on (FEVER-Symmetric, VitaminC, Climate-FEVER dev) are never trained on. Each (source, label) is capped
so no source or class dominates (``caps`` overrides the cap per source or per source/label). The starting point
defaults to the embedded ms-marco MiniLM cross-encoder (dequantized from its INT8 ONNX): it already reads sentence
pairs jointly; ``init`` may also name an earlier verifier to continue from (stage 2). ``evidence_titles`` puts the
article title in front of each evidence sentence and is recorded in the model's config.json, so scorers read it
back (measured: no gain for the embedded verifier, see docs/experiment-log.md#nli-verifier). ``starts`` trains several
seeds to an early step and finishes only the best on calib, since whether a fresh head takes off within one epoch
depends on its seed (docs/experiment-log.md). ``label_offsets`` fits per-label logit offsets on calib after training
and folds them into the head's bias (``train/label_offsets.py``). The run resumes from its last
checkpoint, keeps the checkpoint with the best macro-F1 on the calib split (dev is only reported; with
``load_best_model_at_end: false`` the last step, calib then only reported too), and installs
the result as the embedded verifier (``$VERACITY_CACHE/models/nli-verifier-minilm``, with metrics.json), once
per machine.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veracity.config import make_parser as parser_for
from veracity.data_prep.errors import InputError
from veracity.data_prep.prepared import prepared_names, read_prepared
from veracity.data_prep.schema import NLI_LABELS, TERNARY_TO_NLI, ClaimExample
from veracity.data_prep.splits import hash_int
from veracity.infer.metrics import accuracy, macro_f1
from veracity.io import atomic_directory, mark_completed, write_json
from veracity.models.model_card import command_line, data_licences, hub_id, write_model_card
from veracity.models.onnx_runtime import export_model
from veracity.models.registry import embedded_verifier_dir, float_reranker, resolve_model
from veracity.rundir import write_run_config
from veracity.train.common import last_checkpoint, parse_training_config, resolve_reporting
from veracity.train.label_offsets import fit_label_offsets, fold_into_head, log_probabilities, objective
from veracity.train.report import finish_training_run
from veracity.train.task_scores import task_score_callback

logger = logging.getLogger(__name__)
ID2LABEL = dict(enumerate(NLI_LABELS))  # 0 entailment, 1 neutral, 2 contradiction
CLAIM_SOURCES = ["fever_symmetric", "sufficient_facts_fever", "sufficient_facts_vitaminc", "vitaminc",
                 "climate_fever_evidence"]
EVAL_SOURCES = ["fever_symmetric", "vitaminc", "sufficient_facts_vitaminc", "climate_fever_evidence"]


@dataclass
class NLIDataArgs:
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep."})
    init: str = field(default="reranker", metadata={"help": "reranker (embedded ms-marco), embedder, path, hub id."})
    nli_sources: list[str] = field(default_factory=lambda: ["all"], metadata={"help": "nli_* outputs, or all."})
    claim_sources: list[str] = field(default_factory=lambda: list(CLAIM_SOURCES), metadata={
        "help": "Prepared claim sources whose (evidence, claim) pairs are trained on, besides the nli_* ones."})
    eval_sources: list[str] = field(default_factory=lambda: list(EVAL_SOURCES), metadata={
        "help": "Sources whose dev (and calib) pairs are evaluated."})
    cap_per_source_label: int = field(default=2500, metadata={"help": "Max training pairs per (source, label)."})
    caps: list[str] = field(default_factory=list, metadata={
        "help": "Per-source caps overriding cap_per_source_label: 'source=N' or 'source/label=N'; N=-1 keeps all."})
    repeats: list[str] = field(default_factory=list, metadata={
        "help": "Upsampling after the caps: 'source=N' or 'source/label=N' puts each kept pair of that source (or "
                "source and label) N times into the epoch; others once."})
    max_eval_per_source: int = field(default=400, metadata={"help": "Dev pairs per source evaluated during training."})
    max_length: int = field(default=192, metadata={"help": "Premise + hypothesis length, tokens."})
    head_learning_rate: float = field(default=0.0, metadata={
        "help": "Learning rate of the classification head (the parameters outside the pretrained base model, fresh "
                "when starting from a pair encoder), under the same schedule; 0 = learning_rate."})
    evidence_titles: bool = field(default=False, metadata={
        "help": "Prefix each evidence passage with its article title ('Title: sentence'). Recorded in the model's "
                "config.json (veracity_evidence_titles), so every scorer feeds the verifier the same way."})
    length_batch_order: str = field(default="sorted", metadata={
        "choices": ["sorted", "shuffled"],
        "help": "With train_sampling_strategy group_by_length: 'sorted' walks each megabatch of 50 batches from its "
                "longest pairs to its shortest (transformers' order: on a mixed-source set, one source after "
                "another); 'shuffled' keeps the same length-grouped batches and puts them in random order."})
    length_group_batches: int = field(default=50, metadata={
        "help": "With length_batch_order shuffled: how many batches of randomly drawn pairs are sorted by length "
                "together (transformers' megabatch: 50). Fewer mixes sources within a batch at more padding."})
    starts: int = field(default=1, metadata={
        "help": "Train this many starts (seeds seed, seed+1, ...: head initialisation, batch order, dropout) to step "
                "start_steps, then finish only the one with the best calib score (the checkpoint metric); the others "
                "are dropped. Guards against a start whose fresh head fails to take off (Dodge et al., 2020)."})
    start_steps: int = field(default=200, metadata={
        "help": "With starts > 1: the step at which the starts are compared, on the full run's schedule."})
    vote_weight: float = field(default=0.0, metadata={
        "help": "For training pairs that carry their annotators' votes (Climate-FEVER evidence): train on "
                "(1 - w) x the gold label + w x the votes' label distribution instead of the gold label alone (soft "
                "labels from the crowd, Uma et al., 2021), so a sentence with one REFUTES and one NOT ENOUGH INFO "
                "vote (gold NOT ENOUGH INFO) no longer teaches that its text refutes nothing. 0 = gold labels only; "
                "in [0, 1]."})
    vote_labels: list[str] = field(default_factory=list, metadata={
        "help": "With vote_weight: the NLI labels (entailment, neutral, contradiction) whose votes count; a vote for "
                "another label counts as the gold label, e.g. 'contradiction' moves a pair's target toward REFUTES "
                "where annotators voted REFUTES and nowhere else. Empty = every label's votes; refused without "
                "vote_weight."})
    focal_gamma: float = field(default=0.0, metadata={
        "help": "Focal loss (Lin et al., 2017): each pair's cross-entropy times (1 - p_gold)^gamma, so pairs the "
                "model already gets right weigh less and the hard ones (a minority label's) more; 0 = cross-entropy."})
    label_offsets: bool = field(default=False, metadata={
        "help": "After training, fit per-label logit offsets on the whole calib split (each evaluation source weighs "
                "the same) and add them to the head's bias: a label-prior correction between the training mix and "
                "the evaluated sets (train/label_offsets.py). Recorded in config.json (veracity_label_offsets), "
                "metrics.json and the card."})
    label_offset_sources: list[str] = field(default_factory=list, metadata={
        "help": "With label_offsets: the evaluation sources whose calib pairs the offsets are fitted on (e.g. "
                "climate_fever_evidence: the prior of the set whose labels are least like the training mix's). "
                "Empty = every evaluation source; refused without label_offsets."})
    task_eval_examples: int = field(default=0, metadata={
        "help": "Score each saved checkpoint on this many dev examples per evaluation source (eval checkpoint's "
                "accuracy, macro-F1, ECE, Brier), into the log history and the report's curves; 0 = off."})
    quick: bool = field(default=False, metadata={"help": "A short, labelled quick run (demo; not the verifier)."})
    install: bool = field(default=True, metadata={"help": "Install the result as the embedded verifier."})
    seed_data: int = field(default=13, metadata={"help": "Seed of the pairs' sampling and order (not the model's)."})


def _order(seed: int, key: str) -> int:
    return hash_int(f"{seed}:{key}")


def parse_per_bucket(items: Sequence[str], option: str) -> dict[str, int]:
    """``['climate_fever_evidence=-1', 'nli_sick/neutral=300']`` → ``{'climate_fever_evidence': -1, ...}`` (the
    entries of option ``option``; read with :func:`bucket_value`)."""
    table: dict[str, int] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise InputError(f"{option}: {item!r} is not 'source=N' or 'source/label=N'")
        table[key.strip()] = int(value)
    return table


def bucket_value(table: dict[str, int], source: str, label: str, default: int) -> int:
    """The most specific entry of a :func:`parse_per_bucket` table for (source, label): 'source/label', then
    'source', then ``default``."""
    return table.get(f"{source}/{label}", table.get(source, default))


def parse_caps(caps: Sequence[str], default: int) -> Any:
    """``caps`` → a function (source, label) → cap (None = all, from N = -1)."""
    table = parse_per_bucket(caps, "caps")

    def cap(source: str, label: str) -> int | None:
        n = bucket_value(table, source, label, default)
        return None if n < 0 else n

    return cap


def training_pairs(args: NLIDataArgs) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Capped, shuffled (premise, hypothesis, label) pairs of the train split, and their counts."""
    prepared = Path(args.prepared_dir)
    # the manifest lists the outputs: a stale nli_*.jsonl of an earlier prep run in the folder is never read
    names = prepared_names(prepared, "nli_") if args.nli_sources == ["all"] else args.nli_sources
    buckets: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for name in names:
        for r in read_prepared(prepared, name, ["train"]):
            buckets[(name, r.label)].append({"premise": r.premise, "hypothesis": r.hypothesis, "label": r.label,
                                             "id": r.id})
    for name in args.claim_sources:
        for pair in claim_pairs(prepared, name, "train", args.evidence_titles):
            buckets[(name, pair["label"])].append(pair)
    cap = parse_caps(args.caps, args.cap_per_source_label)
    repeats = parse_per_bucket(args.repeats, "repeats")
    known = {name for name, _ in buckets} | {f"{name}/{label}" for name, label in buckets}
    for key, times in repeats.items():  # a misspelt source would otherwise repeat nothing, silently
        if key not in known:
            raise InputError(f"repeats: '{key}={times}' names no source or source/label of the training pairs")
        if times < 1:
            raise InputError(f"repeats: {key} is repeated {times} times; use caps to leave pairs out")
    pairs = []
    counts: dict[str, int] = {}
    repeated: dict[str, int] = {}
    for (name, label), rows in sorted(buckets.items()):
        rows.sort(key=lambda row: _order(args.seed_data, row["id"]))
        kept = rows[: cap(name, label)]
        counts[f"{name}/{label}"] = len(kept)
        times = bucket_value(repeats, name, label, 1)
        if times > 1:
            repeated[f"{name}/{label}"] = times
        pairs += kept + [{**row, "id": f"{row['id']}#{k}"} for k in range(2, times + 1) for row in kept]
    pairs.sort(key=lambda row: _order(args.seed_data, "shuffle" + row["id"]))
    # by_bucket: distinct pairs kept; pairs and labels: what one epoch sees, repeats included
    stats = {"pairs": len(pairs), "labels": dict(Counter(p["label"] for p in pairs)), "by_bucket": counts}
    return pairs, {**stats, "repeats": repeated} if repeated else stats


def eval_pairs(args: NLIDataArgs, split: str = "dev", capped: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Per evaluation source, its pairs of ``split`` in a seeded order; ``capped``: the first
    ``max_eval_per_source``."""
    out = {}
    for name in args.eval_sources:
        rows = claim_pairs(Path(args.prepared_dir), name, split, args.evidence_titles)
        rows.sort(key=lambda row: _order(args.seed_data, row["id"]))
        out[name] = rows[: args.max_eval_per_source] if capped else rows
    return out


def claim_pairs(prepared_dir: Path, name: str, split: str, titles: bool) -> list[dict[str, Any]]:
    """(premise, hypothesis, label, id) pairs of one split of a prepared claim source (read through the manifest),
    examples without evidence skipped, and ``votes`` (NLI labels) where the annotators' votes are kept. The premise
    is ``ClaimExample.premise`` (with article titles when ``titles``)."""
    examples: list[ClaimExample] = read_prepared(prepared_dir, name, [split])  # type: ignore[assignment]
    return [{"premise": e.premise(titles), "hypothesis": e.claim, "label": TERNARY_TO_NLI[e.label], "id": e.id,
             **({"votes": [TERNARY_TO_NLI[v] for v in e.meta["votes"]]} if e.meta.get("votes") else {})}
            for e in examples if e.split == split and e.evidence_text.strip()]


def initial_model(init: str) -> Path:
    if init == "reranker":
        return float_reranker()
    if init == "embedder":
        return resolve_model("embedder")
    return resolve_model("nli_verifier", init)


def check_label_order(folder: Path) -> None:
    """Continuing from a 3-way NLI model is only right if its head uses our label order (the head is kept as is)."""
    config = json.loads((Path(folder) / "config.json").read_text())
    names = [str(config.get("id2label", {}).get(str(i), "")).lower() for i in range(3)]
    if sorted(names) == sorted(NLI_LABELS) and names != list(NLI_LABELS):
        raise ValueError(f"{folder}/config.json: field 'id2label': the NLI head is ordered {names}, not "
                         f"{list(NLI_LABELS)}; start from a model with our label order or from a pair encoder")


def vote_target(label: str, votes: Sequence[str], weight: float,
                counted: Sequence[str] = NLI_LABELS) -> list[float]:
    """The training target of a pair: ``(1 - weight)`` on its gold ``label`` plus ``weight`` spread over the labels
    as its annotators voted (NLI labels, in ``NLI_LABELS`` order), where a vote for a label outside ``counted``
    counts as the gold label; a pair without votes keeps its gold label."""
    target = np.eye(len(NLI_LABELS))[NLI_LABELS.index(label)]
    if votes and weight:
        votes = [v if v in counted else label for v in votes]
        share = np.array([sum(v == name for v in votes) for name in NLI_LABELS]) / len(votes)
        target = (1 - weight) * target + weight * share
    return [float(x) for x in target]


def _tokenize(tokenizer: Any, rows: list[dict[str, Any]], max_length: int, vote_weight: float = 0.0,
              vote_labels: Sequence[str] = NLI_LABELS) -> Any:
    """The pairs tokenized, each with its ``label``: the gold label's id, or with ``vote_weight`` its
    :func:`vote_target` distribution (for the training set only: evaluation scores gold labels)."""
    from datasets import Dataset  # lazy here and below, as transformers: seconds to import

    label2id = {v: k for k, v in ID2LABEL.items()}
    data = Dataset.from_list([{"premise": r["premise"], "hypothesis": r["hypothesis"],
                               "label": (vote_target(r["label"], r.get("votes", []), vote_weight, vote_labels)
                                         if vote_weight else label2id[r["label"]])} for r in rows])
    return data.map(lambda b: tokenizer(b["premise"], b["hypothesis"], truncation="only_first",
                                        max_length=max_length), batched=True, remove_columns=["premise", "hypothesis"])


def scores(predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy and macro-F1 of the logits ``predictions`` against gold label ids."""
    gold = [ID2LABEL[int(i)] for i in labels]
    pred = [ID2LABEL[int(i)] for i in predictions.argmax(-1)]
    return {"accuracy": accuracy(gold, pred), "macro_f1": macro_f1(gold, pred, sorted(set(gold)))}


def focal_loss(logits: Any, labels: Any, gamma: float, num_items_in_batch: Any = None) -> Any:
    """The focal loss of a batch (Lin et al., 2017): ``-(1 - p)^gamma log p`` of each row's gold label ``p``, summed
    over the rows and divided by ``num_items_in_batch`` (the Trainer's count over an accumulated batch) where given,
    else averaged; ``gamma`` 0 is cross-entropy. ``labels`` are label ids, or target distributions (rows of
    :func:`vote_target`), where each label's term is weighed by its share. Computed in float32 whatever the logits'
    dtype."""
    import torch

    log_p = torch.log_softmax(logits.float(), dim=-1)
    if labels.dim() == 2:  # the Trainer counted every entry of a (rows, labels) target as an item
        targets = labels.float()
        num_items_in_batch = None if num_items_in_batch is None else num_items_in_batch / labels.shape[-1]
    else:
        targets = torch.nn.functional.one_hot(labels, log_p.shape[-1]).float()
    loss = -(targets * (1 - log_p.exp()) ** gamma * log_p).sum(-1)
    return loss.sum() / num_items_in_batch if num_items_in_batch is not None else loss.mean()


def focal_loss_func(gamma: float) -> Any:
    """The Trainer's ``compute_loss_func`` for :func:`focal_loss` with ``gamma``."""

    def loss(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
        return focal_loss(outputs.logits, labels, gamma, num_items_in_batch)

    return loss


def head_parameters(model: Any) -> list[Any]:
    """The parameters outside the model's pretrained base (``model.base_model_prefix``): its task head."""
    prefix = f"{model.base_model_prefix}."
    return [p for name, p in model.named_parameters() if not name.startswith(prefix)]


def with_head_rate(optimizer: Any, head: list[Any], rate: float) -> Any:
    """``optimizer`` with the ``head`` parameters moved out of each of its groups into a copy of that group at
    learning rate ``rate`` (weight decay and the rest kept): call before the scheduler is built and the first step."""
    moved = {id(p) for p in head}
    for group in list(optimizer.param_groups):
        params = [p for p in group["params"] if id(p) in moved]
        if params:
            group["params"] = [p for p in group["params"] if id(p) not in moved]
            optimizer.add_param_group({**{k: v for k, v in group.items() if k != "params"}, "params": params,
                                       "lr": rate})
    return optimizer


def shuffled_length_batches(lengths: Sequence[int], batch_size: int, generator: Any,
                            group_batches: int | None = None) -> list[int]:
    """Indices in batches of similar length (transformers' megabatch grouping: ``group_batches`` batches of random
    pairs sorted together), the full batches in random order and a final short batch, if any, last so that the data
    loader's batch boundaries stay those of the grouping."""
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    order = get_length_grouped_indices(list(lengths), batch_size, group_batches, generator=generator)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    short = [b for b in batches if len(b) < batch_size]
    full = [b for b in batches if len(b) == batch_size]
    return [i for b in torch.randperm(len(full), generator=generator).tolist() for i in full[b]] + \
        [i for b in short for i in b]


def _shuffled_sampler(lengths: Sequence[int], batch_size: int, seed: int, group_batches: int) -> Any:
    import torch

    class ShuffledLengthBatches(torch.utils.data.Sampler):
        def __init__(self) -> None:
            self.generator = torch.Generator().manual_seed(seed)  # a new order each epoch, the same on a rerun

        def __len__(self) -> int:
            return len(lengths)

        def __iter__(self) -> Any:
            return iter(shuffled_length_batches(lengths, batch_size, self.generator, group_batches))

    return ShuffledLengthBatches()


def _trainer_class() -> Any:
    from transformers import Trainer  # lazy: seconds to import

    class HeadRateTrainer(Trainer):
        """Trainer whose head may learn at its own rate (``head_learning_rate``; 0 = the body's) and whose
        length-grouped batches may come in random order (``length_batch_order='shuffled'``)."""

        def __init__(self, *args: Any, head_learning_rate: float = 0.0, length_batch_order: str = "sorted",
                     length_group_batches: int = 50, **kwargs: Any) -> None:
            if length_batch_order not in ("sorted", "shuffled"):
                raise ValueError(f"length_batch_order: {length_batch_order!r} is not 'sorted' or 'shuffled'")
            super().__init__(*args, **kwargs)
            self.head_learning_rate = head_learning_rate
            self.length_batch_order = length_batch_order
            self.length_group_batches = length_group_batches

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            data = self.train_dataset if train_dataset is None else train_dataset
            if self.length_batch_order != "shuffled" or self.args.train_sampling_strategy != "group_by_length":
                return super()._get_train_sampler(train_dataset)
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return _shuffled_sampler([len(ids) for ids in data["input_ids"]],
                                     self.args.train_batch_size * self.args.gradient_accumulation_steps, seed,
                                     self.length_group_batches)

        def create_optimizer(self, model: Any = None) -> Any:
            fresh = self.optimizer is None
            optimizer = super().create_optimizer(model)
            if fresh and self.head_learning_rate > 0:
                with_head_rate(optimizer, head_parameters(self.model if model is None else model),
                               self.head_learning_rate)
            return optimizer

    return HeadRateTrainer


def _stop_at(step: int) -> Any:
    from transformers import TrainerCallback

    class StopAt(TrainerCallback):
        """Ends training at ``step`` with an evaluation and a checkpoint, leaving the schedule of the full run."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if state.global_step >= step:
                control.should_training_stop = control.should_evaluate = control.should_save = True
            return control

    return StopAt()


def checkpoint_score(checkpoint: Path, metric: str) -> float:
    """``metric`` (e.g. ``eval_calib_macro_f1``) of the evaluation at the step a checkpoint was saved."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    values = [h[metric] for h in state["log_history"] if metric in h and h.get("step") == state["global_step"]]
    if not values:
        raise ValueError(f"{checkpoint}: no {metric} at step {state['global_step']} in trainer_state.json")
    return float(values[-1])


def best_start(scores: dict[int, float], greater_is_better: bool = True) -> int:
    """The seed of the best start; a tie goes to the lowest seed."""
    sign = 1 if greater_is_better else -1
    return min(scores, key=lambda seed: (-sign * scores[seed], seed))


def start_dir(output_dir: str | Path, seed: int) -> Path:
    """The folder of the start with this seed: ``output_dir/starts/seed_N``."""
    return Path(output_dir) / "starts" / f"seed_{seed}"


def start_arguments(training: Any, seed: int) -> Any:
    """The training arguments of the start with this seed (data_seed, if set, moved on by as much), in its own
    folder (:func:`start_dir`)."""
    import copy

    start = copy.deepcopy(training)
    start.seed = seed
    if training.data_seed is not None:
        start.data_seed = training.data_seed + seed - training.seed
    start.output_dir = str(start_dir(training.output_dir, seed))
    return start


def run_starts(args: NLIDataArgs, training: Any, trainer_for: Any) -> dict[str, Any]:
    """Train each start to ``start_steps`` in ``output_dir/starts/seed_N`` and choose the best on calib; the scores
    are kept in ``starts.json`` as each start ends, so a killed run does not train a finished start again."""
    metric = training.metric_for_best_model or "calib_macro_f1"
    metric = metric if metric.startswith("eval_") else f"eval_{metric}"
    record = Path(training.output_dir) / "starts.json"
    scores = {int(seed): value for seed, value in
              (json.loads(record.read_text())["scores"] if record.exists() else {}).items()}
    result = {"metric": metric, "step": args.start_steps, "scores": scores}  # starts.json, then with the choice
    for seed in range(training.seed, training.seed + args.starts):
        if seed in scores:
            continue
        run = start_arguments(training, seed)
        trainer = trainer_for(run, [_stop_at(args.start_steps)])
        trainer.train(resume_from_checkpoint=last_checkpoint(run.output_dir))
        scores[seed] = checkpoint_score(Path(run.output_dir) / f"checkpoint-{trainer.state.global_step}", metric)
        logger.info("start seed %d: %s %.4f at step %d", seed, metric, scores[seed], trainer.state.global_step)
        write_json(record, result)
    chosen = best_start(scores, training.greater_is_better is not False)
    for seed in scores:  # the dropped starts' checkpoints (model and optimizer state) are not needed again
        if seed != chosen:
            shutil.rmtree(start_dir(training.output_dir, seed), ignore_errors=True)
    logger.info("continuing start seed %d", chosen)
    return {**result, "chosen": chosen}


def make_parser() -> Any:
    from transformers import TrainingArguments

    return parser_for((NLIDataArgs, TrainingArguments), "veracity train nli")


def check_options(args: NLIDataArgs) -> None:
    """:class:`InputError` for an option out of range or one that would be silently ignored."""
    if not 0.0 <= args.vote_weight <= 1.0:
        raise InputError(f"vote_weight: {args.vote_weight:g} is not in [0, 1]")
    if unknown := [name for name in args.vote_labels if name not in NLI_LABELS]:
        raise InputError(f"vote_labels: {', '.join(unknown)} is not an NLI label ({', '.join(NLI_LABELS)})")
    if args.vote_labels and not args.vote_weight:
        raise InputError("vote_labels: has no effect without vote_weight (give --vote_weight W, 0 < W <= 1)")
    if args.label_offset_sources and not args.label_offsets:
        raise InputError("label_offset_sources: has no effect without label_offsets (give --label_offsets true)")
    if unknown := [name for name in args.label_offset_sources if name not in args.eval_sources]:
        raise InputError(f"label_offset_sources: {', '.join(unknown)} is not an evaluation source "
                         f"({', '.join(args.eval_sources)})")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

    args, training = parse_training_config(make_parser(), argv)
    resolve_reporting(training)  # `auto`: TensorBoard where installed
    if args.quick:  # the demo's fallback: minutes, clearly not the real verifier
        training.max_steps = min(training.max_steps if training.max_steps > 0 else 150, 150)
        args.max_eval_per_source = min(args.max_eval_per_source, 100)
    # first a bad option, caps / repeats entry or a missing --init stops the run, before it writes anything
    check_options(args)
    pairs, stats = training_pairs(args)
    init = initial_model(args.init)
    write_run_config(training.output_dir, args, training, job="train nli")
    check_label_order(init)
    tokenizer = AutoTokenizer.from_pretrained(init)
    logger.info("training pairs: %s", json.dumps({k: stats[k] for k in ("pairs", "labels")}))
    # Checkpoints are chosen on the calib split (all evaluation sources pooled); dev is only reported.
    calib = [r for rows in eval_pairs(args, "calib").values() for r in rows]
    selection = {"calib": _tokenize(tokenizer, calib, args.max_length)} if calib else None
    if selection is None:
        if args.starts > 1:
            raise ValueError(f"starts {args.starts}: the starts are compared on calib, and there are no calib pairs")
        logger.warning("no calib pairs: training without checkpoint selection")
        training.eval_strategy, training.load_best_model_at_end = "no", False
    evaluation = {name: _tokenize(tokenizer, rows, args.max_length)
                  for name, rows in eval_pairs(args).items() if rows}
    if args.vote_weight:
        stats["vote_targets"] = sum(bool(p.get("votes")) for p in pairs)
    train_dataset = _tokenize(tokenizer, pairs, args.max_length, args.vote_weight, args.vote_labels or NLI_LABELS)

    def trainer_for(run: Any, callbacks: Sequence[Any] = ()) -> Any:
        from transformers import set_seed

        set_seed(run.seed)  # the fresh head's initialisation is the seed's (unseeded, it differed on every run)
        model = AutoModelForSequenceClassification.from_pretrained(
            init, num_labels=3, id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()},
            ignore_mismatched_sizes=True)  # a fresh 3-way head on the pretrained pair encoder
        # How the verifier reads its input, saved with every checkpoint; models/nli.py:NLIVerifier reads it back.
        model.config.veracity_evidence_titles = args.evidence_titles
        model.config.veracity_max_length = args.max_length
        model.config.veracity_truncation = "only_first"  # the premise (evidence) side, as _tokenize cuts it
        if hasattr(model.config, "veracity_label_offsets"):  # continuing from a folded head: trained over from here
            del model.config.veracity_label_offsets
        return _trainer_class()(
            model=model, args=run, head_learning_rate=args.head_learning_rate,
            compute_loss_func=focal_loss_func(args.focal_gamma) if args.focal_gamma or args.vote_weight else None,
            length_batch_order=args.length_batch_order, length_group_batches=args.length_group_batches,
            train_dataset=train_dataset, eval_dataset=selection, processing_class=tokenizer,
            data_collator=DataCollatorWithPadding(tokenizer), callbacks=list(callbacks),
            compute_metrics=lambda p: scores(p.predictions, p.label_ids))

    run = training
    if args.starts > 1:
        stats["starts"] = run_starts(args, training, trainer_for)
        run = start_arguments(training, stats["starts"]["chosen"])
    scoring = [task_score_callback("nli", args.prepared_dir, args.eval_sources, args.task_eval_examples,
                                   device=str(run.device))] if args.task_eval_examples > 0 else []
    trainer = trainer_for(run, scoring)
    trainer.train(resume_from_checkpoint=last_checkpoint(run.output_dir))
    if args.label_offsets:  # after the checkpoints: a rerun of a finished run fits them again from the same model
        stats["label_offsets"] = fold_label_offsets(trainer, tokenizer, args)
    final = Path(training.output_dir) / "model"
    trainer.save_model(str(final))
    tokenizer.save_pretrained(final)
    results = {name: trainer.evaluate(data, metric_key_prefix=name) for name, data in evaluation.items()}
    report = {"quick": args.quick, "init": str(init), "train": stats, "dev": results}
    write_json(Path(training.output_dir) / "metrics.json", report)
    write_verifier_card(final, args, init, stats, results, argv, training.load_best_model_at_end)
    mark_completed(training.output_dir, f"NLI verifier in {final}" + (" (QUICK run)" if args.quick else ""))
    labels = ", ".join(f"{label} {n:,}" for label, n in sorted(stats["labels"].items()))
    finish_training_run(training.output_dir, trainer, device=str(run.device), data={
        "training pairs": f"{stats['pairs']:,} pairs of the train split of {args.prepared_dir} ({labels})"})
    if not args.quick:  # CPU inference through ONNX Runtime (NLIVerifier's auto backend: ready, not made on first use)
        export_model(final)
    if args.install:
        install(final, report)
    print(json.dumps({name: {k: round(v, 4) for k, v in r.items() if k.endswith(("accuracy", "macro_f1"))}
                      for name, r in results.items()}, indent=1))
    return report


# what the init choices start from, as hub ids (the embedded folders are conversions of these)
INIT_HUB_IDS = {"reranker": "cross-encoder/ms-marco-MiniLM-L12-v2",
                "embedder": "sentence-transformers/all-MiniLM-L6-v2"}


def write_verifier_card(folder: Path, args: NLIDataArgs, init: Path, stats: dict[str, Any],
                        results: dict[str, Any], argv: Sequence[str] | None, chosen_on_calib: bool) -> Path:
    """The verifier's model card: base model, the training pairs per source (train split) with their licences,
    the evaluation sources (dev split, and whether calib chose the checkpoint), the command and the dev metrics."""
    by_source: dict[str, list[str]] = defaultdict(list)
    for bucket, n in stats["by_bucket"].items():
        source, label = bucket.rsplit("/", 1)
        times = stats.get("repeats", {}).get(bucket, 1)
        by_source[source].append(f"{label} {n}" + (f" (each {times} times)" if times > 1 else ""))
    data = {source: f"train split, {', '.join(parts)} pairs" for source, parts in sorted(by_source.items())}
    for name in args.eval_sources:
        used = f"evaluated on its dev split ({'calib: checkpoint choice' if chosen_on_calib else 'last step kept'})"
        data[name] = f"{data[name]}; {used}" if name in data else used
    return write_model_card(
        folder, title="veracity NLI verifier (3-way cross-encoder: entailment / neutral / contradiction)",
        kind="transformers", base_model=hub_id(INIT_HUB_IDS.get(args.init, args.init), init), base_dir=init,
        command=command_line(argv, "train nli"), data=data,
        licences=data_licences(args.prepared_dir, list(data)),
        metrics={name: {k.removeprefix(f"{name}_"): v for k, v in r.items() if k.endswith(("accuracy", "macro_f1"))}
                 for name, r in results.items()},
        notes=[*(["QUICK run (the demo's fallback, at most 150 steps): not the real verifier"] if args.quick else []),
               *([starts_note(stats["starts"])] if "starts" in stats else []),
               *([offsets_note(stats["label_offsets"])] if "label_offsets" in stats else []),
               *([f"Loss: focal, gamma {args.focal_gamma:g} (Lin et al., 2017)"] if args.focal_gamma else []),
               *([vote_note(stats["vote_targets"], args.vote_weight, args.vote_labels)] if args.vote_weight else [])])


def vote_note(pairs: int, weight: float, labels: Sequence[str] = ()) -> str:
    counted = f" (votes for {', '.join(labels)} only; others count as gold)" if labels else ""
    return (f"Targets: {pairs} pairs with annotator votes trained on (1 - {weight:g}) x gold + {weight:g} x their "
            f"votes{counted}")


def starts_note(starts: dict[str, Any]) -> str:
    scores = ", ".join(f"seed {seed} {value:.3f}" for seed, value in sorted(starts["scores"].items()))
    return (f"{len(starts['scores'])} starts compared on {starts['metric']} at step {starts['step']} ({scores}); "
            f"seed {starts['chosen']} was trained to the end")


def fold_label_offsets(trainer: Any, tokenizer: Any, args: NLIDataArgs) -> dict[str, Any]:
    """Fit per-label offsets on the whole calib split of each evaluation source (or of ``label_offset_sources``;
    the trainer's model's logits) and fold them into its head (``train/label_offsets.py``); what was fitted, and the
    calib objective before/after."""
    sets = {}
    for name, rows in eval_pairs(args, "calib", capped=False).items():
        if rows and (not args.label_offset_sources or name in args.label_offset_sources):
            # labels as predict returns them: with group_by_length it reorders evaluation sets by length too
            output = trainer.predict(_tokenize(tokenizer, rows, args.max_length))
            sets[name] = (log_probabilities(output.predictions), np.asarray(output.label_ids))
    if not sets:
        raise ValueError("label_offsets: no calib pairs to fit them on")
    offsets = fit_label_offsets(sets)
    fold_into_head(trainer.model, offsets)
    trainer.model.config.veracity_label_offsets = [float(x) for x in offsets]
    record = {"offsets": dict(zip(NLI_LABELS, (float(x) for x in offsets), strict=True)),
              "calib_pairs": {name: len(gold) for name, (_, gold) in sets.items()},
              "calib_objective": [objective(sets, np.zeros(3)), objective(sets, offsets)]}
    logger.info("label offsets fitted on calib: %s", json.dumps(record))
    return record


def offsets_note(record: dict[str, Any]) -> str:
    shifts = ", ".join(f"{label} {value:+.2f}" for label, value in record["offsets"].items())
    before, after = record["calib_objective"]
    sources = ", ".join(record["calib_pairs"])
    return (f"label offsets fitted on calib ({sources}) and folded into the head's bias: {shifts} (calib mean of "
            f"(accuracy + macro-F1) / 2 over those sources {before:.3f} → {after:.3f})")


def install(folder: Path, report: dict[str, Any]) -> Path:
    """Copy the trained verifier to the registry's embedded location (a quick run never replaces a full one)."""
    target = embedded_verifier_dir()
    if report["quick"] and (target / "metrics.json").exists():
        if not json.loads((target / "metrics.json").read_text()).get("quick", True):
            logger.info("a full verifier is installed at %s: the quick run leaves it alone", target)
            return target
    with atomic_directory(target, f"NLI verifier from {folder}") as tmp:
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
        write_json(tmp / "metrics.json", report)
    logger.info("installed the NLI verifier at %s", target)
    return target
