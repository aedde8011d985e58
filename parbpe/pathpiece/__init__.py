"""PathPiece (PathPieceL) vocabulary pruning: top-down construction over the chunk table.

Owns the scoring pass (how many more tokens the corpus needs when one occurrence of a token cannot
be used: numpy over padded batches of chunks in score.py, the reference, and KernelScorer there over
the flat chunk table with kernels/pathpiece.py), the scoring workers over a shared chunk table and
the pruning loop. It uses tokenizer's vocabulary index, shortest segmentation and trie, and run's shared arrays,
worker processes and fault hooks.

Imports: jit, kernels, run, tokenizer.
"""
