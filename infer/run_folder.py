"""One output folder, one run: the claim a batch job makes on its ``--output_dir`` before it writes there.

A folder holds the batch outputs of one run — ``<stem>.jsonl`` unsharded, or the ``<stem>.shard-i-of-n.jsonl`` files
of one ``--shard i/n`` layout — made under one ``run_config.yaml``. Every job that writes batch outputs (each
pipeline through ``infer/pipelines/driver.py``, ``infer generate``) claims its folder with :func:`claim_folder`,
which refuses with a :class:`~veracity.rundir.RunConfigMismatchError` (one line, exit status 2 from the CLI):

- a second layout: the folder holds a batch output of another layout, or a run of another layout is writing one
  there now (its lock is held), whatever the sizes of the two layouts;
- a second config or other models: a file of this layout holds records, or a sibling shard is being written now,
  under another run record;
- another job: the run record names another job (``infer generate`` where a pipeline ran) and the folder holds
  JSONL outputs.

Decided under an exclusive lock on the folder itself, so two runs that start together are decided one after the
other: the second sees the first one's held output lock (:func:`veracity.infer.batch.output_lock`, taken before the
claim) or its run record. ``summary.json`` is per shard too (:func:`summary_file`): no sibling overwrites it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from veracity.infer.batch import latest_records, layout_files, shard_file
from veracity.rundir import (
    RunConfigMismatchError,
    check_resume,
    read_run_config,
    record_facts,
    summarise_counts,
    summarise_devices,
    to_plain,
    write_run_config,
)


def summary_file(shard: tuple[int, int]) -> str:
    """``summary.json`` unsharded, ``summary.shard-i-of-n.json`` for shard i/n: each shard reports its own work."""
    return shard_file("summary", shard, ".json")


def layout_of(name: str, stem: str) -> int | None:
    """The number of shards of the layout the batch output called ``name`` belongs to (1: unsharded); None when
    ``name`` is not a batch output of ``stem``."""
    if name == f"{stem}.jsonl":
        return 1
    found = re.fullmatch(re.escape(stem) + r"\.shard-(\d+)-of-(\d+)\.jsonl", name)
    return int(found.group(2)) if found else None


def is_being_written(output: Path) -> bool:
    """Whether another run holds the lock on ``output`` now (its ``.lock`` file is left behind by a killed run too:
    only a held lock counts). The probe is a shared lock held for a moment: a run taking that output's lock in the
    same microsecond is refused as if another run held it, and can simply be started again."""
    try:
        fd = os.open(output.with_name(output.name + ".lock"), os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return True
        raise
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on the folder itself (no file of its own) while one run checks and records its claim;
    a second run waits for it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def other_runs(folder: Path, stem: str, output: Path) -> list[tuple[Path, bool]]:
    """The batch outputs of ``stem`` in ``folder`` besides ``output``, each with whether a run is writing it now:
    the files there, and those whose lock is held before the file exists."""
    names = {p.name[: -len(".lock")] if p.name.endswith(".lock") else p.name for p in folder.glob(f"{stem}*")}
    found = []
    for name in sorted(names):
        path = folder / name
        if path != output and layout_of(name, stem) is not None:
            running = is_being_written(path)
            if running or path.is_file():
                found.append((path, running))
    return found


def claim_folder(folder: Path, stem: str, shard: tuple[int, int], configs: Sequence[Any], *, job: str,
                 models: dict[str, str], decoding: dict[str, Any] | None = None, record: bool = True,
                 partial: bool = False, device: str | None = None) -> None:
    """Claim ``folder`` for the run that writes ``<stem>``'s batch output of ``shard`` (its lock already held) and,
    with ``record``, write its ``run_config.yaml`` (a resume — records of this layout already there — keeps the
    first run's start). Without ``record``, only check: ``partial`` says ``models`` names only the models known
    before any loads (a resume under other weights is refused before loading).

    Raises:
        RunConfigMismatchError: another layout's outputs are in the folder or being written there, or this layout's
            under another config or other models (module docstring).
    """
    output = folder / shard_file(stem, shard)
    plain = to_plain(list(configs)) if len(configs) != 1 else to_plain(configs[0])
    run_config = folder / "run_config.yaml"
    with folder_lock(folder):
        others = other_runs(folder, stem, output)
        for path, running in others:
            layout = layout_of(path.name, stem)
            if layout != shard[1]:
                what = "is being written by a run" if running else "is there"
                raise RunConfigMismatchError(
                    f"{folder}: {path.name} {what} of another shard layout ({describe(layout)}), and this run writes "
                    f"{output.name} ({describe(shard[1])}): one folder holds one run. Choose another --output_dir, "
                    "or rerun with that layout")
        for path, running in [*others, (output, False)]:
            check_resume(run_config, path, plain, models, running=running, partial=partial)
        check_job(folder, run_config, job)
        if record:
            resumed = any(p.is_file() and p.stat().st_size for p in layout_files(folder, stem, shard))
            write_run_config(folder, *configs, job=job, models=models, decoding=decoding, device=device,
                             resumed=resumed)


def check_job(folder: Path, run_config: Path, job: str) -> None:
    """Refuse a folder whose run record names another job while that job's JSONL outputs are there (another job
    writes files of other names, which the layout checks do not see)."""
    recorded = read_run_config(run_config, folder).get("job")
    if recorded and recorded != job:
        kept = [p.name for p in sorted(folder.glob("*.jsonl")) if p.stat().st_size]
        if kept:
            raise RunConfigMismatchError(f"{folder}: holds a run of `{recorded}` ({kept[0]}), and this is `{job}`: "
                                         "one folder holds one run. Choose another --output_dir")


def describe(layout: int | None) -> str:
    return "unsharded" if layout == 1 else f"--shard i/{layout}"


class RecordFacts:
    """What the records of a run's layout were made under — each ok record's ``result["decoding"]`` (None: made
    without a generator) and each record's ``device`` — tallied over the last record of every id: those in the
    folder when the run starts, then each batch it appends (:meth:`observe`), so that ``run_config.yaml``'s
    ``decoding`` and ``device`` (:func:`~veracity.rundir.summarise_facts`) describe every record there, across
    resumes, replays from the response cache and Ray actors. A record from before records kept their facts takes
    what the run record said when this run started.

    A shard's run counts the records of its siblings as they were when it started; :meth:`finish` counts them
    all again.
    """

    def __init__(self, folder: Path, stem: str, shard: tuple[int, int]):
        self.folder, self.stem, self.shard = folder, stem, shard
        old = read_run_config(folder / "run_config.yaml", folder)
        self.before = {"decoding": json.dumps(old.get("decoding")) if old.get("decoding") else None,
                       "device": old.get("device")}
        self.latest: dict[str, tuple[str | None, str | None]] = {}
        self.decodings: Counter[str] = Counter()
        self.devices: Counter[str] = Counter()
        self.count(self.layout_records())
        self.recorded: tuple[Any, Any] | None = None  # what observe() last wrote into the run record

    def layout_records(self) -> list[dict[str, Any]]:
        """The last record of each id in the layout's files, as far as their last whole line (a sibling may be
        writing; a killed run's torn line is cut by the resume itself)."""
        return [r for path in layout_files(self.folder, self.stem, self.shard) if path.is_file()
                for r in latest_records(path, complete_lines=True)]

    def count(self, records: Sequence[dict[str, Any]]) -> None:
        for record in records:
            facts = self.facts(record)
            old = self.latest.get(record["id"])
            if old is not None:
                self.decodings[old[0]] -= 1
                self.devices[old[1]] -= 1
            self.latest[record["id"]] = facts
            self.decodings[facts[0]] += 1
            self.devices[facts[1]] += 1

    def facts(self, record: dict[str, Any]) -> tuple[str | None, str | None]:
        """(decoding as JSON, device) of one record; what the run record said before, for a record without them."""
        result = record.get("result") if record.get("status") == "ok" else None
        if isinstance(result, dict) and "decoding" in result:
            decoding = json.dumps(result["decoding"], sort_keys=True) if result["decoding"] else None
        else:
            decoding = self.before["decoding"] if record.get("status") == "ok" else None
        return decoding, record.get("device", self.before["device"])

    @property
    def has_records(self) -> bool:
        return bool(self.latest)

    def decoding(self) -> dict[str, Any] | None:
        return summarise_counts(Counter({k: n for k, n in self.decodings.items() if k and n > 0}))

    def device(self) -> str | None:
        return summarise_devices(self.devices)

    def observe(self, records: list[dict[str, Any]]) -> None:
        """Count a batch just written and rewrite the run record if what the records say changed (the run record
        is read only then, not after every batch)."""
        self.count(records)
        now = (self.decoding(), self.device())
        if now != self.recorded:
            record_facts(self.folder, decoding=now[0], device=now[1])
            self.recorded = now

    def finish(self) -> None:
        """Count every record of the layout again (a sibling shard's too) and rewrite the run record; under the
        folder's lock, so two shards finishing together write one after the other."""
        with folder_lock(self.folder):
            if self.shard[1] > 1:
                self.latest.clear()
                self.decodings.clear()
                self.devices.clear()
                self.count(self.layout_records())
            record_facts(self.folder, decoding=self.decoding(), device=self.device())
