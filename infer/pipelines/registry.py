"""The four pipelines by name: the one table every caller that has a name reads (the driver, the Python API,
``infer ablate``, the on-demand report). It imports no pipeline: each is imported only when one is asked for
(torch, numpy), and nothing here imports the driver or the report, so both can read it."""

from __future__ import annotations

import importlib
from typing import Any

# recipe file name prefix → (module, class)
PIPELINES = {
    "r2vc": ("veracity.infer.pipelines.r2vc.pipeline", "R2VC"),
    "aic": ("veracity.infer.pipelines.aic.pipeline", "AIC"),
    "sciclaimseekers": ("veracity.infer.pipelines.sciclaimseekers.pipeline", "SciClaim"),
    "sciclaim": ("veracity.infer.pipelines.sciclaimseekers.pipeline", "SciClaim"),
    "uts": ("veracity.infer.pipelines.uts.pipeline", "UTS"),
}

# a pipeline's scorer by the name `veracity eval <name>` gives it: what `infer ablate` rows may call by that name
SCORERS = {
    "r2vc": "veracity.infer.eval.r2vc",
    "averitec": "veracity.infer.eval.averitec",
    "sciclaim": "veracity.infer.eval.sciclaim",
    "m4": "veracity.infer.eval.m4",
}


def pipeline_class(name: str) -> type[Any]:
    """The pipeline called ``name`` (``r2vc``, ``aic``, ``sciclaim`` / ``sciclaimseekers``, ``uts``)."""
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; one of {sorted(PIPELINES)}")
    module, cls = PIPELINES[name]
    return getattr(importlib.import_module(module), cls)


def scorer_main(name: str) -> Any:
    """The ``main(argv)`` of the scorer ``veracity eval <name>`` runs (:data:`SCORERS`)."""
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; one of {sorted(SCORERS)}")
    return importlib.import_module(SCORERS[name]).main
