"""--device on a CUDA machine: each model a job loads is on the GPU (run with -m gpu where torch sees one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")


@pytest.fixture()
def bert_tokenizer_dir(tmp_path: Path) -> Path:
    """A word-piece tokenizer over a few words (no embedded model package needed on a GPU machine)."""
    from transformers import BertTokenizerFast

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "sky", "is", "blue", "."]))
    folder = tmp_path / "bert_tokenizer"
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(folder)
    return folder


def test_auto_and_cuda_place_every_model_on_the_gpu(tiny_lm_dir: Path, bert_tokenizer_dir: Path,
                                                    request: pytest.FixtureRequest, tmp_path: Path) -> None:
    from tiny_models import build_tiny_nli

    from veracity.models.device import model_device, resolve_device
    from veracity.models.engine import EngineConfig, GenerationRequest
    from veracity.models.engine_factory import make_engine
    from veracity.models.nli import NLIVerifier

    assert resolve_device("auto") == "cuda"
    engine = make_engine(EngineConfig(model=str(tiny_lm_dir)))  # auto
    assert model_device(engine.model) == "cuda:0" and str(engine.dtype) == "torch.bfloat16"
    request = GenerationRequest.chat([{"role": "user", "content": "Claim: x"}], max_new_tokens=3)
    assert engine.generate([request])[0].ok
    cpu = make_engine(EngineConfig(model=str(tiny_lm_dir), device="cpu"))
    assert model_device(cpu.model) == "cpu"
    nli = build_tiny_nli(tmp_path / "nli", bert_tokenizer_dir, {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"})
    verifier = NLIVerifier(str(nli))  # auto: torch on the GPU
    assert verifier.backend == "torch" and model_device(verifier.model) == "cuda:0"
    assert verifier.predict(["The sky is blue."], ["The sky is blue."]).shape == (1, 3)
    onnx = NLIVerifier(str(nli), backend="onnx")  # ONNX Runtime stays on the CPU
    assert model_device(onnx.model) == "cpu"
    pytest.importorskip("faiss")  # the retrieval stack, where it is installed
    from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec

    encoder = DenseEncoder(EncoderSpec(model=str(request.getfixturevalue("tiny_encoder_dir"))), device="cuda:0")
    assert str(encoder.model.device) == "cuda:0" and encoder.encode_queries(["a"]).shape[0] == 1


def test_eval_checkpoint_on_cuda_records_it(prepared_dir: Path, tiny_lm_dir: Path, tmp_path: Path) -> None:
    from veracity.cli import main as cli

    assert cli(["eval", "checkpoint", "--kind", "generator", "--model", str(tiny_lm_dir), "--prepared_dir",
                str(prepared_dir), "--sources", "vitaminc", "--max_examples", "2", "--rationale_max_chars", "16",
                "--device", "cuda", "--output_dir", str(tmp_path)]) == 0
    assert yaml.safe_load((tmp_path / "run_config.yaml").read_text())["device"] == "cuda"
