"""veracity: an automated fact-checking toolkit (R2VC, AIC CTU FEVER-8, SciClaimSeekers, UTS) on one core.

``load_pipeline(recipe, **overrides)`` loads a pipeline once and runs it on your rows (``veracity.api``);
``veracity.eval`` scores plain records.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_pipeline"]


def load_pipeline(config: Any = None, **overrides: Any) -> Any:
    """A pipeline loaded from a YAML recipe with keyword overrides of its config fields; see
    :func:`veracity.api.load_pipeline`."""
    from veracity.logs import quiet_unless_asked

    quiet_unless_asked()  # before the libraries load: their bars and warnings stay quiet, as on the command line
    from veracity.api import load_pipeline as load  # lazy: `import veracity` and `veracity --help` stay instant

    return load(config, **overrides)
