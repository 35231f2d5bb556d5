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

from veracity.infer.pipelines.aic.config import AICConfig
from veracity.infer.pipelines.aic.prompt import answer_budget, answer_schema, parse_aic_answer, prompt_messages
from veracity.infer.pipelines.aic.retrieval import ClaimIndexCache, FewShotSelector, select_sources
from veracity.infer.pipelines.aic.store import KnowledgeStore, chunk_documents
from veracity.models.engine import EngineConfig, GenerationRequest

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
        from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec
        from veracity.models.engine import make_engine

        self.config, self.store = config, store
        self.encoder = DenseEncoder(EncoderSpec(model=config.embedder, max_length=config.embed_max_length,
                                                batch_size=config.embed_batch_size))
        cache_root = config.index_cache or str(Path(config.output_dir) / "index_cache")
        self.indexes = ClaimIndexCache(cache_root, self.encoder, config.chunk_chars)
        self.few_shot = FewShotSelector(train_claims) if config.few_shot > 0 else None
        self.engine = engine if engine is not None else make_engine(engine_config)
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
        from veracity.infer.structured import schema_text

        c = self.config
        if not c.constrains:
            return {"max_new_tokens": c.max_new_tokens}
        bounds = (num_sources, c.max_questions, c.question_chars, c.answer_chars)
        return {"json_schema": schema_text(answer_schema(*bounds)), "max_new_tokens": answer_budget(*bounds)}

    def _request(self, item: Item, attempt: int) -> GenerationRequest:
        from veracity.models.engine import SamplingParams

        params = SamplingParams(n=1, temperature=self.config.retry_temperature if attempt else self.config.temperature,
                                top_p=self.config.top_p, seed=self.config.seed + attempt, logprobs=False,
                                **item["_constraint"])
        if self.tokenizer is None:
            return GenerationRequest(messages=tuple(item["_messages"]), params=params)
        prompt = self.tokenizer.apply_chat_template(item["_messages"], add_generation_prompt=True, tokenize=False)
        return GenerationRequest(prompt=prompt + self.answer_prefix, params=params)

    def __call__(self, items: Sequence[Item]) -> list[dict[str, Any]]:
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
            item["attempts"], item["_answer"] = [], None
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
                # json_schema: the request carried the answer schema (the engine enforces it where it can)
                record = {"seed": request.params.seed, "temperature": request.params.temperature,
                          "json_schema": request.params.json_schema is not None,
                          "max_new_tokens": request.params.max_new_tokens}
                if not result.ok or not result.candidates:
                    record.update(text="", finish_reason=None, error=f"generation: {result.error or 'no candidate'}")
                    item["attempts"].append(record)
                    if not (result.error or "").startswith("context_overflow"):
                        still.append(k)  # a longer prompt will not fit on a retry either
                    continue
                candidate = result.candidates[0]
                text = self.answer_prefix + candidate.text
                answer, error = parse_aic_answer(text, len(item["sources"]), self.config.max_questions)
                if error and candidate.finish_reason == "length":
                    error = f"length: {error}"  # cut by the budget, not a malformed answer
                record.update(text=text, finish_reason=candidate.finish_reason, error=error,
                              prompt_tokens=result.prompt_tokens, new_tokens=candidate.num_tokens)
                item["attempts"].append(record)
                if answer is None:
                    still.append(k)
                else:
                    item["_answer"] = answer
            pending = still
        return [self._record(item) for item in items]

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
