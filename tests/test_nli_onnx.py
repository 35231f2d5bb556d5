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
    verifier.session = None  # the torch forward of the model the graph was exported from
    assert verifier.model.config._attn_implementation == "sdpa"
    assert np.allclose(verifier.predict(PREMISES, CLAIMS), before, atol=1e-6)
    target = onnx_dir(verifier_dir, model_fingerprint(verifier_dir))
    ops = {name: [n.op_type for n in onnx.load(str(target / file)).graph.node] for name, file in FILES.items()}
    assert ops["onnx"].count("Attention") == 1 and "EmbedLayerNormalization" in ops["onnx"]
    assert ops["onnx_int8"].count("QAttention") == 1 and "MatMulInteger" in ops["onnx_int8"]
    assert (target / "fingerprint.txt").read_text() == stamp(model_fingerprint(verifier_dir))


def test_the_backend_is_part_of_the_model_id(verifier_dir: Path) -> None:
    fingerprint = model_fingerprint(verifier_dir)
    assert NLIVerifier(str(verifier_dir), backend="torch").model_id.endswith(fingerprint)
    assert not onnx_dir(verifier_dir, fingerprint).exists()  # torch exports nothing
    int8 = f"{fingerprint}+onnx_int8@export2-int{8 if has_vnni() else 7}"  # the graph's export and weight range
    assert NLIVerifier(str(verifier_dir), backend="onnx_int8").model_id.endswith(int8)
    with pytest.raises(ValueError, match="backend"):
        NLIVerifier(str(verifier_dir), backend="tensorrt")


def r2vc_argv(verifier_dir: Path, claims: Path, out: Path) -> list[str]:
    return ["--claims", str(claims), "--use_generator", "false", "--nli_model", str(verifier_dir), "--nli_backend",
            "auto", "--output_dir", str(out), "--progress", "false"]


def recorded_verifier(out: Path) -> str:
    import yaml

    return yaml.safe_load((out / "run_config.yaml").read_text())["models"]["verifier"]


def test_auto_names_the_same_verifier_whether_or_not_its_graph_is_cached(verifier_dir: Path, tmp_path: Path) -> None:
    """``--nli_backend auto`` on a CPU is the ONNX graph, exported on first use: a run, its resume after
    ``models export-onnx`` cached the graph, and a resume after the cache was emptied all name one verifier (before,
    auto meant torch until a graph was cached, so the resume was refused as another model)."""
    import shutil

    from pipeline_inputs import CLAIMS, write_jsonl

    from veracity import cli
    from veracity.infer.pipelines.r2vc.run import main

    claims, out = tmp_path / "claims.jsonl", tmp_path / "run"
    graphs = onnx_dir(verifier_dir, model_fingerprint(verifier_dir))
    write_jsonl(claims, CLAIMS[:2])
    assert main(r2vc_argv(verifier_dir, claims, out))["processed"] == 2
    first = recorded_verifier(out)
    assert first.endswith("+onnx@export2") and is_current(graphs, model_fingerprint(verifier_dir))
    shutil.rmtree(graphs)
    assert cli.main(["models", "export-onnx", "nli_verifier", "--name", str(verifier_dir)]) == 0  # cached now
    write_jsonl(claims, CLAIMS[:4])
    assert main(r2vc_argv(verifier_dir, claims, out))["processed"] == 2
    shutil.rmtree(graphs)  # not cached: exported again by the resume
    write_jsonl(claims, CLAIMS)
    assert main(r2vc_argv(verifier_dir, claims, out))["processed"] == 1
    assert recorded_verifier(out) == first


def test_two_exporters_at_once_export_once_and_leave_the_graphs_whole(verifier_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ``veracity models export-onnx`` at once over one cache (two nodes' processes; here two threads): the
    second waits for the first and finds its graphs — one export, both succeed, the graphs are whole and score like
    torch (before, both exported and the second deleted the first's folder, or failed with ENOTEMPTY)."""
    import threading

    from veracity import cli
    from veracity.models import onnx_runtime

    real, calls, inside, second_started = onnx_runtime.export, [], threading.Event(), threading.Event()

    def slow_export(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - export's own signature
        calls.append(threading.current_thread().name)
        inside.set()
        if len(calls) == 1:  # let the second exporter arrive while this one is still writing
            assert second_started.wait(30)
            threading.Event().wait(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnx_runtime, "export", slow_export)
    results: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            results[name] = cli.main(["models", "export-onnx", "nli_verifier", "--name", str(verifier_dir)])
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            results[name] = error

    first = threading.Thread(target=run, args=("first",), name="first")
    first.start()
    assert inside.wait(60)
    second = threading.Thread(target=lambda: (second_started.set(), run("second")), name="second")
    second.start()
    first.join(120)
    second.join(120)
    assert results == {"first": 0, "second": 0} and calls == ["first"]
    fingerprint = model_fingerprint(verifier_dir)
    assert is_current(onnx_dir(verifier_dir, fingerprint), fingerprint)
    reference = NLIVerifier(str(verifier_dir), backend="torch").predict(PREMISES, CLAIMS)
    assert np.allclose(NLIVerifier(str(verifier_dir), backend="onnx").predict(PREMISES, CLAIMS), reference, atol=1e-5)


@pytest.mark.parametrize("vnni", [False, True])
def test_int8_weights_take_the_range_of_the_cpu(verifier_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                vnni: bool) -> None:
    """Without VNNI the INT8 weights are 7-bit (reduce_range: the u8×s8 products would saturate), with VNNI full
    8-bit; each range gets its own graph folder and model id."""
    import onnx
    from onnx import numpy_helper

    from veracity import cli
    from veracity.models import onnx_runtime

    monkeypatch.setattr(onnx_runtime, "has_vnni", lambda: vnni)
    assert cli.main(["models", "export-onnx", "nli_verifier", "--name", str(verifier_dir)]) == 0
    target = onnx_dir(verifier_dir, model_fingerprint(verifier_dir))
    assert target.name.endswith(f"-int{8 if vnni else 7}")
    graph = onnx.load(str(target / FILES["onnx_int8"]))
    weights = [numpy_helper.to_array(t).astype(int) for t in graph.graph.initializer
               if t.data_type == onnx.TensorProto.INT8]
    assert weights and max(int(abs(w).max()) for w in weights) == (127 if vnni else 64)
    assert NLIVerifier(str(verifier_dir), backend="onnx_int8").model_id.endswith(f"-int{8 if vnni else 7}")


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
