"""Session-wide test setup: offline, one thread, temp caches; tiny data built once per session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The environment of the `server` tests (scripts/setup_vllm_cpu.sh): vLLM brings its own torch, not the project's pin.
VLLM_PYTHON = Path(os.environ.get("VERACITY_VLLM_PYTHON", Path(__file__).parents[1] / ".venv-vllm/bin/python"))

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).parent))
from fixture_data import build_data_root  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """``pytest -m server`` where vLLM is not installed continues in vLLM's environment when there is one: the same
    arguments, run by ``VLLM_PYTHON`` (without one, each server test skips, naming the setup script)."""
    import importlib.util

    markexpr = config.getoption("markexpr") or ""
    if ("server" not in markexpr or "not server" in markexpr or importlib.util.find_spec("vllm") is not None
            or not VLLM_PYTHON.exists() or os.environ.get("VERACITY_VLLM_HANDOVER")):
        return
    os.environ["VERACITY_VLLM_HANDOVER"] = "1"  # once: an environment without vLLM in it does not hand over again
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()  # the handed-over run writes to this terminal, not to pytest's capture
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(config.invocation_params.dir)
    os.execv(VLLM_PYTHON, [str(VLLM_PYTHON), "-m", "pytest", *config.invocation_params.args])


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    hf_home = tmp_path_factory.getbasetemp() / "hf_home"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    # Tests never pick up a pre-built model from ../shared/models by accident (tests that want one set it).
    models_root = tmp_path_factory.getbasetemp() / "empty_models_root"
    models_root.mkdir(exist_ok=True)
    monkeypatch.setenv("VERACITY_MODELS_ROOT", str(models_root))


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny data root in the shipped layout (read-only by convention: copy it to mutate)."""
    return build_data_root(tmp_path_factory.mktemp("data"))


@pytest.fixture()
def mutable_data_root(tmp_path: Path) -> Path:
    return build_data_root(tmp_path / "data")


@pytest.fixture(scope="session")
def prepared_dir(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FEVER-family and VitaminC of the hand-made data root, every record in dev (what the R2VC and checkpoint
    tests evaluate); a test module with other needs defines its own."""
    from veracity.data_prep.prepare import PrepConfig, prepare

    out = tmp_path_factory.mktemp("prep")
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(out), datasets=["fever", "vitaminc"],
                       train_fraction=0.0, calib_fraction=0.0, dev_fraction=1.0))
    return out


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT sentence encoder (hidden 32, 2 layers) with the embedded MiniLM's vocabulary."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from veracity.models.registry import resolve_model

    base = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = BertTokenizerFast.from_pretrained(resolve_model("embedder"))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(base / "hf")
    tokenizer.save_pretrained(base / "hf")
    word = models.Transformer(str(base / "hf"), max_seq_length=64)
    encoder = SentenceTransformer(modules=[word, models.Pooling(32, "mean")], device="cpu")
    encoder.save(str(base / "st"))
    return base / "st"


@pytest.fixture(scope="session")
def embedded_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A veracity cache with the embedded chat model converted once per session (slow tests only)."""
    cache = tmp_path_factory.mktemp("veracity_cache")
    previous = os.environ.get("VERACITY_CACHE")
    os.environ["VERACITY_CACHE"] = str(cache)
    try:
        from veracity.models.registry import resolve_model

        resolve_model("chat_lm")
    finally:
        if previous is None:
            os.environ.pop("VERACITY_CACHE")
        else:
            os.environ["VERACITY_CACHE"] = previous
    return cache


@pytest.fixture(scope="session")
def tiny_verifier(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    """A tiny random 3-way NLI cross-encoder (entailment, neutral, contradiction; passages without titles), saved
    like a trained verifier (a module that needs other settings builds its own)."""
    from tiny_models import build_tiny_nli

    return build_tiny_nli(tmp_path_factory.mktemp("tiny_verifier"), tiny_encoder_dir,
                          {0: "entailment", 1: "neutral", 2: "contradiction"}, veracity_evidence_titles=False)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama chat model (byte-level tokenizer, ChatML template), saved like any local model."""
    from tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's real server on loopback for the ``server`` tests (one per session): its ``/v1`` URL; stopped by pid."""
    from vllm_real import need_vllm, serve

    need_vllm()
    yield from serve(tmp_path_factory.mktemp("vllm"))


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local Ray for one test module, the tests' own whatever else runs on the machine (local_ray.py); shut down
    after the module, so no Ray process is left behind."""
    pytest.importorskip("ray")
    from local_ray import start_local_ray

    ray = start_local_ray()
    yield ray
    ray.shutdown()
