"""parbpe: data-parallel byte-level BPE training with BatchBPE's safe batches, on numpy."""

__version__ = "0.1.0"

from .config import RunOptions, TrainConfig  # noqa: E402
from .tokenizer.model import Tokenizer  # noqa: E402
from .train import TrainResult, count_to_file, evaluate, sample_corpus_files, train, train_from_iterator  # noqa: E402
from .warnings import ParbpeWarning, ResultChangedWarning  # noqa: E402

__all__ = ["ParbpeWarning", "ResultChangedWarning", "RunOptions", "TrainConfig", "TrainResult", "Tokenizer",
           "count_to_file", "evaluate", "sample_corpus_files", "train", "train_from_iterator", "__version__"]
