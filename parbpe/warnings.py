"""parbpe's warning categories: what changed the result of a run without failing it. Filter them, or
make them errors (warnings.simplefilter("error", parbpe.ResultChangedWarning)); strict=True (--strict)
fails the run instead, before anything is written."""


class ParbpeWarning(UserWarning):
    """Every warning parbpe gives."""


class ResultChangedWarning(ParbpeWarning):
    """The tokenizer is not what the settings alone would give: something had to change it."""


class AutoCutoffWarning(ResultChangedWarning):
    """The rarest chunks were left out of training so that the merge stage fits the memory budget."""


class EarlyStopWarning(ResultChangedWarning):
    """Merging stopped before the vocabulary size (no pair left, or none seen often enough)."""


class PrefixSizesWarning(ResultChangedWarning):
    """--also-save sizes are the first merges of the run, not runs of their own (BatchBPE batches)."""


class HeldoutOverlapWarning(ParbpeWarning):
    """A --heldout file is also training input: the held-out numbers then measure training text."""
