"""The top floor: a training run as stages on a run context.

inputs (checks before work, plan, run directory) -> count (and reduce) -> vocabulary (merge: fit,
table, encoding, rounds; per algorithm) -> assemble (tokenizer, stats) -> evaluate (held-out,
--also-save) -> write. parbpe/train.py calls them in order; see docs/ARCHITECTURE.md.
"""
