"""The trained format of an R2VC rationale: cite a passage, quote it between typographic quotes, conclude.

``r2vc/prompt.py`` writes it (``grounded_rationale``, the SFT/DPO targets) and the pipeline records whether each
answer keeps it; ``veracity eval r2vc`` reads it too, for records made before they carried ``quote_format``. It sits
here, below both, because a scorer imports nothing from the pipelines (docs/design.md#layers).
"""

from __future__ import annotations

import re

from veracity.data_prep.schema import NOT_ENOUGH_INFO, REFUTES, SUPPORTS

# How a grounded rationale frames its quote, per label: the verb before it, the conclusion after it.
FRAMES = {SUPPORTS: ("states", "This supports the claim."), REFUTES: ("states", "This contradicts the claim."),
          NOT_ENOUGH_INFO: ("says", "This does not settle the claim either way.")}

# A rationale written the way SFT/DPO train the generator to write it (any label's frame, any passage id)
_QUOTE_FORMAT = re.compile("Passage \\[\\d+\\] (?:{}): \u201c[^\u201d]*\u201d (?:{})".format(
    "|".join(sorted({re.escape(verb) for verb, _ in FRAMES.values()})),
    "|".join(re.escape(conclusion) for _, conclusion in FRAMES.values())))


def keeps_quote_format(rationale: str) -> bool:
    """Whether ``rationale`` is in the trained format (cite a passage, quote it, conclude): what the
    generator-checkpoint table reports of the fine-tuned generators' answers."""
    return _QUOTE_FORMAT.fullmatch(rationale) is not None
