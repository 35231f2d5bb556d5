"""infer/retrieval/gpu.py: a FAISS index moves to the GPU only where faiss has one, and searches the same there."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from veracity.infer.retrieval.gpu import to_gpu_if_available


def vectors(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_without_a_gpu_the_index_is_returned_as_it_is() -> None:
    if faiss.get_num_gpus() > 0:
        pytest.skip("this faiss sees a GPU")
    index = faiss.IndexFlatIP(32)
    index.add(vectors(50))
    assert to_gpu_if_available(index) is index


@pytest.mark.gpu
def test_a_flat_index_searches_the_same_on_the_gpu_and_hnsw_stays_on_the_cpu() -> None:
    if faiss.get_num_gpus() == 0:
        pytest.skip("faiss sees no GPU: install the gpu extra (faiss-gpu-cu12) on a GPU machine")
    docs, queries = vectors(3000), vectors(20, seed=1)
    cpu = faiss.IndexFlatIP(32)
    cpu.add(docs)
    gpu = to_gpu_if_available(cpu)
    assert gpu is not cpu and "Gpu" in type(gpu).__name__ and gpu.ntotal == 3000
    cpu_scores, cpu_ids = cpu.search(queries, 10)
    gpu_scores, gpu_ids = gpu.search(queries, 10)
    assert (gpu_ids == cpu_ids).mean() > 0.99 and np.allclose(gpu_scores, cpu_scores, atol=1e-4)
    assert faiss.index_gpu_to_cpu(gpu).ntotal == 3000  # what a caller writes to disk
    hnsw = faiss.IndexHNSWFlat(32, 16, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(docs)
    assert to_gpu_if_available(hnsw) is hnsw


@pytest.mark.gpu
def test_a_flat_dense_index_is_built_searched_on_the_gpu_and_saved_as_a_cpu_index(tmp_path) -> None:
    from veracity.infer.retrieval.dense import DenseIndex, FaissParams

    if faiss.get_num_gpus() == 0:
        pytest.skip("faiss sees no GPU: install the gpu extra (faiss-gpu-cu12) on a GPU machine")
    docs, queries = vectors(500), vectors(5, seed=1)
    params = FaissParams(kind="flat")
    dense = DenseIndex.from_vectors(docs, [f"d{i}" for i in range(500)], params)
    assert "Gpu" in type(dense.index).__name__
    dense.save(tmp_path / "dense.faiss")
    loaded = DenseIndex.load(tmp_path / "dense.faiss", params, dense.doc_ids)
    assert "Gpu" in type(loaded.index).__name__
    assert loaded.search_vectors(queries, 5) == dense.search_vectors(queries, 5)
