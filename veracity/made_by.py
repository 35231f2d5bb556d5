"""Which command makes a file or folder that a job reads: the second half of the one error line a missing trained
model, adapter, calibrator or training set gets ("… does not exist: `veracity train sft --config …` makes it").

The answer is read from the shipped recipes, not kept in a second list: a path under a training recipe's output
folder (``output_dir``, or ``calibrator_dir`` for the calibrator) is made by that recipe's job, a ``merged`` folder
beside its ``adapter`` by ``veracity train merge`` after it, and what the recipe itself reads first (its training set,
its SFT adapter) is named before it when that is missing too. Prepared data is ``veracity prep``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from veracity.config import load_config_values

RECIPES = Path(__file__).resolve().parents[1] / "configs" / "train"
# a training recipe's file name prefix -> its job and the page that explains it
JOBS = {"sft": ("train sft", "docs/training.md#sft-and-dpo"), "dpo": ("train dpo", "docs/training.md#sft-and-dpo"),
        "nli": ("train nli", "docs/training.md#nli-verifier"),
        "calibrator": ("train calibrator", "docs/training.md#calibrator"),
        "reranker": ("train reranker", "docs/training.md#reranker")}
OUTPUT_FIELDS = ("output_dir", "calibrator_dir")
# what a recipe reads first that another command makes (checked in this order; `model`: a calibrator's generator)
INPUT_FIELDS = ("prepared_dir", "train_file", "sft_adapter", "init", "model")
PREP, PREP_TRAINING = Path("runs/prep"), Path("runs/prep/training")
READS = {"prepared_dir": str(PREP)}  # what a recipe that does not say reads: every training job, prepared data


def made_by(path: str | Path) -> str | None:
    """The commands that make ``path`` (as a recipe names it, relative to the working directory), in order, with
    the page that explains them; None when no shipped recipe or prepared output is the maker."""
    steps = _steps(Path(path))
    if not steps:
        return None
    commands, page = steps
    return " then ".join(f"`{c}`" for c in commands) + (" make" if len(commands) > 1 else " makes") + f" it ({page})"


def _steps(path: Path, depth: int = 0) -> tuple[list[str], str] | None:
    target = path.resolve()
    if target.is_relative_to(PREP_TRAINING.resolve()):
        return ["veracity prep", "veracity prep training-sets"], "docs/training.md#training-sets"
    if target.is_relative_to(PREP.resolve()):
        return ["veracity prep"], "docs/data.md#preparing"
    for recipe, values in _recipes():
        job, page = JOBS[recipe.stem.split("_")[0]]
        out = next((Path(str(values[f])) for f in OUTPUT_FIELDS if values.get(f)), None)
        if out is None or not target.is_relative_to(out.resolve()):
            continue
        commands = []
        for field in INPUT_FIELDS if depth < 2 else ():
            needed = {**READS, **values}.get(field) if field != "model" or values.get("use_generator", True) else None
            before = _steps(Path(str(needed)), depth + 1) if needed and not Path(str(needed)).exists() else None
            commands += [c for c in (before[0] if before else []) if c not in commands]
        train = f"veracity {job} --config {recipe.relative_to(RECIPES.parents[1]).as_posix()}"
        if target.relative_to(out.resolve()).parts[:1] == ("merged",):
            if not (out / "adapter").exists():
                commands.append(train)
            base = out / "sft_merged" if values.get("sft_adapter") else values.get("model_name_or_path", "embedded")
            base_option = "" if base == "embedded" else f" --base {Path(str(base)).as_posix()}"
            commands.append(f"veracity train merge --adapter {(out / 'adapter').as_posix()}{base_option} "
                            f"--output_dir {(out / 'merged').as_posix()}")
        else:
            commands.append(train)
        return commands, page
    return None


def _recipes() -> list[tuple[Path, dict[str, Any]]]:
    """The shipped training recipes with their values (none in an install without ``configs/``)."""
    found = []
    for recipe in sorted(RECIPES.glob("*.yaml")):
        if recipe.stem.split("_")[0] in JOBS:
            found.append((recipe, load_config_values(recipe)))
    return found
