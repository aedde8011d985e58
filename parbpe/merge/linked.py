"""The linked engine's kernel calls (kernels/linked.py): a round found and merged in one sweep of the
table, in two threads where it is large; the live pairs sorted and summed, in two threads where the
table is large. They run where jit.merge_kernels says (parbpe/jit.py); the numpy methods of
engines.LinkedEngine are the reference."""

from __future__ import annotations

import numpy as np

from .. import jit
from ..kernels.linked import (
    by_position,
    count_seconds,
    counting_offsets,
    distinct_pairs,
    fill_records,
    holding,
    runs_taken,
    scatter_by_first,
    scatter_by_second,
    split_point,
    sum_pairs_into,
    sum_sorted_pairs,
    sums_by_key,
    sweep_part,
)
from ..run.threads import in_two

# With threads=2 (the coordinator's own engine, no merge workers), a round's kernels run in two
# threads, each on half of it, from this many positions (hits, candidates, new pairs): below, a
# thread's start is more than the half saves.
TWO_THREADS_MIN = 32_768
# ... and the index of every live pair (the first count's, a rebuild's) is sorted and summed in two
# threads from this many positions (sorted_live_pairs_in_two, sum_sorted_pairs_in_two): from here
# the second thread pays on SuperBPE's stage-2 table; on fewer positions the threads' start and the
# first touch of new arrays in two threads cost what the halves save.
SORT_IN_TWO_MIN = 1 << 22


def find_hits(records: np.ndarray, cand: np.ndarray, which: np.ndarray, first: np.ndarray, second: np.ndarray,
              threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """LinkedEngine.find_hits after the index lookup: the candidates that still hold their pair,
    and of runs x x x ... of a pair (x, x), the 1st, 3rd, ... (as a left-to-right merge); in table
    order (sweep relies on it, and sweeps the table once), as position << member_bits | member, one
    int64. threads=2: each half of the candidates checked in its own thread."""
    bits = member_bits(records, len(first))
    if threads > 1 and len(cand) >= TWO_THREADS_MIN:
        h = len(cand) // 2
        found = np.concatenate(in_two(lambda: holding(records, cand[:h], which[:h], first, second, bits),
                                      lambda: holding(records, cand[h:], which[h:], first, second, bits)))
    else:
        found = holding(records, cand, which, first, second, bits)
    return runs_taken(records, _in_table_order(records, found, bits), first, second, bits)


def member_bits(records: np.ndarray, members: int = 0) -> int:
    """The bits of a packed (position << member_bits | member) that hold the member: what a position
    of the table leaves of 63 (a ValueError if a batch of `members` merges does not fit them)."""
    bits = 63 - len(records).bit_length()
    if members >= 2**bits:
        raise ValueError(f"a batch of {members:,} merges is too large for a table of {len(records):,} tokens")
    return bits


def _in_table_order(records: np.ndarray, found: np.ndarray, bits: int) -> np.ndarray:
    """Packed candidates (distinct positions) sorted, by by_position from jit.RADIX_MIN (numpy's sort below)."""
    if len(found) >= jit.RADIX_MIN:
        return by_position(found, bits, len(records).bit_length())
    found.sort()
    return found


def find_and_apply(records: np.ndarray, tokens: np.ndarray, cand: np.ndarray, which: np.ndarray,
                   first: np.ndarray, second: np.ndarray, new_ids: np.ndarray, removed: int, threads: int = 1
                   ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, int]:
    """find_hits and apply_hits in one sweep of the table: the candidates (the index's entries of a
    safe batch) put in table order, then each merged where it still holds its pair when the sweep
    comes to it. In a safe batch only a run x x x ... of a pair (x, x) has occurrences that overlap,
    and a left-to-right sweep merges its 1st, 3rd, ... as find_hits takes them (the 2nd is the 1st's
    partner, gone by then); every other occurrence holds as it did before the round. The records of
    a large round are read once where find_hits, then apply_hits, read them twice (a cache miss a
    position each time). Returns sweep's results."""
    return sweep(records, tokens, candidates_in_order(records, cand, which, len(first)), first, second, new_ids,
                 removed, threads, check=True)


def candidates_in_order(records: np.ndarray, cand: np.ndarray, which: np.ndarray, members: int) -> np.ndarray:
    """The index's candidates of a batch of `members` merges, packed (position << member_bits | member)
    and in table order: what sweep takes, whole or a slice at a time."""
    bits = member_bits(records, members)
    found = cand.astype(np.int64) << bits
    found |= which
    return _in_table_order(records, found, bits)


def sweep(records: np.ndarray, tokens: np.ndarray, found: np.ndarray, first: np.ndarray, second: np.ndarray,
          new_ids: np.ndarray, removed: int, threads: int = 1, check: bool = True
          ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, int]:
    """Merge member k at each position of found (position << member_bits | member, in table order)
    that holds (first[k], second[k]) as the sweep reaches it (check=False: hits found already, each
    merged). Returns the count changes (keys, deltas: the pairs before the merges, then from `made`
    on, those after, whose positions are the fourth result: they hold a new token and go to the
    index) and the number of merges. threads=2: in two threads from TWO_THREADS_MIN positions, each
    sweeping a half (split_point); the results are one sweep's, the changes reordered."""
    bits = member_bits(records)
    cut = split_point(records, found, bits) if threads > 1 and len(found) >= TWO_THREADS_MIN else 0
    if cut == 0:
        return sweep_part(records, tokens, found, first, second, new_ids, bits, removed, check)
    (keys_a, deltas_a, made_a, pos_a, hits_a), (keys_b, deltas_b, made_b, pos_b, hits_b) = in_two(
        lambda: sweep_part(records, tokens, found[:cut], first, second, new_ids, bits, removed, check),
        lambda: sweep_part(records, tokens, found[cut:], first, second, new_ids, bits, removed, check))
    keys = np.concatenate([keys_a[:made_a], keys_b[:made_b], keys_a[made_a:], keys_b[made_b:]])
    deltas = np.concatenate([deltas_a[:made_a], deltas_b[:made_b], deltas_a[made_a:], deltas_b[made_b:]])
    return keys, deltas, made_a + made_b, np.concatenate([pos_a, pos_b]), hits_a + hits_b


def sum_by_key(keys: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pairs.aggregate with a hash table (sums_by_key): sorted unique keys and their non-zero sums. (Summing
    by halves in two threads, then their sums again, gained nothing on realmix.)"""
    keys, sums, ordered = sums_by_key(keys, deltas)
    if ordered:
        return keys, sums
    order = np.argsort(keys)
    return keys[order], sums[order]


def sorted_live_pairs_in_two(records: np.ndarray, n_live: int, width: int) -> np.ndarray:
    """sorted_live_pairs' entries, element for element, its two counting sorts in two threads: each
    half of the positions counted by second token, then scattered to its own offsets (the first half's
    entries of a token before the second's: positions stay ascending), counting the first tokens bound
    for each half of the intermediate array; each half of that then scattered by first token (the first
    half's entries of a token first). The same two arrays of n_live entries at the peak. On SuperBPE's
    stage-2 table it takes well under sorted_live_pairs' time (how much depends on new memory's first
    touch)."""
    n = len(records)
    cut = n // 2
    seconds = _rows(2, width)
    in_two(lambda: count_seconds(records, 0, cut, seconds[0]), lambda: count_seconds(records, cut, n, seconds[1]))
    starts = _exclusive_sums(seconds)
    by_second = np.empty(n_live, dtype=np.uint64)
    half = n_live // 2
    firsts = _rows(2, 2 * width)  # a thread's: the first tokens bound for by_second[:half], then for the rest
    in_two(lambda: scatter_by_second(records, 0, cut, starts[0], by_second, half, firsts[0]),
           lambda: scatter_by_second(records, cut, n, starts[1], by_second, half, firsts[1]))
    totals = _rows(2, width)  # (destination half, first token)
    np.add(firsts[0].reshape(2, width), firsts[1].reshape(2, width), out=totals)
    starts = _exclusive_sums(totals)
    out = np.empty(n_live, dtype=np.uint64)
    in_two(lambda: scatter_by_first(by_second, 0, half, starts[0], out),
           lambda: scatter_by_first(by_second, half, n_live, starts[1], out))
    return out


def _rows(parts: int, width: int) -> np.ndarray:
    """parts rows of width int64 zeros, a cache line apart (two threads' counts never share one)."""
    return np.zeros((parts, width + 8), dtype=np.int64)[:, :width]


def _exclusive_sums(counts: np.ndarray) -> np.ndarray:
    """The offsets of a counting sort of counts (part, token: _rows), in _rows: token by token, the
    parts in turn (numpy's cumsum: a small array, one per token and part)."""
    starts = _rows(*counts.shape)
    counting_offsets(counts, starts)
    return starts


def sum_sorted_pairs_in_two(records: np.ndarray, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum_sorted_pairs' counts, element for element, each side of a pair boundary near the middle of
    the entries in its own thread (one thread where no pair ends near it: one pair makes most), each
    counting its pairs, then writing them to its part of the results: about half sum_sorted_pairs'
    time on SuperBPE's stage-2 entries."""
    n = len(packed)
    cut = _pair_boundary(packed)
    if cut in (0, n):
        return sum_sorted_pairs(records, packed)
    left, right = in_two(lambda: distinct_pairs(packed[:cut]), lambda: distinct_pairs(packed[cut:]))
    keys = np.empty(left + right, dtype=np.int64)
    sums = np.zeros(left + right, dtype=np.int64)
    in_two(lambda: sum_pairs_into(records, packed[:cut], keys[:left], sums[:left]),
           lambda: sum_pairs_into(records, packed[cut:], keys[left:], sums[left:]))
    return keys, sums


def _pair_boundary(packed: np.ndarray) -> int:
    """Where the pair of the middle entry of sorted packed entries starts or ends, whichever is nearer
    the middle, but 0 or len(packed) only where both are."""
    n = len(packed)
    if n < 2:
        return 0
    pair = packed[n // 2] >> np.uint64(32)
    start = int(np.searchsorted(packed, pair << np.uint64(32), side="left"))
    end = int(np.searchsorted(packed, pair << np.uint64(32) | np.uint64(0xFFFFFFFF), side="right"))
    if start == 0 or (end < n and end - n // 2 < n // 2 - start):
        return end
    return start


def fill_records_in_two(records: np.ndarray, tokens: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> None:
    """fill_records, each half of the chunks in its own thread. The records are new memory, and its
    first touch is most of the fill, which two threads share."""
    h = len(counts) // 2
    in_two(lambda: fill_records(records, tokens, starts[:h + 1], counts[:h]),
           lambda: fill_records(records, tokens, starts[h:], counts[h:]))
