"""PathPiece (PathPieceL) vocabulary pruning: top-down construction over the chunk table.

Owns the scoring pass (how many more tokens the corpus needs when one occurrence of a token cannot
be used: numpy over padded batches of chunks in score.py, the reference, and a numba kernel over the
flat chunk table in kernels.py), the scoring workers over a shared chunk table and the pruning loop.
Imports `tokenizer` (the vocabulary index and the shortest segmentation of `tokenizer/segment.py`, the
trie of `tokenizer/kernels.py`), `run` (shared arrays, worker processes, fault hooks) and `jit`.
"""
