"""The AIC CTU system prompt (the paper's Appendix A), the answer format and its parser: the one place that knows it.

The system prompt holds the instructions, the ``l`` retrieved sources (``## Source ID: i [url]`` with the context
before, the chunk and the context after), the output format and the few-shot QA examples; the claim is the user
message. The answer is one JSON object::

    {"questions": [{"question", "answer", "source", "answer_type"}, ...],
     "claim_veracity": {"Supported": 1-5, "Refuted": 1-5, "Not Enough Evidence": 1-5,
                        "Conflicting Evidence/Cherrypicking": 1-5, "veracity_verdict": "..."}}

The label is the verdict with the highest Likert score; a tie goes to the stated ``veracity_verdict`` when it is
one of the tied verdicts. Missing scores: with a stated verdict, that verdict; with some scores but no verdict,
the highest of those given (``label_from`` says which rule decided). Models drift from the format (the paper's own
listing drops a ``],`` and two commas), so a body that is not valid JSON is read piece by piece: each
``{"question": …}`` object, each verdict's score, the verdict; ``repaired`` marks such answers. Nothing is ever
taken from another claim: an answer without questions or without any verdict is a parse failure.

:func:`answer_schema` is the same answer as a JSON schema, what a constrained engine holds decoding to (the parser
stays the final check): every answer the schema admits parses, to the label its scores and verdict give. A
constrained answer is that JSON object alone — no ``<think>`` block before it, no code fence around it — so the
pipeline does not constrain a run with ``thinking: on`` and starts no ``answer_prefix`` under a constraint.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from veracity.data_prep.schema import AVERITEC_LABELS as VERDICTS
from veracity.infer.parsing import extract_json_object, strip_thinking
from veracity.infer.structured import token_budget

ANSWER_TYPES = ("Boolean", "Extractive", "Abstractive", "Unanswerable")
MAX_QUESTIONS = 10
THINKING_SWITCH = {"on": " /think", "off": " /no_think", "default": ""}  # Qwen3's soft switch in the user turn

INSTRUCTIONS = (
    "You are a professional fact checker, formulate up to 10 questions that cover all the facts needed to validate "
    "whether the factual statement (in User message) is true, false, uncertain or a matter of opinion. Each question "
    "has one of four answer types: Boolean, Extractive, Abstractive and Unanswerable using the provided sources.\n"
    "After formulating Your questions and their answers using the provided sources, You evaluate the possible "
    "veracity verdicts (Supported claim, Refuted claim, Not enough evidence, or Conflicting evidence/Cherrypicking) "
    "given your claim and evidence on a Likert scale (1 - Strongly disagree, 2 - Disagree, 3 - Neutral, 4 - Agree, "
    "5 - Strongly agree). Ultimately, you note the single likeliest veracity verdict according to your best "
    "knowledge.\n"
    "The facts must be coming from these sources, please refer them using assigned IDs:"
)
OUTPUT_FORMAT = """## Output formatting
Please, you MUST only print the output in the following output format:
```json
{
    "questions":
        [
            {"question": "<Your first question>", "answer": "<The answer to the Your first question>", "source": "<Single numeric source ID backing the answer for Your first question>", "answer_type":"<The type of first answer>"},
            {"question": "<Your second question>", "answer": "<The answer to the Your second question>", "source": "<Single numeric Source ID backing the answer for Your second question>", "answer_type":"<The type of second answer>"}
        ],
    "claim_veracity": {
        "Supported": "<Likert-scale rating of how much You agree with the 'Supported' veracity classification>",
        "Refuted": "<Likert-scale rating of how much You agree with the 'Refuted' veracity classification>",
        "Not Enough Evidence": "<Likert-scale rating of how much You agree with the 'Not Enough Evidence' veracity classification>",
        "Conflicting Evidence/Cherrypicking": "<Likert-scale rating of how much You agree with the 'Conflicting Evidence/Cherrypicking' veracity classification>",
        "veracity_verdict": "<The suggested veracity classification for the claim>"
    }
}
```"""  # noqa: E501 - the format block is quoted as the model sees it


def _cap(text: str, max_chars: int | None) -> str:
    return text if max_chars is None or len(text) <= max_chars else text[:max_chars].rsplit(" ", 1)[0] + " …"


def render_source(number: int, source: dict[str, Any], context_chars: int | None = None) -> str:
    """``## Source ID: n [url]`` then context before, chunk text, context after (empty parts left out)."""
    parts = [_cap(source.get("context_before", ""), context_chars), source["text"],
             _cap(source.get("context_after", ""), context_chars)]
    body = "\n\n".join(p for p in parts if p)
    return f"## Source ID: {number} [{source['url']}]\n\n{body}"


def few_shot_lines(example: Any) -> list[str]:
    """One ``"question": …, "answer": …, "answer_type": …`` line per annotated answer of a train claim."""
    lines = []
    for pair in example.questions:
        for answer in pair.answers or []:
            text = answer.answer.strip() or "No answer could be found."
            if answer.answer_type == "Boolean" and answer.boolean_explanation.strip():
                text += ". " + answer.boolean_explanation.strip()
            kind = answer.answer_type or "Abstractive"
            lines.append(f'"question": {json.dumps(pair.question, ensure_ascii=False)}, "answer": '
                         f'{json.dumps(text, ensure_ascii=False)}, "answer_type": "{kind}"')
    return lines


def system_prompt(sources: Sequence[dict[str, Any]], examples: Sequence[Any] = (),
                  context_chars: int | None = None) -> str:
    """The Appendix A system prompt over these sources and few-shot examples (train AveritecClaims)."""
    blocks = [INSTRUCTIONS]
    blocks += [f"---\n{render_source(i, s, context_chars)}" for i, s in enumerate(sources, start=1)]
    blocks.append(f"---\n{OUTPUT_FORMAT}")
    if examples:
        shots = ["---\n## Few-shot learning\nYou have access to the following few-shot learning examples for "
                 "questions and answers.:"]
        for example in examples:
            shots.append(f'### Question examples for claim "{example.claim}" (verdict {example.label})\n'
                         + "\n".join(few_shot_lines(example)))
        blocks.append("\n\n".join(shots))
    return "\n".join(blocks)


def prompt_messages(claim: str, sources: Sequence[dict[str, Any]], examples: Sequence[Any] = (),
                    thinking: str = "default", context_chars: int | None = None) -> list[dict[str, str]]:
    """System prompt + the claim as the user message (with Qwen3's ``/think`` or ``/no_think`` when set)."""
    if thinking not in THINKING_SWITCH:
        raise ValueError(f"thinking must be one of {sorted(THINKING_SWITCH)}, got {thinking!r}")
    return [{"role": "system", "content": system_prompt(sources, examples, context_chars)},
            {"role": "user", "content": claim + THINKING_SWITCH[thinking]}]


# --- the answer's schema ---------------------------------------------------------------------------------------

# Bounds of a constrained answer, in characters. Questions: 200 (AVeriTeC dev's gold questions: median 56, 99th
# percentile 162, longest 221). Answers: 300 (gold answers: median 136, 22% longer — extractive quotes of up to 2,000
# characters; a constrained answer ends its text at the bound). The budget counts 4 bytes a text character (a token is
# at least a byte: structured.token_budget), so 10 such items ask for 20,964 new tokens, though Qwen3-14B writes ~4
# characters a token; a CPU config with a short context lowers all three (configs/pipelines/aic_embedded.yaml).
QUESTION_CHARS = 200
ANSWER_CHARS = 300
# Whitespace that str.strip() removes beyond ASCII's \s, as the regex escapes of a JSON-schema pattern
_UNICODE_BLANKS = "".join(f"\\u{ord(c):04x}" for c in map(chr, range(0x80, 0x10000)) if c.isspace())


def _question_text(max_chars: int) -> dict[str, Any]:
    """A question the parser keeps: 1..max_chars characters, the first not blank (the parser strips the text and
    drops an empty question). The pattern carries the length bound: xgrammar ignores maxLength beside a pattern.
    Its characters are those of the engines' bounded strings (no control character, quote or backslash): xgrammar
    0.2.8 turns ``.{0,199}`` into a grammar that admits raw control characters and invalid escapes, and with it
    stops counting the items of the list around it (maxItems); this class keeps both."""
    return {"type": "string",
            "pattern": f'^[^\\s{_UNICODE_BLANKS}\\x00-\\x1f"\\\\][^\\x00-\\x1f"\\\\]{{0,{max_chars - 1}}}$'}


def _answer_schema(num_sources: int, max_questions: int, question: dict[str, Any],
                   answer_chars: int) -> dict[str, Any]:
    item = {
        "type": "object",
        "properties": {
            "question": question,
            "answer": {"type": "string", "maxLength": answer_chars},
            # a source the prompt lists (null when it lists none): an id outside them is no source to the parser
            "source": ({"type": "integer", "minimum": 1, "maximum": num_sources} if num_sources > 0
                       else {"type": "null"}),
            "answer_type": {"enum": list(ANSWER_TYPES)},
        },
        "required": ["question", "answer", "source", "answer_type"],
        "additionalProperties": False,
    }
    veracity = {verdict: {"type": "integer", "minimum": 1, "maximum": 5} for verdict in VERDICTS}
    return {
        "type": "object",
        "properties": {
            "questions": {"type": "array", "items": item, "minItems": 1, "maxItems": max_questions},
            "claim_veracity": {
                "type": "object",
                "properties": {**veracity, "veracity_verdict": {"enum": list(VERDICTS)}},
                "required": [*VERDICTS, "veracity_verdict"],
                "additionalProperties": False,
            },
        },
        "required": ["questions", "claim_veracity"],
        "additionalProperties": False,
    }


def answer_schema(num_sources: int, max_questions: int = MAX_QUESTIONS, question_chars: int = QUESTION_CHARS,
                  answer_chars: int = ANSWER_CHARS) -> dict[str, Any]:
    """The answer as a JSON schema (the Appendix A fields): 1..``max_questions`` items of a question (not blank, at
    most ``question_chars`` characters), an answer (at most ``answer_chars``), the id of one of the
    ``num_sources`` sources in the prompt and the answer type; a 1–5 score for each of the four verdicts and the
    stated verdict. Bounded throughout: :func:`answer_budget` new tokens hold the longest answer it admits."""
    if max_questions < 1 or question_chars < 1 or answer_chars < 0:
        raise ValueError("answer_schema needs max_questions >= 1, question_chars >= 1 and answer_chars >= 0")
    return _answer_schema(num_sources, max_questions, _question_text(question_chars), answer_chars)


def answer_budget(num_sources: int, max_questions: int = MAX_QUESTIONS, question_chars: int = QUESTION_CHARS,
                  answer_chars: int = ANSWER_CHARS) -> int:
    """``max_new_tokens`` for :func:`answer_schema`: ``structured.token_budget`` of the same schema, its question
    pattern read as the maxLength it amounts to."""
    return token_budget(_answer_schema(num_sources, max_questions, {"type": "string", "maxLength": question_chars},
                                       answer_chars))


# --- the answer ------------------------------------------------------------------------------------------------


@dataclass
class AICQuestion:
    question: str
    answer: str
    source: int | None  # 1-based source id, None when missing or out of range
    answer_type: str


@dataclass
class AICAnswer:
    questions: list[AICQuestion]
    likert: dict[str, int]  # the verdicts the model scored (1..5)
    stated_verdict: str | None
    label: str
    label_from: str  # likert | likert_tie_verdict | likert_tie_order | verdict | partial_likert
    repaired: bool = False
    dropped_questions: int = 0
    notes: list[str] = field(default_factory=list)


def normalize_verdict(text: Any) -> str | None:
    """A verdict name as the model writes it → one of VERDICTS (None if it is none of them)."""
    if not isinstance(text, str):
        return None
    low = text.strip().lower()
    if "conflict" in low or "cherry" in low:
        return VERDICTS[3]
    if "not enough" in low or low in ("nee", "nei", "not enough evidence"):
        return VERDICTS[2]
    if "refut" in low:
        return VERDICTS[1]
    if "support" in low:
        return VERDICTS[0]
    return None


_LIKERT_WORDS = (("strongly disagree", 1), ("strongly agree", 5), ("disagree", 2), ("neutral", 3), ("agree", 4))


def parse_likert(value: Any) -> int | None:
    """1..5 from ``4``, ``"4"``, ``"4 - Agree"`` or ``"Agree"``; None otherwise (0, 7, "high" …)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if float(value).is_integer() and 1 <= value <= 5 else None
    if not isinstance(value, str) or "<" in value or "likert" in value.lower():
        return None  # an echo of the format's placeholder is no score
    digits = re.findall(r"\d+", value)
    if digits:
        number = int(digits[0])
        return number if 1 <= number <= 5 else None
    low = value.lower()
    return next((score for word, score in _LIKERT_WORDS if word in low), None)


def normalize_answer_type(text: Any) -> str:
    low = str(text or "").lower()
    for name in ANSWER_TYPES:
        if name.lower()[:4] in low:
            return name
    return "Abstractive"


def choose_label(likert: dict[str, int], stated: str | None) -> tuple[str, str] | None:
    """(label, rule) from the Likert scores and the stated verdict; None when neither says anything."""
    if len(likert) == len(VERDICTS):
        best = max(likert.values())
        tied = [v for v in VERDICTS if likert[v] == best]
        if len(tied) == 1:
            return tied[0], "likert"
        if stated in tied:
            return stated, "likert_tie_verdict"
        return tied[0], "likert_tie_order"  # tied, and the verdict names none of them: the first in VERDICTS
    if stated is not None:
        return stated, "verdict"
    if likert:
        best = max(likert.values())
        return next(v for v in VERDICTS if likert.get(v) == best), "partial_likert"
    return None


_QUESTION_OBJECT = re.compile(r"\{[^{}]*?\"question\"\s*:[^{}]*\}", re.S)
_VERDICT_FIELD = re.compile(r"\"veracity_verdict\"\s*:\s*\"([^\"]*)\"")


def _salvage(body: str) -> dict[str, Any] | None:
    """Pieces of a broken answer: every question object that decodes, every verdict score, the verdict."""
    questions = []
    for match in _QUESTION_OBJECT.finditer(body):
        try:
            questions.append(json.loads(match.group(0)))
        except json.JSONDecodeError:
            continue
    scores = {}
    for verdict in VERDICTS:
        found = re.search(re.escape(json.dumps(verdict)) + r"\s*:\s*\"?([^\",}\n]*)", body)
        if found:
            scores[verdict] = found.group(1)
    verdict = _VERDICT_FIELD.search(body)
    if not questions and not scores and not verdict:
        return None
    veracity: dict[str, Any] = dict(scores)
    if verdict:
        veracity["veracity_verdict"] = verdict.group(1)
    return {"questions": questions, "claim_veracity": veracity}


def _json_body(text: str) -> tuple[dict[str, Any] | None, bool, str | None]:
    """(object, repaired, error) out of the raw model text."""
    try:  # the whole text one object, as a constrained engine writes it: read as it is, whatever its strings hold
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and ("questions" in whole or "claim_veracity" in whole):
        return whole, False, None
    result = extract_json_object(text)
    if result.ok and isinstance(result.value, dict) and ("questions" in result.value or
                                                          "claim_veracity" in result.value):
        return result.value, False, None
    body, unterminated = strip_thinking(text)
    salvaged = _salvage(body)
    if salvaged is not None:
        return salvaged, True, None
    if unterminated:
        return None, False, "unterminated_think: the answer never left its <think> block"
    return None, False, result.error or "schema: no questions and no claim_veracity"


def parse_aic_answer(text: str, num_sources: int, max_questions: int = MAX_QUESTIONS) -> tuple[AICAnswer | None,
                                                                                                 str | None]:
    """``(answer, None)`` or ``(None, error)``; an error never becomes a guessed label."""
    data, repaired, error = _json_body(text)
    if data is None:
        return None, error
    notes = []
    raw_questions = data.get("questions") or []
    if not isinstance(raw_questions, list):
        return None, f"schema: questions is {type(raw_questions).__name__}, expected a list"
    questions = []
    for item in raw_questions:
        if not isinstance(item, dict) or not str(item.get("question") or "").strip():
            continue
        source = re.findall(r"\d+", str(item.get("source", "")))
        number = int(source[0]) if source else None
        if number is not None and not 1 <= number <= num_sources:
            notes.append(f"source {number} outside 1..{num_sources}")
            number = None
        questions.append(AICQuestion(str(item["question"]).strip(), str(item.get("answer") or "").strip(), number,
                                     normalize_answer_type(item.get("answer_type"))))
    if not questions:
        return None, "schema: no question with a question text"
    dropped = max(0, len(questions) - max_questions)
    veracity = data.get("claim_veracity") or {}
    if not isinstance(veracity, dict):
        veracity = {}
    likert: dict[str, int] = {}
    for key, value in veracity.items():
        verdict = normalize_verdict(key) if key != "veracity_verdict" else None
        score = parse_likert(value)
        if verdict and score is not None:
            likert[verdict] = score
        elif verdict:
            notes.append(f"unreadable Likert score for {verdict}: {value!r}")
    stated_raw = veracity.get("veracity_verdict", data.get("veracity_verdict"))
    stated = normalize_verdict(stated_raw)
    if stated_raw is not None and stated is None:
        notes.append(f"unknown verdict {stated_raw!r}")
    chosen = choose_label(likert, stated)
    if chosen is None:
        return None, "schema: no Likert score and no verdict"
    return AICAnswer(questions[:max_questions], likert, stated, chosen[0], chosen[1], repaired, dropped, notes), None
