"""The main job on embedded defaults: run every stage that exists, on the shipped data, and say what it made.

Usage: veracity demo [--output_dir runs/demo] [--data_root ../shared/data]

Stages so far: (1) data preparation of every shipped dataset; (2) the embedded model of every role, resolved
(the SmolLM2 GGUF is converted once into the cache) and checked by a tiny real use; (3) retrieval: a BM25 + FAISS
index over the FEVER evidence corpus, a hybrid search, and the retrieval evaluation (BM25, dense, α-fusion, RRF,
cross-encoder rerank) on a slice of its dev queries; (4) offline batch inference: the embedded chat model through
the engine layer over a few VitaminC claims, resumable, decoding constrained to the answer's JSON schema, with
the response cache (run the demo twice: the second run replays from the cache);
(5) training: SFT/DPO training sets, a short SFT run of the
embedded LoRA recipe (its report, and its two checkpoints scored on a few claims: ``eval checkpoints``), the 8B
recipe's dry run, and the NLI verifier — the cached one when installed, otherwise a
short, clearly labelled quick version — evaluated on dev pairs; (6) R2VC end to end on a slice of the
FEVER-Symmetric and VitaminC dev splits: the calibrator fit on a calib slice, then the full pipeline and the NLI-only
ablation, written to ``<output_dir>/r2vc/`` like any ``veracity infer r2vc`` run. The generator is the merged SFT
model of ``configs/train/sft_lora_smollm2_cpu.yaml`` when ``runs/train/sft_smollm2/merged`` exists, else the base
SmolLM2 (decoding constrained to the answer's schema, so its answers parse; whether they are right is another
matter); (7) the DPO smoke step: a few steps of ``configs/train/dpo_lora_smollm2_cpu.yaml`` on the SFT adapter of
stage 5; (8) AIC, SciClaimSeekers and UTS on a few items each, their scorers and reports
(:mod:`veracity.demo_tour`); (9) one table of every pipeline's headline metric and the path of each report.
Finished steps are reused.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.prepare import PrepConfig, format_summary, prepare
from veracity.data_prep.prepared import read_prepared
from veracity.data_prep.readers import read_jsonl
from veracity.data_prep.schema import TERNARY_LABELS
from veracity.demo_tour import Headline, headline_table, r2vc_headlines, stage_dpo, stage_pipelines, verdict_line
from veracity.infer.checkpoint_eval import main as evaluate_checkpoint
from veracity.infer.checkpoint_sweep import main as evaluate_checkpoints
from veracity.infer.eval.r2vc import table_cell
from veracity.infer.generate import main as generate
from veracity.infer.pipelines.r2vc.run import main as r2vc
from veracity.infer.retrieval.evaluate import main as evaluate
from veracity.infer.retrieval.index import load_index
from veracity.infer.retrieval.searcher import Searcher, SearchSettings
from veracity.models.registry import ROLES, ModelNotFoundError, resolve_model
from veracity.rundir import write_run_config
from veracity.train.calibrator import main as train_calibrator
from veracity.train.nli import main as train_nli
from veracity.train.sft import main as sft
from veracity.train.training_sets import main as training_sets

logger = logging.getLogger(__name__)


@dataclass
class DemoConfig:
    output_dir: str = field(default="runs/demo", metadata={"help": "Run directory of the demo."})
    data_root: str | None = field(default=None, metadata={"help": "Raw data root (default ../shared/data)."})
    skip_models: bool = field(default=False, metadata={"help": "Only run the data stage."})
    retrieval_queries: int = field(default=50, metadata={"help": "Dev queries scored in the retrieval stage."})
    generate_items: int = field(default=4, metadata={"help": "Claims sent through the engine in stage 4."})
    sft_steps: int = field(default=2, metadata={"help": "Steps of the embedded SFT recipe in stage 5 (a checkpoint "
                                                         "at each half)."})
    checkpoint_examples: int = field(default=3, metadata={
        "help": "VitaminC dev claims each SFT checkpoint is scored on in stage 5."})
    nli_quick_steps: int = field(default=20, metadata={"help": "Steps of the quick verifier if none is cached."})
    r2vc_examples: int = field(default=16, metadata={"help": "Dev claims per source in the R2VC stage."})
    r2vc_calib_examples: int = field(default=60, metadata={
        "help": "Calib claims per source for the full pipeline's calibrator (the generator samples each; at 24 it "
                "fit on 21 claims, chose C=0.01 and abstained on every dev claim)."})
    r2vc_nli_calib_examples: int = field(default=150, metadata={
        "help": "Calib claims per source the NLI-only calibrator is simulated on (the verifier alone: cheap)."})
    dpo_steps: int = field(default=2, metadata={"help": "Steps of the embedded DPO recipe in stage 7."})
    aic_examples: int = field(default=2, metadata={"help": "AVeriTeC dev claims through AIC in stage 8."})
    sciclaim_examples: int = field(default=10, metadata={"help": "Climate-FEVER dev posts through SciClaimSeekers."})
    uts_examples: int = field(default=2, metadata={"help": "AVeriTeC Task 3 dev items through UTS in stage 8."})
    generator: str = field(default="runs/train/sft_smollm2/merged", metadata={
        "help": "R2VC generator; the base embedded model when this folder does not exist."})


def stage_prep(config: DemoConfig) -> None:
    prep = PrepConfig(data_root=config.data_root, output_dir=str(Path(config.output_dir) / "prep"))
    manifest = prepare(prep)
    print(format_summary(manifest))
    print(f"-> records and manifest.json in {prep.output_dir}\n")


def stage_models() -> None:
    for role in ROLES:
        start = time.perf_counter()
        try:
            path = resolve_model(role)
        except ModelNotFoundError as error:
            print(f"{role:13} not available: {error}")
            continue
        print(f"{role:13} {path}  ({time.perf_counter() - start:.1f} s)")
    _smoke_chat_lm(resolve_model("chat_lm"))
    print()


def _smoke_chat_lm(path: Path) -> None:
    """One greedy answer from the embedded chat model, to show the converted folder really generates: a question it
    gets right (asked "Is Paris the capital of France? Answer yes or no.", the 135M model says no)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: seconds to import, this smoke test alone

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    question = "What is the capital of France?"
    messages = [{"role": "user", "content": question}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    output = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(output[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    print(f"chat_lm generates (greedy, a check that the converted model runs): {question!r} → {answer.strip()!r}")


def stage_retrieval(config: DemoConfig) -> None:
    out = Path(config.output_dir)
    evaluate([
        "--prepared_dir", str(out / "prep"), "--benchmarks", "fever_evidence", "--output_dir", str(out / "retrieval"),
        "--max_queries", str(config.retrieval_queries), "--rerank_top_n", "10", "--stem", "true",
    ])
    index = load_index(out / "retrieval" / "index" / "fever_evidence")
    claim = "Colombiana is a French film."
    hits = Searcher(index, SearchSettings(mode="rrf", top_k=3)).search([claim])[0]
    texts = index.texts()
    print(f"\nhybrid (RRF) search for {claim!r}:")
    for rank, (doc, score) in enumerate(hits, start=1):
        print(f"  {rank}. {score:.4f} {texts[doc][:110]}")
    print(f"-> index, metrics.json and results.md in {out / 'retrieval'}\n")


def stage_generate(config: DemoConfig) -> None:
    out = Path(config.output_dir)
    records = read_prepared(out / "prep", "vitaminc")
    claims = ([r for r in records if r.split == "dev"] or records)[: config.generate_items]
    items = out / "generate" / "items.jsonl"
    items.parent.mkdir(parents=True, exist_ok=True)
    items.write_text("".join(json.dumps({"id": r.id, "claim": r.claim, "evidence": r.evidence_text}) + "\n"
                             for r in claims))
    template = ('Evidence: {evidence}\nClaim: {claim}\nDoes the evidence support or refute the claim? Reply with '
                'JSON only: {{"label": "SUPPORTS" or "REFUTES" or "NOT ENOUGH INFO"}}')
    # the answer's schema: decoding is constrained to it, so even the 135M model answers in the format asked
    schema = out / "generate" / "answer_schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"label": {"enum": list(TERNARY_LABELS)}},
                                  "required": ["label"], "additionalProperties": False}))
    generate(["--input", str(items), "--output_dir", str(out / "generate"), "--template", template,
              "--max_new_tokens", "40", "--json_schema", str(schema),
              "--cache", str(out / "generate" / "cache.sqlite"), "--progress", "false"])
    predictions = out / "generate" / "predictions.jsonl"
    for _, record in read_jsonl(predictions):
        if record["status"] != "ok":
            print(f"  {record['id']}: error {record['error']}")
            continue
        candidate = record["result"]["candidates"][0]
        verdict = candidate["parsed"] if candidate["parsed"] is not None else f"unparsed ({candidate['parse_error']})"
        print(f"  {record['id']}: {verdict}  cached={record['result']['cached']}")
    print(f"-> {predictions} (resumable; the same command skips finished items)\n")


def stage_train(config: DemoConfig) -> Headline:
    out = Path(config.output_dir)
    recipes = Path(__file__).resolve().parents[1] / "configs" / "train"
    training_sets(["--prepared_dir", str(out / "prep"), "--output_dir", str(out / "training")])
    # a checkpoint every half of the run: the two the sweep below scores (the recipe keeps two)
    sft(["--config", str(recipes / "sft_lora_smollm2_cpu.yaml"), "--train_file", str(out / "training" / "sft.jsonl"),
         "--output_dir", str(out / "sft"), "--max_steps", str(config.sft_steps),
         "--save_steps", str(max(config.sft_steps // 2, 1)), "--logging_steps", "1", "--disable_tqdm", "true"])
    print(f"-> SFT adapter (a {config.sft_steps}-step smoke run of the recipe) in {out / 'sft' / 'adapter'}, its "
          f"report in {out / 'sft' / 'report.html'}")
    sweep = evaluate_checkpoints([str(out / "sft"), "--prepared_dir", str(out / "prep"), "--sources", "vitaminc",
                                  "--max_examples", str(config.checkpoint_examples), "--rationale_max_chars", "80"])
    print(f"-> every checkpoint scored on {config.checkpoint_examples} VitaminC dev claims: "
          f"{out / 'sft' / 'checkpoints' / 'table.md'} (`veracity train merge --run_dir {out / 'sft'} --checkpoint "
          "best` merges the best)")
    sft(["--config", str(recipes / "sft_lora_nemotron8b.yaml"), "--dry_run", "true"])
    try:
        verifier = resolve_model("nli_verifier")
        print(f"NLI verifier: {verifier}")
    except ModelNotFoundError:
        print(f"NLI verifier: none cached — training a QUICK version ({config.nli_quick_steps} steps; not the real "
              "verifier: run `bash scripts/train_verifier.sh`)")
        train_nli(["--config", str(recipes / "nli_minilm_cpu.yaml"), "--prepared_dir", str(out / "prep"),
                   "--output_dir", str(out / "nli_quick"), "--quick", "true", "--max_steps",
                   str(config.nli_quick_steps), "--eval_strategy", "no", "--save_strategy", "no",
                   "--load_best_model_at_end", "false", "--max_eval_per_source", "50", "--disable_tqdm", "true"])
    evaluate_checkpoint(["--kind", "nli", "--prepared_dir", str(out / "prep"), "--output_dir",
                         str(out / "nli_eval"), "--max_examples", "100"])
    print(f"-> verifier metrics in {out / 'nli_eval'}\n")
    rows = {row["checkpoint"]: row for row in sweep["rows"]}
    return Headline(f"SFT ({config.sft_steps} steps)", f"VitaminC dev, {config.checkpoint_examples} claims",
                    "best checkpoint's macro-F1", rows.get(sweep["best"], {}).get("macro_f1"),
                    str(out / "sft" / "report.html"),
                    f"{sweep['best']}; the base model {table_cell(rows.get('base', {}).get('macro_f1'))} "
                    f"({out / 'sft' / 'checkpoints' / 'table.md'})")


def stage_r2vc(config: DemoConfig) -> dict[str, dict[str, Any]]:
    out = Path(config.output_dir)
    recipes = Path(__file__).resolve().parents[1] / "configs"
    generator = config.generator if (Path(config.generator) / "config.json").exists() else "embedded"
    print(f"generator: {generator}" + ("" if generator != "embedded" else " (base SmolLM2: no trained SFT model at "
                                       f"{config.generator}; `veracity train sft` + `train merge` make one)"))
    common = ["--prepared_dir", str(out / "prep"), "--model", generator, "--n_candidates", "2",
              "--rationale_max_chars", "80", "--cache", str(out / "r2vc" / "cache.sqlite"), "--progress", "false"]
    calibrators = {}
    # the NLI-only features are the verifier's alone (milliseconds a claim): its calibrator fits on many calib claims;
    # the full pipeline's needs the generator's candidates on each (seconds a claim), so it fits on fewer
    fits = (("full", "calibrator_r2vc_embedded.yaml", config.r2vc_calib_examples),
            ("nli_only", "calibrator_r2vc_nli_only.yaml", config.r2vc_nli_calib_examples))
    for name, recipe, examples in fits:
        calibrator_dir = out / "r2vc" / f"calibrator_{name}"  # each recipe its own: the features differ
        try:
            train_calibrator(["--config", str(recipes / "train" / recipe), *common,
                              "--calibrator_dir", str(calibrator_dir),
                              "--max_examples", str(examples), "--sources", "fever_symmetric", "vitaminc"])
            calibrators[name] = str(calibrator_dir / "calibrator.json")
        except ValueError as error:  # a data root too small to fit and hold out (the tests' hand-made one)
            print(f"no {name} calibrator ({error}): candidates ranked by s_ver")
            calibrators[name] = "none"
    runs = {}
    for name, recipe in (("full", "r2vc_embedded.yaml"), ("nli_only", "r2vc_nli_only.yaml")):
        runs[name] = r2vc(["--config", str(recipes / "pipelines" / recipe), *common, "--calibrator", calibrators[name],
                           "--max_examples", str(config.r2vc_examples),
                           "--output_dir", str(out / "r2vc" / name)])
    keys = ("n", "accuracy", "macro_f1", "brier", "ece", "ece_uncalibrated", "coverage", "selective_accuracy", "aurc")
    print("\nR2VC on the dev slice (FEVER-Symmetric + VitaminC):\n")
    print("| run | " + " | ".join(keys) + " |\n|---|" + "---:|" * len(keys))
    for name, summary in runs.items():
        print(f"| {name} | " + " | ".join(table_cell(summary["metrics"][k]) for k in keys) + " |")
    for summary in runs.values():
        print(f"-> {summary['report_html']} (open in a browser: each claim, its evidence, candidates and decision); "
              f"report.md, metrics.json, predictions.jsonl and the plots beside it")
    print()
    return runs


def make_parser() -> Any:
    return parser_for((DemoConfig,), "veracity demo")


def main(argv: Sequence[str] | None = None) -> None:
    (config,) = parse_config(make_parser(), argv)
    write_run_config(config.output_dir, config, job="demo")
    print("== 1. data preparation")
    stage_prep(config)
    if not config.skip_models:
        print("== 2. embedded models")
        stage_models()
        print("== 3. retrieval (index, hybrid search, evaluation)")
        stage_retrieval(config)
        print("== 4. offline batch inference (engine, parsing, cache, resumable output)")
        stage_generate(config)
        print("== 5. training (training sets, SFT smoke run and its checkpoints scored, 8B dry run, NLI verifier)")
        training = stage_train(config)
        print("== 6. R2VC: candidates, verifier signals, calibrator, two-stage abstention")
        r2vc_runs = stage_r2vc(config)
        print("== 7. DPO smoke run (the embedded recipe on the SFT model)")
        stage_dpo(Path(config.output_dir), config.dpo_steps)
        print("== 8. AIC, SciClaimSeekers and UTS (a few items each, scored, with their reports)")
        rows = stage_pipelines(Path(config.output_dir), config.aic_examples, config.sciclaim_examples,
                               config.uts_examples)
        print("== 9. every pipeline's headline metric (a few items each: the path working, not the numbers)\n")
        print(headline_table([training, *r2vc_headlines(r2vc_runs), *rows]))
        print(f"\n{verdict_line(r2vc_runs)}\n")
    print(f"demo finished; everything is under {config.output_dir}")
