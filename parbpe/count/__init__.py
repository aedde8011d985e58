"""Stages 2 and 3, count and reduce: text becomes chunk counts.

Owns: the piece shortcut of pre-tokenization and StringCounts (pieces, cuts), the lexers (lexer,
numpy; chunking, the kernels' lexers), strings of up to 8 bytes as uint64 keys (short_keys), their
hash tables (key_tables) and the kernels' cut-and-key pass (piece_keyer), the per-worker counter and
the count stage (counter, stream), SuperBPE's superword split (superword), hash partitions and run
files (partitions), the reduce stage with freq_cutoff and the stop list (reduce), byte order
(byte_order), counts files as tables (counts_file), and counting on Ray (on_ray). Its kernels live
in parbpe/kernels/. Never merge, tokenizer, the pipeline or the CLI.

Imports: config, io, jit, kernels, patterns, run.
"""
