"""The verifier through ONNX Runtime: exported once, scored like torch, never a stale graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_models import build_tiny_nli

from veracity.models.fingerprint import model_fingerprint
from veracity.models.nli import NLIVerifier
from veracity.models.onnx_runtime import FILES, has_vnni, is_current, onnx_dir, stamp

PREMISES = ["A man plays guitar on a stage in front of a large crowd.", "The sky is green.", "Paris is in France."]
CLAIMS = ["A person makes music.", "The sky is blue.", "Paris is the capital of Germany."]


@pytest.fixture()
def verifier_dir(tmp_path: Path, tiny_encoder_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))  # the exported graphs land in this test's cache
    return build_tiny_nli(tmp_path / "nli", tiny_encoder_dir, {0: "entailment", 1: "neutral", 2: "contradiction"},
                          veracity_max_length=40)


def test_onnx_scores_like_torch(verifier_dir: Path) -> None:
    """fp32 ONNX equals torch to 1e-5 (the same graph, another runtime); INT8 quantizes the weights, so it is
    only close (0.05 on a random tiny model, whose logits are small)."""
    torch_probs = NLIVerifier(str(verifier_dir), backend="torch").predict(PREMISES, CLAIMS)
    onnx = NLIVerifier(str(verifier_dir), backend="onnx")
    assert np.allclose(onnx.predict(PREMISES, CLAIMS), torch_probs, atol=1e-5)
    int8 = NLIVerifier(str(verifier_dir), backend="onnx_int8").predict(PREMISES, CLAIMS)
    assert np.allclose(int8, torch_probs, atol=0.05) and not np.allclose(int8, torch_probs, atol=1e-7)


def test_the_graphs_are_fused_and_the_torch_model_is_left_as_it_was(verifier_dir: Path) -> None:
    """A BERT graph gets one fused attention node per layer (QAttention once quantized), exported through eager
    attention; the torch model it was exported from still scores as before (SDPA)."""
    import onnx

    before = NLIVerifier(str(verifier_dir), backend="torch").predict(PREMISES, CLAIMS)
    verifier = NLIVerifier(str(verifier_dir), backend="onnx")  # exports from its own torch model
    verifier.onnx = None  # the torch forward of the model the graph was exported from
    assert verifier.model.config._attn_implementation == "sdpa"
    assert np.allclose(verifier.predict(PREMISES, CLAIMS), before, atol=1e-6)
    target = onnx_dir(verifier_dir, model_fingerprint(verifier_dir))
    ops = {name: [n.op_type for n in onnx.load(str(target / file)).graph.node] for name, file in FILES.items()}
    assert ops["onnx"].count("Attention") == 1 and "EmbedLayerNormalization" in ops["onnx"]
    assert ops["onnx_int8"].count("QAttention") == 1 and "MatMulInteger" in ops["onnx_int8"]
    assert (target / "fingerprint.txt").read_text() == stamp(model_fingerprint(verifier_dir))


def test_the_backend_is_part_of_the_model_id(verifier_dir: Path) -> None:
    fingerprint = model_fingerprint(verifier_dir)
    assert NLIVerifier(str(verifier_dir)).backend == "torch"  # auto, no graph exported yet: torch, nothing exported
    assert not onnx_dir(verifier_dir, fingerprint).exists()
    assert NLIVerifier(str(verifier_dir), backend="torch").model_id.endswith(fingerprint)
    int8 = f"{fingerprint}+onnx_int8@export2-int{8 if has_vnni() else 7}"  # the graph's export and weight range
    assert NLIVerifier(str(verifier_dir), backend="onnx_int8").model_id.endswith(int8)
    assert NLIVerifier(str(verifier_dir)).backend == "onnx"  # auto on a CPU, once a graph exists (just made)
    with pytest.raises(ValueError, match="backend"):
        NLIVerifier(str(verifier_dir), backend="tensorrt")


def test_a_missing_or_stale_graph_is_rebuilt(verifier_dir: Path) -> None:
    fingerprint = model_fingerprint(verifier_dir)
    target = onnx_dir(verifier_dir, fingerprint)
    NLIVerifier(str(verifier_dir), backend="onnx")
    assert is_current(target, fingerprint)
    (target / "model.int8.onnx").unlink()  # missing: rebuilt
    NLIVerifier(str(verifier_dir), backend="onnx_int8")
    assert (target / "model.int8.onnx").is_file()
    (target / "fingerprint.txt").write_text(f"{fingerprint}\n")  # an older export recipe: rebuilt
    NLIVerifier(str(verifier_dir), backend="onnx")
    assert is_current(target, fingerprint)
    (target / "fingerprint.txt").write_text("another-model\n")  # stale: rebuilt, not used
    (target / "model.onnx").write_bytes(b"not a graph")
    verifier = NLIVerifier(str(verifier_dir), backend="onnx")
    assert is_current(target, fingerprint)
    reference = NLIVerifier(str(verifier_dir), backend="torch").predict(PREMISES, CLAIMS)
    assert np.allclose(verifier.predict(PREMISES, CLAIMS), reference, atol=1e-5)
