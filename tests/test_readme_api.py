"""The Python API examples of docs/api.md run as printed (the model weights swapped for tiny ones, nothing else):
the pipelines, the NLI verifier on its own and retrieval on its own."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from pipeline_inputs import PAPERS, build_tiny_cross_encoder

import veracity
from veracity.infer.pipelines.registry import pipeline_class

REPO = Path(__file__).resolve().parents[1]


def example(name: str) -> str:
    """The ```python block after ``<!-- api-example: name -->`` in docs/api.md."""
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- api-example: {name} -->\n```python\n(.*?)```", text, re.S)
    assert found, f"docs/api.md has no api-example {name}"
    return found.group(1)


@pytest.fixture()
def tiny_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm_dir: Path, tiny_encoder_dir: Path
                 ) -> Path:
    """``veracity.load_pipeline`` with tiny weights for every model role a recipe names; the working directory a
    user would have (the shipped configs, a knowledge store, a paper collection)."""
    from tiny_models import build_tiny_nli

    verifier = build_tiny_nli(tmp_path / "verifier", tiny_encoder_dir, {0: "entailment", 1: "neutral",
                                                                        2: "contradiction"})
    weights = {"model": str(tiny_lm_dir), "nli_model": str(verifier), "embedder": str(tiny_encoder_dir),
               "cross_encoder": str(build_tiny_cross_encoder(tmp_path / "ce", tiny_encoder_dir)), "cache": ""}
    real = veracity.load_pipeline

    def load(config=None, **overrides):  # noqa: ANN001, ANN202 - load_pipeline's own signature
        cls = pipeline_class(Path(config).stem.split("_")[0])
        fields = {f.name for t in cls.config_types for f in dataclasses.fields(t)}
        return real(config, **{**overrides, **{k: v for k, v in weights.items() if k in fields}})

    monkeypatch.setattr(veracity, "load_pipeline", load)
    import veracity.infer.retrieval.dense as dense
    import veracity.models.nli as nli

    tiny_roles = {"nli_verifier": str(verifier), "embedder": str(tiny_encoder_dir)}
    for module in (nli, dense):  # "embedded" for the verifier and the encoder names the tiny weights
        real_resolve = module.resolve_model
        monkeypatch.setattr(module, "resolve_model", lambda role, name=None, *rest, real_resolve=real_resolve: (
            tiny_roles[role] if name == "embedded" and role in tiny_roles else real_resolve(role, name, *rest)))
    work = tmp_path / "work"
    (work / "store").mkdir(parents=True)
    (work / "configs").symlink_to(REPO / "configs")
    (work / "store" / "1.json").write_text(json.dumps({"url": "https://news.example.org/a", "url2text": [
        "The council said the bridge stays open.", "It was built in 1990."]}) + "\n")
    (work / "papers.jsonl").write_text("".join(json.dumps({"cord_uid": f"p{i}", "title": t, "abstract": a}) + "\n"
                                               for i, (t, a) in enumerate(PAPERS)))
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize("name", ["r2vc", "others", "verifier", "retrieval"])
def test_the_api_example_runs_as_printed(name: str, tiny_weights: Path, capsys: pytest.CaptureFixture[str]
                                                ) -> None:
    exec(compile(example(name), f"docs/api.md api-example {name}", "exec"), {})  # noqa: S102 - the page's own code
    printed = capsys.readouterr().out.splitlines()
    if name == "r2vc":
        assert [line.split()[0] for line in printed[:2]] == ["1", "2"] and len(printed) == 3
    elif name == "verifier":
        rows = [[float(x) for x in line.split()[1::2]] for line in printed[:2]]
        assert all(line.startswith("entailment ") for line in printed[:2]) and len(printed) == 3
        assert all(abs(sum(row) - 1) < 2e-3 for row in rows)  # three probabilities per pair
    elif name == "retrieval":
        hits = [eval(line) for line in printed]  # noqa: S307 - the page prints Python lists of tuples
        assert len(hits) == 2 and all(len(h) == 2 and {d for d, _ in h} <= {"d1", "d2", "d3"} for h in hits)
    else:
        assert printed[0] in ("answered", "failed") and printed[1].startswith("[[") and "council" in printed[2]
