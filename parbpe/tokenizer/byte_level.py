"""GPT-2's reversible map between bytes and printable characters, used by vocab.json, merges.txt and
HF tokenizer.json to write byte-level tokens as strings."""

from __future__ import annotations


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (used by vocab.json and HF)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_BYTE_TO_CHAR = bytes_to_unicode()
_CHAR_TO_BYTE = {c: b for b, c in _BYTE_TO_CHAR.items()}
_KEPT = bytes(b for b, c in _BYTE_TO_CHAR.items() if ord(c) == b)  # bytes the map leaves as they are


def token_to_unicode(token: bytes) -> str:
    """A token's bytes as GPT-2's printable characters (in C: linear in the token, however long).
    Latin-1 turns byte b into the character of ordinal b, which the map translates; a token of
    bytes the map keeps (letters, digits, punctuation) needs no translation (5x faster on a token
    of megabytes)."""
    text = token.decode("latin-1")
    return text.translate(_BYTE_TO_CHAR) if token.translate(None, _KEPT) else text


def json_quoted(text: str) -> str:
    """json.dumps(text, ensure_ascii=False) of a byte-level token string (or two joined by a space),
    faster: such strings hold no control character, so only quotes and backslashes are escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unicode_to_token(text: str) -> bytes:
    try:
        return bytes(_CHAR_TO_BYTE[c] for c in text)
    except KeyError as exc:
        raise ValueError(f"{text!r} is not a byte-level token string (character {exc} is not in the map)") from None
