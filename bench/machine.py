"""The machine line every bench prints beside its table: the CPU, its vector flags (what ONNX Runtime's INT8
kernels and vLLM's CPU kernels pick from), threads, and the versions of the packages the bench depends on."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def machine(packages: Sequence[str]) -> str:
    """``CPU: <name>, <n> cores; flags avx2+ avx512f- …; OMP_NUM_THREADS=…`` and a line of ``packages``' versions
    (those installed)."""
    name, flags = platform.processor() or "?", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    versions = []
    for package in packages:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            pass
    have = " ".join(f"{f}{'+' if f in flags else '-'}" for f in CPU_FLAGS)
    return (f"CPU: {name}, {os.cpu_count()} cores; flags {have}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
            f"\n{', '.join(versions)}")
