"""Scoring counted chunks: the merges column equals document-by-document encoding; Rényi equals its authors'."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import parbpe
from parbpe.tokenizer.score import METHODS, renyi_efficiency, score_chunks, segment_chunks

TEXT = ("the cat sat on the mat; the dog ate the hat. Ünïcödé naïve café 中文文本 😀 1234 5678\n" * 30).split("\n")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    d = tmp_path_factory.mktemp("score")
    (d / "corpus.txt").write_text("\n".join(TEXT), encoding="utf-8")
    return parbpe.train([str(d / "corpus.txt")], vocab_size=320, workers=1).tokenizer


def test_methods_round_trip_and_merges_equals_encode(tok) -> None:
    counts = Counter(c for doc in TEXT for c in tok._splitter.chunks(doc))
    words = sum(len(doc.split()) for doc in TEXT)
    rows = {m: score_chunks(tok, counts, m, words=words) for m in METHODS}
    assert rows["merges"]["tokens"] == sum(len(tok.encode_ordinary(doc)) for doc in TEXT)
    assert rows["shortest"]["tokens"] <= min(rows["greedy"]["tokens"], rows["merges"]["tokens"])
    for m in METHODS:
        assert rows[m]["bytes"] == sum(len(doc.encode()) for doc in TEXT)
        for chunk, ids in zip(counts, segment_chunks(tok, list(counts), m), strict=True):
            assert tok.decode_bytes(ids) == chunk.encode()


def test_renyi_equals_tokenization_scorer(tok) -> None:
    scorer = pytest.importorskip("tokenization_scorer")
    ids = [i for doc in TEXT for i in tok.encode_ordinary(doc)]
    lines = [" ".join(f"t{i}" for i in tok.encode_ordinary(doc)) for doc in TEXT if doc]
    counts = np.bincount(ids, minlength=tok.n_vocab)
    for alpha in (2.5, 3.0):
        ref = scorer.score(lines, metric="renyi", power=alpha, vocab=tok.n_vocab)
        assert renyi_efficiency(counts, tok.n_vocab, alpha) == pytest.approx(ref, rel=1e-9)


def test_unknown_method_is_a_clear_error(tok) -> None:
    with pytest.raises(ValueError, match="unknown segmentation method"):
        segment_chunks(tok, ["a"], "fastest")


def test_dropout_zero_is_plain_one_is_bytes_and_seeded(tok) -> None:
    doc = "\n".join(TEXT[:3])
    assert tok.encode(doc, dropout=0.0, seed=1) == tok.encode(doc)
    assert tok.encode(doc, dropout=1.0, seed=1) == list(doc.encode("utf-8"))
    a, b = tok.encode(doc, dropout=0.3, seed=7), tok.encode(doc, dropout=0.3, seed=7)
    assert a == b and tok.decode_bytes(a) == doc.encode() and len(a) > len(tok.encode(doc))
    for method in ("greedy", "shortest"):
        assert tok.decode_bytes(tok.encode(doc, method=method)) == doc.encode()
    with pytest.raises(ValueError, match="probability"):
        tok.encode(doc, dropout=1.5)
