"""Stages 4 and 5, table and merge: chunk counts become merges.

Owns: the numpy chunk table (table), pair-key kernels over ragged arrays (pairs), pair counts,
ranking and safe batches (selection), the append-only pair index (pair_index), the engines that
apply batches (engines), exact batching (exact), merge workers over table slices (workers), and
the coordinator loop, learn_merges (coordinator). Imports run only; it works on numpy arrays,
not on text, so nothing here knows where the counts came from.
"""
