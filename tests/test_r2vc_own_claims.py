"""docs/pipelines/r2vc.md's "Your own claims" commands run as printed on a fresh clone (issue #63): the block is read
from the page and run through the command line, in a working directory with the shipped configs and nothing under
runs/. Only the weights differ: the embedded chat model and verifier resolve to tiny ones (the cache and the models
root hold them where the real ones would be); the embedder is the installed MiniLM."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from test_docs import segments, shell_blocks

from veracity import cli
from veracity.io import COMPLETED

REPO = Path(__file__).resolve().parents[1]


def own_claims_block() -> list[str]:
    """The first shell block under the "### Your own claims" heading of docs/pipelines/r2vc.md."""
    text = (REPO / "docs" / "pipelines" / "r2vc.md").read_text(encoding="utf-8")
    _, lines = next(shell_blocks(text[text.index("### Your own claims"):]))
    return lines


def run_block(lines: list[str]) -> list[list[str]]:
    """Run a docs block here: ``cat > FILE <<'EOF'`` writes FILE, each ``veracity …`` (``\\`` continuations joined)
    goes through ``cli.main`` and must exit 0; returns the veracity commands run. Anything else fails the test."""
    ran, index = [], 0
    while index < len(lines):
        heredoc = re.match(r"^cat > (\S+) <<'EOF'$", lines[index].strip())
        if heredoc:
            end = lines.index("EOF", index)
            Path(heredoc.group(1)).write_text("\n".join(lines[index + 1 : end]) + "\n", encoding="utf-8")
            index = end + 1
            continue
        line = lines[index]
        while line.rstrip().endswith("\\"):
            index += 1
            line = line.rstrip()[:-1] + " " + lines[index]
        index += 1
        for part in segments(line):
            assert part[0] == "veracity", f"not a veracity command: {shlex.join(part)}"
            assert cli.main(part[1:]) == 0, shlex.join(part)
            ran.append(part)
    return ran


@pytest.fixture()
def fresh_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm_dir: Path, tiny_encoder_dir: Path) -> Path:
    """A working directory as a fresh clone has it, the embedded models' places holding tiny weights."""
    import shutil

    from tiny_models import build_tiny_nli

    cache, models = tmp_path / "cache", tmp_path / "models"
    chat = cache / "models" / "smollm2-135m-instruct"  # where the embedded SmolLM2 is converted to, once
    shutil.copytree(tiny_lm_dir, chat)
    (chat / COMPLETED).write_text("tiny stand-in for the converted GGUF\n")
    build_tiny_nli(models / "nli-verifier-minilm", tiny_encoder_dir,
                   {0: "entailment", 1: "neutral", 2: "contradiction"}, veracity_evidence_titles=False)
    monkeypatch.setenv("VERACITY_CACHE", str(cache))
    monkeypatch.setenv("VERACITY_MODELS_ROOT", str(models))
    work = tmp_path / "clone"
    work.mkdir()
    (work / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(work)
    return work


def test_your_own_claims_run_as_printed_on_a_fresh_clone(fresh_clone: Path) -> None:
    ran = run_block(own_claims_block())
    assert [part[:3] for part in ran] == [["veracity", "index", "build"], ["veracity", "infer", "r2vc"]]
    out = fresh_clone / "runs" / "r2vc" / "mine"
    records = {json.loads(line)["id"]: json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()}
    assert sorted(records) == ["1", "2", "3"] and all(r["status"] == "ok" for r in records.values())
    retrieved = records["3"]["result"]["passages"]  # claim 3 has no evidence: it retrieved from the built index
    assert retrieved and {p["doc_id"] for p in retrieved} <= {"d1", "d2"}
    assert records["2"]["result"]["passages"] == [{"text": "Cats are small mammals.", "title": ""}]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["n"], metrics["n_unlabelled"]) == (1, 2)  # only claim 1 carries a label
    models = yaml.safe_load((out / "run_config.yaml").read_text())["models"]  # `embedded`: the base model, resolved
    assert models["generator"].startswith(f"transformers:{fresh_clone.parent}/cache/models/smollm2-135m-instruct#")
    assert models["verifier"].startswith(f"{fresh_clone.parent}/models/nli-verifier-minilm#")
    assert "calibrator" not in models  # --calibrator none
    assert (out / "report.html").is_file()
