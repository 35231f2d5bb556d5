"""The tests' own Ray: how the shared ``ray_cluster`` fixture (conftest.py) starts one, importable on its own so a
test can check it in a fresh process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent


def start_local_ray() -> Any:
    """``ray``, initialised with a new local instance of 2 CPUs whatever else runs on the machine: ``address="local"``,
    as the executor does (infer/executors.py: ``connect``), so neither a `ray start` head nor a stale address file
    of one in Ray's temporary folder is joined. Its actors can import the tests' helper modules."""
    import ray  # lazy: seconds to import

    if ray.is_initialized():  # a test that left one running: not ours to keep
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}})
    return ray
