"""Stage 8, write, and using the result: the Tokenizer, its file formats, segmentation and evaluation.

Owns: the tokenizer model (model: ids, encode, decode), BPE-dropout (dropout), GPT-2's
byte-to-character map (byte_level), every export format and save() (exports), their readers (load),
continuing an existing tokenizer with --init (inherit), segmentation by merges, greedy and shortest
(segment, numpy; tables, the kernels' tables and calls), the evaluation numbers over counted chunks
(score) and measuring a tokenizer document by document (evaluate). Nothing of count, merge or run.

Imports: io, jit, kernels, patterns.
"""
