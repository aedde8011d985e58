"""The top floor: a training run as stages on a run context.

inputs (checks before work, plan, run directory) -> count (and reduce) -> vocabulary (merge: fit,
table, encoding, rounds; per algorithm) -> assemble (tokenizer, stats) -> evaluate (held-out,
--also-save) -> write. parbpe/train.py calls them in order; see docs/ARCHITECTURE.md. It imports
every package below it, and parbpe itself for the version.

Imports: config, count, io, jit, merge, parbpe, pathpiece, patterns, run, tokenizer, warnings.
"""
