"""The trained tokenizer: ids, encoding and decoding; saving and loading go through exports.py and load.py.

Training returns merges; this class only encodes. A chunk is encoded by applying merges in rank
order (the lowest-ranked pair present first, all its occurrences left to right), which reproduces
exactly what training did to that chunk, batched or not: a safe batch's merges never overlap.
"""

from __future__ import annotations

import heapq
import os
import random
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Literal

import numpy as np

from .. import jit
from ..io.readers import replace_surrogates
from ..patterns import NORMAL_FORMS, Splitter, normalize_text, resolve_pattern
from . import exports, load, segment, tables
from .dropout import dropout_merge

_CACHE_LIMIT = 200_000
# Chunks of more than _HEAP_BYTES bytes are encoded with a heap of pair positions (n log n) instead of rescanning
# the chunk once per merge (n squared): SuperBPE's chunks are whole phrases and lines.
_HEAP_BYTES = 48


class Tokenizer:
    """A byte-level BPE tokenizer: split pattern, merges, optional stop list and special tokens.

    Ids: byte_ids[b] is the token of byte b (b for parbpe's own); merges[r] = (a, b, new) makes
    token `new` at rank r; stop_words map whole chunks to tokens; special tokens come last.
    """

    def __init__(
        self,
        *,
        pattern: str,
        merges: Sequence[tuple[int, int, int]] = (),
        byte_ids: Sequence[int] = tuple(range(256)),
        stop_words: dict[bytes, int] | None = None,
        special_tokens: dict[str, int] | None = None,
        tokens: dict[bytes, int] | None = None,
        segmentation: str | None = None,
        normalize: str | None = None,
        reserved_ids: Collection[int] = (),
    ) -> None:
        if len(byte_ids) != 256 or len(set(byte_ids)) != 256:
            raise ValueError("byte_ids must give 256 distinct ids, one per byte")
        load.check_token_ids({"byte_ids": byte_ids, "merges": merges, "stop_words": stop_words or {},
                              "tokens": tokens or {}, "special_tokens": special_tokens or {},
                              "reserved_ids": reserved_ids}, "the tokenizer")
        # ids held by no token (tiktoken's empty token, a "= N" line): never given to another, never produced
        self.reserved_ids = tuple(sorted(set(reserved_ids)))
        self.pattern = pattern
        if normalize is not None and normalize not in NORMAL_FORMS:
            raise ValueError(f"unknown normal form {normalize!r}; use one of {', '.join(NORMAL_FORMS)}")
        self.normalize = normalize  # the Unicode normal form text is put in before it is split (None: as it is)
        self.byte_ids = list(byte_ids)
        self.merges = [tuple(m) for m in merges]
        self.stop_words = dict(stop_words or {})
        self.tokens = dict(tokens or {})  # a vocabulary without merges (PathPiece's kind): tokens beyond the bytes
        if self.tokens and (self.merges or self.stop_words):
            raise ValueError("a tokenizer has either merges (and a stop list) or vocabulary tokens, not both")
        self.segmentation = segmentation or ("shortest" if self.tokens else "merges")
        if self.segmentation not in ("merges", "greedy", "shortest"):
            raise ValueError(f"unknown segmentation {self.segmentation!r}; use merges, greedy or shortest")
        if self.segmentation == "merges" and self.tokens:
            raise ValueError("a vocabulary without merges segments by greedy or shortest, not merges")
        self.special_tokens = dict(special_tokens or {})
        self.vocab: dict[int, bytes] = {i: bytes([b]) for b, i in enumerate(self.byte_ids)}
        for token, i in [*self.stop_words.items(), *self.tokens.items()]:
            if i in self.vocab:
                raise ValueError(f"token {token!r} reuses id {i}")
            self.vocab[i] = token
        for a, b, new in self.merges:
            if a not in self.vocab or b not in self.vocab:
                raise ValueError(f"merge ({a}, {b}) -> {new} uses a token defined later or never")
            self.vocab[new] = self.vocab[a] + self.vocab[b]
        for s, i in self.special_tokens.items():
            if i in self.vocab:
                raise ValueError(f"special token {s!r} reuses id {i}")
            self.vocab[i] = s.encode("utf-8")
        if len(self.vocab) != (len(self.byte_ids) + len(self.stop_words) + len(self.tokens) + len(self.merges)
                               + len(self.special_tokens)):
            raise ValueError("token ids overlap: every byte, stop word, merge and special token needs its own id")
        taken = [i for i in self.reserved_ids if i in self.vocab]
        if taken:
            raise ValueError(f"reserved id {taken[0]} is also a token's")
        self._ranks = {(a, b): (r, new) for r, (a, b, new) in enumerate(self.merges)}
        self._stop_by_text = {t.decode("utf-8", errors="replace"): i for t, i in self.stop_words.items()}
        self._splitter = Splitter(pattern, tuple(self.special_tokens), normalize)
        self._cache: dict[str, list[int]] = {}
        self._vocab_index: tuple[segment.VocabIndex, np.ndarray] | None = None
        self._kernel_tables: tables.KernelTables | None = None

    # -- basic facts ---------------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        """Number of tokens, special tokens included."""
        return len(self.vocab)

    def token_bytes(self, token: int) -> bytes:
        return self.vocab[token]

    # -- encoding ------------------------------------------------------------------------------

    def _encode_chunk(self, chunk: str) -> list[int]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        stop = self._stop_by_text.get(chunk)
        if stop is not None:
            return [stop]
        byte_ids = self.byte_ids
        ids = [byte_ids[b] for b in chunk.encode("utf-8")]
        ids = self._merge_long(ids) if len(ids) > _HEAP_BYTES else self._merge_short(ids)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[chunk] = ids
        return ids

    def _merge_short(self, ids: list[int]) -> list[int]:
        """Apply merges in rank order: find the lowest-ranked pair, merge all of it left to right, again."""
        ranks = self._ranks
        while len(ids) >= 2:
            best = None
            for pair in zip(ids, ids[1:]):
                found = ranks.get(pair)
                if found is not None and (best is None or found[0] < best[0]):
                    best = found
                    best_pair = pair
            if best is None:
                break
            a, b = best_pair
            new = best[1]
            out = []
            i = 0
            n = len(ids)
            while i < n:
                if i + 1 < n and ids[i] == a and ids[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        return ids

    def _merge_long(self, ids: list[int]) -> list[int]:
        """The same as _merge_short, with a heap of (rank, position) over a linked list: the lowest
        rank pops first, its occurrences left to right (a later occurrence overlapping a merged one
        is stale and skipped), and a merge's new pairs hold its new token, so they rank later."""
        ranks = self._ranks
        n = len(ids)
        tokens = list(ids)
        nxt = list(range(1, n + 1))  # n: no next
        prv = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            found = ranks.get((tokens[i], tokens[i + 1]))
            if found is not None:
                heap.append((found[0], i, found[1]))
        heapq.heapify(heap)
        while heap:
            rank, i, new = heapq.heappop(heap)
            j = nxt[i]
            if tokens[i] is None or j >= n:
                continue
            found = ranks.get((tokens[i], tokens[j]))
            if found is None or found[0] != rank:
                continue  # stale: a side was merged since this entry was pushed
            tokens[i] = new
            tokens[j] = None
            k = nxt[j]
            nxt[i] = k
            if k < n:
                prv[k] = i
                found = ranks.get((new, tokens[k]))
                if found is not None:
                    heapq.heappush(heap, (found[0], i, found[1]))
            p = prv[i]
            if p >= 0:
                found = ranks.get((tokens[p], new))
                if found is not None:
                    heapq.heappush(heap, (found[0], p, found[1]))
        return [t for t in tokens if t is not None]

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode text, treating special-token strings as ordinary text (by the tokenizer's segmentation)."""
        chunks = self._splitter.chunks(normalize_text(replace_surrogates(text), self.normalize))
        if self.segmentation != "merges":
            return [t for ids in self.segment_other(list(chunks), self.segmentation) for t in ids]
        out: list[int] = []
        for chunk in chunks:
            out.extend(self._encode_chunk(chunk))
        return out

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | Collection[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
        method: str | None = None,
        dropout: float = 0.0,
        seed: int | None = None,
    ) -> list[int]:
        """Encode text; special tokens as in tiktoken.

        Specials in allowed_special become their ids. Any other special in disallowed_special
        ("all" = every special not allowed) raises ValueError; the rest are encoded as text.
        method: merges (BPE), greedy (longest prefix) or shortest (fewest tokens, PathPiece); default: the
        tokenizer's segmentation (merges, or shortest for a vocabulary without merges);
        dropout p skips each applicable merge with probability p (merges only; seed makes it repeatable).
        """
        encode_chunks = self._chunk_encoder(method or self.segmentation, dropout, seed)
        text = replace_surrogates(text)
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise ValueError(f"allowed_special names tokens this tokenizer does not have: {sorted(unknown)}")
        disallowed = (set(self.special_tokens) - allowed) if disallowed_special == "all" else set(disallowed_special)
        out: list[int] = []
        for piece, is_special in self._splitter.segments(text):
            if is_special and piece in allowed:
                out.append(self.special_tokens[piece])
                continue
            if is_special and piece in disallowed:
                raise ValueError(
                    f"the text contains the special token {piece!r}, which is not allowed. To encode "
                    f"it as a special token pass allowed_special={{{piece!r}}} (or 'all'); to encode it "
                    "as plain text pass disallowed_special=() or use encode_ordinary"
                )
            out.extend(t for ids in encode_chunks(self._splitter.chunks(piece)) for t in ids)
        return out

    def _chunk_encoder(self, method: str, dropout: float, seed: int | None) -> Callable[[list[str]], list[list[int]]]:
        """A function from chunks to their ids by method, with BPE-dropout if dropout > 0."""
        if method not in ("merges", "greedy", "shortest"):
            raise ValueError(f"unknown segmentation method {method!r}; use merges, greedy or shortest")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be a probability in [0, 1], got {dropout}")
        if dropout > 0 and method != "merges":
            raise ValueError(f"dropout applies to merges only, not method {method!r}")
        if method == "merges" and self.tokens:
            raise ValueError("this tokenizer is a vocabulary without merges: segment it with greedy or shortest")
        if dropout > 0:
            rng = random.Random(seed)
            return lambda chunks: [
                dropout_merge([self.byte_ids[b] for b in c.encode("utf-8")], self._ranks, dropout, rng) for c in chunks
            ]
        if method == "merges":
            return lambda chunks: [self._encode_chunk(c) for c in chunks]
        return lambda chunks: self.segment_other(chunks, method)

    def segment_other(self, chunks: Sequence[str], method: str) -> list[list[int]]:
        """Ids of chunks by greedy or shortest over the non-special vocabulary, batched by chunk length."""
        return self.segment_bytes([c.encode("utf-8") for c in chunks], method)

    def segment_bytes(self, raw: Sequence[bytes], method: str) -> list[list[int]]:
        """segment_other for chunks given as UTF-8 bytes."""
        owner, ids = self.segment_arrays(raw, method)
        out: list[list[int]] = [[] for _ in raw]
        for c, t in zip(owner.tolist(), ids.tolist()):
            out[c].append(t)
        return out

    def segment_arrays(self, raw: Sequence[bytes], method: str, cells: int = 1 << 18) -> tuple[np.ndarray, np.ndarray]:
        """(chunk index, token id) of every token of chunks (UTF-8 bytes) by greedy or shortest, in
        order within each chunk: by the numba kernel when the JIT is on (under auto, from
        jit.SEGMENT_MIN_BYTES of chunks), else by segment.py with
        chunks by length, in batches of about `cells` padded bytes (a batch's lookups hold cells x
        the longest token's length ids)."""
        if jit.worth(sum(map(len, raw)), jit.SEGMENT_MIN_BYTES):
            lengths = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            data = np.frombuffer(b"".join(raw), dtype=np.uint8)
            return tables.chunk_tokens(self.kernel_tables(), method, data, offsets)
        if self._vocab_index is None:
            tokens, ids = self._segment_vocab()
            self._vocab_index = (segment.VocabIndex(tokens, max(16, max(map(len, tokens)))), ids)
        index, ids = self._vocab_index
        run = segment.greedy_tokens if method == "greedy" else segment.shortest_tokens
        sizes = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
        order = np.argsort(sizes, kind="stable")
        owners, tokens, places = [], [], []
        start = 0
        while start < len(order):
            width = max(int(sizes[order[min(start + cells // max(int(sizes[order[start]]), 1), len(order)) - 1]]), 1)
            part = order[start : start + max(cells // width, 1)]
            start += len(part)
            owner, token, place = run(index, [raw[k] for k in part.tolist()])
            owners.append(part[owner])
            tokens.append(ids[token])
            places.append(place)
        if not owners:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        owner, token, place = np.concatenate(owners), np.concatenate(tokens), np.concatenate(places)
        keep = np.lexsort((place, owner))
        return owner[keep], token[keep]

    def _segment_vocab(self) -> tuple[list[bytes], np.ndarray]:
        """The byte strings greedy and shortest choose from (the non-special vocabulary, each once: a
        stop word may repeat a merged token) and the id of each (its least)."""
        special = set(self.special_tokens.values())
        first: dict[bytes, int] = {}
        for i in sorted(i for i in self.vocab if i not in special):
            first.setdefault(self.vocab[i], i)
        return list(first), np.array(list(first.values()), dtype=np.int64)

    def kernel_tables(self) -> tables.KernelTables:
        """The trie of the vocabulary and the merges as the numba kernels take them (made once)."""
        if self._kernel_tables is None:
            tokens, ids = self._segment_vocab()
            merges = tables.MergeTable.of(self.byte_ids, self.merges) if not self.tokens else None
            self._kernel_tables = tables.KernelTables(tables.Trie.of(tokens, ids), merges, max(self.vocab) + 1)
        return self._kernel_tables

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        try:
            return b"".join(self.vocab[i] for i in ids)
        except KeyError as exc:
            raise ValueError(f"token id {exc} is not in the vocabulary (0..{self.n_vocab - 1})") from None

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    # -- export formats and files (exports.py, load.py) ----------------------------------------

    def export_problems(self) -> dict[str, str]:
        """Formats this tokenizer cannot be written in, with the reason."""
        return exports.export_problems(self)

    def to_hf_json(self) -> dict[str, Any]:
        """The `tokenizers` library's tokenizer.json (BPE model, Split + ByteLevel pre-tokenizer)."""
        return exports.hf_json(self)

    def to_gpt2_files(self) -> tuple[str, str]:
        """(vocab.json text, merges.txt text) in the GPT-2 release format."""
        return exports.gpt2_files(self)

    def to_tiktoken(self) -> str:
        """tiktoken's rank file: base64 of each token's bytes and its rank (= id), specials excluded."""
        return exports.tiktoken_ranks(self)

    def to_parbpe_json(self, config: dict[str, Any] | None = None) -> dict[str, Any]:
        return exports.parbpe_json(self, config)

    def save(self, directory: str, *, config: dict[str, Any] | None = None) -> dict[str, str]:
        """Write every format to directory (each atomically); returns {file: "written" | reason}."""
        return exports.save(self, directory, config=config)

    @classmethod
    def load(cls, path: str, pattern: str | None = None) -> Tokenizer:
        """Load any tokenizer --init reads: a directory with parbpe.json (or GPT-2's vocab.json +
        merges.txt, or a tokenizer.json), a tokenizer.json, a vocab.json beside its merges.txt, or a
        tiktoken rank file (pattern: its split pattern; it holds none)."""
        return cls(**load.read_any(os.fspath(path), pattern))

    @classmethod
    def from_vocabulary(cls, tokens: Sequence[bytes], *, pattern: str = "gpt4",
                        special_tokens: Collection[str] = (), segmentation: str = "shortest",
                        normalize: str | None = None) -> Tokenizer:
        """A tokenizer of a vocabulary alone (no merges; PathPiece's vocabularies): tokens are byte
        strings, every single byte among them, and take ids in the order given; the special tokens
        follow. It segments by greedy or shortest (the default, the fewest tokens)."""
        tokens = list(tokens)
        segment.VocabIndex(tokens, max(map(len, tokens), default=1))  # every byte, no repeats, none empty
        ids = {t: i for i, t in enumerate(tokens)}
        byte_ids = [ids[bytes([b])] for b in range(256)]
        rest = {t: i for t, i in ids.items() if len(t) > 1}
        specials = {s: len(tokens) + k for k, s in enumerate(special_tokens)}
        return cls(pattern=resolve_pattern(pattern), byte_ids=byte_ids, tokens=rest, special_tokens=specials,
                   segmentation=segmentation, normalize=normalize)

    @classmethod
    def from_gpt2_files(cls, vocab_path: str, merges_path: str, pattern: str = "gpt2",
                        special_tokens: Collection[str] = ("<|endoftext|>",)) -> Tokenizer:
        """Load GPT-2's release format. Tokens of vocab.json that are not byte-level strings and
        are listed in special_tokens become special tokens."""
        return cls(**load.read_gpt2_files(vocab_path, merges_path, pattern, special_tokens))
