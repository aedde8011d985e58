"""train --init (continue a tokenizer) and --also-save (several sizes in one run): continuing from
a run's first merges gives the merges of training straight on, in serial and exact modes; every
format loads; inherited ids are kept; --also-save writes what separate runs write."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from parbpe.cli import main
from parbpe.tokenizer.byte_level import bytes_to_unicode
from parbpe.tokenizer.model import Tokenizer
from tests.corpora import random_text
from tests.tokenizer.test_tokenizer import _hf_and_tiktoken, random_unicode

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "fast", "slowly", "Alice", "Bob", "said", "hello",
         "world", "123", "4567", "don't", "中文", "naïve", "==", "  ", "\n"]
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken")
MODES = {"serial": ["--max-batch-size", "1"], "exact": ["--batching", "exact"]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("initcorpus")
    rng = random.Random(14)
    for k in range(2):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 40))) for _ in range(1500)]
        lines += [random_text(rng, 80) for _ in range(100)]
        (d / f"part{k}.txt").write_text("\n".join(lines))
    return d


def _train(corpus: Path, out: Path, vocab_size: int, *extra: str, capsys=None) -> int:
    code = main(["train", str(corpus), "--vocab-size", str(vocab_size), "--out", str(out), "--progress", "none",
                 *extra])
    if capsys is not None and code != 0:
        pytest.fail(capsys.readouterr().err)
    return code


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("workers", ["1", "2", "2 merge workers"])
def test_continuing_from_k_merges_equals_training_straight_on(corpus, tmp_path, capsys, monkeypatch, mode, workers):
    if workers == "2 merge workers":  # the inherited merges encode, and merging goes on, in merge workers
        from parbpe.merge import prepare
        from parbpe.merge import workers as merge_workers

        monkeypatch.setattr(prepare, "MIN_BYTES_PER_ENCODE_WORKER", 1)
        monkeypatch.setattr(merge_workers, "MIN_TOKENS_PER_WORKER", 1)
        monkeypatch.setattr(merge_workers, "KERNELS_MERGE_ALONE", False)
    settings = [*MODES[mode], "--workers", workers.split()[0]]
    _train(corpus, tmp_path / "k", 400, *settings, capsys=capsys)
    _train(corpus, tmp_path / "straight", 700, *settings, capsys=capsys)
    _train(corpus, tmp_path / "continued", 700, *settings, "--init", str(tmp_path / "k"), capsys=capsys)
    for name in TOKENIZER_FILES:  # no special tokens: the ids are the same too
        assert (tmp_path / "continued" / name).read_bytes() == (tmp_path / "straight" / name).read_bytes(), name
    stats = json.loads((tmp_path / "continued" / "stats.json").read_text())
    assert stats["init"]["inherited_merges"] == 400 - 256 and stats["merges"] == 700 - 400
    assert stats["init"]["encode_workers"] == (2 if workers == "2 merge workers" else 1)
    assert json.loads((tmp_path / "continued" / "parbpe.json").read_text())["config"]["init"] == str(tmp_path / "k")


@pytest.mark.parametrize("divisor, vocab_size", [(2, "500"), (1, "1000")])
def test_the_encoded_table_cut_at_its_cold_pairs_makes_the_whole_tables_tokenizer(corpus, tmp_path, capsys,
                                                                                  monkeypatch, divisor, vocab_size):
    """With the kernels, the table encoded with the inherited merges is merged cut where its pairs are
    too rare to be merged (merge/cold_pairs.py; divisor 1: cut at the n-th pair's count, lowered as
    rounds reach below it): the same files as the whole table merged on."""
    pytest.importorskip("numba")
    from parbpe.merge import cold_pairs
    from parbpe.pipeline import merge as merge_stage

    monkeypatch.setattr(cold_pairs, "MAX_HOT_SHARE", 1.0)  # (a small corpus: its pairs are mostly frequent ones)
    monkeypatch.setattr(cold_pairs, "CUT_DIVISOR", divisor)
    settings = ["--jit", "on", "--workers", "1"]
    _train(corpus, tmp_path / "k", 400, *settings, capsys=capsys)
    _train(corpus, tmp_path / "cut", vocab_size, *settings, "--init", str(tmp_path / "k"), capsys=capsys)
    cut = json.loads((tmp_path / "cut" / "stats.json").read_text())["init"]["cold_cut"]
    assert cut is not None and cut["cuts"][0]["threshold"] >= 2
    assert (len(cut["cuts"]) > 1 or not cut["held"]) if divisor == 1 else cut["held"]
    with monkeypatch.context() as patch:
        patch.setattr(merge_stage, "cut_cold_pairs", lambda *a, **k: None)
        _train(corpus, tmp_path / "whole", vocab_size, *settings, "--init", str(tmp_path / "k"), capsys=capsys)
    assert json.loads((tmp_path / "whole" / "stats.json").read_text())["init"]["cold_cut"] is None
    for name in TOKENIZER_FILES:
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


@pytest.mark.parametrize("source", ["dir", "tokenizer.json", "vocab.json", "tokenizer.tiktoken"])
def test_every_format_continues_alike(corpus, tmp_path, capsys, source):
    _train(corpus, tmp_path / "k", 350, "--max-batch-size", "1", "--workers", "1", capsys=capsys)
    _train(corpus, tmp_path / "straight", 500, "--max-batch-size", "1", "--workers", "1", capsys=capsys)
    init = tmp_path / "k" if source == "dir" else tmp_path / "k" / source
    pattern = ["--pattern", "gpt4"] if source in ("vocab.json", "tokenizer.tiktoken") else []  # not in those files
    _train(corpus, tmp_path / "c", 500, "--max-batch-size", "1", "--workers", "1", "--init", str(init), *pattern,
           capsys=capsys)
    assert (tmp_path / "c" / "merges.txt").read_bytes() == (tmp_path / "straight" / "merges.txt").read_bytes()


def _gpt2_like(corpus: Path, tmp_path: Path, capsys) -> Path:
    """A small tokenizer laid out as GPT-2 is: the bytes' ids in GPT-2's order (printable bytes
    first), merges after them, and <|endoftext|> as the last id."""
    _train(corpus, tmp_path / "base", 600, "--workers", "1", "--pattern", "gpt2", capsys=capsys)
    base = Tokenizer.load(str(tmp_path / "base"))
    order = list(bytes_to_unicode())
    byte_ids = [order.index(b) for b in range(256)]
    remap = {b: byte_ids[b] for b in range(256)}
    merges = [(remap.get(a, a), remap.get(b, b), new) for a, b, new in base.merges]
    gpt2 = Tokenizer(pattern=base.pattern, merges=merges, byte_ids=byte_ids,
                     special_tokens={"<|endoftext|>": 256 + len(merges)})
    gpt2.save(str(tmp_path / "gpt2"))
    return tmp_path / "gpt2"


@pytest.mark.parametrize("source", ["tokenizer.json", "vocab.json", "tokenizer.tiktoken"])
def test_a_gpt2_like_tokenizer_keeps_its_ids_and_encodes_alike_in_hf(corpus, tmp_path, capsys, source):
    gpt2 = _gpt2_like(corpus, tmp_path, capsys)
    old_vocab = json.loads((gpt2 / "vocab.json").read_text())
    old_merges = (gpt2 / "merges.txt").read_text().splitlines()
    extra = {"tokenizer.json": [], "vocab.json": ["--pattern", "gpt2"],
             "tokenizer.tiktoken": ["--pattern", "gpt2", "--special-tokens", "<|endoftext|>"]}[source]
    out = tmp_path / "grown"
    _train(corpus, out, len(old_vocab) + 200, "--init", str(gpt2 / source), *extra, capsys=capsys)
    vocab = json.loads((out / "vocab.json").read_text())
    assert len(vocab) == len(old_vocab) + 200
    assert all(vocab[t] == i for t, i in old_vocab.items())  # every token, the special one too, keeps its id
    assert vocab["<|endoftext|>"] == len(old_vocab) - 1
    assert sorted(i for t, i in vocab.items() if t not in old_vocab) == list(range(len(old_vocab), len(vocab)))
    merges = (out / "merges.txt").read_text().splitlines()
    assert merges[:len(old_merges)] == old_merges and len(merges) == len(old_merges) + 200
    tok = Tokenizer.load(str(out))
    hf, tk = _hf_and_tiktoken(out)
    rng = random.Random(3)
    texts = [(corpus / "part0.txt").read_text()[:5000]] + [random_unicode(rng, 300) for _ in range(20)]
    for text in texts:
        ours = tok.encode(text, allowed_special="all")
        assert hf.encode(text, add_special_tokens=False).ids == ours
        assert tk.encode_ordinary(text) == tok.encode_ordinary(text)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_also_save_writes_what_separate_runs_write(corpus, tmp_path, capsys, mode):
    settings = [*MODES[mode], "--workers", "2", "--special-tokens", "<|endoftext|>"]
    heldout = str(corpus / "part1.txt")
    _train(corpus, tmp_path / "all", 800, *settings, "--also-save", "300,600", "--heldout", heldout, capsys=capsys)
    stats = json.loads((tmp_path / "all" / "stats.json").read_text())
    assert [row["vocab_size"] for row in stats["also_save"]] == [300, 600]
    assert all(row["bytes_per_token"] > 1 for row in stats["also_save"])
    assert stats["also_save"][0]["bytes_per_token"] < stats["also_save"][1]["bytes_per_token"]
    for size in (300, 600):
        _train(corpus, tmp_path / f"alone{size}", size, *settings, capsys=capsys)
        for name in (*TOKENIZER_FILES, "parbpe.json", "tokenizer_config.json", "special_tokens_map.json"):
            assert (tmp_path / "all" / f"vocab-{size}" / name).read_bytes() == \
                (tmp_path / f"alone{size}" / name).read_bytes(), (size, name)
        small = json.loads((tmp_path / "all" / f"vocab-{size}" / "stats.json").read_text())
        assert small["vocab_size"] == size and small["heldout"]["bytes_per_token"] > 1


def test_also_save_with_init(corpus, tmp_path, capsys):
    _train(corpus, tmp_path / "k", 350, "--max-batch-size", "1", "--workers", "1", capsys=capsys)
    _train(corpus, tmp_path / "c", 600, "--max-batch-size", "1", "--workers", "1", "--init", str(tmp_path / "k"),
           "--also-save", "450", capsys=capsys)
    _train(corpus, tmp_path / "alone", 450, "--max-batch-size", "1", "--workers", "1", capsys=capsys)
    assert (tmp_path / "c" / "vocab-450" / "merges.txt").read_bytes() == \
        (tmp_path / "alone" / "merges.txt").read_bytes()


@pytest.mark.parametrize("args, message", [
    (["--init", "{tmp}/nothing-here"], "no tokenizer at"),
    (["--init", "{tmp}/garbage.tiktoken"], "garbage.tiktoken:1: expected a base64 token and its rank"),
    (["--init", "{tmp}/k", "--vocab-size", "300"], "leaves nothing to learn"),
    (["--init", "{tmp}/k", "--stop-list-size", "3"], "init cannot be combined with --stop-list-size"),
    (["--init", "{tmp}/k", "--superbpe-transition", "0.8"], "use --init with --pattern superword"),
    (["--also-save", "900"], "--also-save size 900 must be an integer between 256"),
    (["--also-save", "200"], "--also-save size 200 must be an integer between 256"),
])
def test_bad_init_and_also_save_are_one_line_before_work(corpus, tmp_path, capsys, args, message):
    _train(corpus, tmp_path / "k", 300, "--workers", "1", capsys=capsys)
    (tmp_path / "garbage.tiktoken").write_text("not base64 at all!\n")
    capsys.readouterr()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code = main(["train", str(corpus), "--out", str(tmp_path / "out"), "--progress", "none",
                 *(["--vocab-size", "800"] if "--vocab-size" not in argv else []), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("parbpe train: error:") and "\n" not in err, err
    assert message in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_init_with_the_superword_pattern_extends_as_the_superbpe_authors_do(corpus, tmp_path, capsys):
    from parbpe.merge.superword import superword_allowed
    from parbpe.tokenizer.evaluate import is_superword

    _train(corpus, tmp_path / "k", 400, "--workers", "1", capsys=capsys)
    out = tmp_path / "sw"
    _train(corpus, out, 700, "--workers", "2", "--init", str(tmp_path / "k"), "--pattern", "superword",
           capsys=capsys)
    old, grown = Tokenizer.load(str(tmp_path / "k")), Tokenizer.load(str(out))
    assert grown.merges[:len(old.merges)] == old.merges
    new = [grown.vocab[new] for _, _, new in grown.merges[len(old.merges):]]
    assert all(superword_allowed(t) for t in new) and sum(map(is_superword, new)) > 20
    hf, _ = _hf_and_tiktoken(out)
    text = (corpus / "part1.txt").read_text()[:20000]
    assert hf.encode(text, add_special_tokens=False).ids == grown.encode(text, allowed_special="all")


def test_unreadable_tokenizers_are_named_with_what_is_wrong(corpus, tmp_path, capsys):
    _train(corpus, tmp_path / "k", 300, "--workers", "1", capsys=capsys)
    good = json.loads((tmp_path / "k" / "tokenizer.json").read_text())
    cases = {
        "wordpiece.json": ({"model": {"type": "WordPiece", "vocab": {}}}, "not a BPE tokenizer.json"),
        "spm.json": ({**good, "pre_tokenizer": None, "decoder": None}, "not a byte-level BPE tokenizer"),
        "unknown.json": ({**good, "model": {**good["model"], "merges": ["Ġ zzz"]}},
                         "merge 0: token b'zzz' is not in the vocabulary"),
        "broken.json": ("{not json", "broken.json:1: not valid JSON"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
        code = main(["train", str(corpus), "--vocab-size", "400", "--out", str(tmp_path / "out"), "--progress", "none",
                     "--init", str(tmp_path / name)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and "\n" not in err, (name, err)
    lines = (tmp_path / "k" / "merges.txt").read_text().splitlines()
    (tmp_path / "k" / "merges.txt").write_text("\n".join([*lines[:3], "a b c", *lines[3:]]))
    code = main(["train", str(corpus), "--vocab-size", "400", "--out", str(tmp_path / "out"), "--progress", "none",
                 "--init", str(tmp_path / "k" / "vocab.json")])
    err = capsys.readouterr().err
    assert code == 2 and "merges.txt:4: expected two tokens separated by a space" in err, err


def test_a_tiktoken_file_named_after_its_encoding_brings_its_pattern_and_end_of_text(corpus, tmp_path, capsys):
    """gpt2.tiktoken (openai-whisper's asset) needs no --pattern or --special-tokens: the name says
    GPT-2's pattern and <|endoftext|> at 50256, as tiktoken's gpt2 encoding has them."""
    from run.test_rank_file_quirks import _write_ranks

    from parbpe.patterns import resolve_pattern
    from parbpe.tokenizer.load import read_any

    # files of the published encodings' sizes (a file of another size named so is refused: test_rank_file_quirks)
    for name, pattern, specials, n in [("gpt2.tiktoken", "gpt2", {"<|endoftext|>": 50256}, 50256),
                                       ("CL100K_BASE.tiktoken", "gpt4",
                                        {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                                         "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}, 100256),
                                       ("mine.tiktoken", "gpt4", {}, 600)]:
        _write_ranks(tmp_path / name, n)
        found = read_any(str(tmp_path / name))
        assert found["pattern"] == resolve_pattern(pattern) and found["special_tokens"] == specials, name
        assert read_any(str(tmp_path / name), pattern="gpt4o")["pattern"] == resolve_pattern("gpt4o")
    old = Tokenizer.load(str(tmp_path / "gpt2.tiktoken"))
    out = tmp_path / "grown"
    _train(corpus, out, old.n_vocab + 100, "--init", str(tmp_path / "gpt2.tiktoken"), capsys=capsys)
    vocab = json.loads((out / "vocab.json").read_text())
    assert vocab["<|endoftext|>"] == 50256 and max(vocab.values()) == 50256 + 100
    grown = Tokenizer.load(str(out))
    assert all(grown.vocab[i] == t for i, t in old.vocab.items())
    stats = json.loads((out / "stats.json").read_text())
    assert stats["config"]["pattern_name"] == "gpt2"
    tok = Tokenizer.load(str(out))
    hf, _ = _hf_and_tiktoken(out)
    text = (corpus / "part0.txt").read_text()[:3000] + "<|endoftext|>" + random_unicode(random.Random(5), 200)
    assert hf.encode(text, add_special_tokens=False).ids == tok.encode(text, allowed_special="all")


def test_a_tokenizer_read_again_after_it_changed_is_read_anew(corpus, tmp_path, capsys):
    # read_any keeps what it read per version of the files (a run reads its --init twice).
    from parbpe.tokenizer.load import read_any

    _train(corpus, tmp_path / "k", 300, "--workers", "1", capsys=capsys)
    first = read_any(str(tmp_path / "k"))
    assert read_any(str(tmp_path / "k"))["merges"] == first["merges"]
    _train(corpus, tmp_path / "k", 320, "--workers", "1", capsys=capsys)  # the same directory, rewritten
    assert len(read_any(str(tmp_path / "k"))["merges"]) == len(first["merges"]) + 20
    assert len(read_any(str(tmp_path / "k" / "vocab.json"))["merges"]) == len(first["merges"]) + 20
