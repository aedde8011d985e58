"""numba kernels of the linked engine (engines.LinkedEngine): a round found and merged in one sweep of the table.

With the JIT, the engine keeps a record per position, (next, prev, weight, token), in one array:
the merges of a round jump around the table, and a record is one cache line where four arrays are
four. The table's tokens are written too (the numpy code and compact() read them). The numpy
methods of LinkedEngine are the reference; these do the same work position by position, without
the temporaries of whole-array steps, and add up the count changes in a hash table instead of
sorting them. They run where jit.merge_kernels says (parbpe/jit.py).
"""

from __future__ import annotations

import numpy as np

from .. import jit
from ..jit import helper, kernel, prefetch
from ..run.threads import in_two

AHEAD = 8  # hits ahead whose records a loop over scattered positions asks for (prefetch)

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
        found = np.concatenate(in_two(lambda: _holding(records, cand[:h], which[:h], first, second, bits),
                                      lambda: _holding(records, cand[h:], which[h:], first, second, bits)))
    else:
        found = _holding(records, cand, which, first, second, bits)
    return _runs_taken(records, _in_table_order(records, found, bits), first, second, bits)


def member_bits(records: np.ndarray, members: int = 0) -> int:
    """The bits of a packed (position << member_bits | member) that hold the member: what a position
    of the table leaves of 63 (a ValueError if a batch of `members` merges does not fit them)."""
    bits = 63 - len(records).bit_length()
    if members >= 2**bits:
        raise ValueError(f"a batch of {members:,} merges is too large for a table of {len(records):,} tokens")
    return bits


def _in_table_order(records: np.ndarray, found: np.ndarray, bits: int) -> np.ndarray:
    """Packed candidates (distinct positions) sorted, by _by_position from jit.RADIX_MIN (numpy's sort below)."""
    if len(found) >= jit.RADIX_MIN:
        return _by_position(found, bits, len(records).bit_length())
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
    sweeping a half (_cut); the results are one sweep's, the changes reordered."""
    bits = member_bits(records)
    cut = _cut(records, found, bits) if threads > 1 and len(found) >= TWO_THREADS_MIN else 0
    if cut == 0:
        return _sweep(records, tokens, found, first, second, new_ids, bits, removed, check)
    (keys_a, deltas_a, made_a, pos_a, hits_a), (keys_b, deltas_b, made_b, pos_b, hits_b) = in_two(
        lambda: _sweep(records, tokens, found[:cut], first, second, new_ids, bits, removed, check),
        lambda: _sweep(records, tokens, found[cut:], first, second, new_ids, bits, removed, check))
    keys = np.concatenate([keys_a[:made_a], keys_b[:made_b], keys_a[made_a:], keys_b[made_b:]])
    deltas = np.concatenate([deltas_a[:made_a], deltas_b[:made_b], deltas_a[made_a:], deltas_b[made_b:]])
    return keys, deltas, made_a + made_b, np.concatenate([pos_a, pos_b]), hits_a + hits_b


@kernel(twin="parbpe.merge.engines:LinkedEngine.apply_hits")
def _cut(records, found, member_bits):
    """Where sweep may be cut in two halves that read and write no record of the
    other (0: nowhere near the middle): between candidates c and d in table order, when d is neither
    c's partner q nor q's right neighbour r (whose link back c's merge writes), and d's left neighbour
    is neither c nor q (which a merge at d reads, and then counts the pair c's merge counts). Records
    as the round starts: a merge only removes positions between its candidates."""
    n = len(found)
    for cut in range(max(n // 2, 1), n):
        c, d = found[cut - 1] >> member_bits, found[cut] >> member_bits
        q = np.int64(records[c, 0])
        r = np.int64(records[q, 0]) if q >= 0 else np.int64(-3)
        left = np.int64(records[d, 1])
        if d != q and d != r and left != c and (q < 0 or left != q):
            return cut
    return 0


@kernel(twin="parbpe.merge.engines:LinkedEngine.apply_hits")
def _sweep(records, tokens, found, first, second, new_ids, member_bits, removed, check):
    """sweep's merges in one thread. In table order, the left neighbour of a hit is another hit's
    partner (a b a b) exactly when, once that hit is merged, it is the previous hit: its pair is
    counted as that hit's right pair."""
    low = (np.int64(1) << member_bits) - 1
    n = len(found)
    keys = np.empty(5 * n, dtype=np.int64)
    deltas = np.empty(5 * n, dtype=np.int64)
    hits = np.empty(n, dtype=np.int64)
    m = 0
    n_hits = 0
    previous = np.int64(-1)
    for i in range(n):
        if i + AHEAD < n:  # the records of a hit further on, asked for now (the table outgrows the caches)
            ahead = found[i + AHEAD] >> member_bits
            prefetch(records, ahead)
            prefetch(tokens, ahead)
        h = found[i] >> member_bits
        k = found[i] & low
        part = np.int64(records[h, 0])
        if check and (part < 0 or np.int64(records[h, 3]) != first[k] or np.int64(records[part, 3]) != second[k]):
            continue
        left = np.int64(records[h, 1])
        if left >= 0 and left != previous:
            keys[m] = (np.int64(records[left, 3]) << 32) | np.int64(records[h, 3])
            deltas[m] = -np.int64(records[left, 2])
            m += 1
        keys[m] = (np.int64(records[h, 3]) << 32) | np.int64(records[part, 3])
        deltas[m] = -np.int64(records[h, 2])
        m += 1
        beyond = np.int64(records[part, 0])
        if beyond >= 0:
            keys[m] = (np.int64(records[part, 3]) << 32) | np.int64(records[beyond, 3])
            deltas[m] = -np.int64(records[part, 2])
            m += 1
            records[beyond, 1] = h
        records[h, 3] = new_ids[k]
        tokens[h] = new_ids[k]
        records[h, 0] = beyond
        records[part, 0] = removed
        hits[n_hits] = h
        n_hits += 1
        previous = h
    made = m
    positions = np.empty(2 * n_hits, dtype=np.int64)
    previous = -1
    for i in range(n_hits):
        h = hits[i]
        left = np.int64(records[h, 1])
        if left >= 0 and left != previous:
            keys[m] = (np.int64(records[left, 3]) << 32) | np.int64(records[h, 3])
            deltas[m] = np.int64(records[left, 2])
            positions[m - made] = left
            m += 1
        beyond = np.int64(records[h, 0])
        if beyond >= 0:
            keys[m] = (np.int64(records[h, 3]) << 32) | np.int64(records[beyond, 3])
            deltas[m] = np.int64(records[h, 2])
            positions[m - made] = h
            m += 1
        previous = h
    return keys[:m], deltas[:m], made, positions[:m - made], n_hits


RADIX_SMALL = 512  # entries below which _by_high_half sorts them whole


@kernel(twin="parbpe.merge.engines:LinkedEngine.find_hits")
def _by_position(found, member_bits, position_bits):
    """found (position << member_bits | member, distinct positions) sorted: an LSD radix sort of the
    position's bits, 11 at a time (found itself is the scratch of every other pass). numpy's sort of
    the holding candidates, the twin, was a large share of realmix's merge stage (the first rounds hold
    millions), and the radix sort takes about a third of its time."""
    return _lsd_radix(found, member_bits, member_bits + position_bits)


@helper
def _lsd_radix(values, low_bit, high_bit):
    """int64 values sorted by their bits low_bit..high_bit - 1, stably: an LSD radix sort, 11 bits a
    pass (the last pass the bits left), a pass whose digits are all alike skipped; values is the
    scratch of every other pass."""
    n = len(values)
    scratch = np.empty(n, dtype=np.int64)
    shift = low_bit
    while shift < high_bit:
        width = min(11, high_bit - shift)
        mask = (np.int64(1) << width) - 1
        starts = np.zeros((1 << width) + 1, dtype=np.int64)
        for i in range(n):
            starts[((values[i] >> shift) & mask) + 1] += 1
        alike = False  # (a loop, not starts.max(): numba compiles the reduction's machinery)
        for d in range(len(starts)):
            alike |= starts[d] == n
        if not alike:
            for d in range(1, len(starts)):
                starts[d] += starts[d - 1]
            for i in range(n):
                d = (values[i] >> shift) & mask
                scratch[starts[d]] = values[i]
                starts[d] += 1
            values, scratch = scratch, values
        shift += width
    return values


@kernel(twin="parbpe.merge.engines:LinkedEngine.find_hits")
def _holding(records, cand, which, first, second, member_bits):
    """The candidates that hold their pair, as position << member_bits | member."""
    n = len(cand)
    found = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        if i + AHEAD < n:
            prefetch(records, cand[i + AHEAD])
        p = np.int64(cand[i])
        q = np.int64(records[p, 0])
        if q >= 0:
            k = which[i]
            if np.int64(records[p, 3]) == first[k] and np.int64(records[q, 3]) == second[k]:
                found[m] = (p << member_bits) | k
                m += 1
    return found[:m]


@kernel(twin="parbpe.merge.pairs:runs_taken_left_to_right")
def _runs_taken(records, found, first, second, member_bits):
    """(positions, members) of the sorted holding candidates, but in a run x x x ... of a pair (x, x)
    a member that follows a taken one of its own run."""
    low = (np.int64(1) << member_bits) - 1
    hits = np.empty(len(found), dtype=np.int64)
    members = np.empty(len(found), dtype=np.int64)
    h = 0
    last = np.int64(-1)
    last_taken = False
    for i in range(len(found)):
        p = found[i] >> member_bits
        k = found[i] & low
        take = True
        if first[k] == second[k]:
            take = not (last_taken and np.int64(records[p, 1]) == last and (found[i - 1] & low) == k)
        if take:
            hits[h] = p
            members[h] = k
            h += 1
        last, last_taken = p, take
    return hits[:h], members[:h]


@kernel(twin="parbpe.merge.engines:LinkedEngine._index_new_pairs")
def new_pair_entries(keys, positions):
    """The packed index entries (first << 48 | second << 32 | position) of a round's new pairs
    (sweep's keys from `made` on, tokens below 2**16, and their positions), sorted; None if the
    positions do not ascend (then the caller sorts). In position order, a stable LSD radix sort of
    the 32-bit pair, 11 bits a pass (a pass whose digits are all alike skipped), leaves np.sort's
    order, several times faster than np.sort on the millions of entries the first rounds make."""
    n = len(keys)
    entries = np.empty(n, dtype=np.uint64)
    last = np.int64(-1)
    for i in range(n):
        p = np.int64(positions[i])
        if p <= last:
            return None
        last = p
        k = keys[i]
        entries[i] = np.uint64(((k >> 32) << 48) | ((k & 0xFFFF) << 32) | p)
    return _by_high_half(entries)


@helper
def _by_high_half(entries):
    """uint64 entries sorted by their high 32 bits, stably (_lsd_radix; entries is its scratch). Below
    RADIX_SMALL entries, whose low halves ascend in the order given (both callers'), a plain sort of the
    whole values gives the same order without zeroing three passes' 2,049 counts (a serial run makes
    one round a merge)."""
    if len(entries) < RADIX_SMALL:
        return _insertion_sorted(entries)
    return _lsd_radix(entries.view(np.int64), 32, 64).view(np.uint64)


@helper
def _empty_slots(size):
    """A (size, 2) int64 hash table of empty slots, -1 (np.full's machinery costs more to compile)."""
    table = np.empty((size, 2), dtype=np.int64)
    for j in range(size):
        table[j, 0] = -1
        table[j, 1] = -1
    return table


@helper
def _insertion_sorted(values):
    """np.sort(values) for a few values (an insertion sort: numba's np.sort compiles a quicksort for each
    caller, more than a second of a first run)."""
    out = values.copy()
    for i in range(1, len(out)):
        value = out[i]
        j = i - 1
        while j >= 0 and out[j] > value:
            out[j + 1] = out[j]
            j -= 1
        out[j + 1] = value
    return out


def sum_by_key(keys: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pairs.aggregate with a hash table (_sums): sorted unique keys and their non-zero sums. (Summing
    by halves in two threads, then their sums again, gained nothing on realmix.)"""
    keys, sums, ordered = _sums(keys, deltas)
    if ordered:
        return keys, sums
    order = np.argsort(keys)
    return keys[order], sums[order]


@kernel(twin="parbpe.merge.pairs:aggregate")
def _sums(keys, deltas):
    """Unique keys and their non-zero sums from a hash table first sized for a quarter of the keys
    distinct (realmix: 7% are; grown from 1,024 slots as keys came, the table placed most keys again
    several times) and doubled past half full; sorted by _by_high_half where token ids are below
    2**16 (whether they are sorted: the third result)."""
    bits = 10
    while (1 << bits) < len(keys) // 4:
        bits += 1
    table = _empty_slots(1 << bits)  # (key, sum); key -1: empty (keys are >= 0)
    used = 0
    done = 0
    while done < len(keys):
        done, used = _sums_fill(keys, deltas, done, table, bits, used)
        if done < len(keys):
            table = _sums_grown(table, bits + 1)
            bits += 1
    out_keys = np.empty(used, dtype=np.int64)
    out_sums = np.empty(used, dtype=np.int64)
    n = 0
    wide = np.int64(0)
    for j in range(len(table)):
        if table[j, 0] >= 0 and table[j, 1] != 0:
            out_keys[n] = table[j, 0]
            out_sums[n] = table[j, 1]
            wide |= table[j, 0]
            n += 1
    if wide & ~np.int64(0x0000FFFF0000FFFF):  # a token id of 2**16 or more
        return out_keys[:n], out_sums[:n], False
    entries = np.empty(n, dtype=np.uint64)
    for i in range(n):
        k = out_keys[i]
        entries[i] = np.uint64(((k >> 32) << 48) | ((k & 0xFFFF) << 32) | i)
    entries = _by_high_half(entries)
    sorted_keys = np.empty(n, dtype=np.int64)
    sorted_sums = np.empty(n, dtype=np.int64)
    for i in range(n):
        at = np.int64(entries[i] & np.uint64(0xFFFFFFFF))
        sorted_keys[i] = out_keys[at]
        sorted_sums[i] = out_sums[at]
    return sorted_keys, sorted_sums, True


@helper
def _sums_fill(keys, deltas, first, table, bits, used):
    """Add keys[first:] to the table until it is half full; returns (keys done, slots used)."""
    half = len(table) // 2
    for i in range(first, len(keys)):
        if used >= half:
            return i, used
        key = keys[i]
        at = _sums_slot(table, bits, key)
        if table[at, 0] < 0:
            table[at, 0] = key
            table[at, 1] = 0
            used += 1
        table[at, 1] += deltas[i]
    return len(keys), used


@helper
def _sums_slot(table, bits, key):
    """key's slot in a table of 2**bits (key, sum) slots: its own, or the empty one where it goes."""
    mask = (np.int64(1) << bits) - 1
    at = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))
    while table[at, 0] >= 0 and table[at, 0] != key:
        at = (at + 1) & mask
    return at


@helper
def _sums_grown(table, bits):
    """The (key, sum) table placed again in 2**bits slots."""
    bigger = _empty_slots(np.int64(1) << bits)
    for j in range(len(table)):
        if table[j, 0] >= 0:
            at = _sums_slot(bigger, bits, table[j, 0])
            bigger[at, 0] = table[j, 0]
            bigger[at, 1] = table[j, 1]
    return bigger


@kernel(twin="parbpe.merge.engines:LinkedEngine._packed_entries")
def sorted_live_pairs(records, n_live, width):
    """The packed index entries (first << 48 | second << 32 | position) of every live pair, sorted,
    of a table whose tokens are below width (at most 2**16): a stable counting sort by the second
    token of the entries made in position order, then one by the first; positions stay ascending
    within a pair, so the order is the entries' own, several times faster than numpy's sort of
    SuperBPE's stage-2 entries. It holds twice the
    entries at its peak, one array more than the sort in place: the 8 bytes a live pair stay within
    the linked engine's 38 a token of merge/fit.py (27 at the initial count)."""
    by_first = np.zeros(width + 1, dtype=np.int64)
    by_second = np.zeros(width + 1, dtype=np.int64)
    for p in range(len(records)):
        q = records[p, 0]
        if q >= 0:
            by_first[records[p, 3] + 1] += 1
            by_second[records[q, 3] + 1] += 1
    for k in range(1, width + 1):
        by_first[k] += by_first[k - 1]
        by_second[k] += by_second[k - 1]
    by_position = np.empty(n_live, dtype=np.uint64)
    for p in range(len(records)):
        q = records[p, 0]
        if q >= 0:
            b = np.int64(records[q, 3])
            by_position[by_second[b]] = np.uint64((np.int64(records[p, 3]) << 48) | (b << 32) | p)
            by_second[b] += 1
    out = np.empty(n_live, dtype=np.uint64)
    for i in range(n_live):
        entry = by_position[i]
        a = np.int64(entry >> np.uint64(48))
        out[by_first[a]] = entry
        by_first[a] += 1
    return out


@kernel(twin="parbpe.merge.engines:LinkedEngine._index_live_pairs")
def sum_sorted_pairs(records, packed):
    """The pair counts of sorted packed entries (sorted_live_pairs'): (keys first << 32 | second, in
    order; the sums of their positions' weights). Two passes: the distinct pairs are counted first,
    so nothing is allocated per entry."""
    distinct = _count_distinct(packed)
    keys = np.empty(distinct, dtype=np.int64)
    sums = np.zeros(distinct, dtype=np.int64)
    _fill_pair_sums(records, packed, keys, sums)
    return keys, sums


@helper
def _count_distinct(packed):
    """The number of pairs of sorted packed entries."""
    distinct = 0
    last = np.uint64(0xFFFFFFFFFFFFFFFF)
    for i in range(len(packed)):
        pair = packed[i] >> np.uint64(32)
        distinct += pair != last
        last = pair
    return distinct


@helper
def _fill_pair_sums(records, packed, keys, sums):
    """The keys and sums (zeros) of the pairs of sorted packed entries (sum_sorted_pairs' second pass)."""
    k = -1
    last = np.uint64(0xFFFFFFFFFFFFFFFF)
    for i in range(len(packed)):
        if i + AHEAD < len(packed):
            prefetch(records, np.int64(packed[i + AHEAD] & np.uint64(0xFFFFFFFF)))
        pair = packed[i] >> np.uint64(32)
        if pair != last:
            k += 1
            keys[k] = np.int64(pair >> np.uint64(16)) << 32 | np.int64(pair & np.uint64(0xFFFF))
            last = pair
        sums[k] += records[np.int64(packed[i] & np.uint64(0xFFFFFFFF)), 2]


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
    in_two(lambda: _count_seconds(records, 0, cut, seconds[0]), lambda: _count_seconds(records, cut, n, seconds[1]))
    starts = _exclusive_sums(seconds)
    by_second = np.empty(n_live, dtype=np.uint64)
    half = n_live // 2
    firsts = _rows(2, 2 * width)  # a thread's: the first tokens bound for by_second[:half], then for the rest
    in_two(lambda: _scatter_by_second(records, 0, cut, starts[0], by_second, half, firsts[0]),
           lambda: _scatter_by_second(records, cut, n, starts[1], by_second, half, firsts[1]))
    totals = _rows(2, width)  # (destination half, first token)
    np.add(firsts[0].reshape(2, width), firsts[1].reshape(2, width), out=totals)
    starts = _exclusive_sums(totals)
    out = np.empty(n_live, dtype=np.uint64)
    in_two(lambda: _scatter_by_first(by_second, 0, half, starts[0], out),
           lambda: _scatter_by_first(by_second, half, n_live, starts[1], out))
    return out


def _rows(parts: int, width: int) -> np.ndarray:
    """parts rows of width int64 zeros, a cache line apart (two threads' counts never share one)."""
    return np.zeros((parts, width + 8), dtype=np.int64)[:, :width]


def _exclusive_sums(counts: np.ndarray) -> np.ndarray:
    """The offsets of a counting sort of counts (part, token: _rows), in _rows: token by token, the
    parts in turn (numpy's cumsum: a small array, one per token and part)."""
    starts = _rows(*counts.shape)
    _offsets(counts, starts)
    return starts


@kernel(twin="parbpe.merge.engines:LinkedEngine._packed_entries")
def _offsets(counts, starts):
    """starts[part, token] = the counts before it, token by token, the parts in turn."""
    at = 0
    for token in range(counts.shape[1]):
        for part in range(counts.shape[0]):
            starts[part, token] = at
            at += counts[part, token]


@kernel(twin="parbpe.merge.engines:LinkedEngine._packed_entries")
def _count_seconds(records, lo, hi, counts):
    """counts[token] += the live pairs at positions lo..hi - 1 whose second token it is."""
    for p in range(lo, hi):
        q = records[p, 0]
        if q >= 0:
            counts[records[q, 3]] += 1


@kernel(twin="parbpe.merge.engines:LinkedEngine._packed_entries")
def _scatter_by_second(records, lo, hi, starts, out, half, firsts):
    """The packed entries of the live pairs at positions lo..hi - 1 placed at starts[second token]
    (moved on), and firsts[first token] += 1 as the place is below half, else firsts[width + first token]."""
    width = len(starts)
    for p in range(lo, hi):
        q = records[p, 0]
        if q >= 0:
            a = np.int64(records[p, 3])
            b = np.int64(records[q, 3])
            at = starts[b]
            out[at] = np.uint64((a << 48) | (b << 32) | p)
            starts[b] = at + 1
            firsts[np.int64(at >= half) * width + a] += 1


@kernel(twin="parbpe.merge.engines:LinkedEngine._packed_entries")
def _scatter_by_first(entries, lo, hi, starts, out):
    """entries[lo:hi] placed at starts[first token] (moved on)."""
    for i in range(lo, hi):
        entry = entries[i]
        a = np.int64(entry >> np.uint64(48))
        out[starts[a]] = entry
        starts[a] += 1


def sum_sorted_pairs_in_two(records: np.ndarray, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum_sorted_pairs' counts, element for element, each side of a pair boundary near the middle of
    the entries in its own thread (one thread where no pair ends near it: one pair makes most), each
    counting its pairs, then writing them to its part of the results: about half sum_sorted_pairs'
    time on SuperBPE's stage-2 entries."""
    n = len(packed)
    cut = _pair_boundary(packed)
    if cut in (0, n):
        return sum_sorted_pairs(records, packed)
    left, right = in_two(lambda: _distinct_pairs(packed[:cut]), lambda: _distinct_pairs(packed[cut:]))
    keys = np.empty(left + right, dtype=np.int64)
    sums = np.zeros(left + right, dtype=np.int64)
    in_two(lambda: _sum_pairs_into(records, packed[:cut], keys[:left], sums[:left]),
           lambda: _sum_pairs_into(records, packed[cut:], keys[left:], sums[left:]))
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


@kernel(twin="parbpe.merge.engines:LinkedEngine._index_live_pairs")
def _distinct_pairs(packed):
    """_count_distinct, a thread's (its kernel)."""
    return _count_distinct(packed)


@kernel(twin="parbpe.merge.engines:LinkedEngine._index_live_pairs")
def _sum_pairs_into(records, packed, keys, sums):
    """_fill_pair_sums, a thread's (its kernel)."""
    _fill_pair_sums(records, packed, keys, sums)


@kernel(twin="parbpe.merge.engines:LinkedEngine._index_live_pairs")
def count_live_pairs(records, n_live, width):
    """sorted_live_pairs' entries, and the pair counts (sorted keys, sums), of a table whose tokens are
    below width: a counting sort over the width**2 pairs, two passes over the positions."""
    starts = np.zeros(width * width + 1, dtype=np.int64)
    sums = np.zeros(width * width, dtype=np.int64)
    for p in range(len(records)):
        q = records[p, 0]
        if q >= 0:
            k = np.int64(records[p, 3]) * width + np.int64(records[q, 3])
            starts[k + 1] += 1
            sums[k] += records[p, 2]
    for k in range(1, len(starts)):
        starts[k] += starts[k - 1]
    out = np.empty(n_live, dtype=np.uint64)
    for p in range(len(records)):
        q = records[p, 0]
        if q >= 0:
            a, b = np.int64(records[p, 3]), np.int64(records[q, 3])
            k = a * width + b
            out[starts[k]] = np.uint64((a << 48) | (b << 32) | p)
            starts[k] += 1
    n_seen = 0  # the pairs seen, in key order (loops: numba compiles flatnonzero and fancy indexing's machinery)
    for k in range(len(sums)):
        n_seen += sums[k] != 0
    keys = np.empty(n_seen, dtype=np.int64)
    seen_sums = np.empty(n_seen, dtype=np.int64)
    j = 0
    for k in range(len(sums)):
        if sums[k] != 0:
            keys[j] = (k // width) << 32 | (k % width)
            seen_sums[j] = sums[k]
            j += 1
    return out, keys, seen_sums


def fill_records_in_two(records: np.ndarray, tokens: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> None:
    """fill_records, each half of the chunks in its own thread. The records are new memory, and its
    first touch is most of the fill, which two threads share."""
    h = len(counts) // 2
    in_two(lambda: fill_records(records, tokens, starts[:h + 1], counts[:h]),
           lambda: fill_records(records, tokens, starts[h:], counts[h:]))


@kernel(twin="parbpe.merge.engines:LinkedEngine.__init__")
def fill_records(records, tokens, starts, counts):
    """Each position's record: its neighbours within its chunk (-1 at the ends), its chunk's count, its token."""
    for c in range(len(counts)):
        first, end = starts[c], starts[c + 1]
        for p in range(first, end):
            records[p, 0] = p + 1 if p + 1 < end else -1
            records[p, 1] = p - 1 if p > first else -1
            records[p, 2] = counts[c]
            records[p, 3] = tokens[p]
