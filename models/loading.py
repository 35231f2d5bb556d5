"""When a model's weights load: at construction, or — inside :func:`deferred_loading` — on first use.

A Ray driver builds its pipeline inside the block (``infer/pipelines/driver.py``): every model — the generator
engines, the NLI verifier, the dense encoder, the cross-encoder — is named by content for the run record (the same
id a loaded one has) and loads nothing, since the actors load and run their own copies. Elsewhere a model loads at
construction, so one that cannot load fails the run there, not item by item.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEFERRED = ContextVar("veracity_deferred_loading", default=False)


@contextmanager
def deferred_loading() -> Iterator[None]:
    """Models built inside this block load their weights on first use, not at construction."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def loading_deferred() -> bool:
    """Whether models built now defer loading their weights (:func:`deferred_loading`)."""
    return _DEFERRED.get()
