"""PathPiece (PathPieceL) vocabulary pruning: top-down construction over the chunk table.

Owns the scoring kernel (how many more tokens the corpus needs when one occurrence of a token cannot
be used, vectorized over padded batches of chunks), the scoring workers over a shared chunk table and
the pruning loop. Imports `tokenizer` (the vocabulary index and the shortest segmentation of
`tokenizer/segment.py`) and `run` (shared arrays, worker processes, fault hooks).
"""
