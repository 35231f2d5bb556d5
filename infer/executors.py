"""Where a pipeline run processes its batches: in the driver's process (``local``) or on a Ray cluster (``ray``).

``--executor local`` is :func:`veracity.infer.batch.run_batch`. With ``--executor ray`` the driver
(``infer/pipelines/driver.py``) keeps every other step (checks, lock, run record, summary.json, finish, scoring)
and :func:`run_on_ray` runs the batches:

1. the items still to run are chosen as locally (:func:`~veracity.infer.batch.pending_items`: recorded ids are
   skipped, failed ones run again with ``--retry_errors``) and become a ``ray.data`` dataset (pickled items);
2. ``map_batches`` runs :class:`BatchWorker` on ``--workers`` actors (``--num_gpus_per_worker`` GPUs each); each
   actor builds the pipeline from its configs once (``Pipeline.load_worker``: models loaded once per actor) and
   makes the records of a batch of ``pipeline.batch_size`` items with the local loop's own function
   (:func:`~veracity.infer.batch.batch_records`: a failing item is an error record, its neighbours go on);
3. the records come back as JSON lines in the order batches finish; the driver appends each batch to the records
   file and flushes it, so a killed driver leaves a file the next run resumes.

Ray is imported here only, when a run asks for it (``import ray`` takes seconds). Actors work in the driver's
working directory with the driver's ``VERACITY_*``, ``HF_*``, ``VLLM_*`` and thread settings, so paths in a recipe
mean the same to them (on a multi-node cluster: the same paths on every node, e.g. a shared filesystem), and with
its ``OPENAI_API_KEY``: secrets go to the actors through Ray's runtime environment only, never into a run file, a
cache key or a log. Each record says the device of the actor that made it (``device``), and its decoding facts are
its own (``result["decoding"]``), so the driver's run record summarises what the actors did.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.infer.batch import (
    BatchSummary,
    append_batches,
    batch_records,
    pending_items,
    record_line,
    recover_statuses,
)
from veracity.rundir import RunConfigMismatchError

logger = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")
FORWARDED_ENV_PREFIXES = ("VERACITY_", "HF_", "VLLM_")  # VLLM_: a vLLM engine in an actor (KV cache size …)
MAX_RESTARTS = 2  # per actor, and retries of a batch whose actor died
FORWARDED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM",
                 "OPENAI_API_KEY")  # the key models/openai_engine.py reads when --api_key is not given


@dataclass
class ExecutorConfig:
    """How a pipeline run processes its batches (options of every ``veracity infer <pipeline>``). Records are the
    same under either executor, so a run may resume under the other one."""

    executor: str = field(default="local", metadata={
        "help": "local: batches in this process; ray: on a Ray cluster, in actors that each load the models once."})
    ray_address: str | None = field(default=None, metadata={
        "help": "ray: none starts a Ray instance on this machine for the run; 'auto' joins the cluster this machine "
                "belongs to (`ray start`), or fails; or the head's address (host:6379)."})
    workers: int = field(default=1, metadata={
        "help": "ray: actors, each with its own copy of the pipeline (Ray Data's map_batches concurrency). "
                "Items per batch are the pipeline's own option (claims_per_call, posts_per_call, items_per_call)."})
    num_gpus_per_worker: float = field(default=0.0, metadata={
        "help": "ray: GPUs per actor (1 with engine vllm: one engine per GPU; a fraction shares a GPU)."})

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {self.executor!r}")
        if self.ray_address in ("", "none", "None"):
            self.ray_address = None
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.num_gpus_per_worker < 0:
            raise ValueError(f"num_gpus_per_worker must be >= 0, got {self.num_gpus_per_worker}")


class BatchWorker:
    """One Ray actor: the pipeline built once from its configs, turning batches of items into records.

    A batch is ``{"item": [pickled item, ...]}``; the output is ``{"record": [JSON line, ...], "facts": [...]}``
    where the first row's ``facts`` (JSON; ``""`` on the other rows) tells the driver which actor ran the batch,
    the models it loaded (``model_ids()``: checked against the run record), the seconds per stage it spent on it
    and the pipeline's ``stats()`` so far.
    """

    def __init__(self, cls: type, configs: Sequence[Any], run_dir: str, cwd: str):
        if Path(cwd).is_dir():
            os.chdir(cwd)  # relative paths of the recipe mean what they mean to the driver
        self.pipeline = cls(*configs)
        self.pipeline.load_worker(Path(run_dir))
        self.device = self.pipeline.device()  # resolved here, where the models load
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.reported: dict[str, float] = {}

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[str]]:
        items = [pickle.loads(blob) for blob in batch["item"]]
        records = batch_records(self.pipeline, items, error_fields=self.pipeline.error_fields,
                                stamp={"device": self.device})
        seconds = {k: v - self.reported.get(k, 0.0) for k, v in self.pipeline.seconds.items()}
        self.reported = dict(self.pipeline.seconds)
        facts = json.dumps({"worker": self.name, "models": self.pipeline.model_ids(), "seconds": seconds,
                            "stats": self.pipeline.stats()}, default=str)
        return {"record": [record_line(r) for r in records], "facts": [facts] + [""] * (len(records) - 1)}


def actor_device(config: ExecutorConfig) -> str:
    """Where ``--device auto`` puts an actor's models: the GPU Ray gives it (``--num_gpus_per_worker``), else the
    CPU (Ray hides the GPUs from an actor that asked for none). The driver names the models by this, not by its own
    device; each actor resolves its own and records it per record."""
    return "cuda" if config.num_gpus_per_worker > 0 else "cpu"


def forwarded_env() -> dict[str, str]:
    """The driver's settings the actors get (model roots, caches, offline mode, threads)."""
    return {k: v for k, v in os.environ.items() if k in FORWARDED_ENV or k.startswith(FORWARDED_ENV_PREFIXES)}


def connect(config: ExecutorConfig) -> Any:
    """``ray``, initialised: a Ray instance this process already joined, else ``ray.init(address=ray_address)``
    (none: a new local instance — ray.init's own default would join whatever /tmp/ray names, a stopped head
    included, and wait for it)."""
    import ray  # lazy: seconds to import, and only ray runs need it

    if not ray.is_initialized():
        # RAY_ADDRESS (set by `ray job submit`) is read by ray.init only for None / "auto": honour it here too
        ray.init(address=config.ray_address or os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False)
    return ray


class WorkerModelsError(RunConfigMismatchError):
    """An actor loaded other models than the run record names (another cache or models root on its node): one
    ``error:`` line and exit status 2 on the command line, like a resume under other models."""


def check_worker_models(worker: str, found: dict[str, str], recorded: dict[str, str], run_config: Path) -> None:
    """Refuse an actor's records when its models differ from those ``run_config.yaml`` recorded for the run: a
    record is only comparable to the others when the same models (by content) made it."""
    roles = sorted(set(found) | set(recorded))
    wrong = [f"{role}: {found.get(role, 'none')} (recorded: {recorded.get(role, 'none')})"
             for role in roles if found.get(role) != recorded.get(role)]
    if wrong:
        raise WorkerModelsError(
            f"ray worker {worker} loaded other models than {run_config} records — {'; '.join(wrong)}. Its records "
            "are not written; give every node the same model cache and models root (VERACITY_CACHE, "
            "VERACITY_MODELS_ROOT), then run again: the records written so far are kept and resumed")


def run_on_ray(pipeline: Any, items: Sequence[dict[str, Any]], output: Path, run_dir: Path, *,
               shard: tuple[int, int], retry_errors: bool, progress: bool, config: ExecutorConfig,
               models: dict[str, str], observe: Callable[[list[dict[str, Any]]], None] | None = None
               ) -> tuple[BatchSummary, dict[str, Any]]:
    """Run the pending items of ``output`` through Ray Data actors and append their records to ``output`` as they
    arrive (the caller holds the output's lock). ``models``: the run record's ``model_ids()``; a batch from an
    actor that loaded others stops the run before its records are written (:func:`check_worker_models`). Returns
    the summary and the actors' ``stats()`` (one actor: its stats, as a local run reports them; several:
    ``{"stats_per_worker": {actor: stats}}``); the actors' seconds per stage are added to ``pipeline.seconds``."""
    todo, summary = pending_items(items, recover_statuses(output), shard=shard, retry_errors=retry_errors)
    if not todo:
        return summary, {}
    connect(config)
    from ray import data as ray_data

    ray_data.DataContext.get_current().enable_progress_bars = False  # the bar below counts the records written
    dataset = ray_data.from_items([{"item": pickle.dumps(item)} for item in todo])
    records = dataset.map_batches(
        BatchWorker, fn_constructor_args=(type(pipeline), pipeline.configs, str(run_dir.resolve()), os.getcwd()),
        batch_size=pipeline.batch_size, compute=ray_data.ActorPoolStrategy(size=config.workers),
        num_gpus=config.num_gpus_per_worker or None, runtime_env={"env_vars": forwarded_env()},
        # Ray Data restarts a dead actor and retries its batch without end by default: an item that kills its
        # worker (out of memory, a native crash) would hang the run; a few restarts, then the run stops
        max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)
    logger.info("ray: %d items in batches of %d on %d worker(s), %s GPU each", len(todo), pipeline.batch_size,
                config.workers, config.num_gpus_per_worker)
    stats: dict[str, Any] = {}

    def record_batches() -> Any:  # the actors' records, batch by batch as they finish; their facts kept aside
        for batch in records.iter_batches(batch_size=None, batch_format="pyarrow"):
            for text in batch.column("facts").to_pylist():
                if text:
                    facts = json.loads(text)
                    check_worker_models(facts["worker"], facts["models"], models, run_dir / "run_config.yaml")
                    stats[facts["worker"]] = facts["stats"]
                    for stage, seconds in facts["seconds"].items():
                        pipeline.seconds[stage] += seconds
            yield [json.loads(line) for line in batch.column("record").to_pylist()]

    append_batches(output, record_batches(), summary, total=len(todo), progress=progress,
                   desc=f"{output.name} (ray)", observe=observe)
    return summary, (next(iter(stats.values())) if len(stats) == 1 else {"stats_per_worker": stats})
