"""Stages 4 and 5, table and merge: chunk counts become merges.

Owns: the numpy chunk table (table), pair-key code over ragged arrays (pairs), pair counts, ranking
and safe batches (selection), the append-only pair index (pair_index), the engines that apply
batches (engines, runs) and the linked engine's kernel calls (linked), exact batching (exact), merge workers
over table slices (workers), the stage's memory fit (fit), a table encoded with known merges
(encode, prepare), the cut at pairs too rare to be merged (cold_pairs), SuperBPE's rules (superword),
and the coordinator loop, learn_merges (coordinator). It works on numpy arrays, not on text, so
nothing here knows where the counts came from. Its kernels live in parbpe/kernels/.

Imports: jit, kernels, run.
"""
