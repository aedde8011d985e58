"""Stage 6, write, and using the result: the Tokenizer, its file formats, and evaluation.

Owns: the tokenizer model (model: ids, encode, decode), GPT-2's byte-to-character map
(byte_level), every export format and save() (exports), their readers (load), and measuring a
tokenizer on text (evaluate). Imports patterns and io; nothing of count, merge or run.
"""
