"""BPE-dropout (Provilkov et al. 2020) as the `tokenizers` library applies it, so counts agree with its exports.

Pair occurrences wait in a heap by (rank, position). Each pop is skipped with probability p and set aside;
a pop that is not skipped first puts the set-aside ones back, then merges if still valid (a side merged since
it was pushed makes it stale). So p = 0 is plain BPE in rank order and p = 1 leaves bytes.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping


def dropout_merge(
    ids: list[int], ranks: Mapping[tuple[int, int], tuple[int, int]], p: float, rng: random.Random
) -> list[int]:
    """Merge ids by ranks[(a, b)] = (rank, new), skipping each popped merge with probability p."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout must be a probability in [0, 1], got {p}")
    n = len(ids)
    tokens: list[int | None] = list(ids)
    nxt, prv = list(range(1, n + 1)), list(range(-1, n - 1))
    heap = [(ranks[(ids[i], ids[i + 1])][0], i) for i in range(n - 1) if (ids[i], ids[i + 1]) in ranks]
    heapq.heapify(heap)
    skipped: list[tuple[int, int]] = []
    while heap:
        rank, i = heapq.heappop(heap)
        if p > 0 and rng.random() < p:
            skipped.append((rank, i))
            continue
        for item in skipped:
            heapq.heappush(heap, item)
        skipped.clear()
        j = nxt[i]
        if tokens[i] is None or j >= n:
            continue
        found = ranks.get((tokens[i], tokens[j]))  # type: ignore[arg-type]
        if found is None or found[0] != rank:
            continue
        new = found[1]
        tokens[i], tokens[j] = new, None
        k = nxt[i] = nxt[j]
        if k < n:
            prv[k] = i
            if (new, tokens[k]) in ranks:
                heapq.heappush(heap, (ranks[(new, tokens[k])][0], i))  # type: ignore[index]
        if prv[i] >= 0 and (tokens[prv[i]], new) in ranks:
            heapq.heappush(heap, (ranks[(tokens[prv[i]], new)][0], prv[i]))  # type: ignore[index]
    return [t for t in tokens if t is not None]
