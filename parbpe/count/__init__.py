"""Stages 2 and 3, count and reduce: text becomes chunk counts.

Owns: the piece shortcut of pre-tokenization and StringCounts (pieces), the vectorized GPT-4
lexer (lexer), strings of up to 8 bytes as uint64 keys (short_keys), the per-worker counter and
the count stage (counter), hash partitions and run files (partitions), the reduce stage with
freq_cutoff and the stop list (reduce), counts files as tables and their writing (counts_file).
Imports config, patterns, run and io; never merge, tokenizer, the pipeline or the CLI.
"""
