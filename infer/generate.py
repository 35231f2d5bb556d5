"""Offline batch generation over a JSONL of items, resumable and shardable.

Usage: veracity infer generate --input items.jsonl --output_dir runs/gen [--template "Is it true? {claim}"]
                               [--engine transformers --model embedded] [--n 4 --temperature 0.7] [--shard 0/4]
                               [--parse_json true] [--json_schema schema.json | --regex RE | --choice A B]
                               [--cache runs/gen/cache.sqlite]
                               [--retry_errors true]

Each item needs an ``id`` and ``messages`` (chat), ``prompt`` (raw text), or fields for ``--template`` (one user
message). Writes ``predictions.jsonl`` (``predictions.shard-i-of-n.jsonl`` when sharded; resumes where it
stopped), ``summary.json`` (``summary.shard-i-of-n.json``) and ``run_config.yaml``; a folder holds one run (another
shard layout or config there is refused: ``infer/run_folder.py``). An empty item, a prompt beyond the context, or
a server failure becomes an error record; with ``--parse_json`` every candidate carries ``parsed`` or ``parse_error``.
``--json_schema``, ``--regex`` or ``--choice`` constrains decoding where the engine can (the transformers engine and
vLLM always; an OpenAI-compatible server as ``--server`` says: the run record's ``decoding`` tells whether it was
enforced), each candidate is checked against it all the same, and the summary reports how many still failed (an
answer cut by ``--max_new_tokens`` is named ``length``).
``--retry_errors`` re-runs exactly the items whose last record is an error (the last record of an id wins). The
input is read and checked before anything is written (a malformed line, a missing or repeated id and an empty file
are one-line errors naming the file and line); one run at a time may write an output (a lock file).
"""

from __future__ import annotations

import json
import logging
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.errors import DataError
from veracity.infer.batch import checked_rows, latest_records, output_lock, parse_shard, run_batch, shard_file
from veracity.infer.parsing import extract_json_object, name_cut_off
from veracity.infer.run_folder import RecordFacts, claim_folder, summary_file
from veracity.io import write_json
from veracity.models.device import resolve_device
from veracity.models.engine import (
    Engine,
    EngineConfig,
    GenerationRequest,
    SamplingOptions,
    SamplingParams,
    record_decoding,
)
from veracity.models.engine_factory import make_engine

logger = logging.getLogger(__name__)


@dataclass
class GenerateArgs:
    input: str = field(metadata={"help": "JSONL items with id and messages / prompt / template fields."})
    output_dir: str = field(metadata={"help": "Run directory."})
    id_field: str = field(default="id", metadata={"help": "The field of an input item that is its id."})
    template: str | None = field(default=None, metadata={"help": "User message built with str.format(**item)."})
    system: str | None = field(default=None, metadata={"help": "System message added before templated items."})
    shard: str | None = field(default=None, metadata={"help": "i/n: this machine's share of the items."})
    requests_per_call: int = field(default=8, metadata={"help": "Items handed to the engine at once."})
    parse_json: bool = field(default=False, metadata={"help": "Parse each candidate as a JSON object."})
    json_schema: str | None = field(default=None, metadata={
        "help": "A JSON schema file: constrained decoding where the engine supports it (implies --parse_json)."})
    regex: str | None = field(default=None, metadata={
        "help": "A regular expression every answer must match: constrained decoding, then checked."})
    choice: list[str] | None = field(default=None, metadata={
        "help": "The answers allowed (one of these strings): constrained decoding, then checked."})
    retry_errors: bool = field(default=False, metadata={"help": "Re-run the items whose last record is an error."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def __post_init__(self) -> None:
        given = [name for name in ("json_schema", "regex", "choice") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of --json_schema, --regex and --choice (got {', '.join(given)})")
        if self.choice is not None and not self.choice:
            raise ValueError("--choice needs at least one string")


def build_request(item: dict[str, Any], args: GenerateArgs, params: SamplingParams) -> GenerationRequest:
    """The request for one item; an empty or unusable item raises ValueError (recorded as that item's error)."""
    if item.get("messages"):
        messages = item["messages"]
        if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            raise ValueError("messages must be a list of {role, content} objects")
        if not any(m["content"].strip() for m in messages):
            raise ValueError("empty item: every message is empty")
        return GenerationRequest(messages=tuple(messages), params=params)
    if isinstance(item.get("prompt"), str):
        if not item["prompt"].strip():
            raise ValueError("empty item: the prompt is empty")
        return GenerationRequest(prompt=item["prompt"], params=params)
    if args.template:
        fields = [name for _, name, _, _ in string.Formatter().parse(args.template) if name]
        missing = [name for name in fields if name not in item]
        if missing:
            raise ValueError(f"template field(s) {missing} missing from the item")
        if fields and not any(str(item[name]).strip() for name in fields):
            raise ValueError(f"empty item: template field(s) {fields} are all empty")
        content = args.template.format(**item)
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": content}]
        return GenerationRequest(messages=tuple(messages), params=params)
    raise ValueError("item has neither messages nor prompt, and no --template was given")


def load_schema(path: str | None) -> str | None:
    """The schema file as compact JSON text (what the request and its cache key carry); None without one."""
    if not path:
        return None

    try:
        schema = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise DataError(path, None, f"cannot read the JSON schema ({error.strerror or error})") from None
    except json.JSONDecodeError as error:
        raise DataError(path, error.lineno, f"not a JSON schema: malformed JSON ({error.msg})") from None
    if not isinstance(schema, dict):
        raise DataError(path, None, "not a JSON schema: expected a JSON object")
    return json.dumps(schema, ensure_ascii=False)  # properties keep their order: the answer writes them in it


def check_answer(text: str, params: SamplingParams) -> tuple[Any, str | None]:
    """``(value, None)`` when ``text`` is what the request's constraint asks for (a JSON object for a schema or
    ``--parse_json``, a full match of the regex, one of the choices), else ``(None, reason)``."""
    if params.regex is not None:
        return (text, None) if re.fullmatch(params.regex, text) else (None, "no_match: not matched by the regex")
    if params.choice is not None:
        return (text, None) if text in params.choice else (None, "not_a_choice: not one of the choices")
    parsed = extract_json_object(text)
    return parsed.value, parsed.error


def make_processor(engine: Engine, args: GenerateArgs, params: SamplingParams):

    def process(items: Sequence[dict[str, Any]]) -> list[Any]:
        outcomes: list[Any] = [None] * len(items)
        requests, where = [], []
        for k, item in enumerate(items):
            try:
                requests.append(build_request(item, args, params))
                where.append(k)
            except ValueError as error:
                outcomes[k] = error
        kinds = [params.constraint[0]] if params.constraint else []
        for k, result in zip(where, engine.generate(requests), strict=True):
            if not result.ok:  # the engine's failure or the request's: an error record, retried on request
                outcomes[k] = RuntimeError(result.error)
                continue
            candidates = []
            for c in result.candidates:
                record = c.to_dict()
                if args.parse_json or params.constraint:
                    value, error = check_answer(c.text, params)
                    error = name_cut_off(error, c.finish_reason)
                    record.update(parsed=value, parse_error=error)
                candidates.append(record)
            outcomes[k] = {"candidates": candidates, "prompt_tokens": result.prompt_tokens, "cached": result.cached,
                           "decoding": record_decoding(engine, kinds, [result])}
        return outcomes

    return process


def make_parser() -> Any:
    return parser_for((GenerateArgs, SamplingOptions, EngineConfig), "veracity infer generate")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args, sampling, engine_config = parse_config(make_parser(), argv)
    shard = parse_shard(args.shard)
    out = Path(args.output_dir)
    name = shard_file("predictions", shard)
    # a bad line, a missing or repeated id or an empty file is a DataError before anything is written
    items = checked_rows(args.input, args.id_field)
    schema = load_schema(args.json_schema)
    params = sampling.params(json_schema=schema, regex=args.regex, choice=args.choice)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with output_lock(out / name):  # a refused second run must not overwrite the running one's record either
            configs = (args, sampling, engine_config)
            claim_folder(out, "predictions", shard, configs, job="infer generate", models={}, record=False,
                         partial=True)  # another layout or config in the folder: refused before the model loads
            engine = make_engine(engine_config)
            kinds = [params.constraint[0]] if params.constraint else []
            device = resolve_device(engine_config.device)
            made_under = RecordFacts(out, "predictions", shard)  # the records already there, before the claim
            try:
                claim_folder(out, "predictions", shard, configs, job="infer generate",
                             models={"generator": engine.identity},
                             decoding=made_under.decoding() or engine.decoding(kinds),
                             device=made_under.device() or device)
                summary = run_batch(items, make_processor(engine, args, params), out / name, id_field=args.id_field,
                                    shard=shard, batch_size=args.requests_per_call, progress=args.progress,
                                    retry_errors=args.retry_errors, take_lock=False, stamp={"device": device},
                                    observe=made_under.observe)
            finally:
                made_under.finish()
                engine.close()
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # a run that stopped before its first file leaves no empty folder behind
        raise
    report = summary.to_dict()
    if args.parse_json or params.constraint:
        report["parsing"] = parse_failures(out / name)
        print(f"parse failures: {report['parsing']['failures']} of {report['parsing']['candidates']} candidates")
    print(summary)
    write_json(out / summary_file(shard), report)  # one per shard: a sibling never overwrites it
    logger.info("wrote %s", out / name)
    return json.loads(json.dumps(report))


def parse_failures(path: Path) -> dict[str, Any]:
    """How many candidates of the output (the last record of each id) did not parse, by reason."""
    reasons: Counter[str] = Counter()
    total = 0
    for record in latest_records(path):
        for candidate in (record.get("result") or {}).get("candidates", []) if record["status"] == "ok" else []:
            total += 1
            if candidate.get("parse_error"):
                reasons[candidate["parse_error"]] += 1
    failures = sum(reasons.values())
    return {"candidates": total, "failures": failures, "rate": round(failures / total, 4) if total else None,
            "reasons": dict(sorted(reasons.items()))}
