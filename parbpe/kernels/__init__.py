"""Every numba kernel of parbpe, and nothing else: one module per job.

A kernel is declared `@kernel(twin="parbpe.module:qualname")` (parbpe/jit.py), naming the numpy
function of a stage package that computes the same (tests/test_twins.py runs each pair); the
functions it calls are `@helper`s, inlined into it. The stage packages hold the Python that decides
when and how to call them (buffers, threads, thresholds). Kept in one place so that numba's subset of
Python, its compile costs and its cache live apart from the numpy code, and a kernel is found by its
job: lexer, pieces and key_tables (counting), byte_order and partitions (the reduce and run files),
linked, pair_index, selection, cold_pairs and encode (merging), segment and pathpiece (segmentation
and PathPiece's scores). Helpers shared by several of them have one home each: hashing (the home
slot of Fibonacci hashing), heaps (a min-heap of int64 entries); threads are run/threads.py's, in
the callers.

Imports: jit.
"""
