"""FAISS on the GPU where this faiss build sees one (the ``gpu`` extra installs faiss-gpu-cu12); the CPU index
otherwise, so callers need no branch of their own.

Only index types FAISS runs on a GPU move (flat, IVF); an HNSW graph has no GPU form and stays on the CPU. A moved
index is a GPU index: ``faiss.write_index`` needs ``faiss.index_gpu_to_cpu(index)`` first.
"""

from __future__ import annotations

import logging
from typing import Any

import faiss

logger = logging.getLogger(__name__)

_resources: dict[int, Any] = {}  # one StandardGpuResources per device for the process: its scratch memory is reused


def to_gpu_if_available(index: Any, device: int = 0) -> Any:
    """``index`` copied to GPU ``device`` when faiss has GPUs and runs this index type there, else ``index``
    itself (faiss-cpu, no GPU, or an HNSW index)."""
    if faiss.get_num_gpus() <= device:  # faiss-cpu answers 0
        return index
    if isinstance(faiss.downcast_index(index), faiss.IndexHNSW):
        logger.info("faiss: an HNSW index has no GPU form; it stays on the CPU")
        return index
    if device not in _resources:
        _resources[device] = faiss.StandardGpuResources()
    return faiss.index_cpu_to_gpu(_resources[device], device, index)


def to_cpu(index: Any) -> Any:
    """``index`` as a CPU index (what ``faiss.write_index`` takes): a GPU index copied back, any other as it is."""
    gpu_index = getattr(faiss, "GpuIndex", None)  # only faiss-gpu builds have it
    return faiss.index_gpu_to_cpu(index) if gpu_index is not None and isinstance(index, gpu_index) else index
