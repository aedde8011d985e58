"""PathPiece (PathPieceL) vocabulary pruning: top-down construction over the chunk table.

Owns the scoring (how many more tokens the corpus needs when one occurrence of a token cannot be
used: score), the scoring workers over a shared chunk table (workers) and the pruning loop (prune).
It uses tokenizer's vocabulary index and shortest segmentation, and run's shared arrays, worker
processes and fault hooks. Its own kernels would import jit (tests/test_layout.py allows it).

Imports: run, tokenizer.
"""
