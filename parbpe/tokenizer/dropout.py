"""BPE-dropout (Provilkov et al. 2020): each applicable merge is skipped with probability p at every step.

At each step every adjacent pair with a merge is kept with probability 1 - p; the kept pair of lowest rank
(leftmost among equals) is merged, and the step repeats until no pair is kept. p = 0 gives plain BPE
encoding (merging the leftmost occurrence of the lowest rank repeatedly is what rank order does), p = 1 bytes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping


def dropout_merge(
    ids: list[int], ranks: Mapping[tuple[int, int], tuple[int, int]], p: float, rng: random.Random
) -> list[int]:
    """Merge ids by ranks[(a, b)] = (rank, new), dropping each candidate pair with probability p per step."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout must be a probability in [0, 1], got {p}")
    ids = list(ids)
    while len(ids) >= 2:
        best = None
        for i in range(len(ids) - 1):
            found = ranks.get((ids[i], ids[i + 1]))
            if found is None or (p > 0 and rng.random() < p):
                continue
            if best is None or found[0] < best[0]:
                best, at = found, i
        if best is None:
            break
        ids[at : at + 2] = [best[1]]
    return ids
