r"""Where documents are cut into pieces for counting: places no match of a built-in pattern crosses.

The cuts fall where the character before is not whitespace:
- before a space;
- between an ASCII letter or digit and an ASCII symbol other than the apostrophe (punctuation or
  a control character), or a line break (\n, \r).
There every built-in pattern ends one match and starts the next (no alternative continues past a
non-space character into a space, or from a letter or digit into such a symbol or a line break:
only a run of symbols takes trailing line breaks); the text after the cut is matched exactly as
before (no pattern looks behind); and the text before it ends in a character that is not
whitespace, where the only lookahead, (?!\S) after whitespace, is never tried.
tests/count/test_pieces.py checks the cuts against a character-by-character reference (and the
counts against the plain path); piece_keyer.py is the same rule in one numba pass.
"""

from __future__ import annotations

import numpy as np

# Exactly the characters the `regex` module's \s matches (tests check all code points).
WHITESPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
              + "\u2028\u2029\u202f\u205f\u3000")
_CUT_WINDOW = 4 << 20  # bytes cut at a time (bounds the temporary arrays)
WIDE_WHITESPACE: dict[int, set[int]] = {2: set(), 3: set()}  # by UTF-8 length
for _char in WHITESPACE:
    if ord(_char) >= 128:
        WIDE_WHITESPACE[len(_char.encode())].add(int.from_bytes(_char.encode(), "big"))


def _ends_in_whitespace(data: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For positions ends (each just after a multi-byte character): is that character whitespace?"""
    last2 = (data[np.maximum(ends - 2, 0)].astype(np.int64) << 8) | data[ends - 1]
    last3 = (data[np.maximum(ends - 3, 0)].astype(np.int64) << 16) | last2
    return np.isin(last2, list(WIDE_WHITESPACE[2])) | np.isin(last3, list(WIDE_WHITESPACE[3]))


def cut_bounds(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Bounds of the pieces of the documents data[offsets[i]:offsets[i + 1]] (sorted, from 0 to len(data)).

    Works through the bytes in windows so that its temporary arrays stay small; tests check the
    cuts against a character-by-character reference.
    """
    n = len(data)
    bounds = [np.zeros(1, np.int64)]
    for begin in range(1, n, _CUT_WINDOW):  # position p: a cut before byte p
        end = min(begin + _CUT_WINDOW, n)
        context = max(begin - 3, 0)  # a multi-byte character before a space is up to 3 bytes
        cut = _cuts(data[context:end])[begin - context - 1:]
        starts = offsets[np.searchsorted(offsets, begin):np.searchsorted(offsets, end)]
        cut[starts - begin] = True  # documents start here
        found = np.flatnonzero(cut)
        found += begin
        bounds.append(found)
    if n:
        bounds.append(np.array([n], np.int64))
    return np.concatenate(bounds)


def _cut_codes() -> bytes:
    """A bytes.translate table giving each byte its role in a cut (bits, see _cuts)."""
    b = np.arange(256)
    high = b >= 0x80
    space = b == 0x20
    whitespace = space | ((b >= 9) & (b <= 13))  # \t \n \x0b \x0c \r and the space
    alnum = np.array([chr(c).isascii() and chr(c).isalnum() for c in range(256)])
    line_break = (b == 0x0A) | (b == 0x0D)
    symbol_or_break = ~(alnum | high | whitespace | (b == ord("'"))) | line_break
    codes = space | symbol_or_break << 1 | ~(whitespace | high) << 2 | alnum << 3 | high << 6
    return codes.astype(np.uint8).tobytes()


CUT_CODES = _cut_codes()


def _cuts(data: np.ndarray) -> np.ndarray:
    """For each byte after the first: is there a cut before it?

    Each byte gets a code in one C pass (bytes.translate: a numpy lookup or a dozen byte tests
    cost several times more): bit 0 a space and bit 1 a symbol or line break, each cut before
    when the byte before has bit 2 (ASCII, not whitespace), respectively bit 3 (letter or digit);
    bit 6 a byte of a multi-byte character (before a space, cut unless it ends in whitespace; shifted
    by 2 it meets no bit).
    """
    code = np.frombuffer(data.tobytes().translate(CUT_CODES), np.uint8)
    before = code[:-1]
    cut = (code[1:] & (before >> 2)).astype(bool)
    wide = ((before >> 6) & code[1:]).view(bool).nonzero()[0] + 1  # a space after a multi-byte character
    cut[wide[~_ends_in_whitespace(data, wide)] - 1] = True
    return cut
