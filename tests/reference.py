"""Slow, obvious reference implementations that the fast paths are checked against."""

from __future__ import annotations

from collections import Counter

import regex


def reference_counts(documents: list[str], pattern: str, special_tokens: tuple[str, ...] = ()) -> Counter[bytes]:
    """Chunk counts: split each document on special tokens, then apply the pattern to each piece."""
    counts: Counter[bytes] = Counter()
    for doc in documents:
        pieces = [doc]
        for special in special_tokens:
            pieces = [part for piece in pieces for part in piece.split(special)]
        for piece in pieces:
            for chunk in regex.findall(pattern, piece):
                counts[chunk.encode("utf-8")] += 1
    return counts


def pair_counts(words: dict[tuple[int, ...], int], nonoverlap: bool) -> Counter:
    stats: Counter = Counter()
    for word, count in words.items():
        i = 0
        while i < len(word) - 1:
            stats[(word[i], word[i + 1])] += count
            # nonoverlap: in a run x x x, count (x, x) only where a left-to-right merge would apply it
            if nonoverlap and word[i] == word[i + 1] and i + 2 < len(word) and word[i + 2] == word[i]:
                i += 2
            else:
                i += 1
    return stats


def apply_merge(words: dict[tuple[int, ...], int], pair: tuple[int, int], new: int) -> dict[tuple[int, ...], int]:
    out: dict[tuple[int, ...], int] = {}
    for word, count in words.items():
        merged, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                merged.append(new)
                i += 2
            else:
                merged.append(word[i])
                i += 1
        out[tuple(merged)] = out.get(tuple(merged), 0) + count
    return out


def reference_train(
    counts: dict[bytes, int],
    n_merges: int,
    *,
    nonoverlap: bool = False,
    batched: bool = False,
    cap_divisor: int = 2,
    max_batch_size: int = 0,
    base_vocab: list[bytes] | None = None,
    allow=None,
    min_pair_count: int = 1,
) -> list[tuple[int, int]]:
    """Plain BPE: recount every pair each round, rank by (count, first bytes, second bytes),
    highest first (ids after bytes, for tokens with equal bytes). Serial: merge the top pair.
    Batched: BatchBPE's walk over the top pairs. allow(token bytes) False: that pair is never ranked;
    pairs seen fewer than min_pair_count times are never ranked either."""
    vocab = list(base_vocab or [bytes([i]) for i in range(256)])
    words = {tuple(chunk): c for chunk, c in counts.items() if len(chunk) > 1}
    merges: list[tuple[int, int]] = []
    while len(merges) < n_merges:
        stats = pair_counts(words, nonoverlap)
        if allow is not None:
            stats = Counter({p: c for p, c in stats.items() if allow(vocab[p[0]] + vocab[p[1]])})
        stats = Counter({p: c for p, c in stats.items() if c >= min_pair_count})
        if not stats:
            break
        # Equal bytes (two tokens can share them) fall back to the higher id.
        ranked = sorted(stats, key=lambda p: (stats[p], vocab[p[0]], p[0], vocab[p[1]], p[1]), reverse=True)
        if batched:
            width = min((n_merges - len(merges)) // cap_divisor, len(vocab))
            if max_batch_size:
                width = min(width, max_batch_size)
            width = max(width, 1)
        else:
            width = 1
        seen_first, seen_second, batch = set(), set(), []
        for a, b in ranked[:width]:
            unsafe = a in seen_second or b in seen_first
            seen_first.add(a)
            seen_second.add(b)
            if not unsafe:
                batch.append((a, b))
        for a, b in batch:
            new = len(vocab)
            vocab.append(vocab[a] + vocab[b])
            merges.append((a, b))
            words = apply_merge(words, (a, b), new)
    return merges


def count_with(units, config, run_dir, **kwargs):
    """Chunk counts of units through parbpe's count and reduce stages: (plain dict, CountResult)."""
    from parbpe.count.counter import count_to_runs
    from parbpe.count.reduce import reduce_runs

    result = count_to_runs(units, config, str(run_dir), **kwargs)
    counts: dict[str, int] = {}
    for table in reduce_runs(result.runs, config.workers):
        counts.update(zip(table.column("chunk").to_pylist(), table.column("count").to_pylist()))
    return counts, result
