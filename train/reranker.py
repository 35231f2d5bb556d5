"""Fine-tune SciClaimSeekers' cross-encoder on a task's own training posts: gold papers against the pipeline's
hardest wrong candidates.

Usage: veracity train reranker --config configs/train/reranker_climate_fever.yaml
       veracity infer sciclaim --config configs/pipelines/sciclaimseekers_climate_fever.yaml ...  (uses the result)

The negatives are mined by the pipeline's own first stage (``pipeline_config``: BM25 + dense → RRF head), so the
model learns to separate the gold papers from exactly the candidates it will rerank. Each training post gives one
pair per gold paper (label 1) and one per non-gold paper among the first ``negatives`` of its RRF head (label 0),
in the pipeline's passage format ("title. abstract"); binary cross-entropy on the logit, positives weighted by the
negatives-to-positives ratio. The starting point is the embedded ms-marco MiniLM cross-encoder (dequantized from
its INT8 ONNX) or any cross-encoder folder or hub id (``init``). Checkpoints are chosen by the reranker's MRR@5
over the RRF heads of the ``selection_split`` posts (the gold as the pipeline sees it: only when retrieved);
``report_split`` is only measured. The model is saved to ``<output_dir>/model`` (a transformers folder; pass it as
``--cross_encoder``), with ``metrics.json`` and a model card.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.checkthat_files import read_collection, read_posts
from veracity.data_prep.errors import DataError
from veracity.data_prep.sciclaim_tasks import TASKS, build_task
from veracity.infer.pipelines.sciclaimseekers import run as sciclaim_run
from veracity.infer.pipelines.sciclaimseekers.pipeline import SciClaimPipeline, passage_text
from veracity.io import mark_completed, write_json
from veracity.models.device import DeviceOptions, resolve_device
from veracity.models.model_card import command_line, data_licences, hub_id, write_model_card
from veracity.models.registry import float_reranker, resolve_model
from veracity.rundir import write_run_config
from veracity.train.common import last_checkpoint, parse_training_config, resolve_reporting
from veracity.train.report import finish_training_run

logger = logging.getLogger(__name__)


@dataclass
class RerankerArgs:
    pipeline_config: str = field(default="configs/pipelines/sciclaimseekers_embedded.yaml", metadata={
        "help": "The sciclaim pipeline config whose first stage (analyzer, encoder, RRF) mines the negatives."})
    task: str | None = field(default="climate_fever", metadata={
        "help": "A task built from prepared records (its train/calib/dev posts), or none with --posts."})
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep (--task)."})
    posts: str | None = field(default=None, metadata={"help": "Instead of --task: training posts TSV with gold ids."})
    selection_posts: str | None = field(default=None, metadata={"help": "With --posts: posts that choose the "
                                                                       "checkpoint."})
    collection: str | None = field(default=None, metadata={"help": "With --posts: the paper collection."})
    train_split: str = field(default="train", metadata={"help": "Split (of --task) whose posts are trained on."})
    selection_split: str = field(default="calib", metadata={"help": "Split (of --task) that chooses the checkpoint."})
    report_split: str | None = field(default="dev", metadata={"help": "Split only measured at the end (none: skip)."})
    init: str = field(default="embedded", metadata={
        "help": "Starting cross-encoder: embedded (ms-marco-MiniLM-L-12-v2, dequantized), a folder or a hub id."})
    negatives: int = field(default=15, metadata={"help": "Non-gold candidates per post, from the top of its RRF "
                                                         "head."})
    max_length: int = field(default=256, metadata={"help": "Post + paper length, tokens."})

    def __post_init__(self) -> None:
        if self.posts and not (self.selection_posts and self.collection):
            raise ValueError("--posts needs --selection_posts (they choose the checkpoint) and --collection")
        if not self.posts and not self.task:
            raise ValueError("give --task (with --prepared_dir) or --posts, --selection_posts and --collection")
        if (self.posts and Path(self.posts).resolve() == Path(str(self.selection_posts)).resolve()) or (
                not self.posts and self.selection_split == self.train_split):
            raise ValueError("the posts that choose the checkpoint must not be the training posts")
        if self.negatives < 1:
            raise ValueError(f"negatives must be >= 1, got {self.negatives}")


@dataclass
class SplitData:
    """One split's posts, papers and first-stage RRF heads."""

    posts: list[Any]
    papers: dict[str, Any]
    heads: list[list[str]]


def input_files(args: RerankerArgs, folder: Path) -> tuple[dict[str, Path], Path]:
    """Role (train, selection, report) → posts file, and the collection: the files given, or those of the task,
    built once from the prepared records."""
    if args.posts:
        return {"train": Path(args.posts), "selection": Path(str(args.selection_posts))}, Path(str(args.collection))
    paths = build_task(args.prepared_dir, str(args.task), folder / "task")
    splits = {"train": args.train_split, "selection": args.selection_split}
    if args.report_split not in (None, "", "none"):
        splits["report"] = args.report_split
    for split in splits.values():
        if split not in paths:
            raise DataError(folder / "task", None, f"task {args.task!r} has no split {split!r} "
                            f"(has {sorted(set(paths) - {'collection'})})", field="split")
    return {role: paths[split] for role, split in splits.items()}, paths["collection"]


def first_stage(args: RerankerArgs, folder: Path, device: str = "auto") -> dict[str, SplitData]:
    """The pipeline's RRF heads for the training, selection and report posts (one index for all); ``device``:
    where the dense encoder runs."""
    files, collection = input_files(args, folder)
    posts = {role: read_posts(path) for role, path in files.items()}
    for role, rows in posts.items():
        missing = [p.post_id for p in rows if not p.gold]
        if missing:
            raise DataError(files[role], None, f"post {missing[0]!r} has no gold id ({len(missing)} posts without): "
                            "fine-tuning needs a gold id for every post", field="cord_uid")
    config, engine_config, _ = parse_config(sciclaim_run.make_parser(), [  # _: the executor's options
        "--config", args.pipeline_config, "--output_dir", str(folder), "--index_dir", str(folder / "index"),
        "--device", device])
    pipeline = SciClaimPipeline(config, engine_config, read_collection(collection))
    return {role: SplitData(rows, pipeline.papers, [[doc for doc, _ in stage.fused]
                                                    for stage in pipeline.first_stage(rows)])
            for role, rows in posts.items()}


def training_pairs(data: SplitData, negatives: int) -> list[dict[str, Any]]:
    """(query, passage, label) rows: every gold paper of a post, and its first ``negatives`` non-gold candidates."""
    rows = []
    for post, head in zip(data.posts, data.heads, strict=True):
        gold = [g for g in post.gold if g in data.papers]
        wrong = [doc for doc in head if doc not in set(post.gold)][:negatives]
        rows += [{"query": post.text, "passage": passage_text(data.papers[d]), "label": 1.0} for d in gold]
        rows += [{"query": post.text, "passage": passage_text(data.papers[d]), "label": 0.0} for d in wrong]
    return rows


def reranking_samples(data: SplitData) -> list[dict[str, Any]]:
    """The evaluator's samples: each post's RRF head in order, its gold papers as positives."""
    return [{"query": post.text, "positive": [passage_text(data.papers[g]) for g in post.gold if g in data.papers],
             "documents": [passage_text(data.papers[d]) for d in head]}
            for post, head in zip(data.posts, data.heads, strict=True)]


def evaluator(data: SplitData, name: str, batch_size: int = 64) -> Any:
    """MRR@5 of the reranker over the RRF heads; a gold paper the first stage missed counts as missed.
    (sentence-transformers' evaluator matches the gold by passage text and breaks score ties its own way, so its
    figure can differ from the pipeline's CheckThat MRR@5 by a post.)"""
    # sentence-transformers (and torch, datasets) stay lazy here and below: seconds to import, and the first stage
    # and `--help` need none of them
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    return CrossEncoderRerankingEvaluator(reranking_samples(data), at_k=5, always_rerank_positives=False, name=name,
                                          batch_size=batch_size, write_csv=False)


def initial_model(init: str) -> Path:
    return float_reranker() if init == "embedded" else resolve_model("reranker", init)


def choose_by_selection_mrr(training: Any) -> None:
    """Checkpoints are chosen by the selection MRR@5, higher better, unless the config names another metric
    (transformers' own default, the eval loss, does not exist here: there is no eval dataset)."""
    if training.metric_for_best_model in (None, "loss"):
        training.metric_for_best_model, training.greater_is_better = "eval_selection_mrr@5", True


def make_parser() -> Any:
    from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments  # lazy: as above

    return parser_for((RerankerArgs, CrossEncoderTrainingArguments, DeviceOptions), "veracity train reranker")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    args, training, where = parse_training_config(make_parser(), argv)
    resolve_reporting(training)  # `auto`: TensorBoard where installed
    out = Path(training.output_dir)
    # --device places the first stage's encoder and the evaluated model; the Trainer trains where use_cpu says
    device = "cpu" if training.use_cpu else resolve_device(where.device)
    data = first_stage(args, out / "first_stage", device)  # bad posts, collection or split: DataError (exit 2)
    choose_by_selection_mrr(training)
    write_run_config(out, args, training, job="train reranker", device=device)
    rows = training_pairs(data["train"], args.negatives)
    positives = sum(r["label"] == 1.0 for r in rows)
    stats = {"posts": len(data["train"].posts), "pairs": len(rows), "positives": positives,
             "negatives": len(rows) - positives}
    logger.info("training pairs: %s", stats)
    init = initial_model(args.init)
    model = CrossEncoder(str(init), num_labels=1, max_length=args.max_length, device=device)
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor((len(rows) - positives) / max(positives, 1)))
    batch = training.per_device_eval_batch_size
    selection = evaluator(data["selection"], "selection", batch)
    before = {"selection": selection(model)}  # the starting point (the report split is measured once, at the end)
    trainer = CrossEncoderTrainer(model=model, args=training, train_dataset=Dataset.from_list(rows), loss=loss,
                                  evaluator=selection)
    trainer.train(resume_from_checkpoint=last_checkpoint(out))
    final = out / "model"
    model.save_pretrained(str(final))
    after = {role: evaluator(split, role, batch)(model) for role, split in data.items() if role != "train"}
    report = {"init": str(init), "train": stats, "before": before, "after": after}
    write_json(out / "metrics.json", report)
    write_reranker_card(final, args, init, stats, report, argv)
    mark_completed(out, f"reranker in {final}")
    finish_training_run(out, trainer, device=device, data={
        "training pairs": f"{stats['pairs']:,} pairs ({stats['positives']:,} gold) of {stats['posts']:,} posts"})
    print(json.dumps({when: {role: {k: round(v, 4) for k, v in m.items() if k.endswith("mrr@5")}
                             for role, m in report[when].items()} for when in ("before", "after")}, indent=1))
    return report


def write_reranker_card(folder: Path, args: RerankerArgs, init: Path, stats: dict[str, Any],
                        report: dict[str, Any], argv: Sequence[str] | None) -> Path:
    # a built task's posts and papers are the prepared <task> queries and corpus: their licences are those sources'
    corpus, source = (args.collection, args.posts) if args.posts else TASKS[str(args.task)]
    data = {source: f"{args.train_split}: {stats['posts']} posts, {stats['positives']} gold pairs, "
                    f"{stats['negatives']} first-stage negatives; checkpoint chosen on {args.selection_split}",
            str(corpus): "the papers (passages) of those pairs"}
    licences = None if args.posts else data_licences(args.prepared_dir, [source, str(corpus)])
    init_id = "cross-encoder/ms-marco-MiniLM-L12-v2" if args.init == "embedded" else args.init
    return write_model_card(
        folder, title=f"veracity SciClaimSeekers reranker (cross-encoder fine-tuned on {args.task or source})",
        kind="sentence-transformers", base_model=hub_id(init_id, init), base_dir=init,
        command=command_line(argv, "train reranker"), data=data, licences=licences,
        metrics={when: {role: {k: v for k, v in m.items() if k.endswith(("mrr@5", "ndcg@5"))}
                        for role, m in report[when].items()} for when in ("before", "after")})
