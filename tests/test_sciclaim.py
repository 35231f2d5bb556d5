"""SciClaimSeekers: social analyzer, RRF and rerank ordering, the 0–10 parser, CheckThat I/O, the MRR@5 scorer,
bad collection rows through the CLI, and the pipeline + ablation end to end on tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pipeline_inputs import build_tiny_cross_encoder
from repo_scripts import load_script

from veracity import cli
from veracity.data_prep.checkthat_files import (
    read_collection,
    read_posts,
    read_submission,
    write_submission,
)
from veracity.data_prep.errors import DataError
from veracity.infer.eval.sciclaim import checkthat_scores
from veracity.infer.pipelines.sciclaimseekers.prompt import SYSTEM_PROMPT, USER_TEMPLATE, parse_score, rerank_messages
from veracity.infer.pipelines.sciclaimseekers.ranking import interpolate_scores, order_by_llm_scores, order_by_scores
from veracity.infer.retrieval.analyzers import Analyzer
from veracity.infer.retrieval.fusion import reciprocal_rank_fusion

SHARED_DEV = Path(__file__).resolve().parents[2] / "shared/data/checkthat_2025_task4b/subtask4b_query_tweets_dev.tsv"


# --- analyzer -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("post", "tokens"), [
    ("@WHO_Europe: #LongCovid hits 1 in 8 adults 😷👉 https://t.co/Ab12xYz &amp; more at www.example.org/s?id=3",
     ["long", "covid", "hits", "adults", "more"]),
    ("New study!!! masks cut transmission by 53% (Lancet) 🧪🔬 via @NatureNews #WearAMask http://bit.ly/3xYz",
     ["new", "study", "masks", "cut", "transmission", "53", "lancet", "via", "wear", "mask"]),
    ("ICU patients w/ low vitamin D… #VitaminD #COVID_19 write to me@uni.edu",
     ["icu", "patients", "low", "vitamin", "vitamin", "covid", "19", "write", "me", "uni", "edu"]),
])
def test_social_analyzer_on_real_looking_posts(post: str, tokens: list[str]) -> None:
    # @mentions and URLs go, #hashtags become words (CamelCase and _ split), emoji and punctuation go,
    # stopwords and one-letter tokens go; an e-mail address is not a mention.
    assert Analyzer("social")(post) == tokens


# --- fusion and ordering ------------------------------------------------------------------------------------

def test_rrf_ties_are_broken_by_doc_id() -> None:
    fused = reciprocal_rank_fusion([[("b", 9.0), ("a", 8.0)], [("a", 0.9), ("b", 0.8)]], k=60)
    assert [d for d, _ in fused] == ["a", "b"] and fused[0][1] == pytest.approx(1 / 61 + 1 / 62)


def test_fused_back_reranker_order_is_rrf_over_reranker_bm25_and_dense() -> None:
    from veracity.infer.pipelines.sciclaimseekers.config import SciClaimConfig
    from veracity.infer.pipelines.sciclaimseekers.pipeline import FirstStage
    from veracity.infer.pipelines.sciclaimseekers.ranking import fuse_back

    sparse, dense = [("a", 9.0), ("b", 8.0), ("c", 7.0)], [("b", 0.9), ("a", 0.8), ("d", 0.7)]
    reranked = [("c", 5.0), ("b", 4.0), ("a", 1.0)]  # the reranker lifts c, which only BM25 found (3rd)
    fused = fuse_back(reranked, FirstStage(sparse, dense, []), SciClaimConfig(rrf_k=1, fusion_depth=4, top_k=2))
    # k = 1 (reranker + BM25 + dense): b 1/3 + 1/3 + 1/2, a 1/4 + 1/2 + 1/3, c 1/2 + 1/4, d 1/4
    assert [d for d, _ in fused] == ["b", "a", "c", "d"]
    assert [s for _, s in fused] == pytest.approx([1 / 3 + 1 / 3 + 1 / 2, 1 / 4 + 1 / 2 + 1 / 3, 3 / 4, 1 / 4])


def test_interpolation_sums_min_max_scores_and_a_missing_list_adds_nothing() -> None:
    candidates = ["a", "b", "c"]
    reranker = {"a": 2.0, "b": 4.0}  # c's answer did not parse
    sparse = [("c", 10.0), ("a", 5.0), ("x", 0.0)]  # normalized: c 1, a 0.5, x 0
    dense = [("a", 0.9), ("b", 0.5)]  # normalized: a 1, b 0
    # a: 0 + 1·1 + 2·0.5 = 2; b: 1 + 0 + 0 = 1; c: 0 + 0 + 2·1 = 2 (ties with a: a comes first in RRF order)
    assert interpolate_scores(candidates, reranker, sparse, dense, 1.0, 2.0) == [("a", 2.0), ("c", 2.0), ("b", 1.0)]
    # no weights: the reranker's order; the unscored candidate last; x (not a candidate) never appears
    assert [d for d, _ in interpolate_scores(candidates, reranker, sparse, dense, 0.0, 0.0)] == ["b", "a", "c"]
    with pytest.raises(ValueError, match=">= 0"):
        interpolate_scores(candidates, reranker, sparse, dense, -1.0, 0.0)


def test_interpolation_and_rrf_fuse_back_are_exclusive(tmp_path: Path, capsys) -> None:
    args = ["infer", "sciclaim", "--posts", str(tmp_path / "p.tsv"), "--collection", str(tmp_path / "c.jsonl"),
            "--rerank_fusion", "true", "--rerank_dense_weight", "1", "--output_dir", str(tmp_path / "run")]
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 2 and "choose one" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_llm_scores_sort_ties_by_rrf_and_unparsable_answers_keep_their_slot() -> None:
    fused = [("d1", 0.05), ("d2", 0.04), ("d3", 0.03), ("d4", 0.02), ("d5", 0.01)]
    # d2 and d4 tie on 7: d2 has the higher RRF score; d3 did not parse and stays third.
    order = order_by_llm_scores(fused, [3, 7, None, 7, 9])
    assert [d for d, _ in order] == ["d5", "d2", "d3", "d4", "d1"]
    assert [s for _, s in order] == [9.0, 7.0, -0.03, 7.0, 3.0]
    assert order_by_llm_scores(fused, [None] * 5) == [(d, -s) for d, s in fused]  # nothing parsed: RRF order
    assert [d for d, _ in order_by_scores(fused, [0.1, 0.5, 0.5, -1.0, 0.2])] == ["d2", "d3", "d5", "d1", "d4"]


# --- prompt and parser --------------------------------------------------------------------------------------

def test_prompt_is_table_1() -> None:
    messages = rerank_messages("Masks work", "Face masks", "We show that masks reduce spread.")
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert messages[1]["content"] == ("Social media post: Masks work Candidate paper: Title: Face masks Abstract: We "
                                      "show that masks reduce spread. Score (0-10):")
    assert SYSTEM_PROMPT.startswith("You are an expert scientific source identifier.")
    assert "{abstract}" in USER_TEMPLATE
    short = rerank_messages("p", "t", "one two three four", abstract_max_words=2)[1]["content"]
    assert "Abstract: one two … Score" in short


@pytest.mark.parametrize(("answer", "score"), [
    ("7", 7), ("  8.", 8), ("**9**", 9), ("10", 10), ("0", 0), ("Score: 6/10", 6), ("Score (0-10): 4", 4),
    ("I would rate this 7 out of 10.", 7), ("Relevance: 10/10!", 10), ("<think>maybe 2</think>\n5", 5),
    ("seven", 7), ("7.5", 8), ("The 2020 paper fits. 3", 3),
])
def test_parse_score_reads_messy_answers(answer: str, score: int) -> None:
    assert parse_score(answer) == (score, None)


@pytest.mark.parametrize(("answer", "reason"), [
    ("", "empty_answer"), ("no idea", "no_number"), ("Score (0-10):", "no_number"), ("12", "out_of_range: 12"),
    ("-1", "out_of_range: -1"), ("Score: 15", "out_of_range: 15"), ("<think>hmm", "unterminated_think"),
])
def test_parse_score_names_what_it_cannot_read(answer: str, reason: str) -> None:
    assert parse_score(answer) == (None, reason)


# --- task I/O -----------------------------------------------------------------------------------------------

def test_submission_round_trip(tmp_path: Path) -> None:
    rankings = {"16": ["3qvh482o", "r58aohnu", "a", "b", "c", "extra"], "cf-7": ["Earth's climate:3", "Paris, TX:1"]}
    write_submission(tmp_path / "s.tsv", rankings)
    lines = (tmp_path / "s.tsv").read_text().splitlines()
    assert lines[0] == "post_id\tpreds" and lines[1] == "16\t['3qvh482o', 'r58aohnu', 'a', 'b', 'c']"
    assert read_submission(tmp_path / "s.tsv") == {"16": rankings["16"][:5], "cf-7": rankings["cf-7"]}
    (tmp_path / "plain.tsv").write_text("1\t[ab12cd34, ef56gh78]\n")  # unquoted, no header
    assert read_submission(tmp_path / "plain.tsv") == {"1": ["ab12cd34", "ef56gh78"]}
    (tmp_path / "bad.tsv").write_text("post_id\tpreds\n1\tab12cd34\n")
    with pytest.raises(DataError, match=r"bad.tsv:2: field 'preds'"):
        read_submission(tmp_path / "bad.tsv")


def test_posts_load_in_both_checkthat_layouts(tmp_path: Path) -> None:
    (tmp_path / "two.tsv").write_text('tweet_text\tcord_uid\nfirst tweet\tabc\n"a ""quoted"" one"\tdef\n')
    posts = read_posts(tmp_path / "two.tsv")
    assert [(p.post_id, p.text, p.gold) for p in posts] == [("0", "first tweet", ["abc"]),
                                                            ("1", 'a "quoted" one', ["def"])]
    if SHARED_DEV.is_file():  # the shared CheckThat! 2025 4b file, as it is
        dev = read_posts(SHARED_DEV)
        assert len(dev) == 1399 and (dev[0].post_id, dev[0].gold) == ("16", ["3qvh482o"])
        assert dev[1].text.startswith('"Among 139 clients exposed')


def test_collection_formats_and_bad_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"cord_uid": "u1", "title": "Masks", "abstract": "Masks reduce spread.", "journal": "PLoS One"},
            {"cord_uid": "u2", "title": "Vitamin D", "abstract": None, "journal": None}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    papers = read_collection(tmp_path / "c.parquet")
    assert [(p.key, p.title, p.abstract, p.metadata) for p in papers] == [
        ("u1", "Masks", "Masks reduce spread.", {"journal": "PLoS One"}), ("u2", "Vitamin D", "", {"journal": None})]
    (tmp_path / "c.csv").write_text("pubkey,title,abstract\n7,T,A\n")
    assert read_collection(tmp_path / "c.csv")[0].key == "7"
    (tmp_path / "c.pkl").write_bytes(b"not read")
    with pytest.raises(DataError, match="pickles are not read"):
        read_collection(tmp_path / "c.pkl")


def _write_collection(path: Path, bad: str | None = None) -> Path:
    rows = [json.dumps({"cord_uid": f"p{i}", "title": t, "abstract": a}) for i, (t, a) in enumerate([
        ("Face masks and transmission", "Surgical masks reduce influenza transmission in households."),
        ("Vitamin D in ICU patients", "Vitamin D deficiency is common among intensive care patients."),
        ("Long COVID in adults", "One in eight adults reports lasting symptoms after infection."),
        ("Sea ice and polar bears", "Polar bears lose hunting habitat as Arctic sea ice declines."),
    ])]
    if bad is not None:
        rows.insert(2, bad)
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(("bad", "where"), [
    ('{"title": "no key", "abstract": "x"}', r"c.jsonl:3: field 'cord_uid/pubkey/doc_id/key/id': missing"),
    ('{"cord_uid": "z", "title": 5, "abstract": "x"}', r"c.jsonl:3: field 'title': expected a string"),
    ('{"cord_uid": "z", "title": "", "abstract": ""}', r"c.jsonl:3: field 'title': paper has neither"),
    ('{"cord_uid": "p0", "title": "again", "abstract": "x"}', r"c.jsonl:3: field 'cord_uid': paper key 'p0' repeats"),
    ('{"cord_uid": "z", "title": "broken', r"c.jsonl:3: malformed JSON"),
])
def test_a_bad_collection_row_is_named_through_the_cli(tmp_path: Path, capsys, bad: str, where: str) -> None:
    posts = tmp_path / "posts.tsv"
    posts.write_text("post_id\ttweet_text\tcord_uid\n1\tmasks work\tp0\n")
    collection = _write_collection(tmp_path / "c.jsonl", bad)
    with pytest.raises(SystemExit) as info:
        cli.main(["infer", "sciclaim", "--posts", str(posts), "--collection", str(collection),
                  "--output_dir", str(tmp_path / "run")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and __import__("re").search(where, err), err
    assert not (tmp_path / "run" / "run_config.yaml").exists()  # nothing written before the inputs are checked


# --- scorer -------------------------------------------------------------------------------------------------

def test_mrr_at_5_on_a_hand_made_case(tmp_path: Path) -> None:
    gold = {"a": ["g1"], "b": ["g2"], "c": ["g3"], "d": ["g4"], "e": ["x", "y"]}
    rankings = {"a": ["g1", "n", "n", "n", "n"],      # rank 1 → 1
                "b": ["n", "n", "g2", "n", "n"],      # rank 3 → 1/3
                "c": ["n", "n", "n", "n", "n", "g3"],  # rank 6: outside the first 5 → 0
                "e": ["n", "y", "x"]}                  # two gold ids: the first found counts, 1/2; "d" missing → 0
    scores = checkthat_scores(rankings, gold)
    assert scores == {"mrr@5": pytest.approx((1 + 1 / 3 + 0 + 0 + 1 / 2) / 5), "hit@1": 0.2, "hit@5": 0.6, "n": 5}
    assert checkthat_scores(rankings, gold, only_submitted=True)["n"] == 4
    write_submission(tmp_path / "s.tsv", rankings)
    (tmp_path / "gold.tsv").write_text("post_id\ttweet_text\tcord_uid\n" + "".join(
        f"{p}\ttext {p}\t{ids!r}\n" for p, ids in gold.items()))
    metrics = cli.main(["eval", "sciclaim", "--submission", str(tmp_path / "s.tsv"),
                        "--gold", str(tmp_path / "gold.tsv"), "--output_dir", str(tmp_path / "o")])
    assert metrics == 0
    written = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert set(written) == {"mrr@5", "hit@1", "hit@5", "n"} and written["mrr@5"] == pytest.approx(scores["mrr@5"])


# --- end to end on tiny models ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_ce"), tiny_encoder_dir)


def _task(tmp_path: Path) -> list[str]:
    (tmp_path / "posts.tsv").write_text(
        "post_id\ttweet_text\tcord_uid\n"
        "1\tDo masks work? #masks https://t.co/x masks reduce influenza transmission\tp0\n"
        "2\t@doc Vitamin D deficiency in ICU patients 😷\tp1\n"
        "3\tlong covid: one in eight adults have lasting symptoms #LongCovid\tp2\n")
    _write_collection(tmp_path / "c.jsonl")
    return ["--posts", str(tmp_path / "posts.tsv"), "--collection", str(tmp_path / "c.jsonl"), "--max_length", "64",
            "--progress", "false", "--max_new_tokens", "4"]


def test_ablation_end_to_end_on_tiny_models(tmp_path: Path, tiny_encoder_dir: Path, tiny_lm_dir: Path,
                                            tiny_cross_encoder: Path) -> None:
    from veracity.infer.pipelines.sciclaimseekers.run import main

    out = tmp_path / "run"
    weights = ["--rerank_dense_weight", "1.5", "--rerank_bm25_weight", "0.5"]
    result = main([*_task(tmp_path), "--embedder", str(tiny_encoder_dir), "--model", str(tiny_lm_dir),
                   "--cross_encoder", str(tiny_cross_encoder), "--ablation", "true", "--ablation_llm_posts", "2",
                   *weights, "--output_dir", str(out)])["metrics"]
    written = json.loads((out / "metrics.json").read_text())
    interpolated = "RRF k=60 + cross-encoder@50, interpolated (dense 1.5, BM25 0.5)"
    names = ["BM25", "dense", "RRF k=60", "α-fusion α=0.5", "RRF k=60 + cross-encoder@50",
             "RRF k=60 + cross-encoder@50, fused back", interpolated, "α-fusion α=0.5 + cross-encoder@50",
             "RRF k=60 + LLM rerank@50 (first 2 posts)"]
    assert list(result["rows"])[:9] == names and set(names) <= set(written["rows"])
    assert written["n"]["BM25"] == 3 and written["n"][names[-1]] == 2
    assert all(set(row) == {"mrr@5", "hit@1", "hit@5"} for row in written["rows"].values())
    assert "RRF k=60 (first 2 posts)" in written["rows"]  # the LLM row's neighbours on the same posts
    assert written["llm_rerank"]["pairs"] == 8
    assert written["cross_encoder"]["pairs"] == 24  # 4 papers per post, 2 heads
    submissions = sorted(p.name for p in (out / "submissions").iterdir())
    assert len(submissions) == 9 and "bm25.tsv" in submissions
    # the pipeline with the same weights submits the ablation's interpolated row
    single = main([*_task(tmp_path), "--embedder", str(tiny_encoder_dir), "--cross_encoder", str(tiny_cross_encoder),
                   "--reranker", "cross_encoder", *weights, "--output_dir", str(tmp_path / "single")])
    assert read_submission(tmp_path / "single" / "submission.tsv") == read_submission(
        out / "submissions" / "rrf_k_60_cross_encoder_50_interpolated_dense_1_5_bm25_0_5.tsv")
    assert single["metrics"]["mrr@5"] == pytest.approx(result["rows"][interpolated]["mrr@5"], abs=1e-4)
    record = json.loads((tmp_path / "single" / "records.jsonl").read_text().splitlines()[0])["result"]
    assert set(record["cross_encoder_scores"]) == {d for d, _ in record["rrf"]} and record["llm_answers"] is None
    bm25 = read_submission(out / "submissions" / "bm25.tsv")
    assert checkthat_scores(bm25, {"1": ["p0"], "2": ["p1"], "3": ["p2"]})["mrr@5"] == pytest.approx(
        result["rows"]["BM25"]["mrr@5"], abs=1e-4)
    assert bm25["1"][0] == "p0" and bm25["2"][0] == "p1"  # BM25 finds the lexical matches


def test_llm_rerank_records_explain_the_order(tmp_path: Path, tiny_encoder_dir: Path, tiny_lm_dir: Path) -> None:
    from veracity.infer.pipelines.sciclaimseekers.run import main

    out = tmp_path / "run"
    summary = main([*_task(tmp_path), "--embedder", str(tiny_encoder_dir), "--model", str(tiny_lm_dir),
                    "--reranker", "llm", "--output_dir", str(out), "--top_k", "3"])
    records = [json.loads(line)["result"] for line in (out / "records.jsonl").read_text().splitlines()]
    unparsable = 0
    for record in records:
        rrf = [(d, s) for d, s in record["rrf"]]
        scores = [a["score"] for a in record["llm_answers"]]
        assert [a["doc_id"] for a in record["llm_answers"]] == [d for d, _ in rrf]
        expected = order_by_llm_scores(rrf, scores)[:3]
        assert [d for d, _ in record["ranking"]] == [d for d, _ in expected]
        unparsable += sum(s is None for s in scores)
    assert summary["llm_rerank"]["unparsable"] == unparsable and summary["llm_rerank"]["pairs"] == 12
    assert read_submission(out / "submission.tsv") == {r["post_id"]: [d for d, _ in r["ranking"]] for r in records}
    assert set(json.loads((out / "metrics.json").read_text())) == {"mrr@5", "hit@1", "hit@5", "n"}


def test_pickle_conversion_is_opt_in(tmp_path: Path, capsys) -> None:
    import pandas as pd

    frame = pd.DataFrame({"cord_uid": ["u1", "u2"], "title": ["Masks", "Vitamin D"], "abstract": ["A.", "B."],
                          "time": pd.to_datetime(["2020-01-02", None]), "mag_id": [float("nan")] * 2})
    frame.to_pickle(tmp_path / "collection.pkl")
    args = ["prep", "sciclaim-collection", "--pickle", str(tmp_path / "collection.pkl"),
            "--output", str(tmp_path / "c.jsonl")]
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 2 and "--trust_pickle true" in capsys.readouterr().err
    assert not (tmp_path / "c.jsonl").exists()
    cli.main([*args, "--trust_pickle", "true"])
    papers = read_collection(tmp_path / "c.jsonl")
    assert [(p.key, p.title) for p in papers] == [("u1", "Masks"), ("u2", "Vitamin D")]
    assert papers[0].metadata == {"time": "2020-01-02T00:00:00", "mag_id": None}


def test_tasks_from_prepared_records(tmp_path: Path) -> None:
    from veracity.data_prep.schema import CorpusDocument, RetrievalQuery
    from veracity.data_prep.sciclaim_tasks import build_task
    from veracity.io import sha256_file, write_jsonl

    prep = tmp_path / "prep"
    docs = [CorpusDocument("Global warming:14", "Global warming", "", "Species go extinct.", "cf", "x:1"),
            CorpusDocument("Paris, TX:2", "Paris, TX", "", 'It has a "tower".', "cf", "x:2")]
    queries = [RetrievalQuery("cf-0", "Polar\tbears\nare dying", ["Global warming:14", "Paris, TX:2"], "cf", "dev",
                              "x:1")]
    outputs = {}
    for name, rows, kind in (("climate_fever_corpus", docs, "corpus_document"),
                             ("climate_fever_queries", queries, "retrieval_query")):
        write_jsonl(prep / f"{name}.jsonl", [r.to_dict() for r in rows])
        outputs[name] = {"kind": kind, "sha256": sha256_file(prep / f"{name}.jsonl")}
    (prep / "manifest.json").write_text(json.dumps({"outputs": outputs}))
    paths = build_task(prep, "climate_fever", tmp_path / "task")
    posts = read_posts(paths["dev"])
    assert [(p.post_id, p.text, p.gold) for p in posts] == [("cf-0", "Polar bears are dying",
                                                             ["Global warming:14", "Paris, TX:2"])]
    papers = read_collection(paths["collection"])
    assert [(p.key, p.title, p.abstract) for p in papers] == [("Global warming:14", "Global warming",
                                                               "Species go extinct."),
                                                              ("Paris, TX:2", "Paris, TX", 'It has a "tower".')]


def test_real_recipe_is_the_papers_pipeline() -> None:
    """The real-scale recipe inherits the embedded one but not its small-model choices (reranker, weights)."""
    from veracity.config import load_config_values
    from veracity.infer.retrieval.dense import E5_INSTRUCT_QUERY_PREFIX

    real = load_config_values(Path(__file__).parents[1] / "configs/pipelines/sciclaimseekers_real.yaml")
    assert real["reranker"] == "llm" and real["rerank_dense_weight"] == real["rerank_bm25_weight"] == 0
    assert real["embedder"] == "intfloat/multilingual-e5-large-instruct"
    assert real["query_prefix"] == E5_INSTRUCT_QUERY_PREFIX and not real.get("rerank_fusion")


def test_weight_choice_takes_a_plateau_over_a_spike() -> None:
    module = load_script("scripts/sciclaim_weights.py")
    # (3, 3) is the single best point but stands alone; (1, 1) is lower amid high neighbours.
    grid = {(i, j): 0.5 for i in range(4) for j in range(4)}
    grid.update({(3, 3): 0.9, (1, 1): 0.8, (0, 1): 0.75, (1, 0): 0.75, (2, 1): 0.75, (1, 2): 0.75})
    assert max(grid, key=grid.get) == (3, 3) and module.plateau_choice(grid) == (1, 1)


# --- fine-tuning the cross-encoder on a task's training posts ---------------------------------------------------

def test_reranker_training_pairs_are_the_gold_and_the_first_wrong_candidates() -> None:
    from veracity.data_prep.checkthat_files import Paper, Post
    from veracity.train.reranker import SplitData, reranking_samples, training_pairs

    papers = {k: Paper(k, f"T{k}", f"abstract {k}") for k in "abcdg"}
    papers["e"] = Paper("e", "", "no title")
    data = SplitData([Post("1", "claim one", ["g", "b"]), Post("2", "claim two", ["zz"])], papers,
                     [["a", "b", "e", "c", "d"], ["c", "a"]])
    rows = [(r["query"], r["passage"], r["label"]) for r in training_pairs(data, negatives=2)]
    assert rows == [  # g was not retrieved and is still a positive; b is skipped as a negative; "title. abstract"
        ("claim one", "Tg. abstract g", 1.0), ("claim one", "Tb. abstract b", 1.0),
        ("claim one", "Ta. abstract a", 0.0), ("claim one", "no title", 0.0),
        ("claim two", "Tc. abstract c", 0.0), ("claim two", "Ta. abstract a", 0.0)]  # zz is not in the collection
    samples = reranking_samples(data)
    assert samples[0] == {"query": "claim one", "positive": ["Tg. abstract g", "Tb. abstract b"],
                          "documents": ["Ta. abstract a", "Tb. abstract b", "no title", "Tc. abstract c",
                                        "Td. abstract d"]}  # the head in RRF order: a missed gold stays missed


def _reranker_task(tmp_path: Path, tiny_encoder_dir: Path) -> list[str]:
    _task(tmp_path)  # the training posts (posts.tsv) and the collection (c.jsonl)
    (tmp_path / "selection.tsv").write_text(  # other posts, other wording: they choose the checkpoint
        "post_id\ttweet_text\tcord_uid\n"
        "s1\tArctic sea ice decline threatens polar bears #climate\tp3\n"
        "s2\tintensive care patients often lack vitamin D\tp1\n"
        "s3\thousehold influenza spread and surgical masks\tp0\n")
    recipe = tmp_path / "pipeline.yaml"
    recipe.write_text(f"embedder: {tiny_encoder_dir}\nmax_length: 64\nprogress: false\ncandidates: 4\n"
                      "fusion_depth: 4\ntop_k: 4\n")
    return ["train", "reranker", "--pipeline_config", str(recipe), "--posts", str(tmp_path / "posts.tsv"),
            "--selection_posts", str(tmp_path / "selection.tsv"), "--collection", str(tmp_path / "c.jsonl")]


def test_the_reranker_fine_tunes_and_the_pipeline_reranks_with_it(tmp_path: Path, tiny_encoder_dir: Path,
                                                                   tiny_cross_encoder: Path) -> None:
    from veracity.infer.pipelines.sciclaimseekers.run import main as infer
    from veracity.infer.retrieval.rerank import CrossEncoderReranker

    out = tmp_path / "reranker"
    cli.main([*_reranker_task(tmp_path, tiny_encoder_dir), "--init", str(tiny_cross_encoder), "--negatives", "3",
              "--output_dir", str(out), "--max_steps", "40", "--learning_rate", "0.003",
              "--per_device_train_batch_size", "4", "--eval_strategy", "steps", "--eval_steps", "20",
              "--save_steps", "20", "--load_best_model_at_end", "true", "--use_cpu", "true", "--report_to", "none",
              "--disable_tqdm", "true"])  # no metric_for_best_model: the selection MRR@5, higher is better
    report = json.loads((out / "metrics.json").read_text())
    assert report["train"] == {"posts": 3, "pairs": 12, "positives": 3, "negatives": 9}
    assert set(report["before"]) == set(report["after"]) == {"selection"}  # --posts: no report split
    assert (out / "COMPLETED").exists() and (out / "model" / "README.md").exists()
    run_config = (out / "run_config.yaml").read_text()
    assert "metric_for_best_model: eval_selection_mrr@5" in run_config  # the run records the metric it used
    page = (out / "report.html").read_text(encoding="utf-8")  # its training report: the selection MRR's curve
    assert 'alt="curves/selection_mrr_5.png" src="data:image/png;base64,' in page and "<td>train reranker</td>" in page
    # trained on these very posts: every gold paper now outscores the three others of its post
    reranker = CrossEncoderReranker(str(out / "model"))
    papers = read_collection(tmp_path / "c.jsonl")
    for post in read_posts(tmp_path / "posts.tsv"):
        scores = reranker.score(post.text, [f"{p.title}. {p.abstract}" for p in papers])
        assert int(np.argmax(scores)) == int(post.gold[0][1:]), (post, scores)
    # the pipeline reranks the selection posts' RRF heads with it: its MRR@5 is the trainer's selection figure
    summary = infer(["--posts", str(tmp_path / "selection.tsv"), "--collection", str(tmp_path / "c.jsonl"),
                     "--max_length", "64", "--progress", "false", "--embedder", str(tiny_encoder_dir),
                     "--candidates", "4", "--fusion_depth", "4", "--top_k", "4", "--reranker", "cross_encoder",
                     "--cross_encoder", str(out / "model"), "--rerank_dense_weight", "0", "--rerank_bm25_weight", "0",
                     "--output_dir", str(tmp_path / "run")])
    assert summary["metrics"]["n"] == 3
    assert summary["metrics"]["mrr@5"] == pytest.approx(report["after"]["selection"]["selection_mrr@5"], abs=1e-4)


def test_reranker_training_refuses_its_training_posts_as_selection_posts(tmp_path: Path, capsys) -> None:
    posts = str(tmp_path / "p.tsv")
    for extra in (["--posts", posts, "--selection_posts", posts, "--collection", "c.jsonl"],
                  ["--task", "climate_fever", "--selection_split", "train"]):
        with pytest.raises(SystemExit) as info:
            cli.main(["train", "reranker", *extra, "--output_dir", str(tmp_path / "o")])
        assert info.value.code == 2 and "must not be the training posts" in capsys.readouterr().err


def test_reranker_checkpoints_are_chosen_by_the_highest_selection_mrr(tmp_path: Path) -> None:
    from veracity.config import parse_config
    from veracity.train.reranker import choose_by_selection_mrr, make_parser

    common = ["--output_dir", str(tmp_path), "--eval_strategy", "steps", "--save_steps", "500", "--use_cpu", "true"]
    _, training, _ = parse_config(make_parser(), [*common, "--load_best_model_at_end", "true"])
    assert training.metric_for_best_model == "loss" and training.greater_is_better is False  # transformers' default
    choose_by_selection_mrr(training)
    assert (training.metric_for_best_model, training.greater_is_better) == ("eval_selection_mrr@5", True)
    _, training, _ = parse_config(make_parser(), [*common, "--metric_for_best_model", "eval_selection_ndcg@5"])
    choose_by_selection_mrr(training)
    assert (training.metric_for_best_model, training.greater_is_better) == ("eval_selection_ndcg@5", True)


def test_the_hf_cross_encoder_returns_raw_logits(tiny_cross_encoder: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from veracity.infer.retrieval.rerank import CrossEncoderReranker

    # the ONNX backend returns logits; a sigmoid here would change how scores mix in the min–max interpolation
    texts = ["Surgical masks reduce transmission.", "Polar bears lose habitat."]
    scores = CrossEncoderReranker(str(tiny_cross_encoder)).score("do masks work", texts)
    tokenizer = AutoTokenizer.from_pretrained(tiny_cross_encoder)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_cross_encoder).eval()
    with torch.no_grad():
        logits = model(**tokenizer(["do masks work"] * 2, texts, padding=True, return_tensors="pt")).logits[:, 0]
    assert scores == pytest.approx(logits.numpy(), abs=1e-5)


def test_reranker_training_refuses_posts_without_selection_posts(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "reranker", "--posts", str(tmp_path / "p.tsv"), "--output_dir", str(tmp_path / "o")])
    assert info.value.code == 2 and "--selection_posts" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_reranker_training_names_a_post_without_gold(tmp_path: Path, tiny_encoder_dir: Path, capsys) -> None:
    argv = _reranker_task(tmp_path, tiny_encoder_dir)
    (tmp_path / "posts.tsv").write_text("post_id\ttweet_text\tcord_uid\n1\tmasks work\tp0\n2\tno gold here\t\n")
    with pytest.raises(SystemExit) as info:
        cli.main([*argv, "--output_dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "posts.tsv: field 'cord_uid': post '2' has no gold id" in err, err
    assert not (tmp_path / "o" / "run_config.yaml").exists()


def test_the_tuned_recipe_reads_the_model_its_training_config_writes() -> None:
    from veracity.config import load_config_values

    root = Path(__file__).parents[1]
    tuned = load_config_values(root / "configs/pipelines/sciclaimseekers_climate_fever.yaml")
    training = load_config_values(root / "configs/train/reranker_climate_fever.yaml")
    assert tuned["cross_encoder"] == f"{training['output_dir']}/model" and tuned["reranker"] == "cross_encoder"
    assert training["pipeline_config"] == "configs/pipelines/sciclaimseekers_embedded.yaml"  # the negatives' source
    assert (training["train_split"], training["selection_split"]) == ("train", "calib")  # dev stays out


def test_overlap_split_separates_posts_whose_gold_a_training_post_has(tmp_path: Path, capsys) -> None:
    from veracity.data_prep.checkthat_files import Post

    module = load_script("scripts/sciclaim_overlap.py")
    train = [Post("t1", "x", ["p0", "p9"]), Post("t2", "y", ["p5"])]
    posts = [Post("1", "a", ["p0"]), Post("2", "b", ["p1", "p5"]), Post("3", "c", ["p2"])]
    groups = module.split_by_overlap(posts, train)
    assert [p.post_id for p in groups["seen"]] == ["1", "2"] and [p.post_id for p in groups["unseen"]] == ["3"]
    # through its command line on an ablation-shaped run folder
    (tmp_path / "posts.tsv").write_text("post_id\ttweet_text\tcord_uid\n1\ta\t['p0']\n2\tb\t['p1', 'p5']\n"
                                        "3\tc\t['p2']\n")
    (tmp_path / "train.tsv").write_text("post_id\ttweet_text\tcord_uid\nt1\tx\t['p0', 'p9']\nt2\ty\t['p5']\n")
    (tmp_path / "metrics.json").write_text(json.dumps({"posts_file": str(tmp_path / "posts.tsv")}))
    write_submission(tmp_path / "submissions" / "bm25.tsv", {"1": ["p0"], "2": ["p7", "p1"], "3": ["p7"]})
    write_submission(tmp_path / "submissions" / "llm.tsv", {"1": ["p0"]})  # a subset row: left out
    table = module.main(["--run", str(tmp_path), "--train_posts", str(tmp_path / "train.tsv")])
    assert table == {"bm25": {"seen": 0.75, "unseen": 0.0}}
    assert json.loads((tmp_path / "overlap.json").read_text())["n"] == {"seen": 2, "unseen": 1}
