"""Content-hashed response cache (SQLite): a re-run replays instead of calling the model again.

The key hashes the engine kind, the model id (path + fingerprint, or server + model name), the sampling
parameters (seed included) and the messages. The value keeps what the answer was made under — whether its
constraint was enforced (``GenerationResult.constrained``) — and a replay says that, not what the engine would do
now; an entry from before that was kept is asked again. WAL mode and a busy timeout make concurrent writers
(threads or processes) safe; results with an error are not cached, so a failed call is tried again next time.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.models.engine import Engine, GenerationRequest, GenerationResult


def request_key(engine: Engine, request: GenerationRequest) -> str:
    payload = {"engine": engine.kind, "model": engine.model_id, **request.to_dict()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class ResponseCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        # Switching to WAL takes an exclusive lock that busy_timeout does not always wait for: several processes
        # opening a new cache at once may see "database is locked" here, so the set-up retries.
        for attempt in range(100):
            try:
                with self._connect() as db:
                    if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                        db.execute("PRAGMA journal_mode=WAL")
                    db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                break
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or attempt == 99:
                    raise
                time.sleep(0.05)

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60.0)
            db.execute("PRAGMA busy_timeout=60000")
            self._local.db = db
        return db

    def get_many(self, keys: Sequence[str]) -> dict[str, dict]:
        db = self._connect()
        found: dict[str, dict] = {}
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for key, value in db.execute(f"SELECT key, value FROM responses WHERE key IN ({marks})", chunk):
                found[key] = json.loads(value)
        return found

    def put_many(self, items: dict[str, dict]) -> None:
        if not items:
            return
        with self._connect() as db:  # one transaction
            db.executemany("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)",
                           [(k, json.dumps(v, ensure_ascii=False)) for k, v in items.items()])

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM responses").fetchone()[0]


class CachedEngine(Engine):
    """Wraps an engine: cached requests replay, the rest go to the engine in one call."""

    def __init__(self, engine: Engine, cache: ResponseCache):
        self.engine, self.cache = engine, cache
        self.kind = engine.kind

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    def decoding(self, kinds: Sequence[str] = ("json_schema",)) -> dict[str, Any]:
        """The wrapped engine's now; whether a replayed answer was constrained is its result's own ``constrained``
        (what it was made under), which :func:`~veracity.models.engine.record_decoding` reads."""
        return self.engine.decoding(kinds)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        keys = [request_key(self.engine, r) for r in requests]
        # an entry that does not say whether its constraint was enforced is asked again (kept before it was recorded)
        hits = {k: v for k, v in self.cache.get_many(keys).items() if "constrained" in v}
        missing = [i for i, k in enumerate(keys) if k not in hits]
        fresh = self.engine.generate([requests[i] for i in missing]) if missing else []
        self.cache.put_many({keys[i]: r.to_dict() for i, r in zip(missing, fresh, strict=True) if r.ok})
        by_index = dict(zip(missing, fresh, strict=True))
        return [by_index[i] if i in by_index else GenerationResult.from_dict(hits[k], cached=True)
                for i, k in enumerate(keys)]

    def close(self) -> None:
        self.engine.close()
