"""Checks on the real data in ../shared/data (skipped where it is absent)."""

from __future__ import annotations

import base64
import json

import pyarrow.parquet as pq
import pytest

import parbpe
from parbpe.config import TrainConfig
from parbpe.io.counts_files import read_counts
from parbpe.io.plan import plan


def test_fineweb_counts_file_reads(shared_data):
    [unit] = plan([str(shared_data / "fineweb-edu-counts" / "fineweb-edu-1gb-cutoff10.csv")])
    counts = read_counts(unit)
    # 229,095 lines, but 709 quoted chunks span lines: 228,384 chunk rows, a header and a pattern row.
    assert len(counts.chunks) == 228_384
    assert counts.pattern == TrainConfig(pattern="gpt4").pattern
    assert min(counts.counts) >= 10


def test_exports_match_parbpe_on_heldout(shared_data, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tiktoken = pytest.importorskip("tiktoken")
    shard = shared_data / "realmix" / "train-00003-of-00008.parquet"
    out = tmp_path / "tok"
    result = parbpe.train([str(shard)], vocab_size=4096, special_tokens=("<|endoftext|>",), out_dir=str(out))
    tok = result.tokenizer
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    ranks = {base64.b64decode(b): int(r) for b, r in (line.split() for line in (out / "tokenizer.tiktoken").open())}
    tk = tiktoken.Encoding(name="t", pat_str=json.loads((out / "parbpe.json").read_text())["pattern"],
                           mergeable_ranks=ranks, special_tokens=tok.special_tokens)
    docs = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0).to_pylist()
    for doc in docs[::3]:  # 170 documents, 1.6 MB: every kind the heldout file has, a third of the time
        ours = tok.encode(doc, allowed_special="all")
        assert hf.encode(doc, add_special_tokens=False).ids == ours
        assert tk.encode(doc, allowed_special="all") == ours
        assert tok.decode(ours) == doc


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "gpt4o"])
def test_piece_shortcut_is_exact_on_real_text(shared_data, pattern, tmp_path):
    from collections import Counter

    import regex

    from parbpe.count.counter import ShardCounter
    from tests.count.test_pieces import _summed_rows

    texts = pq.read_table(shared_data / "realmix" / "heldout.parquet", columns=["text"]).column(0)
    config = TrainConfig(pattern=pattern, workers=1)
    shard = ShardCounter(config, str(tmp_path), "t")
    shard.add_texts(texts.combine_chunks())
    table = shard.pieces.chunk_counts()
    fast = _summed_rows(table) + shard.plain
    compiled = regex.compile(config.pattern)
    assert fast == Counter(c for text in texts.to_pylist() for c in compiled.findall(text))


@pytest.mark.parametrize("kind", ["superbpe", "pathpiece", "init"])
def test_eval_on_heldout_equals_encoding_each_document(shared_data, tmp_path, kind):
    """Issue 55 item 2 on real text: parbpe eval, --heldout and parbpe.evaluate give the token count of encoding
    each held-out document, for SuperBPE (its lines are not split apart as training's are), PathPiece and
    --init tokenizers."""
    shard = shared_data / "realmix" / "train-00003-of-00008.parquet"
    heldout = shared_data / "realmix" / "heldout.parquet"
    out = tmp_path / kind
    settings = {"superbpe": {"vocab_size": 1024, "superbpe_transition": 0.5},
                "pathpiece": {"algorithm": "pathpiece", "vocab_size": 768, "initial_vocab_size": 1024},
                "init": {"vocab_size": 1024}}[kind]
    if kind == "init":
        parbpe.train([str(shard)], vocab_size=640, out_dir=str(tmp_path / "base"), progress="none")
        settings["init"] = str(tmp_path / "base")
    result = parbpe.train([str(shard)], out_dir=str(out), heldout=[str(heldout)], progress="none", **settings)
    tok = parbpe.Tokenizer.load(str(out))
    docs = pq.read_table(heldout, columns=["text"]).column(0).to_pylist()
    encoded = sum(len(tok.encode_ordinary(doc)) for doc in docs)
    [row] = parbpe.evaluate(str(out), [str(heldout)], progress="none")
    assert (row["tokens"], result.stats["heldout"]["tokens"]) == (encoded, encoded)
