"""The verifier through OpenVINO: fp32 scores like torch, static INT8 (NNCF, WordNet calibration) close to it, the
cascade (INT8, close calls in fp32) as each where it should be, graphs cached by the weights' fingerprint and never
used stale, the backend named in the run record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_nli_onnx import CLAIMS, PREMISES, recorded_verifier, verifier_dir  # noqa: F401 (a fixture)

from veracity.models import openvino_runtime
from veracity.models.fingerprint import model_fingerprint
from veracity.models.nli import NLIVerifier
from veracity.models.openvino_runtime import (
    CALIBRATION_PAIRS,
    FILES,
    GRAPHS,
    CascadeSession,
    ov_dir,
    top_two_gap,
    wordnet_pairs,
)


def test_openvino_scores_like_torch_and_int8_is_quantized(verifier_dir: Path) -> None:  # noqa: F811
    """fp32 through OpenVINO equals torch to 1e-4 (the same weights, another runtime); the INT8 graph holds
    FakeQuantize nodes (static activations' ranges) and scores close to torch, not equal; the torch model the
    graphs were converted from scores as before."""
    import openvino as ov

    torch_probs = NLIVerifier(str(verifier_dir), backend="torch").predict(PREMISES, CLAIMS)
    fp32 = NLIVerifier(str(verifier_dir), backend="openvino")
    assert np.allclose(fp32.predict(PREMISES, CLAIMS), torch_probs, atol=1e-4)
    fp32.session = None
    assert np.allclose(fp32.predict(PREMISES, CLAIMS), torch_probs, atol=1e-6)
    int8 = NLIVerifier(str(verifier_dir), backend="openvino_int8").predict(PREMISES, CLAIMS)
    assert np.allclose(int8, torch_probs, atol=0.05) and not np.allclose(int8, torch_probs, atol=1e-7)
    target = ov_dir(model_fingerprint(verifier_dir))
    ops = {name: {node.get_type_name() for node in ov.Core().read_model(str(target / file)).get_ops()}
           for name, file in FILES.items()}
    assert "FakeQuantize" in ops["openvino_int8"] and "FakeQuantize" not in ops["openvino"]
    assert (target / "fingerprint.txt").read_text() == GRAPHS.stamp(model_fingerprint(verifier_dir))


def test_a_stale_graph_is_rebuilt_and_the_backend_is_in_the_model_id(verifier_dir: Path) -> None:  # noqa: F811
    fingerprint = model_fingerprint(verifier_dir)
    verifier = NLIVerifier(str(verifier_dir), backend="openvino_int8")
    assert verifier.model_id.endswith(f"{fingerprint}+openvino_int8@ov1-wordnet{CALIBRATION_PAIRS}")
    assert NLIVerifier(str(verifier_dir), backend="openvino").model_id.endswith(f"{fingerprint}+openvino@ov1")
    expected = verifier.predict(PREMISES, CLAIMS)
    target = ov_dir(fingerprint)
    (target / "fingerprint.txt").write_text("another model\n")  # a hand-copied or stale folder
    (target / FILES["openvino_int8"]).write_text("not a graph")
    again = NLIVerifier(str(verifier_dir), backend="openvino_int8")
    assert GRAPHS.is_current(target, fingerprint)
    assert np.allclose(again.predict(PREMISES, CLAIMS), expected, atol=1e-6)


def test_a_graph_backend_is_a_cpu_backend() -> None:
    from veracity.models.nli import resolve_backend

    assert resolve_backend("openvino_int8", "cpu") == "openvino_int8"
    with pytest.raises(ValueError, match="runs on the CPU"):
        resolve_backend("openvino_int8", "cuda")


def test_the_calibration_pairs_are_the_same_on_every_call() -> None:
    pairs = wordnet_pairs()
    assert len(pairs) == CALIBRATION_PAIRS == len(set(pairs))
    assert pairs == wordnet_pairs()
    assert all(premise.endswith(".") and hypothesis.endswith(".") for premise, hypothesis in pairs)


def test_r2vc_records_the_openvino_verifier(verifier_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    """Through the R2VC command line: ``--nli_backend openvino_int8`` is the verifier the run records."""
    from pipeline_inputs import CLAIMS as CLAIM_ROWS
    from pipeline_inputs import write_jsonl

    from veracity import cli

    claims, out = tmp_path / "claims.jsonl", tmp_path / "run"
    write_jsonl(claims, CLAIM_ROWS[:2])
    assert cli.main(["infer", "r2vc", "--claims", str(claims), "--use_generator", "false", "--nli_model",
                     str(verifier_dir), "--nli_backend", "openvino_int8", "--output_dir", str(out),
                     "--progress", "false"]) == 0
    assert recorded_verifier(out).endswith("+openvino_int8@ov1-wordnet300")


def test_top_two_gap() -> None:
    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.4, 0.35, 0.25], [1 / 3, 1 / 3, 1 / 3]]))
    assert np.allclose(top_two_gap(logits), [0.5, 0.05, 0.0])
    assert np.allclose(top_two_gap(logits + 5.0), [0.5, 0.05, 0.0])  # a shift of every logit changes nothing


class Recorder:
    """A session that returns fixed logits per row and keeps the batches it was given."""

    def __init__(self, logits: np.ndarray):
        self.logits, self.batches = logits, []

    def run(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        self.batches.append(batch)
        return self.logits[: len(batch["input_ids"])].copy()


def test_the_cascade_rescores_only_the_close_calls_cut_to_their_length() -> None:
    """Rows whose INT8 top-two gap is below the margin get fp32's logits, the others keep INT8's; the fp32 batch
    holds those rows alone, without the columns that are padding in all of them; the counts add up."""
    int8 = Recorder(np.log(np.array([[0.9, 0.05, 0.05], [0.4, 0.35, 0.25], [0.1, 0.45, 0.45], [0.05, 0.05, 0.9]])))
    fp32 = Recorder(np.array([[0.0, 5.0, 0.0], [0.0, 0.0, 5.0]]))
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    batch = {"input_ids": np.arange(20).reshape(4, 5) * mask, "attention_mask": mask}
    cascade = CascadeSession(int8, fp32, margin=0.1)
    out = cascade.run(batch)
    assert np.allclose(out[[0, 3]], int8.logits[[0, 3]]) and np.allclose(out[[1, 2]], fp32.logits)
    (sent,) = fp32.batches
    assert sent["attention_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert sent["input_ids"].tolist() == [[5, 6, 0], [10, 11, 12]]
    assert (cascade.scored, cascade.rescored) == (4, 2)
    int8.logits = int8.logits[[0, 3]]
    CascadeSession(int8, fp32, margin=0.1).run({k: v[[0, 3]] for k, v in batch.items()})
    assert len(fp32.batches) == 1  # no close call: fp32 is not run


def test_the_cascade_is_int8_or_fp32_by_its_margin(verifier_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Through NLIVerifier: margin 0 scores as INT8 does, margin 1 (every pair a close call) as fp32 does; the
    model id names the margin."""
    int8 = NLIVerifier(str(verifier_dir), backend="openvino_int8").predict(PREMISES, CLAIMS)
    fp32 = NLIVerifier(str(verifier_dir), backend="openvino").predict(PREMISES, CLAIMS)
    cascade = NLIVerifier(str(verifier_dir), backend="openvino_cascade")
    assert cascade.model_id.endswith(f"+openvino_cascade@ov1-wordnet{CALIBRATION_PAIRS}-margin0.1")
    for margin, expected in ((0.0, int8), (1.0, fp32)):
        cascade.session.margin = margin
        assert np.allclose(cascade.predict(PREMISES, CLAIMS), expected, atol=1e-6)
    assert cascade.session.rescored == cascade.session.scored // 2 > 0
    assert cascade.stats.rescored_fp32 == cascade.session.rescored  # what the run records say
    monkeypatch.setattr(openvino_runtime, "CASCADE_MARGIN", 0.2)
    assert NLIVerifier(str(verifier_dir), backend="openvino_cascade").model_id.endswith("-margin0.2")
