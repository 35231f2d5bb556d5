"""The R2VC answer the generator is trained to write is one its constrained decoding can write (issue 44, item 1).

Over the shipped data (``../shared/data``, or ``$VERACITY_DATA_ROOT``): ``veracity prep`` then ``veracity prep
training-sets``, and every SFT completion and DPO chosen / rejected answer is accepted by the grammar the pipeline
compiles for its prompt (the schema of ``answer_constraint`` at R2VC's default rationale bound, compiled by the
transformers engine's own grammar cache); and a greedy constrained decode that is pushed towards a target token by
token writes exactly that target (a grammar that masks one of its tokens makes the decode leave it).
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path

import pytest

from veracity.infer.pipelines.r2vc.config import R2VCConfig
from veracity.infer.pipelines.r2vc.prompt import answer_constraint, grounded_rationale

REPO = Path(__file__).resolve().parents[1]
PASSAGE = re.compile(r"<passage id=\d+>\n(.*?)\n</passage>", re.S)


def shipped_data_root() -> Path:
    root = Path(os.environ.get("VERACITY_DATA_ROOT") or REPO.parent / "shared" / "data")
    if not (root / "fever").is_dir() or not (root / "vitaminc").is_dir():
        pytest.skip(f"the shipped data is not at {root} (set $VERACITY_DATA_ROOT)")
    return root


@pytest.fixture(scope="module")
def training_sets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sft.jsonl and dpo.jsonl as ``veracity prep training-sets`` writes them over the shipped FEVER-family and
    VitaminC data (every default source)."""
    from veracity import cli

    out = tmp_path_factory.mktemp("shipped")
    cli.main(["prep", "--data_root", str(shipped_data_root()), "--output_dir", str(out / "prep"),
              "--datasets", "fever", "vitaminc"])
    cli.main(["prep", "training-sets", "--prepared_dir", str(out / "prep"), "--output_dir", str(out / "training")])
    return out / "training"


def targets(folder: Path) -> list[tuple[str, int, str]]:
    """(where, passages in its prompt, answer text) of every SFT and DPO target."""
    found = []
    for name, fields in (("sft", ("completion",)), ("dpo", ("chosen", "rejected"))):
        for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            passages = len(PASSAGE.findall(row["prompt"][1]["content"]))
            found += [(f"{name} {row['id']} {f}", passages, row[f][0]["content"]) for f in fields]
    return found


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    """The transformers engine on a tiny Llama whose context holds a real three-passage prompt and its answer."""
    from tiny_models import build_tiny_llama

    from veracity.models.hf_engine import TransformersEngine

    return TransformersEngine(str(build_tiny_llama(tmp_path_factory.mktemp("tiny_llama_4k"), max_positions=4096)))


def pipeline_constraint(passages: int, engine) -> dict:
    """What the R2VC pipeline asks ``engine`` for on a prompt of ``passages`` passages (its default config)."""
    return answer_constraint(passages, R2VCConfig().rationale_max_chars, constrained=True, max_new_tokens=160,
                             engine=engine)


def test_every_shipped_training_target_is_accepted_by_the_pipelines_grammar(training_sets: Path, engine) -> None:
    import xgrammar

    manifest = json.loads((training_sets / "manifest.json").read_text())
    found = targets(training_sets)
    assert len(found) == manifest["sft"]["records"] + 2 * manifest["dpo"]["records"] > 3000

    @cache
    def compiled(passages: int):
        return engine.grammars.compiled("json_schema", pipeline_constraint(passages, engine)["json_schema"])

    eos = engine.tokenizer.eos_token_id
    refused = []
    for where, passages, text in found:
        matcher = xgrammar.GrammarMatcher(compiled(passages))
        if not (matcher.accept_string(text) and matcher.accept_token(eos) and matcher.is_terminated()):
            refused.append(f"{where}: {text}")
    assert not refused, f"{len(refused)} of {len(found)} targets refused, e.g. {refused[:2]}"
    # not vacuous: the targets quote their passage (the old format's quote needed escapes) and the rationale
    # bound binds (a passage longer than the room is cut to fit)
    rationales = [json.loads(text)["rationale"] for _, _, text in found]
    assert sum("\u201c" in r for r in rationales) > 0.9 * len(rationales)
    assert sum(len(r) > R2VCConfig().rationale_max_chars - 10 for r in rationales) > 100


def test_a_rationale_stays_within_the_bound_and_the_bounded_characters() -> None:
    passage = 'He said "no" \\ twice.\n' * 40
    for label in ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO"):
        rationale = grounded_rationale(label, passage, 12)
        assert len(rationale) <= R2VCConfig().rationale_max_chars
        assert not re.search(r'[\x00-\x1f"\\]', rationale) and "He said 'no' / twice." in rationale


@pytest.mark.parametrize("label", ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"])
def test_a_constrained_greedy_decode_pushed_along_a_target_writes_it(training_sets: Path, engine,
                                                                     label: str) -> None:
    """Teacher forcing through the grammar: every step's logit of the target's next token is raised far above the
    rest, before the grammar mask; the mask gets the last word, so the text is the target only if the grammar
    allows each of its tokens, and the answer ends (EOS) where the target does."""
    from veracity.models.engine import GenerationRequest

    rows = [json.loads(line) for line in (training_sets / "sft.jsonl").read_text(encoding="utf-8").splitlines()]
    # a target of a three-passage prompt whose quote the bound cut (the longest answers)
    row = next(r for r in rows if r["label"] == label and len(PASSAGE.findall(r["prompt"][1]["content"])) == 3
               and "\u2026" in r["completion"][0]["content"])
    target = row["completion"][0]["content"]
    forced = [*engine.tokenizer(target, add_special_tokens=False)["input_ids"], engine.tokenizer.eos_token_id]
    steps: list[int] = []

    def push(module, args, output):  # one forward per generated token: the prompt's, then one per step
        if len(steps) < len(forced):
            output.logits[:, -1, forced[len(steps)]] += 1e4
        steps.append(len(steps))
        return output

    handle = engine.model.register_forward_hook(push)
    try:
        request = GenerationRequest.chat(row["prompt"], temperature=0.0, logprobs=True,
                                         **pipeline_constraint(3, engine))
        (result,) = engine.generate([request])
    finally:
        handle.remove()
    candidate = result.candidates[0]
    assert result.error is None and candidate.text == target and candidate.finish_reason == "stop"
    assert len(candidate.token_logprobs) == len(forced)  # the EOS was written (and scored) right after the target
