"""What the transformers engine adds to ``model.generate``: constrained decoding and per-request sampling.

- **Constraints** (a JSON schema, a regular expression or a choice among strings) are compiled with xgrammar once
  per constraint and tokenizer and reused; each ``generate`` call gets a fresh ``xgrammar.contrib.hf.LogitsProcessor``,
  which keeps one grammar state per row (prompt-major rows: prompt ``p``'s candidate ``c`` is row ``p * n + c``).
- **Sampling seeded per request**: transformers samples every row of a batch from one global generator, so a
  claim's samples would change with what it is batched with. :class:`RowSampler` instead draws each row's token
  by the Gumbel-max trick from that row's own generator (seeded from the request's content and the candidate's
  index), and ``generate`` runs greedily over the result: argmax(log p + Gumbel noise) is a sample of p.
- **Log-probabilities under a constraint** (one definition for every engine, ``engine.LOGPROB_DEFINITION``): the
  token's log-probability under the model at temperature 1, renormalised over the tokens the grammar allowed at
  that step — what vLLM returns (its grammar mask is applied before it computes log-probs). Unconstrained, the
  allowed set is the whole vocabulary, so this is the plain model log-probability. :class:`RowSampler` records the
  log-normaliser of the masked logits at each step; the engine subtracts it from the raw logit of the chosen token.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor

from veracity.models.engine import choice_grammar


def row_seed(seed: int, prompt_ids: Sequence[int], candidate: int) -> int:
    """A 63-bit seed from the request's seed, its prompt (as the model sees it) and the candidate's index: the same
    request gets the same samples whatever it is batched with, and two prompts never share a stream."""
    digest = hashlib.sha256(json.dumps([seed, list(prompt_ids), candidate]).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class RowSampler(LogitsProcessor):
    """The last logits processor of a ``generate`` call run with ``do_sample=False``.

    Records, per step and row, the log-normaliser of the (grammar-masked) logits at temperature 1; when
    ``temperature > 0`` it also turns the scores into a sample: temperature, top-p, then Gumbel noise from the row's
    own generator, so that the greedy argmax that follows picks a sample of the warped distribution.
    """

    def __init__(self, seeds: Sequence[int] | None, temperature: float = 0.0, top_p: float = 1.0):
        self.temperature, self.top_p = temperature, top_p
        self.generators = None
        if temperature > 0:
            if seeds is None:
                raise ValueError("sampling needs one seed per row")
            self.generators = [torch.Generator().manual_seed(s) for s in seeds]
        self.log_normalisers: list[torch.Tensor] = []  # one (rows,) tensor per step

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.float()
        self.log_normalisers.append(scores.logsumexp(-1).cpu())
        if self.generators is None:
            return scores
        warped = scores / self.temperature
        if self.top_p < 1.0:
            warped = _top_p(warped, self.top_p)
        rows, vocab = warped.shape
        if rows != len(self.generators):
            raise RuntimeError(f"RowSampler has {len(self.generators)} generators for {rows} rows")
        uniform = torch.stack([torch.rand(vocab, generator=g) for g in self.generators]).to(warped.device)
        gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-20)))
        return warped + gumbel

    def masked_logprobs(self, raw_logits: Sequence[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        """(rows, steps) log-probabilities of ``tokens`` by ``engine.LOGPROB_DEFINITION``, from ``generate``'s raw
        per-step logits (``output_logits``) and the normalisers recorded here."""
        # the logits are where the model ran (a GPU), the tokens and normalisers on the CPU: gather there, then move
        return torch.stack([step.float().gather(1, tokens[:, k : k + 1].to(step.device)).squeeze(1).cpu()
                            - self.log_normalisers[k] for k, step in enumerate(raw_logits)], dim=1)


def _top_p(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering as transformers' ``TopPLogitsWarper`` does it (the top token always kept)."""
    sorted_scores, order = scores.sort(descending=False)
    cumulative = sorted_scores.softmax(-1).cumsum(-1)
    remove = cumulative <= (1 - top_p)
    remove[..., -1:] = False
    return scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))


# xgrammar 0.2.8 writes a string bounded by maxLength as characters other than quote, backslash, CR and LF: raw
# control characters (invalid in JSON) slip through, and a random model does emit them. The fix is the class its
# unbounded strings already use, less the escapes (a bounded string counts characters, not escape sequences).
_BOUNDED_CHARACTERS = r'[^\"\\\r\n]'
_JSON_CHARACTERS = r'[^\0-\x1f\"\\]'


def json_schema_grammar(xgrammar: Any, schema: str) -> str:
    """The EBNF grammar of compact JSON (``", "`` and ``": "`` separators, no other whitespace, so an answer's length
    is predictable) that follows ``schema``, with bounded strings kept to valid JSON characters."""
    grammar = str(xgrammar.Grammar.from_json_schema(schema, any_whitespace=False))
    return grammar.replace(_BOUNDED_CHARACTERS, _JSON_CHARACTERS)


class GrammarCache:
    """Compiled grammars for one tokenizer, each compiled once (a bounded JSON schema takes seconds)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]):
        import xgrammar  # lazy: xgrammar is optional, for constrained decoding alone

        self.xgrammar = xgrammar
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                       stop_token_ids=sorted(stop_token_ids))
        self.compiler = xgrammar.GrammarCompiler(info)
        # xgrammar reads special tokens (<|im_start|>, <pad>) as their literal text, which a JSON string admits;
        # a constrained answer never contains one, stop tokens aside.
        self.forbidden = sorted(set(getattr(tokenizer, "all_special_ids", [])) - set(stop_token_ids))
        self._compiled: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def compiled(self, kind: str, spec: str) -> Any:
        """The compiled grammar of a constraint: ``kind`` json_schema (schema text), regex, or choice (a JSON list)."""
        key = (kind, spec)
        with self._lock:
            if key not in self._compiled:
                self._compiled[key] = self.compiler.compile_grammar(grammar_of(self.xgrammar, kind, spec))
            return self._compiled[key]

    def processor(self, kind: str, spec: str) -> GrammarMask:
        """A fresh logits processor for one ``generate`` call (it keeps one grammar state per row)."""
        return GrammarMask(self.compiled(kind, spec), self.xgrammar, self.forbidden)


class GrammarMask(LogitsProcessor):
    """Masks each row's logits to the tokens its grammar state allows (xgrammar's matcher and bitmask).

    Like ``xgrammar.contrib.hf.LogitsProcessor``, but a row that transformers has ended otherwise (a stop string, after
    which it feeds padding) is left alone instead of failing an assertion: its padding is not a grammar token.
    """

    def __init__(self, compiled: Any, xgrammar: Any, forbidden: Sequence[int] = ()):
        self.compiled, self.xgr, self.forbidden = compiled, xgrammar, list(forbidden)
        self.matchers: list[Any] = []
        self.active: list[bool] = []
        self.bitmask = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = input_ids.shape[0]
        if not self.matchers:  # first step: nothing generated yet
            self.matchers = [self.xgr.GrammarMatcher(self.compiled) for _ in range(rows)]
            self.active = [True] * rows
            self.bitmask = self.xgr.allocate_token_bitmask(rows, self.compiled.tokenizer_info.vocab_size)
        else:
            for i, matcher in enumerate(self.matchers):
                if self.active[i] and not matcher.is_terminated():
                    self.active[i] = matcher.accept_token(int(input_ids[i, -1]))
        live = [i for i, matcher in enumerate(self.matchers) if self.active[i] and not matcher.is_terminated()]
        for i, matcher in enumerate(self.matchers):
            if i in live:
                matcher.fill_next_token_bitmask(self.bitmask, i)
            else:  # ended: whatever comes is padding, replaced by transformers; allow it all
                self.bitmask[i].fill_(-1)
        device = scores.device
        scores = scores.to("cpu") if device.type not in ("cpu", "cuda") else scores
        self.xgr.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device))
        if self.forbidden and live:
            scores[torch.tensor(live)[:, None], torch.tensor(self.forbidden)[None, :]] = float("-inf")
        return scores.to(device)


def grammar_of(xgrammar: Any, kind: str, spec: str) -> Any:
    """The xgrammar ``Grammar`` the engine enforces for a constraint (``SamplingParams.constraint``)."""
    if kind == "json_schema":
        return xgrammar.Grammar.from_ebnf(json_schema_grammar(xgrammar, spec))
    if kind == "regex":
        return xgrammar.Grammar.from_regex(spec)
    if kind == "choice":
        return xgrammar.Grammar.from_ebnf(choice_grammar(json.loads(spec)))
    raise ValueError(f"unknown constraint kind {kind!r}")


def grammar_accepts(kind: str, spec: str, text: str) -> bool:
    """Whether the grammar the engine enforces for a constraint admits ``text`` (no tokenizer needed): how tests
    check a schema against well-formed and malformed answers."""
    import xgrammar  # lazy: optional, as above
    from xgrammar.testing import _is_grammar_accept_string

    return bool(_is_grammar_accept_string(grammar_of(xgrammar, kind, spec), text))
