r"""The built-in split patterns (GPT-2, GPT-4, GPT-4o and their --digits variants, and the superword
split) as kernels over decoded characters.

Each kernel reproduces its `regex` pattern exactly over whole documents of any Unicode text: at each
position it tries the pattern's alternatives in order, as `regex` does (leftmost first, with the
backtracking of the greedy quantifiers and the possessive ones of GPT-4 spelled out), so it needs
neither the piece cuts nor `regex` for text that is not ASCII. The characters' classes come from
count/chunk_bounds.py's tables (read off `regex`), which also calls these kernels; the numpy lexers
of count/lexer.py and count/superword.py are the reference.
"""

from __future__ import annotations

import numpy as np

from ..jit import helper, kernel

# Class bits of a character: letter, number, whitespace, GPT-4o's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
# (UPPER) and [\p{Ll}\p{Lm}\p{Lo}\p{M}] (LOWER), a line break (\r \n).
LETTER, NUMBER, SPACE, UPPER, LOWER, BREAK = 1, 2, 4, 8, 16, 32


@helper
def _code_point(data, i):
    """The code point of the UTF-8 character at data[i] (valid UTF-8, as pyarrow strings are; at most
    0x10FFFF) and its width in bytes."""
    b = data[i]
    if b < 0x80:
        return np.int64(b), 1
    if b < 0xE0:
        return ((np.int64(b) & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F), 2
    if b < 0xF0:
        return (((np.int64(b) & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6)
                | (np.int64(data[i + 2]) & 0x3F)), 3
    point = (((np.int64(b) & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12)
             | ((np.int64(data[i + 2]) & 0x3F) << 6) | (np.int64(data[i + 3]) & 0x3F))
    return min(point, np.int64(0x10FFFF)), 4


@kernel(twin="parbpe.count.lexer:decode_utf8")
def decode(data, docs, table, canon, bits, low, folded, pos, char_docs):
    """UTF-8 documents data[docs[d]:docs[d + 1]] as characters: each one's class bits, its code point
    if ASCII (else 0), its contraction letter and its byte position; char_docs: the documents' bounds
    in characters. Returns the number of characters."""
    k = 0
    for d in range(len(docs) - 1):
        char_docs[d] = k
        i = docs[d]
        end = docs[d + 1]
        while i < end:
            point, width = _code_point(data, i)
            bits[k] = table[point]
            low[k] = point if point < 0x80 else 0
            folded[k] = canon[point]
            pos[k] = i
            k += 1
            i += width
    char_docs[len(docs) - 1] = k
    pos[k] = len(data)
    return k


@kernel(twin="parbpe.count.lexer:gpt2_chunk_starts_utf8")
def gpt2_starts(bits, low, char_docs, group, out):
    r"""Chunk starts (character positions, into out) of '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+
    | ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (\p{N} up to `group` a chunk) over each document; returns how many."""
    k = 0
    for d in range(len(char_docs) - 1):
        i = char_docs[d]
        n = char_docs[d + 1]
        while i < n:
            out[k] = i
            k += 1
            end = -1
            if low[i] == 39 and i + 1 < n:  # an apostrophe: contractions, exactly
                x = low[i + 1]
                if x == 115 or x == 100 or x == 109 or x == 116:
                    end = i + 2
                elif i + 2 < n:
                    y = low[i + 2]
                    if (x == 108 and y == 108) or (x == 118 and y == 101) or (x == 114 and y == 101):
                        end = i + 3
            if end < 0:
                for cls in range(3):  # letters, numbers, other symbols, each after an optional space
                    j = i + 1 if low[i] == 32 and i + 1 < n and _is_class(bits[i + 1], cls) else i
                    if _is_class(bits[j], cls):
                        end = j + 1
                        limit = j + group if cls == 1 else n
                        while end < n and end < limit and _is_class(bits[end], cls):
                            end += 1
                        break
            if end < 0:
                end = _whitespace_end(bits, i, n)
            i = end
    return k


@kernel(twin="parbpe.count.lexer:gpt4_chunk_starts_utf8")
def gpt4_starts(bits, low, folded, char_docs, group, out):
    r"""Chunk starts of GPT-4's '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}
    | ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+ (\p{N} up to `group`); returns how many."""
    k = 0
    for d in range(len(char_docs) - 1):
        i = char_docs[d]
        n = char_docs[d + 1]
        while i < n:
            out[k] = i
            k += 1
            b = bits[i]
            end = _contraction_end(folded, i, n) if low[i] == 39 else -1
            if end < 0:  # [^\r\n\p{L}\p{N}]?+\p{L}+: the optional character is never given back
                j = i + 1 if b & (LETTER | NUMBER | BREAK) == 0 else i
                if j < n and bits[j] & LETTER:
                    end = _run_end(bits, j, n, LETTER)
            if end < 0 and b & NUMBER:
                end = _run_end(bits, i, min(n, i + group), NUMBER)
            if end < 0:
                end = _symbols_end(bits, low, i, n, False)
            if end < 0:
                end = _line_break_end(bits, i, n)
            if end < 0:
                end = _whitespace_end(bits, i, n)
            i = end
    return k


@kernel(twin="parbpe.count.lexer:gpt4o_chunk_starts")
def gpt4o_starts(bits, low, folded, char_docs, group, out):
    r"""Chunk starts of GPT-4o's pattern (patterns.py; \p{N} up to `group`); returns how many."""
    k = 0
    for d in range(len(char_docs) - 1):
        i = char_docs[d]
        n = char_docs[d + 1]
        while i < n:
            out[k] = i
            k += 1
            end = _gpt4o_word_end(bits, i, n)
            if end >= 0:  # (?i:'s|'t|'re|'ve|'m|'ll|'d)? after a word
                if end < n and low[end] == 39:
                    end = max(end, _contraction_end(folded, end, n))
            elif bits[i] & NUMBER:
                end = _run_end(bits, i, min(n, i + group), NUMBER)
            else:
                end = _symbols_end(bits, low, i, n, True)
                if end < 0:
                    end = _line_break_end(bits, i, n)
                if end < 0:
                    end = _whitespace_end(bits, i, n)
            i = end
    return k


# The superword split's classes of a character (superword.py's LETTER_ ... EDGE_).
SW_LETTER, SW_DIGIT, SW_SYMBOL, SW_SPACE, SW_CR, SW_NL, SW_OTHER_WS, SW_EDGE = range(8)


@kernel(twin="parbpe.count.superword:superword_chunk_starts")
def superword_decode(data, docs, classes, cls, pos, char_docs):
    """UTF-8 documents data[docs[d]:docs[d + 1]] as characters for the superword split: each one's
    class (superword_classes) into cls and its byte position into pos (pos[k] = len(data) after the
    last); char_docs: the documents' bounds in characters. Returns the number of characters. One
    table read a character: decode()'s three tables and four arrays serve the other patterns."""
    k = 0
    for d in range(len(docs) - 1):
        char_docs[d] = k
        i = docs[d]
        end = docs[d + 1]
        while i < end:
            point, width = _code_point(data, i)
            cls[k] = classes[point]
            pos[k] = i
            i += width
            k += 1
    char_docs[len(docs) - 1] = k
    pos[k] = len(data)
    return k


@kernel(twin="parbpe.count.superword:superword_chunk_starts")
def superword_starts(cls, n, char_docs, start, out):
    r"""Chunk starts of the superword split line by line (patterns.SUPERWORD_LINES_PATTERN: the rules
    of superword.py's docstring, which superword._starts applies with numpy) over each document, into
    out, from the classes of its n characters (superword_decode; cls holds two more slots, read past
    the last). start: a bool per character, all False, and so again on return. Returns how many."""
    cls[n] = SW_EDGE
    cls[n + 1] = SW_EDGE
    for d in range(len(char_docs) - 1):
        f = char_docs[d]
        e = char_docs[d + 1]
        if e > f:
            _superword_document(cls, f, e, start)
    k = 0
    for i in range(n):
        if start[i]:
            start[i] = False
            out[k] = i
            k += 1
    return k


@helper
def _superword_document(cls, f, e, start):
    """Mark the chunk starts of one document, characters [f, e) (e > f) of cls."""
    saved = cls[e]  # the document's end reads as SW_EDGE (the next document's first class is put back)
    saved2 = cls[e + 1]
    cls[e] = SW_EDGE
    cls[e + 1] = SW_EDGE
    start[f] = True
    prev = SW_EDGE
    digits = 0  # the run of digits so far
    i = f
    while i < e:
        c = cls[i]
        if prev == SW_NL:
            start[i] = True
        if c == SW_DIGIT:  # a chunk every three digits from the run's start, and one after the run
            if digits % 3 == 0:
                start[i] = True
            digits += 1
        elif digits:
            start[i] = True
            digits = 0
        if c == SW_SYMBOL and prev != SW_SYMBOL and cls[i + 1] == SW_SYMBOL:
            start[i - 1 if prev == SW_SPACE else i] = True  # two or more symbols, a space before them
            j = i + 2
            while cls[j] == SW_SYMBOL:
                j += 1
            while cls[j] == SW_CR:  # the carriage returns after them
                j += 1
            if cls[j] == SW_NL:  # and one line feed
                j += 1
            if j < e:
                start[j] = True
        elif c == SW_SPACE and prev != SW_SPACE:  # a run of spaces [i, last]
            last = i
            while cls[last + 1] == SW_SPACE:
                last += 1
            after = cls[last + 1]
            after2 = cls[last + 2] if after != SW_EDGE else SW_EDGE
            several = last > i
            to_whitespace = after == SW_EDGE or after == SW_CR or after == SW_NL or after == SW_OTHER_WS
            if to_whitespace or several:
                start[i] = True
            if to_whitespace and after != SW_EDGE:
                start[last + 1] = True
            if not to_whitespace and not (after == SW_SYMBOL and after2 == SW_SYMBOL) and several:
                start[last] = True
        prev = c
        i += 1
    cls[e] = saved
    cls[e + 1] = saved2


@helper
def _is_class(b, cls):
    """Letter (cls 0), number (1) or other symbol (2: neither, nor whitespace)."""
    if cls == 0:
        return b & LETTER != 0
    if cls == 1:
        return b & NUMBER != 0
    return b & (LETTER | NUMBER | SPACE) == 0


@helper
def _run_end(bits, i, n, bit):
    """The end of the run of characters with `bit` from i (at most to n)."""
    while i < n and bits[i] & bit:
        i += 1
    return i


@helper
def _contraction_end(folded, i, n):
    """The end of '(?i:s|d|m|t|ll|ve|re) at i (an apostrophe), else -1."""
    if i + 1 >= n:
        return -1
    x = folded[i + 1]
    if x == 115 or x == 100 or x == 109 or x == 116:
        return i + 2
    if i + 2 < n:
        y = folded[i + 2]
        if (x == 108 and y == 108) or (x == 118 and y == 101) or (x == 114 and y == 101):
            return i + 3
    return -1


@helper
def _symbols_end(bits, low, i, n, slash):
    r"""The end of ' ?[^\s\p{L}\p{N}]+[\r\n]*' at i (slash: [\r\n/]*, GPT-4o), else -1."""
    j = i + 1 if low[i] == 32 and i + 1 < n and bits[i + 1] & (LETTER | NUMBER | SPACE) == 0 else i
    if bits[j] & (LETTER | NUMBER | SPACE):
        return -1
    while j < n and bits[j] & (LETTER | NUMBER | SPACE) == 0:
        j += 1
    while j < n and (bits[j] & BREAK or (slash and low[j] == 47)):
        j += 1
    return j


@helper
def _line_break_end(bits, i, n):
    r"""The end of \s*[\r\n] at i (and GPT-4o's \s*[\r\n]+): just past the last line break of the
    whitespace run from i, else -1."""
    end = -1
    while i < n and bits[i] & SPACE:
        if bits[i] & BREAK:
            end = i + 1
        i += 1
    return end


@helper
def _whitespace_end(bits, i, n):
    r"""The end of \s+(?!\S)|\s+ at i (whitespace): the run, but for its last character when a
    character that is not whitespace follows and the run has two or more."""
    end = _run_end(bits, i, n, SPACE)
    return end - 1 if end < n and end - i >= 2 else end


@helper
def _gpt4o_word_end(bits, i, n):
    r"""The end of GPT-4o's [^\r\n\p{L}\p{N}]?U*L+ or [^\r\n\p{L}\p{N}]?U+L* at i (U, L: its upper and
    lower letter classes), before any contraction, as `regex` backtracks; else -1."""
    lead = bits[i] & (LETTER | NUMBER | BREAK) == 0
    for j in (i + 1, i):  # the optional character taken first, then not
        if j == i + 1 and (not lead or j >= n):
            continue
        upper_end = _run_end(bits, j, n, UPPER)
        for m in range(upper_end, j - 1, -1):  # U* gives back characters one by one
            if m < n and bits[m] & LOWER:
                return _run_end(bits, m, n, LOWER)
    for j in (i + 1, i):
        if j == i + 1 and (not lead or j >= n):
            continue
        if bits[j] & UPPER:
            return _run_end(bits, _run_end(bits, j, n, UPPER), n, LOWER)
    return -1
