"""veracity: an automated fact-checking toolkit (R2VC, AIC CTU FEVER-8, SciClaimSeekers, UTS) on one core."""

__version__ = "0.1.0"
