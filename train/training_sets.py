"""SFT and DPO training sets for the R2VC generator, from prepared claim examples (docs/training.md#training-sets).

Usage: veracity prep training-sets [--prepared_dir runs/prep] [--output_dir runs/prep/training] [--split train]

- SFT: prompt = system + user message with the claim and numbered passages (the gold evidence plus
  ``distractors`` passages of other claims, at a seeded position); completion = the gold answer: label, a
  rationale quoting the gold passage, and its id (none for NOT ENOUGH INFO).
- DPO: chosen = the gold answer; rejected = a wrong-label answer from the example's contrastive partner (same
  VitaminC / FEVER-Symmetric case or SufficientFacts pair, other label) where one exists; else, with
  ``--mine_model`` (the SFT model), a wrong-label answer sampled from that model, kept only when the NLI verifier
  disagrees with its label (docs/design.md#r2vc-decisions); else a wrong label with a rationale over the same
  evidence. The manifest counts each source of rejected answers (``dpo_rejected_from``).
Outputs ``sft.jsonl``, ``dpo.jsonl`` (conversational prompt/completion and prompt/chosen/rejected, the formats
TRL reads) and ``manifest.json``; deterministic for a given seed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.prepared import read_prepared
from veracity.data_prep.schema import NOT_ENOUGH_INFO, TERNARY_LABELS, ClaimExample
from veracity.data_prep.splits import hash_int
from veracity.infer.pipelines.r2vc.prompt import (
    fit_rationale,
    format_answer,
    grounded_rationale,
    parse_r2vc_answer,
    prompt_messages,
)
from veracity.infer.pipelines.r2vc.signals import NLI_TO_LABEL, SignalSettings, claim_signals
from veracity.io import write_json, write_jsonl
from veracity.models.engine import EngineConfig, GenerationRequest
from veracity.models.engine_factory import make_engine
from veracity.models.nli import NLIVerifier

DEFAULT_SOURCES = ["vitaminc", "fever_symmetric", "sufficient_facts_fever", "sufficient_facts_vitaminc"]


@dataclass
class TrainingSetConfig:
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep."})
    output_dir: str = field(default="runs/prep/training", metadata={"help": "Where sft.jsonl / dpo.jsonl go."})
    sources: list[str] = field(default_factory=lambda: list(DEFAULT_SOURCES), metadata={
        "help": "Prepared claim sources the examples come from."})
    split: str = field(default="train", metadata={"help": "Which hash split to train on (never calib or dev)."})
    distractors: int = field(default=2, metadata={"help": "Passages of other claims added to each prompt."})
    seed: int = field(default=13, metadata={"help": "Seed of the shuffle, the distractors and the rejected answers."})
    max_examples: int | None = field(default=None, metadata={"help": "Cap on examples (after the shuffle)."})
    mine_model: str | None = field(default=None, metadata={
        "help": "Chat model to sample rejected answers from (the merged SFT model, or a base with --mine_adapter)."})
    mine_adapter: str | None = field(default=None, metadata={"help": "LoRA adapter applied to --mine_model."})
    mine_samples: int = field(default=4, metadata={"help": "Answers sampled per example without a partner."})
    mine_max: int | None = field(default=None, metadata={"help": "Mine for at most this many examples (CPU runs)."})
    mine_nli_model: str = field(default="embedded", metadata={"help": "Verifier that must disagree with the label."})


def _unit(*parts: object) -> int:
    return hash_int("\x00".join(map(str, parts)))


def load_examples(config: TrainingSetConfig) -> list[ClaimExample]:
    examples = []
    for source in config.sources:
        examples += [e for e in read_prepared(config.prepared_dir, source, [config.split])
                     if isinstance(e, ClaimExample) and e.evidence_text.strip()]
    examples.sort(key=lambda e: _unit(config.seed, e.id))  # deterministic shuffle
    return examples[: config.max_examples] if config.max_examples else examples


def layout(example: ClaimExample, pool: Sequence[ClaimExample], config: TrainingSetConfig) -> tuple[list[str], int]:
    """The prompt's passages and the 1-based position of the gold evidence among them.

    Distractors are drawn from other groups by seeded hashing (constant work per example, so building scales
    to the full 317k VitaminC train set).
    """
    picked: list[str] = []
    for k in range(20 * config.distractors):
        if len(picked) == config.distractors or not pool:
            break
        other = pool[_unit(config.seed, example.id, k) % len(pool)]
        if other.group_id == example.group_id or other.claim == example.claim:
            continue
        if other.evidence_text not in picked and other.evidence_text != example.evidence_text:
            picked.append(other.evidence_text)
    gold_at = _unit(config.seed, example.id, "gold") % (len(picked) + 1)
    passages = picked[:gold_at] + [example.evidence_text] + picked[gold_at:]
    return passages, gold_at + 1


def answer(label: str, passage: str, passage_id: int) -> str:
    ids = [] if label == NOT_ENOUGH_INFO else [passage_id]
    return format_answer(label, grounded_rationale(label, passage, passage_id), ids)


def as_target(text: str, num_passages: int) -> str | None:
    """A mined (free) answer rewritten in the format the answer schema admits — its rationale fitted
    (:func:`~veracity.infer.pipelines.r2vc.prompt.fit_rationale`), its ids among the prompt's passages — or None
    when it does not parse: a DPO target is one the constrained generator can write."""
    parsed, _ = parse_r2vc_answer(text, num_passages)
    if parsed is None:
        return None
    return format_answer(parsed.label, fit_rationale(parsed.rationale), parsed.evidence_ids[:num_passages])


Miner = Callable[[Sequence[ClaimExample], Sequence[list[dict[str, str]]]], list[str | None]]


def verifier_checked_miner(engine: Any, verifier: Any, config: TrainingSetConfig) -> Miner:
    """Sample answers per prompt; keep the first that parses, has a wrong label, and whose label the verifier's
    own label (y_NLI over the example's evidence) disagrees with — a plausible mistake the verifier can refute."""
    def mine(examples: Sequence[ClaimExample], prompts: Sequence[list[dict[str, str]]]) -> list[str | None]:
        requests = [GenerationRequest.chat(p, n=config.mine_samples, temperature=0.9, top_p=0.95,
                                           max_new_tokens=160, seed=config.seed) for p in prompts]
        probs = verifier.predict([e.evidence_text for e in examples], [e.claim for e in examples])
        picked: list[str | None] = []
        for example, result, row in zip(examples, engine.generate(requests), probs, strict=True):
            verifier_label = NLI_TO_LABEL[claim_signals(row[None, :], SignalSettings())[3]]
            chosen = None
            for candidate in result.candidates:
                parsed, _ = parse_r2vc_answer(candidate.text)
                if parsed and parsed.label != example.label and parsed.label != verifier_label:
                    chosen = candidate.text
                    break
            picked.append(chosen)
        return picked

    return mine


def build(config: TrainingSetConfig, miner: Miner | None = None
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    examples = load_examples(config)
    groups: dict[str, list[ClaimExample]] = defaultdict(list)
    for e in examples:
        groups[f"{e.source}:{e.group_id}"].append(e)
    sft, dpo = [], []
    rejected_from: Counter[str] = Counter()
    layouts = {e.id: layout(e, examples, config) for e in examples}
    partners = {e.id: [p for p in groups[f"{e.source}:{e.group_id}"] if p.label != e.label] for e in examples}
    mined: dict[str, str | None] = {}
    if miner is not None:
        lonely = [e for e in examples if not partners[e.id]][: config.mine_max]
        for start in range(0, len(lonely), 16):
            chunk = lonely[start : start + 16]
            answers = miner(chunk, [prompt_messages(e.claim, layouts[e.id][0]) for e in chunk])
            mined.update((e.id, as_target(text, len(layouts[e.id][0])) if text else None)
                         for e, text in zip(chunk, answers, strict=True))
    for example in examples:
        passages, gold_id = layouts[example.id]
        prompt = prompt_messages(example.claim, passages)
        chosen = answer(example.label, example.evidence_text, gold_id)
        sft.append({"id": example.id, "prompt": prompt, "completion": [{"role": "assistant", "content": chosen}],
                    "label": example.label, "origin": example.origin})
        if partners[example.id]:
            partner = partners[example.id][_unit(config.seed, example.id, "partner") % len(partners[example.id])]
            rejected = answer(partner.label, partner.evidence_text, gold_id)
            rejected_from["contrastive_partner"] += 1
        elif mined.get(example.id):
            rejected = mined[example.id]
            rejected_from["sft_sample_verifier_disagrees"] += 1
        else:
            wrong = [lab for lab in TERNARY_LABELS if lab != example.label]
            label = wrong[_unit(config.seed, example.id, "wrong") % len(wrong)]
            rejected = answer(label, example.evidence_text, gold_id)
            rejected_from["wrong_label_same_evidence"] += 1
        dpo.append({"id": example.id, "prompt": prompt, "chosen": [{"role": "assistant", "content": chosen}],
                    "rejected": [{"role": "assistant", "content": rejected}], "label": example.label,
                    "origin": example.origin})
    stats = {"examples": len(examples), "labels": dict(sorted(Counter(e.label for e in examples).items())),
             "sources": dict(sorted(Counter(e.source for e in examples).items())),
             "dpo_rejected_from": dict(sorted(rejected_from.items()))}
    return sft, dpo, stats


def make_parser() -> Any:
    return parser_for((TrainingSetConfig,), "veracity prep training-sets")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    (config,) = parse_config(make_parser(), argv)
    miner = None
    if config.mine_model:
        engine = make_engine(EngineConfig(model=config.mine_model, adapter=config.mine_adapter))
        miner = verifier_checked_miner(engine, NLIVerifier(config.mine_nli_model), config)
    sft, dpo, stats = build(config, miner)
    out = Path(config.output_dir)
    manifest: dict[str, Any] = {**stats, "config": config.__dict__}
    for name, rows in (("sft", sft), ("dpo", dpo)):
        count, digest = write_jsonl(out / f"{name}.jsonl", rows)
        manifest[name] = {"records": count, "sha256": digest}
    write_json(out / "manifest.json", manifest)
    print(f"{stats['examples']} examples {stats['labels']} -> sft {len(sft)}, dpo {len(dpo)} "
          f"(rejected from {stats['dpo_rejected_from']}) in {out}")
    return manifest
