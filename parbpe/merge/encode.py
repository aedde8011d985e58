"""A chunk table encoded with a list of merges, as BPE encodes: vectorized, no pair counts kept.

SuperBPE's stage 2 starts from its chunks encoded with stage 1's merges. Replaying the merges
through a merge engine keeps every pair count up to date after every round, which is most of its
cost; here the counts are not needed (the merge stage counts the encoded table once). The merges
are applied a batch at a time, in order: the batches of a BatchBPE run are safe (no token is the
second of one pair and the first of another), so a batch applied at once gives what its merges
applied one by one give; a pair (x, x) merges its runs left to right. Positions form a linked list
per chunk; each position waits in the bucket of the batch its pair belongs to, and a merge puts
the new pairs on both sides of its token in the buckets of later batches (a pair that holds a new
token can only be merged by a later batch). A round costs in proportion to its occurrences.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import jit
from ..kernels.encode import encode_chunks
from ..run.threads import in_two
from .pairs import gather, pack, runs_taken_left_to_right
from .table import ChunkTable, token_dtype

_SLICE = 1 << 22  # positions looked up at a time when the buckets are filled


def encode_byte_table(table: ChunkTable, merges: list[tuple[int, int]], batch_sizes: list[int],
                      dtype: np.dtype | None = None, threads: int = 1) -> ChunkTable:
    """encode_table for a table of bytes (tokens 0-255) and merges of tokens 256 on, through its pieces;
    the new table's tokens are of dtype (default the table's: a table of bytes may be uint8).

    A merge never makes a token across two adjacent bytes x, y that no token of the merges holds
    side by side: its bytes would hold them. So the chunks are cut there (SuperBPE's phrases fall
    apart into their words), each distinct piece is encoded once (encode_table), and every chunk is
    its pieces' tokens in order: exactly the chunk encoded whole, for a fraction of the work. With
    the kernels (jit.merge_kernels) one pass cuts, looks each piece up and encodes the new
    ones (_encode_cached: a few times faster than numpy and pyarrow, and than a kernel encoding the
    distinct pieces pyarrow had found, since most pieces repeat), each half of the table in its own
    thread with threads=2; else numpy and pyarrow (the reference).
    """
    inside = _held_by_merges(merges)
    dtype = np.dtype(dtype or table.tokens.dtype)
    n = len(table.tokens)
    if n == 0 or not np.array_equal(table.lengths, np.diff(table.starts)) or int(table.tokens.max()) > 255:
        return encode_table(table, merges, batch_sizes, 256, dtype)
    if jit.merge_kernels(n):
        tokens, lengths = _encode_cached(table.tokens, table.starts, merges, inside.ravel(), dtype, threads)
        return _table_of(tokens, lengths, table.counts.copy())
    import pyarrow as pa  # here, not at the top: merge workers that only merge never load pyarrow
    import pyarrow.compute as pc

    # The largest moment is the pieces' bounds (int64 per piece) beside arrow's dictionary of them;
    # the rest goes a slice at a time (numpy's fancy indexing makes an intp per element).
    data = table.tokens.astype(np.uint8, copy=False)
    cut = np.ones(n + 1, dtype=bool)  # a piece starts here; position n closes the last piece
    flat_inside = inside.ravel()
    for lo in range(1, n, _SLICE):
        hi = min(lo + _SLICE, n)
        pair = data[lo - 1:hi - 1].astype(np.uint16) << 8
        pair |= data[lo:hi]
        np.logical_not(flat_inside[pair], out=cut[lo:hi])
    cut[table.starts[:-1]] = True
    bounds = np.flatnonzero(cut)
    del cut
    pieces = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(bounds) - 1,
                                              [None, pa.py_buffer(bounds), pa.py_buffer(np.ascontiguousarray(data))])
    encoded = pc.dictionary_encode(pieces)
    del pieces
    which = encoded.indices.to_numpy()
    distinct = encoded.dictionary
    _, piece_offsets, piece_data = distinct.buffers()
    piece_offsets = np.frombuffer(piece_offsets, np.int64)[distinct.offset:distinct.offset + len(distinct) + 1]
    piece_bytes = np.frombuffer(piece_data, np.uint8)[piece_offsets[0]:piece_offsets[-1]]
    piece_starts = piece_offsets - piece_offsets[0]
    one_each = ChunkTable(tokens=piece_bytes, starts=piece_starts,
                          lengths=np.diff(piece_starts), counts=np.ones(len(distinct), dtype=np.int64))
    done = encode_table(one_each, merges, batch_sizes, 256, dtype)
    del encoded, distinct, one_each, piece_offsets, piece_bytes, piece_data
    pa.default_memory_pool().release_unused()  # arrow's pool keeps freed pages for itself otherwise
    # Every chunk is its pieces' tokens, in order: chunk c's pieces begin at piece first[c].
    first = np.searchsorted(bounds, table.starts)
    del bounds
    at = np.zeros(len(which) + 1, dtype=np.int64)  # where each piece's tokens go
    np.cumsum(done.lengths[which], out=at[1:])
    tokens = np.empty(int(at[-1]), dtype=dtype)
    for lo in range(0, len(which), _SLICE):
        some = which[lo:lo + _SLICE]
        idx, _ = gather(done.tokens, done.starts[some], done.lengths[some])
        tokens[at[lo]:at[lo + len(some)]] = done.tokens[idx]
    starts = at[first]
    return ChunkTable(tokens=tokens, starts=starts, lengths=np.diff(starts), counts=table.counts.copy())


def encode_table(table: ChunkTable, merges: list[tuple[int, int]], batch_sizes: list[int], first_id: int,
                 dtype: np.dtype | None = None) -> ChunkTable:
    """A new, compact table: each chunk of table encoded with merges (merge k makes token first_id + k),
    applied in the batches batch_sizes (each a safe batch, in rank order); tokens of dtype (default the table's)."""
    dtype = np.dtype(dtype or table.tokens.dtype)
    if sum(batch_sizes) != len(merges):
        raise ValueError(f"{len(merges)} merges in batches of {sum(batch_sizes)} in all")
    if not merges or len(table.tokens) == 0:
        return ChunkTable(tokens=table.tokens.astype(dtype), starts=table.starts.copy(), lengths=table.lengths.copy(),
                          counts=table.counts.copy())
    chain = _Chain(table)
    book = _MergeBook(merges, batch_sizes, first_id)
    first_pos, first_at, bounds = _first_found(chain, book)
    # A position's stamp is the last batch that changed its pair (-1: none yet). An entry waiting
    # in a batch's bucket holds (positions, merge indices, the stamp when they were found): it is
    # stale once the stamp moved on, and the position's new pair is in another entry.
    stamp = np.full(len(chain.tokens), -1, dtype=np.int32)
    waiting: dict[int, list[tuple[np.ndarray, np.ndarray, int]]] = {}
    for k in range(len(batch_sizes)):
        entries = [(first_pos[bounds[k]:bounds[k + 1]], first_at[bounds[k]:bounds[k + 1]], -1), *waiting.pop(k, [])]
        valid = [stamp[pos] == made for pos, _, made in entries]
        cand = np.concatenate([pos[ok] for (pos, _, _), ok in zip(entries, valid)])
        at = np.concatenate([at[ok] for (_, at, _), ok in zip(entries, valid)]).astype(np.int64)
        if not len(cand):
            continue
        self_pair = (book.keys[at] >> 32) == (book.keys[at] & 0xFFFFFFFF)
        cand, at = runs_taken_left_to_right(cand, at, self_pair, chain.prv)
        gone, before = chain.merge(cand, book.new_of[at])
        stamp[gone] = k
        stamp[before] = k
        stamp[cand] = k
        _wait_for_later_batches(chain, book, np.concatenate([before, cand]), k, waiting)
    del first_pos, first_at, stamp
    return chain.compacted(dtype, table.counts)


class _Chain:
    """encode_table's table as a linked list of positions per chunk: its tokens (int32, compacted
    where the table holds merged chunks), next and previous links (-1 at a chunk's ends), and which
    positions are still alive (a merge kills its second position)."""

    def __init__(self, table: ChunkTable) -> None:
        n = len(table.tokens)
        self.lengths = lengths = table.lengths.copy()
        if np.array_equal(lengths, np.diff(table.starts)):
            self.tokens = table.tokens.astype(np.int32)
        else:  # the table holds merged chunks: their tokens, compacted
            region = np.repeat(np.arange(table.n_chunks), np.diff(table.starts))
            self.tokens = table.tokens[np.arange(n) - table.starts[region] < lengths[region]].astype(np.int32)
            del region
        self.starts = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.starts[1:])
        n = len(self.tokens)
        self.link = np.int32 if n < 2**31 - 1 else np.int64  # positions and links: 4 bytes each while they fit
        self.nxt = np.arange(1, n + 1, dtype=self.link)
        self.prv = np.arange(-1, n - 1, dtype=self.link)
        self.nonempty = lengths > 0
        self.nxt[self.starts[1:][self.nonempty] - 1] = -1
        self.prv[self.starts[:-1][self.nonempty]] = -1
        self.alive = np.ones(n, dtype=bool)
        self._is_hit = np.zeros(n, dtype=bool)  # merge's scratch, all False between calls

    def merge(self, cand: np.ndarray, new_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Merge each position of cand with the next into new_tokens; returns (the positions merged
        away, the live positions just before a merge that are not merges themselves)."""
        nxt, prv = self.nxt, self.prv
        gone = nxt[cand]
        self.tokens[cand] = new_tokens
        self.alive[gone] = False
        after = nxt[gone]
        nxt[cand] = after
        has_after = after >= 0
        prv[after[has_after]] = cand[has_after]
        before = prv[cand]
        self._is_hit[cand] = True
        before = before[(before >= 0) & ~self._is_hit[np.maximum(before, 0)]]  # a hit right before a hit: once
        self._is_hit[cand] = False
        return gone, before

    def compacted(self, dtype: np.dtype, counts: np.ndarray) -> ChunkTable:
        """The live tokens as a compact table of dtype, with the chunks' counts."""
        new_lengths = np.zeros(len(self.lengths), dtype=np.int64)
        new_lengths[self.nonempty] = np.add.reduceat(self.alive, self.starts[:-1][self.nonempty])
        new_starts = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(new_lengths, out=new_starts[1:])
        return ChunkTable(tokens=self.tokens[self.alive].astype(dtype), starts=new_starts, lengths=new_lengths,
                          counts=counts.copy())


class _MergeBook:
    """Every merge's pair key, sorted, with its batch and the token it makes; lookup finds them."""

    def __init__(self, merges: list[tuple[int, int]], batch_sizes: list[int], first_id: int) -> None:
        keys = pack(np.array([a for a, _ in merges], dtype=np.int64), np.array([b for _, b in merges], dtype=np.int64))
        batch_of = np.repeat(np.arange(len(batch_sizes), dtype=np.int64), batch_sizes)
        new_of = first_id + np.arange(len(merges), dtype=np.int64)
        order = np.argsort(keys)
        self.keys, self.batch_of, self.new_of = keys[order], batch_of[order], new_of[order]
        if len(keys) > 1 and (np.diff(self.keys) == 0).any():
            raise ValueError("a merge list with a pair twice")
        self.batches = len(batch_sizes)
        self.narrow = np.uint16 if self.batches < 2**16 else np.int32  # a batch number, stored

    def lookup(self, chain: _Chain, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions holding a merge's pair, that merge's batch, its index in the sorted keys)."""
        after = chain.nxt[positions]
        positions = positions[after >= 0]
        pair = pack(chain.tokens[positions], chain.tokens[chain.nxt[positions]])
        at = np.searchsorted(self.keys, pair)
        at[at == len(self.keys)] = 0
        found = self.keys[at] == pair
        return positions[found], self.batch_of[at[found]], at[found]


def _first_found(chain: _Chain, book: _MergeBook) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every position that holds a merge's pair before any merge, grouped by batch (a stable radix
    sort keeps each batch's positions in order), found a slice of positions at a time (bounds the
    temporaries): (positions, merge indices, each batch's bounds in them)."""
    found_pos, found_batch, found_at = [], [], []
    n = len(chain.tokens)
    for lo in range(0, n, _SLICE):
        at_pos, batches, at = book.lookup(chain, np.arange(lo, min(lo + _SLICE, n), dtype=chain.link))
        found_pos.append(at_pos)
        found_batch.append(batches.astype(book.narrow))
        found_at.append(at.astype(np.int32))
    batches = np.concatenate(found_batch)
    order = np.argsort(batches, kind="stable")
    bounds = np.searchsorted(batches[order], np.arange(book.batches + 1))
    del batches, found_batch
    return np.concatenate(found_pos)[order], np.concatenate(found_at)[order], bounds


def _wait_for_later_batches(chain: _Chain, book: _MergeBook, positions: np.ndarray, k: int,
                            waiting: dict[int, list[tuple[np.ndarray, np.ndarray, int]]]) -> None:
    """The pairs a batch k made at positions that a merge makes, each put in its batch's bucket."""
    found, later, found_at = book.lookup(chain, positions)
    if not len(found):
        return
    order = np.argsort(later.astype(book.narrow), kind="stable")
    found, later, found_at = found[order], later[order], found_at[order]
    if later[0] <= k:
        raise AssertionError("a merge made a pair of an earlier batch: the batches are not in rank order")
    cuts = np.flatnonzero(np.diff(later)) + 1
    heads = later[np.concatenate([[0], cuts])].tolist()
    for pos, at, batch in zip(np.split(found, cuts), np.split(found_at, cuts), heads):
        waiting.setdefault(batch, []).append((pos, at, k))


def rank_order_batches(merges: list[tuple[int, int]], first_id: int = 256) -> list[int]:
    """Sizes of consecutive batches of merges (merge k makes token first_id + k, in rank order)
    that encode_table may apply a batch at a time and still give the merges one by one: a batch
    ends before a merge that uses a token made in it, or whose first token is the second of a
    merge in it, or whose second token is the first of one (pairs that could overlap)."""
    sizes: list[int] = []
    made: set[int] = set()
    firsts: set[int] = set()
    seconds: set[int] = set()
    size = 0
    for k, (a, b) in enumerate(merges):
        if a in made or b in made or a in seconds or b in firsts:
            sizes.append(size)
            size = 0
            made.clear()
            firsts.clear()
            seconds.clear()
        made.add(first_id + k)
        firsts.add(a)
        seconds.add(b)
        size += 1
    if size:
        sizes.append(size)
    return sizes


def sampled_tokens_per_byte(data: np.ndarray, offsets: np.ndarray, merges: list[tuple[int, int]],
                            batch_sizes: list[int], sample_bytes: int = 4 << 20, dtype: np.dtype | None = None
                            ) -> float:
    """Tokens per byte that encoding chunks (chunk k is data[offsets[k]:offsets[k + 1]]) with merges
    leaves, measured on evenly spaced chunks of about sample_bytes in all: what a table of these
    chunks will hold once encoded, known before it is built (the merge stage's memory estimate).
    dtype: the tokens' (default uint16 or int32 as the merges need), the table's own encoding's, so
    that the encoding kernel is compiled for one signature, not two (each costs a compile in a cold
    cache)."""
    lengths = np.diff(offsets)
    multi = np.flatnonzero(lengths > 1)  # the table leaves out chunks of one byte
    total = int(lengths[multi].sum())
    if total == 0:
        return 1.0
    step = max(1, int(total // max(sample_bytes, 1)))
    picked = multi[::step]
    picked_lengths = lengths[picked]
    starts = np.zeros(len(picked) + 1, dtype=np.int64)
    np.cumsum(picked_lengths, out=starts[1:])
    idx, _ = gather(data, offsets[picked], picked_lengths)
    sample = ChunkTable(tokens=np.asarray(data[idx], dtype=np.uint8), starts=starts, lengths=picked_lengths.copy(),
                        counts=np.ones(len(picked), dtype=np.int64))
    encoded = encode_byte_table(sample, merges, batch_sizes, dtype=dtype or token_dtype(256 + len(merges)))
    return len(encoded.tokens) / int(starts[-1])


def _held_by_merges(merges: list[tuple[int, int]]) -> np.ndarray:
    """held_side_by_side of the tokens the merges make from the 256 bytes."""
    vocab = [bytes([b]) for b in range(256)]
    for a, b in merges:
        vocab.append(vocab[a] + vocab[b])
    return held_side_by_side(vocab[256:])


def held_side_by_side(tokens: list[bytes]) -> np.ndarray:
    """inside[x, y]: whether some token holds byte y right after byte x (256 x 256 bools). All tokens'
    bytes at once, the pairs across two tokens left out: one numpy call for all of SuperBPE's tens of
    thousands of tokens, where one call a token was slow, twice a run (the estimate and the encoding)."""
    data = np.frombuffer(b"".join(tokens), dtype=np.uint8)
    ends = np.cumsum(np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens)))
    within = np.ones(max(len(data) - 1, 0), dtype=bool)
    within[ends[:-1] - 1] = False  # a token's last byte and the next one's first
    inside = np.zeros((256, 256), dtype=bool)
    inside[data[:-1][within], data[1:][within]] = True
    return inside


def encode_chunk_arrays(data: np.ndarray, offsets: np.ndarray, counts: np.ndarray, merges: list[tuple[int, int]],
                       dtype: np.dtype, threads: int = 1) -> ChunkTable:
    """The table table_from_arrays(data, offsets, counts) holds (every chunk of more than one byte, in
    order) encoded with merges, as encode_byte_table encodes it, by the kernels straight from the chunk
    arrays (chunk k is data[offsets[k]:offsets[k + 1]]): no table of bytes is copied first (SuperBPE's
    stage 2: most of the corpus). The chunks of one byte are encoded too (a token each) and
    then left out. The caller checks use_kernels."""
    tokens, lengths = _encode_cached(data, offsets, merges, _held_by_merges(merges).ravel(), np.dtype(dtype), threads)
    keep = np.diff(offsets) > 1
    if not keep.all():
        tokens = tokens[np.repeat(keep, lengths)]
        lengths, counts = lengths[keep], counts[keep]
    return _table_of(tokens, lengths, counts.astype(np.int64))


def _table_of(tokens: np.ndarray, lengths: np.ndarray, counts: np.ndarray) -> ChunkTable:
    """The compact table of chunks whose tokens lie side by side in tokens, lengths[k] for chunk k."""
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    return ChunkTable(tokens=tokens, starts=starts, lengths=lengths, counts=counts)


def _encode_cached(data: np.ndarray, starts: np.ndarray, merges: list[tuple[int, int]], inside: np.ndarray,
                   dtype: np.dtype, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The chunks data[starts[k]:starts[k + 1]] (bytes) encoded by a kernel (encode_chunks): (their
    tokens side by side, tokens per chunk); the same tokens as encode_byte_table's numpy path, tested.
    With threads=2 and TWO_THREADS_MIN_BYTES of chunks, each half of them in a thread of its own (the
    kernel holds no GIL), each with its own piece table."""
    keys = pack(np.array([a for a, _ in merges], dtype=np.int64), np.array([b for _, b in merges], dtype=np.int64))
    data = data.astype(np.uint8, copy=False)
    n_chunks = len(starts) - 1
    out = np.empty(len(data), dtype=dtype)  # a chunk has at most its bytes' tokens: each half writes its own part
    halves = threads > 1 and len(data) >= TWO_THREADS_MIN_BYTES
    cut = int(np.searchsorted(starts, len(data) // 2)) if halves else 0
    if 0 < cut < n_chunks:
        (used_left, left), (used_right, right) = in_two(
            functools.partial(_encode_part, data, starts, 0, cut, inside, keys, out),
            functools.partial(_encode_part, data, starts, cut, n_chunks, inside, keys, out))
        middle = int(starts[cut])
        return np.concatenate([out[:used_left], out[middle:middle + used_right]]), np.concatenate([left, right])
    used, lengths = _encode_part(data, starts, 0, n_chunks, inside, keys, out)
    return out[:used].copy(), lengths  # (a copy: the table's own size, not its bytes')


def _encode_part(data: np.ndarray, starts: np.ndarray, lo: int, hi: int, inside: np.ndarray, keys: np.ndarray,
                 out: np.ndarray) -> tuple[int, np.ndarray]:
    """Chunks lo to hi encoded into out from their first byte's place on: (tokens written, tokens per chunk)."""
    a, b = int(starts[lo]), int(starts[hi])
    return encode_chunks(data[a:b], starts[lo:hi + 1] - a, inside, keys, out[a:b], *_ENCODE_SIZES)


# encode_chunks: pieces cut before they are looked up; the piece tables' first sizes (2 ** bits slots)
_ENCODE_SIZES = (256, 16, 12)
TWO_THREADS_MIN_BYTES = 1 << 20  # _encode_cached: a smaller table is encoded in one thread
