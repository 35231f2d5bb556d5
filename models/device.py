"""Where models run: the one ``--device`` option of every command that loads a model (docs/training.md#devices).

``auto`` is the GPU when torch sees one, else the CPU; ``cpu``, ``cuda`` and ``cuda:N`` say it outright. The
generator engine, the NLI verifier (torch backend on a GPU: ONNX Runtime stays a CPU backend), the cross-encoder
and the dense encoder all take it; run records hold the resolved device beside the config's value.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from veracity.data_prep.errors import InputError

DEVICE_HELP = "Where the models run: auto (the GPU when torch sees one, else the CPU), cpu, cuda or cuda:N."
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device(spec: str) -> str:
    """``spec`` if it names a device this module knows (ValueError otherwise); no torch import."""
    if not isinstance(spec, str) or not DEVICE_PATTERN.fullmatch(spec):
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {spec!r}")
    return spec


# Inside resolved_for(): the device `auto` stands for where the models will load (not this process).
_RESOLVED_FOR: ContextVar[str | None] = ContextVar("resolved_for", default=None)


@contextlib.contextmanager
def resolved_for(device: str) -> Iterator[None]:
    """Inside the block, ``auto`` resolves to ``device`` and a ``cuda`` spec is taken as given: how a Ray driver
    names the models its actors will load on their own machines (the actors resolve and check it there)."""
    token = _RESOLVED_FOR.set(device)
    try:
        yield
    finally:
        _RESOLVED_FOR.reset(token)


def resolve_device(spec: str = "auto") -> str:
    """The torch device ``spec`` stands for on this machine (or, inside :func:`resolved_for`, where the models will
    load): ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        InputError: a CUDA device torch does not see (one ``error:`` line through the command line).
    """
    check_device(spec)
    if spec == "cpu":
        return "cpu"
    elsewhere = _RESOLVED_FOR.get()
    if elsewhere is not None:
        return elsewhere if spec == "auto" else spec
    import torch  # lazy: seconds to import; only a job that loads a model resolves its device

    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise InputError(f"--device {spec}: torch sees no CUDA GPU on this machine (torch {torch.__version__}); "
                         "use --device cpu or auto")
    index = int(spec.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise InputError(f"--device {spec}: torch sees {torch.cuda.device_count()} CUDA GPU(s), numbered from 0")
    return spec


def model_device(model: object) -> str:
    """The device a torch module's first parameter lives on (``cpu``, ``cuda:0``), for run records and tests."""
    return str(next(model.parameters()).device)  # type: ignore[attr-defined]


@dataclass
class DeviceOptions:
    """``--device`` for jobs that load models but have no :class:`~veracity.models.engine.EngineConfig`."""

    device: str = field(default="auto", metadata={"help": DEVICE_HELP})

    def __post_init__(self) -> None:
        check_device(self.device)
