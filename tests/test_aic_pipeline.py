"""AIC CTU: chunking and context fields, stores (real layout and proxy), the per-claim index cache, MMR on a
hand-made example, prompt rendering, the answer parser on real-looking outputs, the pipeline with a scripted
engine (retry, failure never filled), and the FEVER-8 output files."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from pipeline_inputs import answer_json

from veracity.data_prep.errors import DataError
from veracity.data_prep.schema import AveritecClaim, QAAnswer, QAPair
from veracity.infer.pipelines.aic.config import AICConfig
from veracity.infer.pipelines.aic.prompt import (
    choose_label,
    parse_aic_answer,
    parse_likert,
    prompt_messages,
    system_prompt,
)
from veracity.infer.pipelines.aic.retrieval import ClaimIndexCache, FewShotSelector, select_sources
from veracity.infer.pipelines.aic.store import (
    KnowledgeStore,
    StoreDocument,
    build_proxy_store,
    chunk_documents,
    pack_sentences,
    split_long,
)
from veracity.models.engine import Candidate, Engine, EngineConfig, GenerationResult

# --- chunking ---------------------------------------------------------------------------------------------------


def test_pack_sentences_keeps_whole_sentences_within_the_limit() -> None:
    sentences = ["aaaa.", "bbbb.", "cccc.", "dd."]  # 5, 5, 5, 3 characters
    # "aaaa. bbbb." is 11 characters: fits 11, not 10
    assert pack_sentences(sentences, 11) == ["aaaa. bbbb.", "cccc. dd."]
    assert pack_sentences(sentences, 10) == ["aaaa.", "bbbb.", "cccc. dd."]
    assert pack_sentences(sentences, 100) == ["aaaa. bbbb. cccc. dd."]
    assert pack_sentences([" ", ""], 10) == []


def test_a_sentence_longer_than_the_limit_is_cut_at_spaces() -> None:
    assert split_long("one two three four", 9) == ["one two", "three", "four"]
    assert split_long("abcdefghij", 4) == ["abcd", "efgh", "ij"]  # one word longer than the limit
    chunks = pack_sentences(["short.", "a much longer sentence than ten", "end."], 10)
    assert chunks == ["short.", "a much", "longer", "sentence", "than ten", "end."]
    assert all(len(c) <= 10 for c in chunks)


def test_chunks_carry_url_and_the_full_neighbours_of_the_same_document() -> None:
    docs = [StoreDocument("u1", ("aaaa.", "bbbb.", "cccc.")), StoreDocument("u2", ("zz.",))]
    chunks = chunk_documents(docs, 5)
    assert [(c.chunk_id, c.url, c.text) for c in chunks] == [(0, "u1", "aaaa."), (1, "u1", "bbbb."),
                                                              (2, "u1", "cccc."), (3, "u2", "zz.")]
    assert (chunks[0].context_before, chunks[0].context_after) == ("", "bbbb.")
    assert (chunks[1].context_before, chunks[1].context_after) == ("aaaa.", "cccc.")
    assert (chunks[2].context_before, chunks[2].context_after) == ("bbbb.", "")
    assert (chunks[3].context_before, chunks[3].context_after) == ("", "")  # never across documents


# --- stores -----------------------------------------------------------------------------------------------------


def test_store_folder_and_single_file_layouts(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / "7.json").write_text(json.dumps({"url": "u", "url2text": ["s1.", "s2."]}) + "\n\n"
                                   + json.dumps({"url": "v", "url2text": []}) + "\n")
    store = KnowledgeStore(folder)
    assert [(d.url, d.sentences) for d in store.documents("7")] == [("u", ("s1.", "s2.")), ("v", ())]
    assert list(store.documents("8")) == []  # no file: no documents
    single = tmp_path / "store.jsonl"
    single.write_text("".join(json.dumps({"claim_id": cid, "url": url, "url2text": [url]}) + "\n"
                              for cid, url in ((0, "a"), (1, "b"), (0, "c"))))
    assert [d.url for d in KnowledgeStore(single).documents("0")] == ["a", "c"]


def test_a_bad_store_line_names_file_line_and_field(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / "1.json").write_text(json.dumps({"url": "u", "url2text": ["ok"]}) + "\n"
                                   + json.dumps({"url": "u", "url2text": [1]}) + "\n")
    with pytest.raises(DataError) as error:
        list(KnowledgeStore(folder).documents("1"))
    assert "1.json:2" in str(error.value) and "url2text" in str(error.value)


def claim(claim_id: str, text: str, label: str, qa: list[tuple[str, str, str, str, str]]) -> AveritecClaim:
    """qa: (question, answer, answer_type, source_url, boolean_explanation)."""
    return AveritecClaim(id=claim_id, claim=text, label=label, source="t", split="dev", origin="t",
                         questions=[QAPair(q, [QAAnswer(a, t, u, b)]) for q, a, t, u, b in qa])


CLAIMS = [
    claim("dev-0", "Sean Connery refused an Apple ad.", "Refuted", [
        ("Who wrote it?", "Scoopertino wrote it. It is satire.", "Extractive", "https://s.com/a", ""),
        ("Is it real?", "No", "Boolean", "https://s.com/a", "It was made up"),
        ("Any date?", "No answer could be found.", "Unanswerable", "", "")]),
    claim("dev-1", "Apple ads starred Sean Connery in 1998.", "Refuted", [
        ("Did he star?", "He never starred in an Apple ad.", "Abstractive", "https://x.org/b", "")]),
    claim("dev-2", "Bananas are berries.", "Supported", [
        ("Are bananas berries?", "Botanically, yes.", "Abstractive", "https://fruit.net/c", "")]),
]


def test_proxy_store_own_answers_under_their_urls_plus_distractors(tmp_path: Path) -> None:
    counts = build_proxy_store(CLAIMS, ["dev-0"], tmp_path / "full", distractors=1, mode="bm25",
                               store_id=lambda i: i.split("-")[1])
    rows = [json.loads(line) for line in (tmp_path / "full" / "0.json").read_text().splitlines()]
    by_url = {r["url"]: r for r in rows}
    # the two answers of s.com/a, sentence-split; the Boolean one with its explanation; the unanswerable one gone
    assert by_url["https://s.com/a"]["url2text"] == ["Scoopertino wrote it.", "It is satire.", "No.",
                                                      "It was made up"]
    assert by_url["https://s.com/a"]["proxy_role"] == "own"
    # BM25 picks the Sean Connery claim as the one distractor, not the bananas
    assert by_url["https://x.org/b"]["proxy_role"] == "distractor" and "https://fruit.net/c" not in by_url
    assert counts == {"claims": 1, "own_documents": 1, "distractor_documents": 1}
    build_proxy_store(CLAIMS, ["dev-0"], tmp_path / "floor", own=False, distractors=2, mode="random",
                      store_id=lambda i: i.split("-")[1])
    floor = [json.loads(line) for line in (tmp_path / "floor" / "0.json").read_text().splitlines()]
    assert {r["proxy_role"] for r in floor} == {"distractor"} and len(floor) == 2


# --- retrieval --------------------------------------------------------------------------------------------------


def unit(degrees: float) -> np.ndarray:
    return np.array([math.cos(math.radians(degrees)), math.sin(math.radians(degrees))], dtype=np.float32)


def test_knn_then_mmr_on_a_hand_made_example() -> None:
    import faiss

    from veracity.infer.pipelines.aic.store import Chunk

    # query at 0°; a: 10°, b: 12° (a near-duplicate of a), c: 40°, d: 80° (least similar, left out by k = 3)
    vectors = np.stack([unit(10), unit(12), unit(40), unit(80)])
    index = faiss.IndexFlatIP(2)
    index.add(vectors)
    chunks = [Chunk(i, f"u{i}", t, "", "") for i, t in enumerate("abcd")]
    picked = select_sources(unit(0), index, chunks, k=3, lambda_=0.75, top=2)
    # first pick: a (0.75·cos10°); then b scores 0.75·cos12° − 0.25·cos2° = 0.4837 and c 0.75·cos40° − 0.25·cos30°
    # = 0.3580: λ = 0.75 still prefers the near-duplicate; λ = 0.25 prefers c (−0.4580 against b's −0.5050)
    assert [s.chunk.text for s in picked] == ["a", "b"]
    assert picked[0].mmr_score == pytest.approx(0.75 * math.cos(math.radians(10)), abs=1e-6)
    assert picked[1].mmr_score == pytest.approx(0.75 * math.cos(math.radians(12)) - 0.25 * math.cos(math.radians(2)),
                                                abs=1e-6)
    assert picked[1].similarity == pytest.approx(math.cos(math.radians(12)), abs=1e-6)
    assert [s.chunk.text for s in select_sources(unit(0), index, chunks, k=3, lambda_=0.25, top=2)] == ["a", "c"]
    # λ = 0 is pure diversity: among the k = 3 nearest, c; with k = 4, d (cos 70° to a) is in reach and wins
    assert [s.chunk.text for s in select_sources(unit(0), index, chunks, k=3, lambda_=0.0, top=2)] == ["a", "c"]
    assert [s.chunk.text for s in select_sources(unit(0), index, chunks, k=4, lambda_=0.0, top=2)] == ["a", "d"]
    assert select_sources(unit(0), None, [], k=3) == []


class CountingEncoder:
    """Deterministic 4-d 'embeddings' by character counts; counts its calls."""

    fingerprint = "counting-v1"

    def __init__(self, max_length: int = 512, doc_prefix: str = "") -> None:
        from veracity.infer.retrieval.dense import EncoderSpec

        self.calls = 0
        self.spec = EncoderSpec(model="counting", doc_prefix=doc_prefix, max_length=max_length)

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        rows = np.array([[t.count(ch) + 0.1 for ch in "abcd"] for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_index_cache_is_faiss_plus_json_and_rebuilds_on_change(tmp_path: Path) -> None:
    from veracity.infer.pipelines.aic.store import chunk_documents

    encoder = CountingEncoder()
    cache = ClaimIndexCache(tmp_path, encoder, 2048)
    make = lambda: chunk_documents([StoreDocument("u", ("aab.", "cd."))], 4)  # noqa: E731
    chunks, index = cache.get("dev/1", "store-v1", make)
    assert index.ntotal == len(chunks) == 2 and encoder.calls == 1
    assert sorted(p.name for p in (tmp_path / "dev_1").iterdir()) == ["chunks.json", "index.faiss"]
    again, index2 = cache.get("dev/1", "store-v1", make)
    assert encoder.calls == 1 and again == chunks and cache.reused == 1
    np.testing.assert_allclose(index2.reconstruct(0), index.reconstruct(0))
    cache.get("dev/1", "store-v2", make)  # the store changed: embed again
    assert encoder.calls == 2
    ClaimIndexCache(tmp_path, type("E", (CountingEncoder,), {"fingerprint": "other"})(), 2048).get("dev/1",
                                                                                                  "store-v2", make)
    assert cache.built == 2


def test_index_cache_key_holds_everything_that_changes_a_vector(tmp_path: Path, tiny_encoder_dir: Path) -> None:
    """Two runs sharing --index_cache at other embed_max_length (or document prefix) never share chunk vectors."""
    from veracity.infer.pipelines.aic.pipeline import AICPipeline
    from veracity.infer.pipelines.aic.store import chunk_documents

    make = lambda: chunk_documents([StoreDocument("u", ("aab.", "cd."))], 4)  # noqa: E731
    long, short, prefixed = CountingEncoder(512), CountingEncoder(128), CountingEncoder(512, doc_prefix="passage: ")
    ClaimIndexCache(tmp_path, long, 2048).get("1", "store-v1", make)
    ClaimIndexCache(tmp_path, long, 2048).get("1", "store-v1", make)
    assert long.calls == 1  # same settings: reused
    ClaimIndexCache(tmp_path, short, 2048).get("1", "store-v1", make)
    assert short.calls == 1  # only the input length differs: embedded again
    ClaimIndexCache(tmp_path, prefixed, 2048).get("1", "store-v1", make)
    assert prefixed.calls == 1
    # the same through the pipeline's settings: two AIC configs that differ only in embed_max_length
    build_proxy_store(CLAIMS, ["dev-0"], tmp_path / "store", distractors=1, store_id=lambda i: i.split("-")[1])
    store = KnowledgeStore(tmp_path / "store")
    keys = []
    for max_length in (128, 64):
        config = AICConfig(embedder=str(tiny_encoder_dir), embed_max_length=max_length, few_shot=0, k=4, sources=2,
                           index_cache=str(tmp_path / "shared_cache"), output_dir=str(tmp_path / f"run{max_length}"))
        pipeline = AICPipeline(config, EngineConfig(), store, [], engine=ScriptedEngine({}))
        keys.append(pipeline.indexes._meta(store.fingerprint("0")))
        pipeline.indexes.get("0", store.fingerprint("0"), lambda: chunk_documents(store.documents("0"), 2048))
        assert (pipeline.indexes.built, pipeline.indexes.reused) == (1, 0)
    assert keys[0] != keys[1] and {k: v for k, v in keys[0].items() if k != "max_length"} == \
        {k: v for k, v in keys[1].items() if k != "max_length"}


def test_few_shot_by_bm25_never_the_claim_itself() -> None:
    selector = FewShotSelector(CLAIMS)
    picked = selector.select("Sean Connery refused an Apple ad.", 2)
    assert [c.id for c in picked] == ["dev-1", "dev-2"] or [c.id for c in picked][0] == "dev-1"
    assert "dev-0" not in [c.id for c in picked]


# --- prompt -----------------------------------------------------------------------------------------------------

SOURCES = [{"url": "https://s.com/a", "text": "Scoopertino wrote it.", "context_before": "Intro.",
            "context_after": "More."},
           {"url": "https://x.org/b", "text": "He never starred.", "context_before": "", "context_after": ""}]


def test_system_prompt_renders_sources_format_and_few_shot() -> None:
    text = system_prompt(SOURCES, [CLAIMS[2]])
    assert text.startswith("You are a professional fact checker, formulate up to 10 questions")
    assert "## Source ID: 1 [https://s.com/a]\n\nIntro.\n\nScoopertino wrote it.\n\nMore." in text
    assert "## Source ID: 2 [https://x.org/b]\n\nHe never starred." in text
    assert text.index("Source ID: 1") < text.index("Source ID: 2") < text.index("## Output formatting") \
        < text.index("## Few-shot learning")
    assert ('### Question examples for claim "Bananas are berries." (verdict Supported)\n'
            '"question": "Are bananas berries?", "answer": "Botanically, yes.", "answer_type": "Abstractive"') in text
    assert '"veracity_verdict": "<The suggested veracity classification for the claim>"' in text
    capped = system_prompt([{**SOURCES[0], "context_before": "word " * 50}], context_chars=12)
    assert "word word …\n\nScoopertino" in capped
    messages = prompt_messages("The claim.", SOURCES, thinking="off")
    assert messages[0]["role"] == "system" and messages[1] == {"role": "user", "content": "The claim. /no_think"}
    assert prompt_messages("The claim.", SOURCES)[1]["content"] == "The claim."
    with pytest.raises(ValueError):
        prompt_messages("c", SOURCES, thinking="maybe")


# --- the answer parser --------------------------------------------------------------------------------------------

VALID = """<think>Source 1 says it is satire.</think>
```json
{"questions": [
  {"question": "Who wrote the letter?", "answer": "Scoopertino, a satire site.", "source": "1", "answer_type": "Extractive"},
  {"question": "Did Connery star in an ad?", "answer": "No.", "source": 2, "answer_type": "boolean"}],
 "claim_veracity": {"Supported": "1", "Refuted": "5 - Strongly agree", "Not Enough Evidence": 2,
                    "Conflicting Evidence/Cherrypicking": "1", "veracity_verdict": "Refuted"}}
```"""  # noqa: E501
# Appendix B of the paper: the "]," after the questions and two commas are missing
BROKEN = """```json
{
"questions": [
{"question": "Did France deport 118 Pakistanis?", "answer": "No source mentions it.", "source": "10", "answer_type": "Boolean"},
{"question": "What role did social media play?", "answer": "Calls for boycotts.", "source": "5", "answer_type": "Extractive"}
"claim_veracity": {
"Supported": "1",
"Refuted": "5",
"Not Enough Evidence": "1",
"Conflicting Evidence/Cherrypicking": "1"
"veracity_verdict": "Refuted"
}
```"""  # noqa: E501


def test_parser_reads_a_valid_answer_with_a_think_block() -> None:
    answer, error = parse_aic_answer(VALID, num_sources=2)
    assert error is None and answer is not None
    assert [(q.source, q.answer_type) for q in answer.questions] == [(1, "Extractive"), (2, "Boolean")]
    assert answer.likert == {"Supported": 1, "Refuted": 5, "Not Enough Evidence": 2,
                             "Conflicting Evidence/Cherrypicking": 1}
    assert (answer.label, answer.label_from, answer.repaired) == ("Refuted", "likert", False)


def test_parser_repairs_the_papers_broken_json() -> None:
    answer, error = parse_aic_answer(BROKEN, num_sources=10)
    assert error is None and answer is not None and answer.repaired
    assert [q.question for q in answer.questions] == ["Did France deport 118 Pakistanis?",
                                                      "What role did social media play?"]
    assert [q.source for q in answer.questions] == [10, 5]
    assert answer.label == "Refuted" and answer.stated_verdict == "Refuted" and len(answer.likert) == 4
    # with 6 sources, source 10 does not exist: kept as a question, no source
    answer, _ = parse_aic_answer(BROKEN, num_sources=6)
    assert answer is not None and answer.questions[0].source is None and "source 10 outside 1..6" in answer.notes


def test_missing_likert_scores_and_ties() -> None:
    no_scores = ('{"questions": [{"question": "Q?", "answer": "A", "source": "1"}], '
                 '"claim_veracity": {"veracity_verdict": "Not enough evidence"}}')
    answer, _ = parse_aic_answer(no_scores, 1)
    assert answer is not None and (answer.label, answer.label_from) == ("Not Enough Evidence", "verdict")
    partial = '{"questions": [{"question": "Q?", "answer": "A"}], "claim_veracity": {"Supported": 4, "Refuted": 2}}'
    answer, _ = parse_aic_answer(partial, 1)
    assert answer is not None and (answer.label, answer.label_from) == ("Supported", "partial_likert")
    nothing = '{"questions": [{"question": "Q?", "answer": "A"}], "claim_veracity": {}}'
    assert parse_aic_answer(nothing, 1) == (None, "schema: no Likert score and no verdict")
    tie = {"Supported": 4, "Refuted": 4, "Not Enough Evidence": 1, "Conflicting Evidence/Cherrypicking": 1}
    assert choose_label(tie, "Refuted") == ("Refuted", "likert_tie_verdict")
    assert choose_label(tie, "Not Enough Evidence") == ("Supported", "likert_tie_order")
    assert choose_label(tie, None) == ("Supported", "likert_tie_order")


def test_parser_failures_are_named_never_guessed() -> None:
    assert parse_aic_answer("The claim is false.", 3) == (None, "no_json_object")
    assert parse_aic_answer('{"questions": [], "claim_veracity": {"Refuted": 5}}', 3)[1] == \
        "schema: no question with a question text"
    assert parse_aic_answer("<think>let me see", 3)[1].startswith("unterminated_think")
    # a truncated answer: questions, but the verdict block never came
    truncated = '```json\n{"questions": [{"question": "Q?", "answer": "A", "source": "1"}, {"question": "R'
    assert parse_aic_answer(truncated, 3) == (None, "schema: no Likert score and no verdict")
    many = json.dumps({"questions": [{"question": f"Q{i}?", "answer": "a"} for i in range(12)],
                       "claim_veracity": {"veracity_verdict": "Supported"}})
    answer, _ = parse_aic_answer(many, 3)
    assert answer is not None and len(answer.questions) == 10 and answer.dropped_questions == 2


@pytest.mark.parametrize(("value", "expected"), [(4, 4), ("4", 4), ("4 - Agree", 4), ("Strongly disagree", 1),
                                                  ("agree", 4), (0, None), ("7", None), (True, None), (4.5, None),
                                                  ("<Likert-scale rating of how much You agree>", None)])
def test_parse_likert(value: object, expected: int | None) -> None:
    assert parse_likert(value) == expected


# --- the pipeline with a scripted engine ---------------------------------------------------------------------------


class ScriptedEngine(Engine):
    """Answers by the claim in the user message: a list of texts per claim, one per call."""

    kind = "scripted"

    def __init__(self, script: dict[str, list[str]]):
        self.script = {k: list(v) for k, v in script.items()}
        self.seeds: list[int | None] = []

    @property
    def model_id(self) -> str:
        return "scripted"

    def generate(self, requests):  # noqa: ANN001, ANN201
        out = []
        for r in requests:
            self.seeds.append(r.params.seed)
            claim_text = r.messages[-1]["content"]
            out.append(GenerationResult([Candidate(self.script[claim_text].pop(0), "stop")]))
        return out


def test_pipeline_retries_then_records_failures_without_filling(tmp_path: Path, tiny_encoder_dir: Path) -> None:
    from veracity.infer.pipelines.aic.outputs import write_outputs
    from veracity.infer.pipelines.aic.pipeline import AICPipeline

    build_proxy_store(CLAIMS, ["dev-0", "dev-1", "dev-2"], tmp_path / "store", distractors=1,
                      store_id=lambda i: i.split("-")[1])
    engine = ScriptedEngine({
        CLAIMS[0].claim: ["not json", answer_json("Refuted")],  # parses on the retry
        CLAIMS[1].claim: ["nope", "still nope"],  # never parses: a failure
        CLAIMS[2].claim: [answer_json("Supported")],
    })
    config = AICConfig(embedder=str(tiny_encoder_dir), few_shot=1, k=4, sources=2, parse_retries=1,
                       output_dir=str(tmp_path / "run"))
    pipeline = AICPipeline(config, EngineConfig(), KnowledgeStore(tmp_path / "store"), CLAIMS, engine=engine)
    items = [{"id": c.id.split("-")[1], "claim": c.claim, "gold": c.label} for c in CLAIMS]
    records = pipeline(items)
    assert [r["status"] for r in records] == ["answered", "failed", "answered"]
    assert [r["label"] for r in records] == ["Refuted", None, "Supported"]
    assert [len(r["attempts"]) for r in records] == [2, 2, 1]
    assert [a["seed"] for a in records[0]["attempts"]] == [13, 14]
    assert records[0]["attempts"][1]["temperature"] == 0.7
    assert records[1]["failure"] == "no_json_object" and records[1]["answer"] is None
    assert all(len(r["sources"]) <= 2 and set(r["seconds"]) == {"index", "retrieval", "few_shot", "generation"}
               for r in records)
    assert records[0]["answer"]["questions"][0]["url"] == records[0]["sources"][0]["url"]
    assert "dev-0" not in records[0]["few_shot_ids"]
    # the FEVER-8 files: the failed claim has no row (the scorer counts it wrong), the CSV is the leaderboard's
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    counts = write_outputs(out, [{"id": r["id"], "status": "ok", "result": r} for r in records])
    assert counts == {"answered": 2, "failed": 1}
    raw = (out / "submission.csv").read_bytes()
    assert raw.startswith(b"id,claim,evi,label,split\r\n0,Sean Connery refused an Apple ad.,"
                          b"\"Who wrote it?\t\t\nScoopertino.\t\t\n\n\",Refuted,pred\r\n")
    rows = list(csv.DictReader(io.StringIO(raw.decode(), newline="")))
    assert [r["id"] for r in rows] == ["0", "2"]
    predictions = json.loads((out / "predictions.json").read_text())
    assert predictions[0]["evidence"][0]["question"] == "Who wrote it?" and predictions[0]["pred_label"] == "Refuted"
    assert [json.loads(line)["id"] for line in (out / "failures.jsonl").read_text().splitlines()] == ["1"]


# --- the command line ----------------------------------------------------------------------------------------------


def test_infer_aic_command_end_to_end_on_tiny_models(data_root: Path, tmp_path: Path, tiny_encoder_dir: Path,
                                                     tiny_lm_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli
    from veracity.data_prep.prepare import PrepConfig, prepare
    from veracity.models.nltk_data import ensure_nltk_data

    ensure_nltk_data(tmp_path / "cache" / "nltk_data")
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    prepared = tmp_path / "prep"
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(prepared), datasets=["averitec"]))
    out = tmp_path / "run"
    args = ["infer", "aic", "--config", "configs/pipelines/aic_embedded.yaml", "--prepared_dir", str(prepared),
            "--embedder", str(tiny_encoder_dir), "--model", str(tiny_lm_dir), "--answer_prefix", "",
            "--max_new_tokens", "8", "--cache", "", "--output_dir", str(out), "--progress", "false"]
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert cli.main(args) == 0
    # the tiny model (1024 positions, one token per byte) cannot hold the prompt: both claims are recorded
    # failures, not retried (the prompt would not fit on a retry either) and never filled in
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert sorted(f["id"] for f in failures) == ["0", "2"] and all(len(f["attempts"]) == 1 for f in failures)
    assert all(f["failure"].startswith("generation: context_overflow") for f in failures)
    assert (out / "submission.csv").read_text() == "id,claim,evi,label,split\n"
    assert json.loads((out / "predictions.json").read_text()) == []
    assert sorted(p.name for p in (out / "store").iterdir()) == ["0.json", "2.json"]
    assert (out / "index_cache" / "0" / "index.faiss").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"] == 2 and set(summary["seconds_per_claim"]) == {"index", "retrieval", "few_shot",
                                                                             "generation", "total"}
    assert summary["store"]["claims_without_gold_evidence"] == 1  # dev-2 has no QA: not in gold.json
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    assert metrics["n"] == 1 and metrics["n_missing_predictions"] == 1 and metrics["old_averitec_score"] == 0.0
    assert metrics["n_errors"] == 1 and metrics["label_accuracy"] == 0.0  # the failed claim: counted, and wrong
    # a store that does not exist: one line naming it, exit code 2
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*args, "--knowledge_store", str(tmp_path / "nowhere"), "--output_dir", str(tmp_path / "r2")])
    assert exit_info.value.code == 2 and "nowhere" in capsys.readouterr().err
    # the same output under other generation settings: refused before anything is written, records kept
    records = (out / "records.jsonl").read_text()
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*args[:-4], "--max_new_tokens", "9", *args[-4:]])
    assert exit_info.value.code == 2 and "max_new_tokens: 8 → 9" in capsys.readouterr().err
    assert (out / "records.jsonl").read_text() == records


# --- the output step: every character of web text, and only this run's records ------------------------------------


class AnswerAll(ScriptedEngine):
    """Answers every claim with the same parsable verdict."""

    def __init__(self, label: str = "Refuted"):
        super().__init__({})
        self.label = label

    def generate(self, requests):  # noqa: ANN001, ANN201
        return [GenerationResult([Candidate(answer_json(self.label), "stop")]) for _ in requests]


@pytest.fixture(scope="module")
def prepared_averitec(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from veracity.data_prep.prepare import PrepConfig, prepare

    prepared = tmp_path_factory.mktemp("prep_aic")
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(prepared), datasets=["averitec"]))
    return prepared


def _aic_cli(prepared: Path, encoder: Path, out: Path, *extra: str) -> list[str]:
    return ["infer", "aic", "--config", "configs/pipelines/aic_embedded.yaml", "--prepared_dir", str(prepared),
            "--embedder", str(encoder), "--answer_prefix", "", "--cache", "", "--evaluate", "false",
            "--output_dir", str(out), "--progress", "false", *extra]


@pytest.fixture()
def scripted_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[AnswerAll]:
    """``veracity infer aic`` with the generator replaced by :class:`AnswerAll` (everything else real)."""
    import veracity.models.engine_factory as engine_module

    made: list[AnswerAll] = []

    def make(config: EngineConfig) -> AnswerAll:
        made.append(AnswerAll())
        return made[-1]

    monkeypatch.setattr(engine_module, "make_engine", make)
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    return made


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_infer_aic_writes_its_outputs_when_a_source_holds_a_unicode_line_separator(
        prepared_averitec: Path, tiny_encoder_dir: Path, tmp_path: Path, scripted_cli: list[AnswerAll],
        separator: str) -> None:
    from veracity import cli

    store = tmp_path / "store"
    store.mkdir()
    for claim_id in ("0", "2"):  # the prepared dev claims (dev-1 has an empty claim text)
        (store / f"{claim_id}.json").write_text(json.dumps(
            {"url": "https://web.example/a", "url2text": [f"A web page{separator}with a raw separator.", "Second."]},
            ensure_ascii=False) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    assert cli.main(_aic_cli(prepared_averitec, tiny_encoder_dir, out, "--knowledge_store", str(store))) == 0
    assert separator in (out / "records.jsonl").read_text(encoding="utf-8")  # kept raw by the batch writer
    predictions = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
    assert [p["claim_id"] for p in predictions] == ["0", "2"]
    assert all(separator in p["evidence"][0]["scraped_text"] for p in predictions)
    rows = list(csv.DictReader(io.StringIO((out / "submission.csv").read_text(encoding="utf-8"), newline="")))
    assert [(r["id"], r["label"]) for r in rows] == [("0", "Refuted"), ("2", "Refuted")]


def _stale_record(claim_id: str, label: str) -> dict:
    """An answered AIC batch record as an older run would have left it."""
    source = {"url": "https://stale.example", "text": "Stale text.", "context_before": "", "context_after": ""}
    return {"id": claim_id, "status": "ok", "seconds": 0.1, "result": {
        "id": claim_id, "claim": "stale claim", "status": "answered", "label": label, "failure": None,
        "sources": [source], "n_chunks": 1, "own_sources": 0, "attempts": [],
        "seconds": {"index": 0.0, "retrieval": 0.0, "few_shot": 0.0, "generation": 0.0},
        "answer": {"questions": [{"question": "Stale?", "answer": "Yes.", "source": 1, "url": source["url"],
                                  "answer_type": "Boolean"}]}}}


def test_infer_aic_refuses_the_records_of_another_layout_and_reads_only_its_own(
        prepared_averitec: Path, tiny_encoder_dir: Path, tmp_path: Path, scripted_cli: list[AnswerAll],
        capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli

    out = tmp_path / "run"
    out.mkdir()
    # an older sharded run left its files: an unsharded run into the folder is refused (one folder, one run)
    stale = [_stale_record("0", "Supported"), _stale_record("9", "Supported")]
    (out / "records.shard-0-of-2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stale))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(_aic_cli(prepared_averitec, tiny_encoder_dir, out))
    assert exit_info.value.code == 2
    assert "records.shard-0-of-2.jsonl is there of another shard layout" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["records.shard-0-of-2.jsonl"]
    # and so is a sharded run into a folder holding an unsharded records.jsonl
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "records.jsonl").write_text(json.dumps(_stale_record("0", "Supported")) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(_aic_cli(prepared_averitec, tiny_encoder_dir, sharded, "--shard", "0/2"))
    assert exit_info.value.code == 2 and "records.jsonl is there" in capsys.readouterr().err
    (sharded / "records.jsonl").unlink()
    for shard in ("0/2", "1/2"):  # claims "0" and "2" both hash to shard 0
        assert cli.main(_aic_cli(prepared_averitec, tiny_encoder_dir, sharded, "--shard", shard)) == 0
    predictions = json.loads((sharded / "predictions.json").read_text())
    assert [(p["claim_id"], p["pred_label"]) for p in predictions] == [("0", "Refuted"), ("2", "Refuted")]
    # the resume check covers every file the outputs read: shard 1 under other settings, while shard 0's records
    # were made under these, is refused before anything is written
    shard0 = (sharded / "records.shard-0-of-2.jsonl").read_text()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(_aic_cli(prepared_averitec, tiny_encoder_dir, sharded, "--shard", "1/2", "--max_new_tokens", "9"))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "records.shard-0-of-2.jsonl" in err and "max_new_tokens: 256 → 9" in err
    assert (sharded / "records.shard-0-of-2.jsonl").read_text() == shard0
