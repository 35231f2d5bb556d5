"""Logging set up once, by entry points only; third-party noise quiet unless ``--verbose``.

Quiet by default means: transformers, datasets and huggingface_hub log errors only and show no progress bars
of their own (weight loading, ``Map``), FutureWarnings and UserWarnings from libraries are not shown, and chatty
loggers (faiss's loader, matplotlib's font cache, HTTP clients) log warnings only. veracity's own progress bars
(batch runs, training) and tables stay. ``veracity --verbose …`` or ``VERACITY_VERBOSE=1`` brings everything back.
The Python API is quiet the same way (:func:`quiet_unless_asked`) unless ``VERACITY_VERBOSE=1`` or the program called
:func:`setup_logging` itself.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

CHATTY_LOGGERS = ("faiss", "faiss.loader", "matplotlib", "httpx", "httpcore", "urllib3", "datasets", "transformers",
                  "sentence_transformers", "huggingface_hub", "accelerate", "peft", "trl", "PIL")
LIBRARY_MODULES = r"(transformers|trl|peft|accelerate|datasets|torch|sentence_transformers|huggingface_hub|sklearn)"


def quiet_third_party() -> None:
    """Silence third-party logs, warnings and bars (must run before those libraries are imported)."""
    for name, value in (("TRANSFORMERS_VERBOSITY", "error"), ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1"),
                        ("HF_DATASETS_DISABLE_PROGRESS_BARS", "1"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                        ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(name, value)
    for category in (FutureWarning, UserWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARY_MODULES)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    _quiet_loaded_libraries()


def _quiet_loaded_libraries() -> None:
    """The environment variables above act at import time; a library imported already (an embedding program,
    a test session) is told through its API instead."""
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging  # imported already (checked above)

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils import logging as datasets_logging

        datasets_logging.set_verbosity_error()
        datasets_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


def verbose_from_env() -> bool:
    """``VERACITY_VERBOSE=1``: third-party logs, warnings and bars stay, for the commands and the Python API."""
    return os.environ.get("VERACITY_VERBOSE", "") not in ("", "0", "false")


_chosen = False  # set by setup_logging: an entry point (the command line) has chosen, the API leaves it be


def quiet_unless_asked() -> None:
    """The Python API's default (``veracity.load_pipeline``, ``NLIVerifier``, the dense encoder of an index): quiet as
    the commands are — no "Loading weights" bars or library warnings — unless ``VERACITY_VERBOSE=1`` or the program
    set up logging itself through :func:`setup_logging` (what the commands do, ``--verbose`` or not)."""
    if not _chosen and not verbose_from_env():
        quiet_third_party()


def setup_logging(level: str | None = None, verbose: bool | None = None) -> None:
    global _chosen
    _chosen = True
    if verbose is None:
        verbose = verbose_from_env()
    if not verbose:
        quiet_third_party()
    level = (level or os.environ.get("VERACITY_LOG_LEVEL", "INFO")).upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if not verbose:  # a library that sets its own logger's level on import (bm25s: DEBUG) still stays quiet
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, OwnLogsOnly) for f in handler.filters):
                handler.addFilter(OwnLogsOnly())


class OwnLogsOnly(logging.Filter):
    """veracity's own records at any level; other libraries' from WARNING up."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".")[0] in ("veracity", "__main__")
