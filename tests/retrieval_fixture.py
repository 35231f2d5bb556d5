"""A small hand-made corpus with queries and gold ids (prepared-record format)."""

from __future__ import annotations

import json
from pathlib import Path

DOCS = [
    ("d01", "Polar bear", "Polar bears depend on sea ice, which melts earlier as the climate warms."),
    ("d02", "Polar bear", "The polar bear is a large bear native to the Arctic."),
    ("d03", "Global warming", "Global warming is the long-term rise of Earth's average surface temperature."),
    ("d04", "Sea level rise", "Sea levels rose about 20 centimetres since 1900 because oceans warm and ice melts."),
    ("d05", "Coral reef", "Coral reefs bleach when ocean temperatures stay high for weeks."),
    ("d06", "Carbon dioxide", "Carbon dioxide concentrations passed 415 parts per million in 2019."),
    ("d07", "Paris", "Paris is the capital and most populous city of France."),
    ("d08", "Berlin", "Berlin is the capital of Germany and its largest city."),
    ("d09", "Telemundo", "Telemundo is an American Spanish-language television network."),
    ("d10", "Soul Food", "Soul Food is a 1997 American comedy-drama film released by Fox 2000 Pictures."),
    ("d11", "Bees", "Rising temperatures push bees to their physiological limits."),
    ("d12", "Glacier", "Most mountain glaciers have been retreating since the mid-19th century."),
]
QUERIES = [
    ("q1", "Polar bears are losing their sea ice habitat", ["d01"], "dev"),
    ("q2", "What is the capital of France?", ["d07"], "dev"),
    ("q3", "Telemundo broadcasts in Spanish", ["d09"], "dev"),
    ("q4", "Oceans are rising because ice melts", ["d04", "d12"], "dev"),
    ("q5", "Fox released the film Soul Food", ["d10"], "train"),
    ("q6", "Carbon dioxide levels in the atmosphere", ["d06"], "train"),
    ("q7", "coral bleaching and warm oceans", ["d05"], "train"),
]


def write_benchmark(folder: Path, name: str = "toy") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}_corpus.jsonl", "w") as f:
        for doc_id, title, text in DOCS:
            f.write(json.dumps({"doc_id": doc_id, "title": title, "url": "", "text": text, "source": name,
                                "origin": "hand-made"}) + "\n")
    with open(folder / f"{name}_queries.jsonl", "w") as f:
        for qid, text, gold, split in QUERIES:
            f.write(json.dumps({"query_id": qid, "text": text, "gold_ids": gold, "split": split, "source": name,
                                "origin": "hand-made"}) + "\n")
    from veracity.io import sha256_file

    # a manifest like `veracity prep` writes: jobs read prepared records only through it
    outputs = {f"{name}_{part}": {"file": f"{name}_{part}.jsonl", "kind": kind,
                                  "sha256": sha256_file(folder / f"{name}_{part}.jsonl")}
               for part, kind in (("corpus", "corpus_document"), ("queries", "retrieval_query"))}
    manifest = folder / "manifest.json"
    previous = json.loads(manifest.read_text())["outputs"] if manifest.exists() else {}
    manifest.write_text(json.dumps({"outputs": {**previous, **outputs}}))
    return folder
