"""parbpe eval at corpus scale against the slow, obvious reference: every document encoded one by one
(encode with each method), its tokens counted; the rows must match exactly, for any worker count."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import parbpe
from parbpe.cli import main
from parbpe.io.plan import plan
from parbpe.io.readers import ReadStats, iter_documents
from parbpe.pipeline.corpus_eval import ROW_KEYS
from parbpe.tokenizer.score import renyi_efficiency

METHODS = ("merges", "greedy", "shortest")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    rng = random.Random(3)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 7))) for _ in range(300)]
    for k in range(3):
        ends = ["", "\n", " 123.", "<|x|>"]
        docs = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 80))) + rng.choice(ends) for _ in range(80)]
        (root / f"part{k}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    corpus = sorted(str(p) for p in root.glob("*.jsonl"))
    plain = parbpe.train(corpus, vocab_size=400, special_tokens=["<|x|>"]).tokenizer
    stop = parbpe.train(corpus, vocab_size=400, stop_list_size=5).tokenizer
    superbpe = parbpe.train(corpus, vocab_size=450, superbpe_transition=0.8).tokenizer
    return corpus, {"plain": plain, "stop list": stop, "superbpe": superbpe}


_REFERENCES: dict[tuple, dict] = {}


def _reference(tok, corpus, method, alpha=2.5):
    """_reference_row, computed once per tokenizer, corpus and method (the parametrized tests share it)."""
    key = (id(tok), tuple(corpus), method, alpha)
    if key not in _REFERENCES:
        _REFERENCES[key] = _reference_row(tok, corpus, method, alpha)
    return dict(_REFERENCES[key])


def _reference_row(tok, corpus, method, alpha):
    """Every document encoded by itself (greedy and shortest by segment.py's numpy, whatever the JIT)."""
    counts = np.zeros(max(tok.vocab) + 2, dtype=np.int64)
    n_bytes = words = 0
    stats = ReadStats()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PARBPE_JIT", "off")
        texts = [text for unit in plan(corpus) for text in iter_documents(unit, "text", stats)]
        encoded = [tok.encode(text, method=method, disallowed_special=()) for text in texts]
    for text, ids in zip(texts, encoded):
        np.add.at(counts, np.asarray(ids, dtype=np.int64), 1)
        n_bytes += len(text.encode())
        words += len(text.split())
    regular = sorted(i for i in tok.vocab if i not in tok.special_tokens.values())
    return {"tokens": int(counts.sum()), "bytes": n_bytes, "words": words, "documents": stats.documents,
            "renyi_efficiency": renyi_efficiency(counts[regular], len(regular), alpha),
            "vocab_unused_share": float(np.mean(counts[regular] == 0))}


@pytest.mark.parametrize(("workers", "jit"), [(1, "off"), (2, "off"), (1, "on"), (2, "on")])
def test_rows_equal_document_by_document_encoding(setup, workers, jit, monkeypatch):
    """With the numba kernels (jit on) and without, the same rows as the documents encoded one by one."""
    if jit == "on":
        pytest.importorskip("numba")
    monkeypatch.setenv("PARBPE_JIT", jit)
    corpus, tokenizers = setup
    names = sorted(tokenizers)
    rows = parbpe.evaluate([tokenizers[n] for n in names], corpus, names=names, methods=METHODS, workers=workers)
    assert [(r["tokenizer"], r["method"]) for r in rows] == [(n, m) for n in names for m in METHODS]
    for r in rows:
        expected = _reference(tokenizers[r["tokenizer"]], corpus, r["method"])
        for key, value in expected.items():
            assert r[key] == pytest.approx(value, rel=1e-12), (r["tokenizer"], r["method"], key)
        assert set(ROW_KEYS) <= set(r)
        assert r["bytes_per_token"] == r["bytes"] / r["tokens"] and r["tokens_per_word"] == r["tokens"] / r["words"]
    shortest = {r["tokenizer"]: r["tokens"] for r in rows if r["method"] == "shortest"}
    assert all(shortest[r["tokenizer"]] <= r["tokens"] for r in rows)  # the fewest tokens, always


def test_the_command_prints_rows_and_json(setup, tmp_path, capsys):
    corpus, tokenizers = setup
    tokenizers["plain"].save(str(tmp_path / "tok"))
    assert main(["eval", "--tokenizer", str(tmp_path / "tok"), *corpus, "--method", "merges,shortest",
                 "--renyi-alpha", "3", "--workers", "2"]) == 0
    table = capsys.readouterr().out
    assert "Renyi(3)" in table and table.count(str(tmp_path / "tok")) == 2
    assert main(["eval", "--tokenizer", str(tmp_path / "tok"), *corpus, "--json", "--method", "greedy"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["method"] for r in rows] == ["greedy"] and rows[0]["tokens"] == _reference(
        tokenizers["plain"], corpus, "greedy")["tokens"]


def test_bad_methods_and_counts_files_are_one_line_errors(setup, tmp_path, capsys):
    corpus, tokenizers = setup
    tokenizers["plain"].save(str(tmp_path / "tok"))
    assert main(["eval", "--tokenizer", str(tmp_path / "tok"), *corpus, "--method", "merges,bpe"]) == 2
    assert "unknown segmentation method(s) ['bpe']" in capsys.readouterr().err
    parbpe.count_to_file(corpus, str(tmp_path / "c.parquet"), parbpe.TrainConfig())
    assert main(["eval", "--tokenizer", str(tmp_path / "tok"), str(tmp_path / "c.parquet")]) == 2
    assert "not counts files" in capsys.readouterr().err


def test_plot_draws_a_png(setup, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    corpus, tokenizers = setup
    tokenizers["plain"].save(str(tmp_path / "a"))
    tokenizers["superbpe"].save(str(tmp_path / "b"))
    png = tmp_path / "eval.png"
    assert main(["eval", "--tokenizer", str(tmp_path / "a"), "--tokenizer", str(tmp_path / "b"), *corpus,
                 "--method", "merges,shortest", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_of_a_run_with_also_save_draws_its_size_curve(setup, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from parbpe.pipeline import eval_plot

    corpus, _ = setup
    out = tmp_path / "run"
    parbpe.train(corpus, vocab_size=420, also_save=[300, 350], heldout=corpus, out_dir=str(out), workers=1)
    curve = eval_plot.size_curve(str(out))
    stats = json.loads((out / "stats.json").read_text())
    assert [size for size, _ in curve] == [300, 350, 420]
    assert curve[-1][1] == stats["heldout"]["bytes_per_token"]
    assert curve[0][1] == json.loads((out / "vocab-300" / "stats.json").read_text())["heldout"]["bytes_per_token"]
    assert eval_plot.size_curve(str(tmp_path)) == []  # not a run's directory
    drawn = {}
    monkeypatch.setattr(eval_plot, "size_curve", lambda d: drawn.setdefault(d, curve))
    png = tmp_path / "e.png"
    assert main(["eval", "--tokenizer", str(out), *corpus, "--plot", str(png)]) == 0
    assert list(drawn) == [str(out)] and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_words_are_counted_as_str_split_counts_them():
    """count_words over arrow's buffers (numpy) against str.split on every kind of whitespace, documents
    empty, null, sliced, string and large_string."""
    import pyarrow as pa

    from parbpe.io.readers import _WHITESPACE, count_words

    assert "".join(c for c in map(chr, range(0x3001)) if c.isspace()) == "".join(sorted(_WHITESPACE))
    rng = random.Random(5)
    alphabet = [*_WHITESPACE, *"ab\u00e9\u00c2\u20ac\u2010\u2030\u3001\u1680\U0001f600\x00"]
    for _ in range(400):
        docs = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(0, 8))]
        texts = pa.array(docs + [None] * rng.randint(0, 2), type=rng.choice([pa.string(), pa.large_string()]))
        if len(texts) > 2 and rng.random() < 0.5:
            texts = texts.slice(1, len(texts) - 2)
        assert count_words(texts) == sum(len(t.split()) for t in texts.to_pylist() if t is not None), texts


@pytest.fixture(scope="module")
def lines_setup(tmp_path_factory):
    """Documents of many lines (SuperBPE's superword split, trained line by line, encodes a document whole:
    its chunks may cross a line end) and SuperBPE, PathPiece and --init tokenizers trained on them."""
    root = tmp_path_factory.mktemp("evallines")
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 6))) for _ in range(200)]
    seps = [" ", " ", " ", "\n", ".\n", " \n", "\n\n", ", ", "\t"]
    docs = ["".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(10, 90))) for _ in range(240)]
    (root / "train.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[:160]))
    (root / "heldout.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[160:]))
    train, heldout = str(root / "train.jsonl"), [str(root / "heldout.jsonl")]
    superbpe = parbpe.train(train, vocab_size=500, superbpe_transition=0.6, workers=1).tokenizer
    parbpe.train(train, vocab_size=350, workers=1, out_dir=root / "base")
    init = parbpe.train(train, vocab_size=420, init=str(root / "base"), workers=1).tokenizer
    pathpiece = parbpe.train(train, algorithm="pathpiece", vocab_size=330, initial_vocab_size=500,
                             workers=1).tokenizer
    return heldout, {"superbpe": superbpe, "init": init, "pathpiece": pathpiece}


@pytest.mark.parametrize("jit", ["off", "on"])
def test_rows_equal_encoding_for_superbpe_pathpiece_and_init_on_text_of_many_lines(lines_setup, jit, monkeypatch):
    """Issue 55 item 2: eval's token counts are those of encoding each document, for every kind of tokenizer."""
    if jit == "on":
        pytest.importorskip("numba")
    monkeypatch.setenv("PARBPE_JIT", jit)
    heldout, tokenizers = lines_setup
    names = sorted(tokenizers)
    rows = parbpe.evaluate([tokenizers[n] for n in names], heldout, names=names, workers=2)
    for r in rows:
        expected = _reference(tokenizers[r["tokenizer"]], heldout, r["method"])
        assert (r["tokenizer"], r["tokens"]) == (r["tokenizer"], expected["tokens"])
        assert r["bytes"] == expected["bytes"] and r["words"] == expected["words"]


def test_eval_reports_the_segmentation_and_shows_progress_by_default(setup, tmp_path, capsys):
    """Issue 55 item 15: eval showed no progress by default, and its segmentation never reported."""
    corpus, tokenizers = setup
    tokenizers["plain"].save(str(tmp_path / "tok"))
    assert main(["eval", "--tokenizer", str(tmp_path / "tok"), *corpus, "--progress", "jsonl", "--workers", "2"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    segment = [e for e in events if e.get("event") == "progress" and e.get("stage") == "segment"]
    assert segment and segment[-1]["done"] == segment[-1]["total"], events
    assert main(["eval", "--tokenizer", str(tmp_path / "tok"), *corpus]) == 0
    assert "[parbpe]" in capsys.readouterr().err  # the default: progress on stderr


def test_an_eval_worker_killed_while_segmenting_is_said_so(setup, monkeypatch):
    """Issue 55 item 14: a segmenting worker's death named what it was doing and a hint that fits (the
    segmentation is not bounded by --memory-budget: fewer --workers is what helps)."""
    from parbpe.config import RunOptions, TrainConfig
    from parbpe.pipeline.corpus_eval import count_text, score_text
    from parbpe.run.pool import WorkerDied

    corpus, tokenizers = setup
    monkeypatch.setenv("PARBPE_JIT", "off")  # worker processes (the kernels run in threads)
    text = count_text(corpus, tokenizers["plain"].pattern, None, TrainConfig(workers=1), RunOptions(progress="none"))
    monkeypatch.setenv("PARBPE_TEST_KILL", "eval:2")
    with pytest.raises(WorkerDied) as died:
        score_text(text, [tokenizers["plain"]], ["merges"], workers=2, start_method="fork", slice_bytes=100)
    said = str(died.value)
    assert "segmenting" in said and "fewer --workers" in said and "--memory-budget" not in said, said
    assert "finishing" not in said, said
