"""PathPiece (PathPieceL) vocabulary pruning: top-down construction over the chunk table.

Owns the scoring kernel (how many more tokens the corpus needs when one occurrence of a token cannot
be used, vectorized over padded batches of chunks) and the single-process pruning loop. Imports
`tokenizer` (the vocabulary index and the shortest segmentation of `tokenizer/segment.py`) and numpy only.
"""
