"""``make_engine``: the one place that builds an engine from an :class:`~veracity.models.engine.EngineConfig`.

Apart from ``models/engine.py`` (the interface every backend imports), so no backend imports the factory that
imports it: each backend is imported only when a config names it.
"""

from __future__ import annotations

from veracity.models.engine import Engine, EngineConfig


def make_engine(config: EngineConfig) -> Engine:
    """Build the configured engine, wrapped in the response cache when one is set."""
    engine: Engine
    if config.engine == "transformers":
        from veracity.models.hf_engine import TransformersEngine  # lazy: torch

        engine = TransformersEngine(config.model, adapter=config.adapter, batch_size=config.batch_size,
                                    dtype=config.dtype, device=config.device)
    elif config.engine == "openai":
        from veracity.models.openai_engine import OpenAIEngine  # lazy: the openai SDK

        engine = OpenAIEngine(config.model, base_url=config.base_url, api_key=config.api_key, timeout=config.timeout,
                              max_retries=config.max_retries, concurrency=config.concurrency,
                              send_generation_config=config.send_generation_config, server=config.server)
    elif config.engine == "vllm":
        from veracity.models.vllm_engine import VLLMEngine  # lazy: vllm

        engine = VLLMEngine(config.model, dtype=config.dtype, **config.vllm_kwargs())
    else:
        raise ValueError(f"unknown engine {config.engine!r}; choose transformers, openai or vllm")
    if config.cache:
        from veracity.models.cache import CachedEngine, ResponseCache  # lazy: sqlite

        engine = CachedEngine(engine, ResponseCache(config.cache))
    return engine
