"""AIC over a batch of claims: store → chunks → per-claim FAISS index → k nearest → MMR → l sources; BM25 few-shot;
one LLM call per claim; parse, retry what does not parse, record what still does not as a failure.

With ``constrained`` (the default, unless ``thinking`` is on) each call carries the claim's answer schema
(``prompt.answer_schema`` over its own sources) and asks for ``prompt.answer_budget`` new tokens, the longest answer
the schema admits; retries stay constrained (another seed, at ``retry_temperature``). Unconstrained, the call asks
for ``max_new_tokens`` and may start after ``answer_prefix``. A parse failure of an answer cut by the budget is
named ``length: …``.

``AICPipeline(config, engine_config, store, train_claims)`` loads the encoder and the engine once; calling it on
claim items (``{id, claim, gold}``) returns one record per item, run by ``infer/batch.py`` (resumable, sharded,
errors isolated). A record keeps the sources verbatim (URL, chunk, context), every attempt's raw text and parse
error, the parsed answer with the rule that chose its label, and the seconds each stage took for this claim
(batched stages are split evenly over the claims of the batch).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError
from veracity.infer.eval.averitec import main as evaluate
from veracity.infer.parsing import name_cut_off
from veracity.infer.pipelines.aic.config import AICConfig
from veracity.infer.pipelines.aic.outputs import gold_record, load_claims, store_claim_id, write_outputs
from veracity.infer.pipelines.aic.prompt import answer_budget, answer_schema, parse_aic_answer, prompt_messages
from veracity.infer.pipelines.aic.report import FLAGS as REPORT_FLAGS
from veracity.infer.pipelines.aic.report import report_item
from veracity.infer.pipelines.aic.retrieval import ClaimIndexCache, FewShotSelector, select_sources
from veracity.infer.pipelines.aic.store import KnowledgeStore, build_proxy_store, chunk_documents
from veracity.infer.pipelines.contract import Pipeline
from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec, encoder_id
from veracity.infer.structured import schema_text
from veracity.io import write_json
from veracity.models import engine as engines
from veracity.models import engine_factory  # engine_factory.make_engine looked up at load time (tests replace it)
from veracity.models.engine import EngineConfig, GenerationRequest, SamplingParams, unavailable_error

logger = logging.getLogger(__name__)
Item = dict[str, Any]
STAGES = ("index", "retrieval", "few_shot", "generation")


def answer_record(answer: Any, sources: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The parsed answer with each question's source URL resolved."""
    return {
        "questions": [{"question": q.question, "answer": q.answer, "source": q.source,
                       "url": sources[q.source - 1]["url"] if q.source else None, "answer_type": q.answer_type}
                      for q in answer.questions],
        "likert": answer.likert, "stated_verdict": answer.stated_verdict, "label_from": answer.label_from,
        "repaired": answer.repaired, "dropped_questions": answer.dropped_questions, "notes": answer.notes,
    }


class AICPipeline:
    """Loads the encoder, the index cache, the few-shot index and the generator engine once."""

    def __init__(self, config: AICConfig, engine_config: EngineConfig, store: KnowledgeStore,
                 train_claims: Sequence[Any], engine: Any | None = None):
        """``engine``: an engine to use instead of building one from ``engine_config`` (tests script one)."""
        self.config, self.store = config, store
        self.encoder = DenseEncoder(EncoderSpec(model=config.embedder, max_length=config.embed_max_length,
                                                batch_size=config.embed_batch_size, backend=config.embed_backend),
                                    device=engine_config.device)
        cache_root = config.index_cache or str(Path(config.output_dir) / "index_cache")
        self.indexes = ClaimIndexCache(cache_root, self.encoder, config.chunk_chars)
        self.few_shot = FewShotSelector(train_claims) if config.few_shot > 0 else None
        self.engine = engine if engine is not None else engine_factory.make_engine(engine_config)
        self.tokenizer = None
        self.answer_prefix = "" if config.constrains else config.answer_prefix  # a constrained answer is JSON alone
        if self.answer_prefix:
            # only a local engine can render the chat template and continue after a prefix
            self.tokenizer = getattr(getattr(self.engine, "engine", self.engine), "tokenizer", None)
            if self.tokenizer is None:
                raise ValueError("answer_prefix needs the transformers engine (it renders the chat template itself)")
        self.seconds: dict[str, float] = defaultdict(float)
        self.claims_seen = 0

    def _sources(self, item: Item, query: Any) -> tuple[list[dict[str, Any]], int, float]:
        t0 = time.perf_counter()
        claim_id = item["id"]
        chunks, index = self.indexes.get(claim_id, self.store.fingerprint(claim_id),
                                         lambda: chunk_documents(self.store.documents(claim_id),
                                                                 self.config.chunk_chars))
        t1 = time.perf_counter()
        picked = select_sources(query, index, chunks, self.config.k, self.config.mmr_lambda, self.config.sources)
        item["_seconds"]["retrieval"] += time.perf_counter() - t1
        return [s.to_dict() for s in picked], len(chunks), t1 - t0

    def _constraint(self, num_sources: int) -> dict[str, Any]:
        """The claim's answer schema and its token budget (constrained), or the configured budget."""
        c = self.config
        if not c.constrains:
            return {"max_new_tokens": c.max_new_tokens}
        bounds = (num_sources, c.max_questions, c.question_chars, c.answer_chars)
        return {"json_schema": schema_text(answer_schema(*bounds)),  # the engines' one budget rule
                "max_new_tokens": engines.answer_budget(self.engine, "json_schema", answer_budget(*bounds),
                                                        c.max_new_tokens)}

    def _request(self, item: Item, attempt: int) -> GenerationRequest:
        params = SamplingParams(n=1, temperature=self.config.retry_temperature if attempt else self.config.temperature,
                                top_p=self.config.top_p, seed=self.config.seed + attempt, logprobs=False,
                                **item["_constraint"])
        if self.tokenizer is None:
            return GenerationRequest(messages=tuple(item["_messages"]), params=params)
        prompt = self.tokenizer.apply_chat_template(item["_messages"], add_generation_prompt=True, tokenize=False)
        return GenerationRequest(prompt=prompt + self.answer_prefix, params=params)

    def __call__(self, items: Sequence[Item]) -> list[dict[str, Any] | Exception]:
        items = [{**item, "_seconds": defaultdict(float)} for item in items]
        n = len(items)
        t0 = time.perf_counter()
        queries = self.encoder.encode_queries([item["claim"] for item in items])
        per_item_query = (time.perf_counter() - t0) / n
        for item, query in zip(items, queries, strict=True):
            item["_seconds"]["retrieval"] += per_item_query
            item["sources"], item["n_chunks"], item["_seconds"]["index"] = self._sources(item, query)
            t = time.perf_counter()
            examples = self.few_shot.select(item["claim"], self.config.few_shot) if self.few_shot else []
            item["few_shot_ids"] = [e.id for e in examples]
            item["_messages"] = prompt_messages(item["claim"], item["sources"], examples, self.config.thinking,
                                                self.config.source_context_chars)
            item["_seconds"]["few_shot"] += time.perf_counter() - t
            item["_constraint"] = self._constraint(len(item["sources"]))
            item["attempts"], item["_answer"], item["_results"] = [], None, []
        pending = list(range(n))
        for attempt in range(self.config.parse_retries + 1):
            if not pending:
                break
            t = time.perf_counter()
            requests = [self._request(items[k], attempt) for k in pending]
            results = self.engine.generate(requests)
            share = (time.perf_counter() - t) / len(pending)
            still = []
            for k, request, result in zip(pending, requests, results, strict=True):
                item = items[k]
                item["_seconds"]["generation"] += share
                item["_results"].append(result)
                # json_schema: the request carried the answer schema (the engine enforces it where it can)
                record = {"seed": request.params.seed, "temperature": request.params.temperature,
                          "json_schema": request.params.json_schema is not None,
                          "max_new_tokens": request.params.max_new_tokens}
                if not result.ok or not result.candidates:
                    record.update(text="", finish_reason=None, error=f"generation: {result.error or 'no candidate'}")
                    item["attempts"].append(record)
                    # a longer prompt will not fit on a retry either; an engine that failed is not a parse failure
                    # to retry with other sampling: the claim is an error record, run again by --retry_errors
                    if not ((result.error or "").startswith("context_overflow") or result.unavailable):
                        still.append(k)
                    continue
                candidate = result.candidates[0]
                text = self.answer_prefix + candidate.text
                answer, error = parse_aic_answer(text, len(item["sources"]), self.config.max_questions)
                error = name_cut_off(error, candidate.finish_reason)
                record.update(text=text, finish_reason=candidate.finish_reason, error=error,
                              prompt_tokens=result.prompt_tokens, new_tokens=candidate.num_tokens)
                item["attempts"].append(record)
                if answer is None:
                    still.append(k)
                else:
                    item["_answer"] = answer
            pending = still
        kinds = ["json_schema"] if self.config.constrains else []
        out: list[dict[str, Any] | Exception] = []
        for item in items:
            record = self._record(item)  # its seconds counted either way
            failed = unavailable_error(item["_results"]) if item["_answer"] is None else None
            out.append(failed or {**record, "decoding": engines.record_decoding(self.engine, kinds, item["_results"])})
        return out

    def _record(self, item: Item) -> dict[str, Any]:
        seconds = {stage: round(item["_seconds"][stage], 4) for stage in STAGES}
        for stage, value in seconds.items():
            self.seconds[stage] += value
        self.claims_seen += 1
        answer = item["_answer"]
        sources = item["sources"]
        record = {
            "id": item["id"], "claim": item["claim"], "gold": item.get("gold"), "record_id": item.get("record_id"),
            "n_chunks": item["n_chunks"], "sources": sources, "few_shot_ids": item["few_shot_ids"],
            "own_sources": sum(s.get("role") == "own" for s in sources), "attempts": item["attempts"],
            "seconds": seconds,
        }
        if answer is None:
            last = item["attempts"][-1]["error"] if item["attempts"] else "no attempt"
            return {**record, "status": "failed", "label": None, "failure": last, "answer": None}
        return {**record, "status": "answered", "label": answer.label, "failure": None,
                "answer": answer_record(answer, sources)}

    def close(self) -> None:
        self.engine.close()


def retrieval_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How much of what was retrieved came from the claim's own documents (proxy stores mark them)."""
    results = [r["result"] for r in records if r["status"] == "ok"]
    if not results:
        return {}
    n = len(results)
    return {"claims": n, "mean_chunks": round(sum(r["n_chunks"] for r in results) / n, 2),
            "mean_sources": round(sum(len(r["sources"]) for r in results) / n, 2),
            "mean_own_sources": round(sum(r["own_sources"] for r in results) / n, 2),
            "claims_with_an_own_source": round(sum(r["own_sources"] > 0 for r in results) / n, 4)}


def seconds_per_claim(records: list[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per claim of each stage over every recorded claim (resumed runs included)."""
    results = [r["result"] for r in records if r["status"] == "ok"]
    return {s: round(sum(r["seconds"][s] for r in results) / max(len(results), 1), 3) for s in STAGES}


class AIC(Pipeline):
    """The contract (``contract.py``) of ``veracity infer aic``: prepared AVeriTeC claims in (or a user's
    ``{id, claim}`` rows through the API), one claim record per item out, the FEVER-8 files made from them and
    scored by ``veracity eval averitec`` (``<output_dir>/eval``)."""

    name = "aic"
    unit = "claims"
    config_types = (AICConfig, EngineConfig)
    report_flags = REPORT_FLAGS
    report_item = staticmethod(report_item)

    def __init__(self, config: AICConfig, engine_config: EngineConfig, engine: Any | None = None):
        """``engine``: an engine to use instead of building one from ``engine_config`` (tests script one)."""
        super().__init__(config, engine_config)
        self.engine_config, self.engine = engine_config, engine
        self.models: AICPipeline | None = None
        self.claims: tuple[list[Any], list[Any], list[Any]] | None = None  # (pool, targets, train)

    @property
    def batch_size(self) -> int:
        return self.config.claims_per_call

    def _claims(self) -> tuple[list[Any], list[Any], list[Any]]:
        if self.claims is None:
            self.claims = load_claims(self.config)
        return self.claims

    def items(self) -> list[Item]:
        return [{"id": store_claim_id(c.id), "record_id": c.id, "claim": c.claim, "gold": c.label}
                for c in self._claims()[1]]

    def row_item(self, row: Item, source: str, line: int) -> Item:
        """``{id, claim[, gold, record_id]}``: ``id`` is the claim's id in the knowledge store."""
        if not isinstance(row.get("claim"), str) or not row["claim"].strip():
            raise DataError(source, line, "missing or empty claim", field="claim")
        return {"id": str(row["id"]), "record_id": row.get("record_id"), "claim": row["claim"],
                "gold": row.get("gold")}

    def check(self) -> None:
        if self.config.knowledge_store is not None:
            KnowledgeStore(self.config.knowledge_store)  # a store that is not there: named before any write

    def load(self, run_dir: Path) -> None:
        if self.engine is None:
            self.engine = engine_factory.make_engine(self.engine_config)

    def model_ids(self) -> dict[str, str]:
        """The embedder (named from its options, so also before load(): a resume under another one is refused
        before any model loads, and no claim index is rebuilt with it) and, once built, the generator."""
        c = self.config
        ids = {"embedder": encoder_id(EncoderSpec(model=c.embedder, backend=c.embed_backend))}
        if self.engine is not None:
            ids["generator"] = self.engine.identity
        return ids

    def decoding(self) -> dict[str, Any] | None:
        if self.engine is None or not hasattr(self.engine, "decoding"):
            return None
        return self.engine.decoding(["json_schema"] if self.config.constrains else [])

    def prepare(self, run_dir: Path) -> dict[str, Any]:
        """The knowledge store (the proxy one is built in ``<output_dir>/store``), ``gold.json`` of the claims
        run, and the loaded pipeline."""
        config = self.config
        # the prepared claims: for the proxy store, gold.json and few-shot (a user's store without few-shot: none)
        needed = config.knowledge_store is None or config.few_shot > 0 or self.claims is not None
        pool, targets, train = self._claims() if needed else ([], [], [])
        report: dict[str, Any] = {"knowledge_store": config.knowledge_store}
        if config.knowledge_store is None:
            store_dir = self._proxy_store(run_dir)
            report = {"knowledge_store": str(store_dir), "proxy": True,
                      **build_proxy_store(pool, [c.id for c in targets], store_dir, own=config.proxy_own_documents,
                                          distractors=config.proxy_distractor_claims, mode=config.proxy_distractors,
                                          seed=config.proxy_seed, store_id=store_claim_id)}
        # a claim without gold QA pairs has no evidence score (the scorer refuses it): it runs, but is not in gold
        write_json(run_dir / "gold.json", [gold_record(c) for c in targets if any(p.answers for p in c.questions)])
        report["claims_without_gold_evidence"] = sum(not any(p.answers for p in c.questions) for c in targets)
        self._build(report["knowledge_store"], train)
        return {"store": report}

    def _build(self, store: str | Path, train: list[Any]) -> None:
        """The claim pipeline over ``store`` with ``train`` as the few-shot pool (the driver's and each worker's)."""
        self.models = AICPipeline(self.config, self.engine_config, KnowledgeStore(store), train, engine=self.engine)
        self.seconds = self.models.seconds

    def _proxy_store(self, run_dir: Path) -> Path:
        return run_dir / ("store" if self.config.proxy_own_documents else "store_distractors_only")

    def load_worker(self, run_dir: Path) -> None:
        """The engine and the claim pipeline over the knowledge store the driver's ``prepare`` wrote."""
        self.load(run_dir)
        self._build(self.config.knowledge_store or self._proxy_store(run_dir),
                    self._claims()[2] if self.config.few_shot > 0 else [])

    def __call__(self, items: Sequence[Item]) -> list[dict[str, Any] | Exception]:
        assert self.models is not None, "prepare() first"
        return self.models(items)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()

    def finish(self, records: Sequence[dict[str, Any]], run_dir: Path) -> dict[str, Any]:
        """``predictions.json``, ``submission.csv`` and ``failures.jsonl`` from every record of the layout."""
        counts = write_outputs(run_dir, list(records))
        facts = {**counts, "retrieval": retrieval_stats(list(records)),
                 "seconds_per_claim": seconds_per_claim(list(records))}
        facts["seconds_per_claim"]["total"] = round(sum(facts["seconds_per_claim"].values()), 3)
        logger.info("retrieval: %s", facts["retrieval"])
        logger.info("answered %d, failed %d; seconds per claim: %s", counts["answered"], counts["failed"],
                    ", ".join(f"{k} {v:.2f}" for k, v in facts["seconds_per_claim"].items()))
        return facts

    def stats(self) -> dict[str, Any]:
        indexes = self.models.indexes if self.models else None
        return {"indexes_built": indexes.built, "indexes_reused": indexes.reused} if indexes else {}

    def score(self, records: Sequence[dict[str, Any]], run_dir: Path) -> dict[str, Any] | None:
        if not self.config.evaluate:
            return None

        return evaluate(["--predictions", str(run_dir / "submission.csv"), "--gold", str(run_dir / "gold.json"),
                         "--output_dir", str(run_dir / "eval"), "--progress", "false"])

