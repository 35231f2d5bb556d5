"""The dense encoder through ONNX Runtime: exported once, embeds like torch, recorded in the index it builds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from retrieval_fixture import write_benchmark

from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec
from veracity.infer.retrieval.index import IndexMismatchError, IndexSettings, build_index, load_index
from veracity.models.fingerprint import model_fingerprint
from veracity.models.onnx_runtime import is_current, onnx_dir

TEXTS = ["Paris is the capital of France.", "The sky is blue.",
         "A much longer sentence about the melting of glaciers in the Alps over the last century, measured by"
         " satellites and by hand."]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's cache: the graphs are exported once (by the first test) and found by the others."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VERACITY_CACHE", str(folder))
        yield folder


def test_onnx_embeds_like_torch(cache: Path, tiny_encoder_dir: Path) -> None:
    """fp32 ONNX equals torch to 1e-5 in every coordinate (the same graph, another runtime; batches cut by length
    the same way), INT8 only close (cosine ≥ 0.95 on a random tiny encoder); every vector unit-length."""
    spec = EncoderSpec(model=str(tiny_encoder_dir), batch_size=2, max_length=16)  # 16: the long text is cut
    reference = DenseEncoder(spec).encode_documents(TEXTS)
    fp32 = DenseEncoder(EncoderSpec(**{**spec.__dict__, "backend": "onnx"})).encode_documents(TEXTS)
    int8 = DenseEncoder(EncoderSpec(**{**spec.__dict__, "backend": "onnx_int8"})).encode_documents(TEXTS)
    assert fp32.shape == reference.shape == (3, 32) and fp32.dtype == np.float32
    assert np.allclose(fp32, reference, atol=1e-5)
    cosine = (int8 * reference).sum(axis=1)
    assert cosine.min() >= 0.95 and not np.allclose(int8, reference, atol=1e-7)
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)
    assert is_current(onnx_dir(tiny_encoder_dir, model_fingerprint(tiny_encoder_dir)),
                      model_fingerprint(tiny_encoder_dir))


def test_an_unknown_backend_is_refused(cache: Path) -> None:
    with pytest.raises(ValueError, match="unknown encoder backend 'tensorrt'; choose torch, onnx, onnx_int8"):
        EncoderSpec(backend="tensorrt")


def test_the_index_records_the_backend_and_loads_with_it(cache: Path, tiny_encoder_dir: Path,
                                                         tmp_path: Path) -> None:
    bench = write_benchmark(tmp_path / "bench")
    settings = IndexSettings(embedder=str(tiny_encoder_dir), faiss_kind="flat", encoder_backend="onnx",
                             progress=False)
    folder = build_index(bench / "toy_corpus.jsonl", tmp_path / "index", settings)
    assert json.loads((folder / "index_meta.json").read_text())["dense"]["encoder"]["backend"] == "onnx"
    loaded = load_index(folder)
    assert loaded.encoder is not None and loaded.encoder.spec.backend == "onnx"
    torch_vectors = DenseEncoder(EncoderSpec(model=str(tiny_encoder_dir))).encode_queries(["capital of France"])
    assert np.allclose(loaded.encoder.encode_queries(["capital of France"]), torch_vectors, atol=1e-5)
    with pytest.raises(IndexMismatchError, match="backend onnx, the encoder given uses '', 256 and torch: rebuild"):
        load_index(folder, encoder=DenseEncoder(EncoderSpec(model=str(tiny_encoder_dir))))  # another runtime


def test_export_onnx_from_the_command_line(cache: Path, tiny_encoder_dir: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli

    cli.main(["models", "export-onnx", "embedder", "--name", str(tiny_encoder_dir)])
    folder = Path(capsys.readouterr().out.strip())
    assert folder == onnx_dir(tiny_encoder_dir, model_fingerprint(tiny_encoder_dir))
    assert (folder / "model.onnx").is_file() and (folder / "model.int8.onnx").is_file()
