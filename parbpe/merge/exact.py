"""Exact batching: the longest ranked prefix of a round that serial BPE would merge in the same order.

boundary_events lists, per engine (or per slice), the pairs a batch would create at each of its
merge sites, without applying it; prefix_stop, over every slice's events, finds the first member
that such a pair outranks. Only that prefix is applied, so the merges equal max_batch_size=1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .pairs import pack


def boundary_events(engine: Any, first: np.ndarray, second: np.ndarray, first_id: int,
                    hits: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs a batch creates, as events (pair key, member, count change), without applying it.

    engine is a LinkedEngine (its table, links and weights); hits and which are the batch's
    merge sites and the member of each.

    Each boundary between a merge site and its neighbour holds one pair after every prefix of the
    batch: a pair with one new token from the step after the first of the two merges, a pair of
    two new tokens from the step after the second. An event (key, k, d) says that from member k
    on, counting the merges before k, the pair's count changes by d.
    """
    n = len(first)
    empty = np.zeros(0, dtype=np.int64)
    if n <= 1 or len(hits) == 0:
        return empty, empty, empty
    tokens, nxt, prv = engine.table.tokens, engine.next, engine.prev
    never = n  # "member" of a position no merge of the batch touches
    order = np.argsort(hits)
    sorted_hits, sorted_which = hits[order], which[order]
    partners = nxt[hits].astype(np.int64)
    sorted_partners = np.sort(partners)

    def member_starting_at(pos: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(sorted_hits, pos), len(sorted_hits) - 1)
        return np.where(sorted_hits[at] == pos, sorted_which[at], never)

    # Right boundary of every hit: (this merge, whatever follows its partner).
    right = nxt[partners].astype(np.int64)
    has_right = right >= 0
    r_pos = right[has_right]
    r_mu, r_tu = which[has_right], second[which[has_right]]
    r_mv, r_tv = member_starting_at(r_pos), tokens[r_pos].astype(np.int64)
    r_w = engine.weight[hits[has_right]]
    # Left boundary of a hit whose left neighbour no merge touches (else it is a right boundary).
    left = prv[hits].astype(np.int64)
    at = np.minimum(np.searchsorted(sorted_partners, left), len(sorted_partners) - 1)
    lone = (left >= 0) & (sorted_partners[at] != left)
    l_pos = left[lone]
    l_mu, l_tu = np.full(len(l_pos), never), tokens[l_pos].astype(np.int64)
    l_mv, l_tv = which[lone], first[which[lone]]
    l_w = engine.weight[hits[lone]]

    mu, tu = np.concatenate([r_mu, l_mu]), np.concatenate([r_tu, l_tu])
    mv, tv = np.concatenate([r_mv, l_mv]), np.concatenate([r_tv, l_tv])
    w = np.concatenate([r_w, l_w]).astype(np.int64)
    a, c = np.minimum(mu, mv), np.maximum(mu, mv)
    new_u, new_v = first_id + mu, first_id + mv
    # After merge a: one side is new (both, when one merge makes both sides, as in runs of x x).
    one_new = np.where(mu == mv, pack(new_u, new_v), np.where(mu < mv, pack(new_u, tv), pack(tu, new_v)))
    both = (c < never) & (c != a)
    keys = np.concatenate([one_new, one_new[both], pack(new_u[both], new_v[both])])
    steps = np.concatenate([a + 1, c[both] + 1, c[both] + 1])  # the pair holds from member `step` on
    deltas = np.concatenate([w, -w[both], w[both]])
    keep = steps < n
    return keys[keep], steps[keep], deltas[keep]


def prefix_stop(keys: np.ndarray, steps: np.ndarray, deltas: np.ndarray, first: np.ndarray, second: np.ndarray,
                counts: np.ndarray, rank_key: Callable[[int], tuple]) -> int:
    """How many of a conflict-free ranked prefix serial BPE would merge in this order.

    Member k is merged next by serial BPE if no pair created by members 0..k-1, counted as it
    stands after just those merges (boundary_events, from every slice of the table), outranks it:
    pairs that existed before the batch only lose occurrences, and conflict-free members never
    touch each other's occurrences. rank_key(pair key) orders pairs of equal count by the tie
    rule (smaller is ranked first), new tokens of the round included.
    """
    n = len(first)
    if len(keys) == 0:
        return n
    order = np.lexsort((steps, keys))
    keys, steps, deltas = keys[order], steps[order], deltas[order]
    values = np.cumsum(deltas)
    # (np.concatenate, not np.r_: its index machinery costs more than the work in exact batching's many
    # small rounds)
    same_as_next = keys[1:] == keys[:-1]
    group_start = np.concatenate([[True], ~same_as_next])
    base = np.maximum.accumulate(np.where(group_start, np.arange(len(keys)), 0))
    values = values - np.concatenate([[0], values])[base]  # running count of each pair from its first step on
    ends = np.concatenate([np.where(same_as_next, steps[1:], n), [n]])  # until the pair's next change
    # A created pair outranks member k if its count is higher, or equal and it wins the tie rule.
    # Counts fall with rank: [tie_from, below_from) are the members of equal count.
    neg_counts = -np.asarray(counts, dtype=np.int64)
    tie_from = np.maximum(np.searchsorted(neg_counts, -values, side="left"), steps)
    below_from = np.maximum(np.searchsorted(neg_counts, -values, side="right"), steps)
    live = values > 0
    sure = below_from[live & (below_from < ends)]
    best = int(sure.min()) if len(sure) else n
    ties = np.flatnonzero(live & (tie_from < np.minimum(below_from, ends)) & (tie_from < best))
    for r in ties[np.argsort(tie_from[ties], kind="stable")].tolist():
        if tie_from[r] >= best:
            break
        mine = rank_key(int(keys[r]))
        for k in range(int(tie_from[r]), min(int(below_from[r]), int(ends[r]), best)):
            if mine < rank_key((int(first[k]) << 32) | int(second[k])):
                best = k
                break
    return best
