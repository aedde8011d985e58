"""Ranking pairs and choosing safe batches of merges (the coordinator's side of a merge round).

Rank order (DESIGN.md "Ties"): higher count first; on equal counts the lexicographically greater
pair, comparing the first token's bytes, then the second's; never hash or dict order. Two tokens
can have the same bytes (merges (ab, c) and (a, bc) both give abc); then the higher id counts as
greater, so the order stays total.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..kernels.selection import NEGATIVE, NOT_COUNTED, by_age, lower_by_key, rising_by_age


class Descending:
    """A token's bytes, ordered in reverse: greater bytes sort first (a proper prefix after every
    longer string it begins). It wraps the bytes without copying them, so a tie key costs nothing
    whatever the token's length, and two keys compare in time bounded by their common prefix.
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __lt__(self, other: Descending) -> bool:
        return self.data > other.data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and self.data == other.data

    def __hash__(self) -> int:
        return hash(self.data)

    def __repr__(self) -> str:
        return f"Descending({self.data!r})"


class PairCounts:
    """The current count of every pair, in numpy arrays ordered so that new pairs are appended.

    Entries are ordered by an age key: the pair's larger token id first (then which side it is
    on, then the smaller id). A merge round creates pairs only with its new tokens, whose ids
    exceed every id before, so the round's new pairs sort after all stored ones: they are appended
    (to arrays with room to grow), and lowering counts is one searchsorted. No Python object per
    pair. Pairs whose count fell to zero stay as zeros until they are half the store.
    """

    def __init__(self, keys: np.ndarray, counts: np.ndarray, use_kernels: bool = False) -> None:
        # with kernels: falling counts found through _high_starts (lower_by_key), new pairs put in
        # age order by a counting sort (rising_by_age), where numpy sorts and searches the store
        self.use_kernels = use_kernels
        keys, counts = np.asarray(keys, dtype=np.int64), np.asarray(counts, dtype=np.int64)
        n = len(keys)
        # Room for as many new pairs as there are pairs, left unwritten (no memory until pairs arrive):
        # growing the store later copied it into new memory, whose first touch is slow (SuperBPE's stage 2).
        room = 2 * n
        if use_kernels and n > 1 and bool(np.all(keys[1:] > keys[:-1])):  # (as every engine counts them)
            self._ages, self._counts = by_age(keys, counts, room)
        else:
            ages = age_key(keys)
            order = np.argsort(ages)
            self._ages, self._counts = np.empty(room, dtype=np.uint64), np.empty(room, dtype=np.int64)
            np.take(ages, order, out=self._ages[:n])
            np.take(counts, order, out=self._counts[:n])
        self._size = n
        self.live = self._size  # entries with a non-zero count
        # _high_starts[h]: the first entry whose larger token is h or above (its last one: the end), the
        # first _highs of an array with room to grow (a serial run adds a token a round)
        self._high_starts, self._highs = self._starts_by_high() if use_kernels else (None, 0)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(age keys, counts) of every entry, dead ones included (count 0)."""
        return self._ages[:self._size], self._counts[:self._size]

    def count_of(self, key: int) -> int:
        """The current count of one pair (0 if it has none)."""
        ages, counts = self.arrays()
        age = age_key(np.array([key], dtype=np.int64))[0]
        at = int(np.searchsorted(ages, age))
        return int(counts[at]) if at < len(ages) and ages[at] == age else 0

    def update(self, keys: np.ndarray, deltas: np.ndarray) -> None:
        """Add count changes for distinct pairs. Positive deltas are new pairs, which must hold a
        token newer than every pair stored; negative ones lower existing pairs."""
        if self.use_kernels:
            stored, counts = self.arrays()
            ascending, new_ages, new_counts = rising_by_age(keys, deltas)
            if ascending:  # (as engines give them; a ranking's pairs, taken out, come in rank order)
                self._check(lower_by_key(stored, counts, self._high_starts[:self._highs], keys, deltas))
                self._add_new(new_ages, new_counts)
                return
        ages = age_key(keys)
        falling = deltas < 0
        stored, counts = self.arrays()
        fall_ages, fall_deltas = ages[falling], deltas[falling]
        order = np.argsort(fall_ages)
        self._check(_lower_counts_numpy(stored, counts, fall_ages[order], fall_deltas[order]))
        new_ages = ages[~falling]
        order = np.argsort(new_ages)
        self._add_new(new_ages[order], deltas[~falling][order])

    def _check(self, emptied: int) -> None:
        """Raise for a refused change (nothing changed); else count the pairs that fell to zero."""
        if emptied == NOT_COUNTED:
            raise AssertionError("a count change for a pair that is not counted")
        if emptied == NEGATIVE:
            raise AssertionError("a pair count went negative")
        self.live -= emptied

    def _add_new(self, new_ages: np.ndarray, new_counts: np.ndarray) -> None:
        """Append new pairs (ages ascending), then drop the dead entries once they are half the store."""
        if len(new_ages):
            if self._size and new_ages[0] <= self._ages[self._size - 1]:
                raise AssertionError("an existing pair gained occurrences, or a new pair holds no new token")
            self._append(new_ages, new_counts)
        if self._size > 2 * self.live + 1024:
            ages, counts = self.arrays()
            kept = counts != 0
            self._ages, self._counts = ages[kept], counts[kept]
            self._size = len(self._ages)
            if self.use_kernels:
                self._high_starts, self._highs = self._starts_by_high()

    def _starts_by_high(self) -> tuple[np.ndarray, int]:
        """_high_starts of the store (for each larger token h up to the last one's, then one past it),
        and how many."""
        highs = self._ages[:self._size] >> np.uint64(33)
        top = int(highs[-1]) + 1 if self._size else 0
        return np.searchsorted(highs, np.arange(top + 1, dtype=np.uint64)), top + 1

    def _append(self, ages: np.ndarray, counts: np.ndarray) -> None:
        end = self._size + len(ages)
        if end > len(self._ages):
            room = max(end, 2 * len(self._ages))
            self._ages, self._counts = _grown(self._ages, self._size, room), _grown(self._counts, self._size, room)
        self._ages[self._size:end] = ages
        self._counts[self._size:end] = counts
        if self.use_kernels:  # the new larger tokens' starts: their ages come after every stored one
            highs = ages >> np.uint64(33)
            top = self._highs - 1  # the first larger token past the store's
            more = np.searchsorted(highs, np.arange(top + 1, int(highs[-1]) + 2, dtype=np.uint64)) + self._size
            if self._highs + len(more) > len(self._high_starts):
                grown = np.empty(2 * (self._highs + len(more)), dtype=self._high_starts.dtype)
                grown[:self._highs] = self._high_starts[:self._highs]
                self._high_starts = grown
            self._high_starts[self._highs:self._highs + len(more)] = more
            self._highs += len(more)
        self._size = end
        self.live += len(ages)


def _grown(array: np.ndarray, used: int, room: int) -> np.ndarray:
    """A new array of room items holding array[:used]; the rest is left as it comes (read only once
    written): its pages are touched as pairs arrive, where writing zeros there touched them all at
    once (slow for SuperBPE's stage-2 store of millions of pairs)."""
    out = np.empty(room, dtype=array.dtype)
    out[:used] = array[:used]
    return out


def _lower_counts_numpy(stored: np.ndarray, counts: np.ndarray, ages: np.ndarray, deltas: np.ndarray) -> int:
    """counts[searchsorted(stored, ages)] += deltas for ascending ages of stored pairs, numpy's way (the
    kernels' twin: lower_by_key); the number of counts that fell to zero, or NOT_COUNTED / NEGATIVE,
    changing nothing, when an age is not stored or a count would go below zero."""
    at = np.searchsorted(stored, ages)
    if len(at) and (at[-1] >= len(stored) or not np.array_equal(stored[at], ages)):
        return NOT_COUNTED
    left = counts[at] + deltas
    if (left < 0).any():
        return NEGATIVE
    counts[at] = left
    return int(np.count_nonzero(left == 0))


def age_key(keys: np.ndarray) -> np.ndarray:
    """uint64 keys ordering pairs by their larger token id: max << 33 | (first < second) << 32 | min."""
    keys = np.asarray(keys, dtype=np.int64)
    first, second = keys >> 32, keys & 0xFFFFFFFF
    high, low = np.maximum(first, second), np.minimum(first, second)
    return ((high.astype(np.uint64) << np.uint64(33)) | ((first < second).astype(np.uint64) << np.uint64(32))
            | low.astype(np.uint64))


def pair_of_age(ages: np.ndarray) -> np.ndarray:
    """Inverse of age_key: the int64 pair keys first << 32 | second."""
    high = (ages >> np.uint64(33)).astype(np.int64)
    low = (ages & np.uint64(0xFFFFFFFF)).astype(np.int64)
    first_low = ((ages >> np.uint64(32)) & np.uint64(1)).astype(bool)
    return np.where(first_low, (low << 32) | high, (high << 32) | low)


class PairQueue:
    """Current pair counts (PairCounts) and the ranking of the top pairs.

    Two views serve the two kinds of round. A lazy max-heap serves narrow rounds (serial BPE):
    only pairs whose count is at least its threshold are on it, every other pair has a smaller
    count. A numpy candidate pool serves wide rounds (BatchBPE ranks thousands of pairs): it
    holds every pair with a count at least the pool threshold, and is ranked with numpy. Counts
    of existing pairs only ever fall (merges create pairs only with new tokens), so both views
    are checked against the store when used and rebuilt when they run short.
    """

    NARROW = 16  # widths up to this use the heap
    # Pairs put on the heap when it is (re)built: HEAP_FIRST the first time, twice as many each time it
    # runs short, at most HEAP_MOST. BatchBPE's last rounds (widths below NARROW) rank a few dozen pairs
    # in all, and building a heap of 4,096 entries (with their tie keys) cost more than their ranking;
    # serial runs pop tens of thousands and soon rebuild at the most.
    HEAP_FIRST = 64
    HEAP_MOST = 4096

    def __init__(self, keys: np.ndarray, counts: np.ndarray, vocab: list[bytes], use_kernels: bool = False) -> None:
        self.counts = PairCounts(keys, counts, use_kernels)
        self._bytes: list[bytes] = list(vocab)  # every token's bytes
        self._ties: dict[int, Descending] = {}  # tie_key of the tokens asked for, made once each
        # Each token's first 8 bytes as a big-endian number (zero-padded) and its length up to 9: they
        # order tokens by bytes in numpy, but for tokens longer than 8 bytes that share their first 8.
        self._prefix = np.zeros(max(len(vocab), 1024), dtype=np.uint64)
        self._length = np.zeros(len(self._prefix), dtype=np.int64)
        self._set_prefixes(0, self._bytes)
        self._heap: list[tuple[int, Descending, int, Descending, int, int]] = []
        self._heap_threshold = float("inf")
        self._heap_size = self.HEAP_FIRST
        # The pool: sorted keys and their current counts, kept up to date from the deltas.
        self._pool_keys = np.zeros(0, dtype=np.int64)
        self._pool_counts = np.zeros(0, dtype=np.int64)
        self._pool_threshold = float("inf")

    def add_token(self, token_bytes: bytes) -> None:
        """Register the bytes of the next token id (called once per merge, in id order)."""
        self.add_tokens([token_bytes])

    def add_tokens(self, tokens: list[bytes]) -> None:
        """Register the bytes of the next token ids, in id order (a round's merges at once)."""
        first = len(self._bytes)
        self._bytes.extend(tokens)
        if len(self._bytes) > len(self._prefix):
            room = max(len(self._bytes), 2 * len(self._prefix))
            self._prefix = np.concatenate([self._prefix, np.zeros(room - len(self._prefix), dtype=np.uint64)])
            self._length = np.concatenate([self._length, np.zeros(room - len(self._length), dtype=np.int64)])
        self._set_prefixes(first, tokens)

    def _set_prefixes(self, first: int, tokens: list[bytes]) -> None:
        """Tokens first, first + 1, ...: their first 8 bytes as a big-endian number and length up to 9."""
        if not tokens:
            return
        padded = b"".join(token[:8].ljust(8, b"\0") for token in tokens)
        self._prefix[first:first + len(tokens)] = np.frombuffer(padded, dtype=">u8")
        self._length[first:first + len(tokens)] = np.minimum(np.fromiter(map(len, tokens), np.int64, len(tokens)), 9)

    def _byte_order(self, tokens: np.ndarray) -> np.ndarray:
        """tokens (ascending ids) by bytes descending, the higher id first among equal bytes."""
        prefix, length = self._prefix[tokens], self._length[tokens]
        order = np.lexsort((-tokens, -length, ~prefix))
        ordered, prefix, length = tokens[order], prefix[order], length[order]
        # Tokens longer than 8 bytes with the same first 8: their runs sorted by all their bytes.
        same = (prefix[1:] == prefix[:-1]) & (length[1:] == 9) & (length[:-1] == 9)
        if same.any():
            edges = np.flatnonzero(np.diff(np.concatenate([[0], same.astype(np.int8), [0]])))
            for start, stop in zip(edges[::2].tolist(), (edges[1::2] + 1).tolist()):
                run = sorted(ordered[start:stop].tolist(), reverse=True)
                ordered[start:stop] = sorted(run, key=self._bytes.__getitem__, reverse=True)
        return ordered

    def __len__(self) -> int:
        return self.counts.live

    def tie_key(self, token: int) -> Descending:
        """The tie-rule key of a token: its bytes, greater first (made once per token: heap entries
        of serial rounds ask for them tens of thousands of times)."""
        key = self._ties.get(token)
        if key is None:
            key = self._ties[token] = Descending(self._bytes[token])
        return key

    def _entry(self, key: int, count: int) -> tuple[int, Descending, int, Descending, int, int]:
        first, second = key >> 32, key & 0xFFFFFFFF
        return (-count, self.tie_key(first), -first, self.tie_key(second), -second, key)

    def update(self, keys: np.ndarray, deltas: np.ndarray) -> None:
        """Add count changes for distinct keys. Positive deltas are new pairs (a new pair always
        holds a token made this round); negative ones lower existing pairs."""
        self.counts.update(keys, deltas)
        falling = deltas < 0
        fall_keys, fall_deltas = keys[falling], deltas[falling]
        new_keys, new_counts = keys[~falling], deltas[~falling]
        self._update_pool(fall_keys, fall_deltas, new_keys, new_counts)
        heaped = new_counts >= self._heap_threshold
        for key, count in zip(new_keys[heaped].tolist(), new_counts[heaped].tolist()):
            heapq.heappush(self._heap, self._entry(key, count))

    def ranked(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The n top pairs in rank order as (keys, counts); fewer if fewer exist."""
        if n <= self.NARROW:
            return self._ranked_narrow(n)
        return self._ranked_wide(n)

    # -- narrow rounds: the heap -------------------------------------------------------------

    def _refill_heap(self, wanted: int) -> None:
        keys, values, threshold = self._top_region(max(wanted, self._heap_size))
        self._heap_size = min(2 * self._heap_size, self.HEAP_MOST)
        self._heap = [self._entry(k, c) for k, c in zip(keys.tolist(), values.tolist())]
        heapq.heapify(self._heap)
        self._heap_threshold = threshold

    def _pop(self) -> tuple[int, int] | None:
        """Pop the top pair (key, count), or None when the heap runs out."""
        while self._heap:
            neg, *_, key = heapq.heappop(self._heap)
            current = self.counts.count_of(key)
            if current == -neg:
                return key, current
            if current >= self._heap_threshold:
                heapq.heappush(self._heap, self._entry(key, current))
            # else: it now belongs below the threshold, off the heap
        return None

    def _ranked_narrow(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        while True:
            top = []
            while len(top) < n:
                item = self._pop()
                if item is None:
                    break
                top.append(item)
            if len(top) == n or len(top) == self.counts.live:
                break
            # The heap ran out: rebuild it lower from the store (which still holds the popped
            # pairs) and rank again.
            self._refill_heap(n)
        for key, count in top:
            heapq.heappush(self._heap, self._entry(key, count))
        return (np.array([k for k, _ in top], dtype=np.int64), np.array([c for _, c in top], dtype=np.int64))

    # -- wide rounds: the numpy pool ---------------------------------------------------------

    def _top_region(self, target: int) -> tuple[np.ndarray, np.ndarray, int]:
        """All pairs whose count is at least the target-th largest: (keys, counts, that count)."""
        ages, values = self.counts.arrays()
        target = min(self.counts.live, target)  # the zeros of dead pairs rank below every live pair
        threshold = int(np.partition(values, len(values) - target)[len(values) - target])
        top = np.flatnonzero(values >= threshold)
        keys = pair_of_age(ages[top])
        order = np.argsort(keys)
        return keys[order], values[top][order], threshold

    def _update_pool(self, fall_keys, fall_deltas, new_keys, new_counts) -> None:
        """Apply count changes to the pool; new pairs join it when they reach its threshold."""
        pool_keys, pool_counts = self._pool_keys, self._pool_counts
        if len(pool_keys) and len(fall_keys):
            at = np.searchsorted(pool_keys, fall_keys)
            at[at == len(pool_keys)] = 0
            inside = pool_keys[at] == fall_keys
            pool_counts[at[inside]] += fall_deltas[inside]
        joining = new_counts >= self._pool_threshold
        if joining.any():
            keys = np.concatenate([pool_keys, new_keys[joining]])
            order = np.argsort(keys, kind="stable")
            self._pool_keys = keys[order]
            self._pool_counts = np.concatenate([pool_counts, new_counts[joining]])[order]

    def _ranked_wide(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.counts.live:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        live = self._pool_counts >= self._pool_threshold
        n_live = int(live.sum())
        if n_live < n and n_live < self.counts.live:
            keys, counts, self._pool_threshold = self._top_region(max(2 * n, 4096))
        else:
            keys, counts = self._pool_keys[live], self._pool_counts[live]
            if len(keys) > 4 * n + 4096:
                # Raise the threshold: what leaves the pool is below it, like all outside it.
                cut = len(keys) - (2 * n + 4096)
                self._pool_threshold = int(np.partition(counts, cut)[cut])
                keep = counts >= self._pool_threshold
                keys, counts = keys[keep], counts[keep]
        self._pool_keys, self._pool_counts = keys, counts
        if len(keys) > n:
            kth = np.partition(counts, len(keys) - n)[len(keys) - n]
            near = counts >= kth
            keys, counts = keys[near], counts[near]
        # Rank order: count, then first token's bytes, then second's; all descending. Tokens are
        # ranked among those of these pairs only (place 0: the greatest), which orders the pairs the
        # same: by 8-byte prefixes in numpy, and by all their bytes only where long tokens share a
        # prefix (_byte_order; a Python sort of every token's bytes was most of a round's selection).
        first, second = keys >> 32, keys & 0xFFFFFFFF
        present = np.zeros(int(max(first.max(), second.max())) + 1, dtype=bool)
        present[first] = True
        present[second] = True
        tokens = np.flatnonzero(present)
        place = np.zeros(len(present), dtype=np.int64)
        place[self._byte_order(tokens)] = np.arange(len(tokens))
        width = max(len(tokens), 1)
        by_tokens = place[first] * width + place[second]
        if int(counts.max()) < (2**62) // (width**2):
            order = np.argsort(by_tokens - counts * width**2)[:n]  # one sort on one int64 key
        else:
            by_tokens = np.argsort(by_tokens)
            order = by_tokens[np.argsort(-counts[by_tokens], kind="stable")[:n]]
        return keys[order], counts[order]


def safe_batch(ranked_keys: np.ndarray) -> np.ndarray:
    """BatchBPE's safe batch, as a mask over the ranked pairs.

    Walking the ranked pairs in order, a pair is skipped when its first token was already seen in
    second position, or its second token in first position; skipped pairs still mark their tokens
    as seen. Since being seen does not depend on being accepted, pair k is skipped exactly when
    its first token is the second of an earlier pair or its second token the first of one.
    """
    first = ranked_keys >> 32
    second = ranked_keys & 0xFFFFFFFF
    if len(ranked_keys) == 0:
        return np.zeros(0, dtype=bool)
    position = np.arange(len(ranked_keys))
    size = int(max(first.max(), second.max())) + 1
    return (_earliest(second, size)[first] >= position) & (_earliest(first, size)[second] >= position)


def _earliest(column: np.ndarray, size: int) -> np.ndarray:
    """For each token id below size, the first index at which it appears in column (len(column) if never)."""
    first_at = np.full(size, len(column), dtype=np.int64)
    np.minimum.at(first_at, column, np.arange(len(column)))
    return first_at


def search_width(merges_remaining: int, vocab_now: int, cap_divisor: int, max_batch_size: int) -> int:
    """How many top pairs BatchBPE looks at this round: at most merges_remaining // cap_divisor,
    at most the current vocabulary size, at most max_batch_size (0 = no limit), at least 1."""
    width = min(merges_remaining // cap_divisor, vocab_now)
    if max_batch_size:
        width = min(width, max_batch_size)
    return max(width, 1)
