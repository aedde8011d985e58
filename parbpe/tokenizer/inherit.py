"""Continuing from an existing tokenizer (train --init): its merges in training's ids, and the
tokenizer a run makes from them, with every inherited id kept.

Training numbers tokens its own way: byte b is token b, merge r makes token 256 + r. A loaded
tokenizer may number them otherwise (GPT-2 gives "!" id 0 and its special token 50256): its
merges are mapped to training's ids in rank order, and back when the result is built. Inherited
tokens keep their ids; the run's other special tokens take the ids after every inherited one,
then the new merges (so GPT-2 continued keeps 0-50256 and its new tokens start at 50257).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import Tokenizer


@dataclass
class Inherited:
    """A loaded tokenizer to continue from, and its merges in training's ids (merge r: 256 + r)."""

    tokenizer: Tokenizer
    source: str  # the path it was read from (for messages and parbpe.json)
    merges: list[tuple[int, int]] = field(default_factory=list)

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """Its special tokens, by id."""
        return tuple(sorted(self.tokenizer.special_tokens, key=self.tokenizer.special_tokens.get))

    def vocab(self) -> list[bytes]:
        """The bytes of every token in training's ids: the 256 bytes, then one per merge."""
        vocab = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            vocab.append(vocab[a] + vocab[b])
        return vocab


def inherit(tokenizer: Tokenizer, source: str) -> Inherited:
    """The merges of tokenizer in training's ids; a stop list (whole chunks as tokens) is refused."""
    if tokenizer.tokens:
        raise ValueError(f"{source} is a vocabulary without merges: parbpe continues only tokenizers made by "
                         "merges")
    if tokenizer.stop_words:
        raise ValueError(f"{source} has a stop list (whole chunks as tokens): parbpe continues only tokenizers "
                         "made by merges alone")
    to_training = {external: b for b, external in enumerate(tokenizer.byte_ids)}
    merges = []
    for rank, (a, b, new) in enumerate(tokenizer.merges):
        merges.append((to_training[a], to_training[b]))
        to_training[new] = 256 + rank
    return Inherited(tokenizer=tokenizer, source=source, merges=merges)


def continued(inherited: Inherited, new_merges: list[tuple[int, int]], special_tokens: tuple[str, ...],
              pattern: str) -> Tokenizer:
    """The tokenizer of a run that continued inherited: its tokens with their ids, then the run's
    other special tokens, then new_merges (in training's ids, the first making 256 + the inherited
    merges), each given the next free id."""
    old = inherited.tokenizer
    to_external = dict(enumerate(old.byte_ids))
    for rank, (_, _, new) in enumerate(old.merges):
        to_external[256 + rank] = new
    next_id = max([*old.vocab, *old.reserved_ids]) + 1  # a reserved id (tiktoken's "= N") is no new token's
    specials = dict(old.special_tokens)
    for s in special_tokens:
        if s not in specials:
            specials[s] = next_id
            next_id += 1
    merges = list(old.merges)
    first = 256 + len(old.merges)
    for k, (a, b) in enumerate(new_merges):
        to_external[first + k] = next_id
        merges.append((to_external[a], to_external[b], next_id))
        next_id += 1
    return Tokenizer(pattern=pattern, merges=merges, byte_ids=old.byte_ids, special_tokens=specials,
                     normalize=old.normalize, reserved_ids=old.reserved_ids)
