"""R2VC's inputs and side files: prepared claims, a user's claims rows, the indexes they retrieve from, the
calibrator and its certificate's scope.

A bad row, a selection without claims, or a missing calibrator is a ``DataError`` / ``PreparedDataError`` naming
the file (and line) before anything is written; ``veracity.cli`` prints it as one line with exit status 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError
from veracity.data_prep.prepared import PreparedDataError, read_prepared
from veracity.data_prep.readers import read_jsonl
from veracity.data_prep.schema import ClaimExample, to_ternary
from veracity.data_prep.splits import hash_int
from veracity.infer.batch import IdCheck
from veracity.infer.pipelines.r2vc.config import RETRIEVAL_CORPORA, R2VCConfig
from veracity.infer.retrieval.dense import encoder_id
from veracity.infer.retrieval.index import IndexSettings, built_encoder, read_meta
from veracity.io import write_json, write_text
from veracity.made_by import made_by
from veracity.models.calibrator import LogisticCalibrator, calibrator_file
from veracity.models.engine import EngineConfig
from veracity.models.registry import require_local_path


def passages_of(example: ClaimExample) -> list[dict[str, str]]:
    """A prepared example's own evidence: its passages, or its evidence text as one passage."""
    passages = [{"text": p.text, "title": p.title} for p in example.evidence if p.text.strip()]
    if not passages and example.evidence_text.strip():
        passages = [{"text": example.evidence_text, "title": ""}]
    return passages


def prepared_items(config: R2VCConfig) -> list[dict[str, Any]]:
    """Items of the configured prepared sources and split (``max_examples`` per source, the first in an order
    seeded by ``subset_seed`` — never by the sampling ``seed``). No claim at all is a PreparedDataError."""
    items = []
    for source in config.sources:
        examples = [e for e in read_prepared(config.prepared_dir, source, [config.split])
                    if isinstance(e, ClaimExample)]
        examples.sort(key=lambda e: hash_int(f"{config.subset_seed}:{e.id}"))
        if config.max_examples:
            examples = examples[: config.max_examples]
        corpus = RETRIEVAL_CORPORA.get(source)
        if corpus and config.index_dir:
            corpus = config.index_dir
        for e in examples:
            items.append({"id": f"{source}/{e.id}", "claim": e.claim, "gold": e.label, "source": source,
                          "passages": [] if corpus else passages_of(e), "retrieve_from": corpus})
    if not items:
        raise PreparedDataError(f"{config.prepared_dir}: no claims in the {config.split!r} split of "
                                f"{list(config.sources)}; nothing to run (check --sources and --split)")
    return items


def user_item(row: dict[str, Any], path: str | Path, line: int | None, index_dir: str | None,
              ids: IdCheck | None = None) -> dict[str, Any]:
    """A claims row ``{id, claim[, evidence, label]}`` as an item; a bad row is a DataError naming ``path``, line and
    field (``ids`` checks its id). ``evidence``: a string, a list of strings or of ``{text, title}``; without
    evidence the claim retrieves from ``index_dir``."""
    claim, evidence = row.get("claim"), row.get("evidence")
    if not isinstance(claim, str) or not claim.strip():
        raise DataError(path, line, "missing or empty claim", field="claim")
    if ids is not None:
        ids.check(line, row)
    if isinstance(evidence, str):
        evidence = [evidence]
    if evidence is not None and not (isinstance(evidence, list) and all(
            isinstance(e, str) or (isinstance(e, dict) and isinstance(e.get("text"), str)) for e in evidence)):
        raise DataError(path, line, "must be a string, a list of strings or a list of {text, title}",
                        field="evidence")
    gold = to_ternary(row["label"]) if row.get("label") is not None else None
    if row.get("label") is not None and gold is None:
        raise DataError(path, line, f"unknown label {row['label']!r}", field="label")
    passages = [{"text": e, "title": ""} if isinstance(e, str) else
                {"text": e["text"], "title": str(e.get("title", ""))} for e in evidence or []]
    if not passages and not index_dir:
        raise DataError(path, line, "no evidence and no --index_dir to retrieve from", field="evidence")
    return {"id": str(row["id"]), "claim": claim, "gold": gold, "source": "claims", "passages": passages,
            "retrieve_from": None if passages else index_dir}


def user_items(path: str, index_dir: str | None) -> list[dict[str, Any]]:
    """Items from a user's JSONL; a bad row is a DataError naming file, line and field (an id seen before names
    the line it was first on), and so is a file without any claim."""
    items = []
    ids = IdCheck(path)
    for line, row in read_jsonl(path):
        items.append(user_item(row, path, line, index_dir, ids))
    ids.require_some("claims")
    return items


def load_calibrator(config: R2VCConfig) -> Any | None:
    """The configured calibrator, or None; a missing or unreadable file is a DataError naming it (checked before
    anything is written)."""
    if not config.calibrator:
        return None

    path = calibrator_file(config.calibrator)
    if not path.is_file():
        made = made_by(path) or (f"`veracity train calibrator --calibrator_dir {path.parent}` with this run's "
                                 "generator and verifier makes it (docs/training.md#calibrator)")
        raise DataError(path, None, f"no calibrator file here: {made}; --calibrator none ranks by s_ver instead")
    try:
        calibrator = LogisticCalibrator.load(path)
    except (OSError, ValueError) as error:  # JSONDecodeError is a ValueError
        cause = str(error).removeprefix(f"{path}: ")
        raise DataError(path, None, f"not a calibrator file ({cause})") from None
    if config.abstention == "risk_control" and "holdout_confidence" not in (calibrator.risk_control or {}):
        raise DataError(path, None, "abstention risk_control: the calibrator keeps no certify-part calib scores; "
                                    "refit it with `veracity train calibrator`")
    return calibrator


def check_model_paths(config: R2VCConfig, engine_config: EngineConfig) -> None:
    """The verifier, and the generator where the engine loads it from disk, named by a path that is not there: one
    ``ModelNotFoundError`` line with the command that makes it, before the driver makes the run folder."""
    require_local_path("nli_verifier", config.nli_model)
    if config.use_generator and engine_config.engine in LOCAL_ENGINES:
        require_local_path("chat_lm", engine_config.model)


def evaluated_sources(config: R2VCConfig) -> list[str]:
    """What a run evaluates (or a calibrator certifies on), as a list of names: the prepared sources, or the
    claims file."""
    return [f"claims file {config.claims}"] if config.claims else list(config.sources)


def risk_control_scope(config: R2VCConfig, calibrator: Any | None) -> dict[str, Any] | None:
    """For ``abstention: risk_control``: the claims the τ_cal certificate was computed on and the ones this run
    evaluates, and what the guarantee then assumes. None for other abstention modes."""
    if config.abstention != "risk_control" or calibrator is None:
        return None
    held = calibrator.risk_control or {}
    certified = held.get("certify_sources")
    evaluated = evaluated_sources(config)
    same = certified is not None and sorted(certified) == sorted(evaluated)
    shown = certified if certified is not None else "not recorded (a calibrator fit before sources were recorded)"
    if same:
        note = (f"P(selective risk > {config.target_risk:g}) <= {config.delta:g} holds for claims exchangeable with "
                f"the certifying ones: certified on the {held.get('certify_split', 'calib')} split of {certified}, "
                f"evaluated on the {config.split} split of the same sources.")
    else:
        note = (f"The guarantee P(selective risk > {config.target_risk:g}) <= {config.delta:g} assumes the evaluated "
                f"claims are exchangeable with the certifying ones, and the sources differ: certified on {shown}, "
                f"evaluated on {evaluated}. Across other sources it is an assumption, not a guarantee.")
    return {"certified_on": {"sources": certified, "split": held.get("certify_split"),
                             "claims": held.get("n_certify", len(held.get("holdout_correct", [])))},
            "evaluated_on": {"sources": evaluated, "split": None if config.claims else config.split},
            "same_sources": same, "assumes": "exchangeability", "note": note}


def record_scope(out: Path, metrics: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
    """Add the risk-control certificate's scope to ``metrics.json`` and ``report.md`` (and say it)."""
    metrics = {**metrics, "risk_control_guarantee": scope}
    write_json(out / "metrics.json", metrics)
    report = out / "report.md"
    if report.is_file():
        text = report.read_text(encoding="utf-8").rstrip("\n")
        write_text(report, f"{text}\n\n## Risk-control guarantee\n\n{scope['note']}\n")
    print(f"risk control: {scope['note']}")
    return metrics


LOCAL_ENGINES = ("transformers", "vllm")  # the engines that load the generator's weights themselves
# How R2VC indexes a prepared corpus it retrieves from (the default encoder, stemmed BM25).
CORPUS_INDEX = IndexSettings(stem=True)


def index_location(key: str, index_root: str) -> Path:
    """Where the index an item's ``retrieve_from`` names is: ``key`` itself when it is an index folder, else
    ``<index_root>/<key>`` (a prepared corpus's index, built there the first time)."""
    folder = Path(key)
    return folder if (folder / "index_meta.json").exists() else Path(index_root) / key


def retrieval_embedders(config: R2VCConfig) -> dict[str, str]:
    """The dense encoder of the indexes the configured items retrieve from, by content (named without loading it):
    the one an index was built with, or the one it will be built with. ``{}`` when no item retrieves."""
    if config.claims:
        keys = [config.index_dir] if config.index_dir else []
    else:
        keys = sorted({config.index_dir or RETRIEVAL_CORPORA[s] for s in config.sources if s in RETRIEVAL_CORPORA})
    named = set()
    for key in keys:
        folder = index_location(key, config.index_root)
        built = (folder / "index_meta.json").exists()
        spec = built_encoder(read_meta(folder)) if built else CORPUS_INDEX.encoder_spec()
        if spec is not None:
            named.add(encoder_id(spec))
    return {"embedder": " + ".join(sorted(named))} if named else {}
