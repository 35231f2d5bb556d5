"""Small inputs of the four pipelines, shared by the driver and API tests: rows, files, a scripted AIC engine and a
tiny cross-encoder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from veracity.models.engine import Candidate, Engine, GenerationRequest, GenerationResult

CLAIMS = [
    {"id": "c1", "claim": "The bridge is 120 metres long.", "evidence": ["The bridge is 120 metres long."],
     "label": "SUPPORTS"},
    {"id": "c2", "claim": "Cats purr.", "evidence": "Cats purr when content.", "label": "supports"},
    {"id": "c3", "claim": "The river flows north.", "evidence": [{"text": "The river flows south.", "title": "River"}],
     "label": "REFUTES"},
    {"id": "c4", "claim": "The tower opened in 1990.", "evidence": ["It opened in 1991.", "It is 30 m tall."]},
    {"id": "c5", "claim": "Owls hunt at night.", "evidence": ["Most owls hunt at night."], "label": "SUPPORTS"},
]

ITEMS = [
    {"id": f"i{k}", "claim": f"The council closed bridge {k}.", "claimant": "A blog" if k % 2 else "",
     "verdict": "Refuted", "evidence": [
         {"url": f"https://news.example.org/{k}", "text": f"No. The first anchor about bridge {k} says one thing. "
                                                         "We use cookies on this site. The second anchor says more."},
         {"url": "https://b.example.org/b", "text": "The other source says the bridge is open."}]}
    for k in range(1, 5)
]

POSTS = [("1", "Do masks work? #masks https://t.co/x masks reduce influenza transmission", "p0"),
         ("2", "@doc Vitamin D deficiency in ICU patients 😷", "p1"),
         ("3", "long covid: one in eight adults have lasting symptoms #LongCovid", "p2"),
         ("4", "the reefs are bleaching again after the heatwave", "p3")]
PAPERS = [("Face masks and transmission", "Surgical masks reduce influenza transmission in households."),
          ("Vitamin D in ICU patients", "Vitamin D deficiency is common among intensive care patients."),
          ("Long COVID in adults", "One in eight adults reports lasting symptoms after infection."),
          ("Coral bleaching", "Marine heatwaves bleach coral reefs.")]


def write_jsonl(path: Path, rows: Sequence[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_posts_and_collection(folder: Path) -> tuple[Path, Path]:
    """``posts.tsv`` (with gold ids) and ``c.jsonl`` of :data:`POSTS` and :data:`PAPERS`."""
    posts = folder / "posts.tsv"
    posts.write_text("post_id\ttweet_text\tcord_uid\n" + "".join(f"{p}\t{t}\t{g}\n" for p, t, g in POSTS),
                     encoding="utf-8")
    collection = write_jsonl(folder / "c.jsonl", [{"cord_uid": f"p{i}", "title": t, "abstract": a}
                                                  for i, (t, a) in enumerate(PAPERS)])
    return posts, collection


def answer_json(label: str) -> str:
    """A parsable AIC answer: one question on source 1 and the verdict ``label``."""
    return json.dumps({"questions": [{"question": "Who wrote it?", "answer": "Scoopertino.", "source": "1",
                                      "answer_type": "Extractive"}],
                       "claim_veracity": {v: (5 if v == label else 1) for v in
                                          ("Supported", "Refuted", "Not Enough Evidence",
                                           "Conflicting Evidence/Cherrypicking")} | {"veracity_verdict": label}})


class AnswerAll(Engine):
    """Answers every AIC claim with the same parsable verdict."""

    kind = "scripted"

    def __init__(self, label: str = "Refuted"):
        self.label = label

    @property
    def model_id(self) -> str:
        return "scripted"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return [GenerationResult([Candidate(answer_json(self.label), "stop")]) for _ in requests]


def build_tiny_cross_encoder(folder: Path, tokenizer_dir: Path) -> Path:
    """A tiny random BERT with one output (a cross-encoder), saved like any reranker folder."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    tokenizer = BertTokenizerFast.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
