"""SuperBPE end to end: --superbpe-transition, its two stages, its exports and `parbpe eval`."""

from __future__ import annotations

import json
import random

import pytest

import parbpe
from parbpe.cli import main
from parbpe.merge.superword import superword_allowed
from parbpe.patterns import SUPERWORD_PATTERN
from parbpe.tokenizer.evaluate import is_superword
from tests.tokenizer.test_tokenizer import _hf_and_tiktoken, random_unicode

WORDS = ["the", "of", "and", "in", "a", "to", "is", "cat", "sat", "on", "mat", "Note", "it", "was"]


def phrases(seed: int, n: int) -> str:
    """Lines of common phrases, with numbers, colons, runs of symbols and spaces: SuperBPE's material."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = [rng.choice(WORDS[:7]) if rng.random() < 0.6 else rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        line = " ".join(words)
        if rng.random() < 0.3:
            line = "Note: " + line
        if rng.random() < 0.3:
            line += f" {rng.randint(0, 99999)}"
        line += rng.choice([".", ",", "...", "!?", " :)", "", "  "])
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("superbpe")
    path = d / "phrases.txt"
    path.write_text(phrases(1, 3000), encoding="utf-8")
    return path


def merge_workers_on_small_tables(patch: pytest.MonkeyPatch) -> None:
    """Have stage 2 encode and merge in two merge workers even on the tests' small tables."""
    from parbpe.merge import prepare, workers

    patch.setattr(prepare, "MIN_BYTES_PER_ENCODE_WORKER", 1)
    patch.setattr(workers, "MIN_TOKENS_PER_WORKER", 1)
    patch.setattr(workers, "KERNELS_MERGE_ALONE", False)


@pytest.fixture(scope="module")
def superbpe_run(corpus, tmp_path_factory):
    """The run the tests look at: two workers count, and encode and merge stage 2's table."""
    out = tmp_path_factory.mktemp("sb") / "out"
    with pytest.MonkeyPatch.context() as patch:
        merge_workers_on_small_tables(patch)
        result = parbpe.train([str(corpus)], vocab_size=700, superbpe_transition=0.6,
                              special_tokens=("<|endoftext|>",), workers=2, out_dir=str(out))
    assert result.stats["superbpe"]["encode_workers"] == 2 and result.stats["superbpe"]["merge_workers"] == 2
    return result, out


def test_stage_one_is_ordinary_bpe_and_stage_two_makes_superwords(corpus, superbpe_run):
    result, _ = superbpe_run
    tok, stats = result.tokenizer, result.stats
    transition = round(0.6 * 700) - 256
    assert stats["superbpe"]["transition_merges"] == stats["superbpe"]["stage1_merges"] == transition
    assert stats["superbpe"]["stage2_merges"] == 700 - 256 - 1 - transition
    assert tok.n_vocab == 700 and tok.pattern == SUPERWORD_PATTERN
    plain = parbpe.train([str(corpus)], vocab_size=256 + transition + 1, special_tokens=("<|endoftext|>",), workers=1)
    merges = [(a, b) for a, b, _ in tok.merges]
    assert merges[:transition] == [(a, b) for a, b, _ in plain.tokenizer.merges]
    stage2 = [tok.vocab[new] for _, _, new in tok.merges[transition:]]
    assert all(superword_allowed(t) for t in stage2)
    assert sum(map(is_superword, stage2)) > 50  # phrases like "of the" became tokens
    assert not any(is_superword(tok.vocab[new]) for _, _, new in tok.merges[:transition])
    assert stats["superbpe"]["skipped_tokens"] > 0  # "Note: ..." and five-word phrases were refused
    assert set(stats["superbpe"]["seconds"]) == {"superbpe_count", "superbpe_table", "superbpe_encode",
                                                 "superbpe_merge"}
    assert stats["superbpe"]["peak_rss_bytes"] > 0
    # Fewer tokens than ordinary BPE of the same size on the training text.
    ordinary = parbpe.train([str(corpus)], vocab_size=700, special_tokens=("<|endoftext|>",), workers=1).tokenizer
    text = corpus.read_text()
    assert len(tok.encode_ordinary(text)) < 0.9 * len(ordinary.encode_ordinary(text))


def test_same_output_for_any_number_of_workers(corpus, superbpe_run, tmp_path):
    _, out = superbpe_run
    parbpe.train([str(corpus)], vocab_size=700, superbpe_transition=0.6, special_tokens=("<|endoftext|>",),
                 workers=1, out_dir=str(tmp_path / "w1"))
    for name in ("tokenizer.json", "merges.txt", "vocab.json", "tokenizer.tiktoken", "parbpe.json"):
        assert (tmp_path / "w1" / name).read_bytes() == (out / name).read_bytes(), name


@pytest.mark.parametrize("refused_by", ["nothing", "room", "freq_cutoff", "no_cutoff_fits"])
def test_stage_two_encodes_straight_from_its_counts_where_the_budget_holds_its_bytes(corpus, tmp_path, monkeypatch,
                                                                                   refused_by):
    """With the kernels, stage 2's chunks are encoded straight from the count's arrays (no table of
    bytes, no sampled estimate) where the budget holds the table merged unencoded with room to spare;
    where it does not (or a --freq-cutoff filters the chunks) the table of bytes is built and encoded
    as before. The same tokenizer either way."""
    pytest.importorskip("numba")
    from parbpe.merge import encode as encode_module
    from parbpe.pipeline import merge as merge_stage

    monkeypatch.setenv("PARBPE_JIT", "on")
    straight, sampled = [], []
    encode = merge_stage.encode_chunk_arrays
    monkeypatch.setattr(merge_stage, "encode_chunk_arrays", lambda *a, **k: straight.append(1) or encode(*a, **k))
    sample = merge_stage.sampled_tokens_per_byte
    monkeypatch.setattr(merge_stage, "sampled_tokens_per_byte", lambda *a, **k: sampled.append(1) or sample(*a, **k))
    if refused_by == "room":  # the budget holds the encoded table with room to spare, not the unencoded one
        room = merge_stage._room
        monkeypatch.setattr(merge_stage, "_room",
                            lambda fit, budget: "numba" if fit.tokens_per_byte == 1.0 else room(fit, budget))
    if refused_by == "no_cutoff_fits":  # the unencoded table fits no cutoff (its fit's error): not the run's
        fit = merge_stage.fit_merge_stage

        def refusing(*args, **kwargs):
            if kwargs.get("tokens_per_byte") == 1.0:
                raise ValueError("memory budget 1.0 MB is too small for the merge stage: ...")
            return fit(*args, **kwargs)

        monkeypatch.setattr(merge_stage, "fit_merge_stage", refusing)
    settings = dict(vocab_size=700, superbpe_transition=0.6, special_tokens=("<|endoftext|>",), workers=1,
                    freq_cutoff=2 if refused_by == "freq_cutoff" else 0)
    result = parbpe.train([str(corpus)], out_dir=str(tmp_path / "a"), **settings)
    assert (straight, sampled) == (([1], []) if refused_by == "nothing" else ([], [1]))
    stats = result.stats["superbpe"]
    assert stats["encoded_table_tokens"] < stats["table_tokens"] == stats["merge_fit"]["table_tokens"]
    assert stats["merge_fit"]["tokens_per_byte"] == round(stats["encoded_table_tokens"] / stats["table_tokens"], 4)
    with monkeypatch.context() as patch:  # the other way: the table of bytes, built and encoded
        patch.setattr(merge_stage, "_straight_base", lambda *a: None)
        patch.setattr(encode_module, "TWO_THREADS_MIN_BYTES", 1)
        other = parbpe.train([str(corpus)], out_dir=str(tmp_path / "b"), **settings)
    assert other.tokenizer.merges == result.tokenizer.merges
    for name in ("tokenizer.json", "merges.txt", "vocab.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


@pytest.mark.parametrize("divisor", [2, 1])
def test_stage_two_merges_its_table_cut_at_its_cold_pairs_to_the_same_tokenizer(corpus, tmp_path, monkeypatch, divisor,
                                                                               capsys):
    """With the kernels, stage 2 merges its encoded table cut where its pairs are too rare to be merged
    (merge/cold_pairs.py): the same files as the whole table makes. Cut at the stage's n-th pair count
    (divisor 1), later rounds reach below the cut: cut lower, the merges so far replayed, the same files."""
    pytest.importorskip("numba")
    from parbpe.merge import cold_pairs
    from parbpe.pipeline import merge as merge_stage

    monkeypatch.setenv("PARBPE_JIT", "on")
    monkeypatch.setattr(cold_pairs, "MAX_HOT_SHARE", 1.0)  # (a small corpus: its pairs are mostly frequent ones)
    monkeypatch.setattr(cold_pairs, "CUT_DIVISOR", divisor)
    settings = dict(vocab_size=700, superbpe_transition=0.6, special_tokens=("<|endoftext|>",), workers=1)
    result = parbpe.train([str(corpus)], out_dir=str(tmp_path / "cut"), progress="jsonl", **settings)
    cut = result.stats["superbpe"]["cold_cut"]
    assert cut is not None and cut["cuts"][0]["table_tokens"] < result.stats["superbpe"]["encoded_table_tokens"]
    notes = [json.loads(line)["message"] for line in capsys.readouterr().err.splitlines() if '"note"' in line]
    below = [n for n in notes if "a round ranks pairs seen fewer than" in n]
    if divisor == 1:
        assert len(cut["cuts"]) > 1 or not cut["held"]
        assert len(below) == len(cut["cuts"]) - cut["held"] > 0 and "(the merges so far replayed)" in below[0]
    else:
        assert cut["held"] and len(cut["cuts"]) == 1 and below == []
    with monkeypatch.context() as patch:
        patch.setattr(merge_stage, "cut_cold_pairs", lambda *a, **k: None)
        whole = parbpe.train([str(corpus)], out_dir=str(tmp_path / "whole"), **settings)
    assert whole.stats["superbpe"]["cold_cut"] is None
    assert whole.tokenizer.merges == result.tokenizer.merges
    for name in ("tokenizer.json", "merges.txt", "vocab.json"):
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_stage_two_keeps_its_reduced_counts_as_its_reduce_workers_wrote_them(corpus, tmp_path):
    """Stage 2's reduce workers write their partitions into its run directory themselves (a file each,
    and a record naming them), where its counts are read from (stage 1 keeps one file: its chunks are
    sorted together)."""
    out = tmp_path / "o"
    parbpe.train([str(corpus)], vocab_size=700, superbpe_transition=0.6, workers=2, out_dir=str(out),
                 keep_run_dir=True)
    stage1, stage2 = out / ".parbpe-run", out / ".parbpe-run" / "superword"
    assert (stage1 / "reduced.arrow").exists() and not (stage1 / "reduced-parts.json").exists()
    record = json.loads((stage2 / "reduced-parts.json").read_text())
    assert not (stage2 / "reduced.arrow").exists() and not (stage2 / "count").exists()
    assert sorted(p.name for p in (stage2 / "reduced-parts").iterdir()) == [name for name, _, _ in record["parts"]]
    assert sum(chunks for _, chunks, _ in record["parts"]) == record["meta"]["unique_chunks"]


def test_stage_two_allocates_in_small_pages_and_stage_one_as_numpy_does(corpus, tmp_path, monkeypatch):
    """Where free pages are reported to a host, stage 2 (the superword count's arrays, the table, the
    encoding, the merge) runs inside run/pages.py's small_pages, stage 1 with numpy's own huge-page
    advice; it is back after the run."""
    from parbpe.pipeline import vocabulary
    from parbpe.run import pages

    switch = pages._advice_switch()
    if switch is None:
        pytest.skip("this numpy has no huge-page advice")
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    monkeypatch.setattr(pages, "free_pages_reported", lambda: True)  # (as on a VM whose balloon reports them)

    def advice() -> bool:
        was = switch(False)
        switch(was)
        return bool(was)

    seen = []
    merge, count = vocabulary.merge_stage, vocabulary.superword_count_stage
    monkeypatch.setattr(vocabulary, "merge_stage", lambda *a, **k: seen.append(("merge", advice())) or merge(*a, **k))
    monkeypatch.setattr(vocabulary, "superword_count_stage",
                        lambda *a, **k: seen.append(("count", advice())) or count(*a, **k))
    wait = vocabulary.CountBeside.wait  # (the count beside stage 1's merge: its counts loaded here)
    monkeypatch.setattr(vocabulary.CountBeside, "wait", lambda *a: seen.append(("count", advice())) or wait(*a))
    was = switch(True)
    try:
        parbpe.train([str(corpus)], vocab_size=700, superbpe_transition=0.6, workers=1, out_dir=str(tmp_path / "o"))
        assert advice()
    finally:
        switch(was)
    assert seen == [("merge", True), ("count", False), ("merge", False)]


def test_exports_encode_like_parbpe(superbpe_run):
    result, out = superbpe_run
    tok = result.tokenizer
    hf, tk = _hf_and_tiktoken(out)
    rng = random.Random(3)
    texts = [phrases(9, 40), "Note: the cat sat on the mat.\n\nthe cat  sat...\r\n12345 of the :) <|endoftext|>x"]
    texts += [random_unicode(rng, 200) for _ in range(20)]
    for text in texts:
        ours = tok.encode_ordinary(text)
        assert tk.encode_ordinary(text) == ours
        assert hf.encode(text, add_special_tokens=False).ids == tok.encode(text, allowed_special="all")
        assert tok.decode(ours) == text
    assert json.loads((out / "parbpe.json").read_text())["pattern_name"] == "superword"


def test_eval_side_by_side(corpus, superbpe_run, tmp_path, capsys):
    _, out = superbpe_run
    assert main(["train", str(corpus), "--vocab-size", "700", "--special-tokens", "<|endoftext|>", "--out",
                 str(tmp_path / "bpe"), "--progress", "none", "--workers", "1"]) == 0
    capsys.readouterr()
    assert main(["eval", "--tokenizer", str(tmp_path / "bpe"), "--tokenizer", str(out), str(corpus)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:5] == ["tokenizer", "method", "tokens", "vs", "first"] and len(table) == 4
    bpe_row, sb_row = table[2].split(), table[3].split()
    assert bpe_row[0] == str(tmp_path / "bpe") and float(bpe_row[3]) == 1.0 and bpe_row[7] == "0.00%"
    assert float(sb_row[3]) < 0.9 and float(sb_row[7].rstrip("%")) > 5
    assert main(["eval", "--tokenizer", str(tmp_path / "bpe"), "--tokenizer", str(out), str(corpus), "--json"]) == 0
    reports = {r["tokenizer"]: r for r in json.loads(capsys.readouterr().out)}
    assert reports[str(out)]["tokens"] < reports[str(tmp_path / "bpe")]["tokens"]
    assert reports[str(out)]["superword_vocab"] > 50 and reports[str(tmp_path / "bpe")]["superword_vocab"] == 0


@pytest.mark.parametrize("args, message", [
    (["--superbpe-transition", "1.5"], "between 0 and 1"),
    (["--superbpe-transition", "5000"], "outside 0..443"),
    (["--superbpe-transition", "lots"], "cannot read 'lots' as a transition"),
    (["--superbpe-transition", "0.8", "--stop-list-size", "5"], "cannot be combined with --stop-list-size"),
    (["--superbpe-transition", "0.8", "--pattern", "superword"], "stage 2 uses the superword split by itself"),
])
def test_bad_settings_are_one_line_errors(corpus, tmp_path, capsys, args, message):
    try:
        code = main(["train", str(corpus), "--vocab-size", "700", "--special-tokens", "<|endoftext|>", "--out",
                     str(tmp_path / "o"), "--progress", "none", *args])
    except SystemExit as exc:  # argparse's own errors: usage, then the one error line
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("parbpe train: error:") and message in last and "Traceback" not in err


def test_counts_files_and_iterators_are_refused(corpus, tmp_path, capsys):
    counts = tmp_path / "counts.parquet"
    assert main(["count", str(corpus), "--out", str(counts), "--progress", "none"]) == 0
    capsys.readouterr()
    assert main(["train", str(counts), "--vocab-size", "700", "--superbpe-transition", "0.8", "--out",
                 str(tmp_path / "o"), "--progress", "none"]) == 2
    assert "a counts file cannot give" in capsys.readouterr().err
    with pytest.raises(ValueError, match="consumed once"):
        parbpe.train_from_iterator(iter(["the cat sat"] * 10), vocab_size=300, superbpe_transition=0.9)
    assert not (tmp_path / "o").exists()


def test_a_killed_worker_ends_a_superbpe_run_in_one_line(tmp_path, monkeypatch, capsys):
    from parbpe.run.faults import KILL_HOOK

    parts = []
    for k in range(4):  # two units per counting worker
        parts.append(tmp_path / f"part-{k}.txt")
        parts[-1].write_text(phrases(10 + k, 300), encoding="utf-8")
    monkeypatch.setenv(KILL_HOOK, "count:1")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    status = main(["train", *map(str, parts), "--vocab-size", "700", "--superbpe-transition", "0.6", "--out",
                   str(tmp_path / "o"), "--tmp-dir", str(tmp), "--workers", "2", "--progress", "none"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "died" in err, err
    assert list(tmp.iterdir()) == [] and not (tmp_path / "o").exists()


@pytest.mark.parametrize("trouble", ["killed while encoding", "killed while merging", "no shared memory"])
def test_stage_two_workers_fail_in_one_line_and_leave_nothing(corpus, tmp_path, monkeypatch, capsys, trouble):
    from parbpe.run.faults import KILL_HOOK
    from parbpe.run.shared_arrays import SHM_DIR_VARIABLE

    merge_workers_on_small_tables(monkeypatch)
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setenv(SHM_DIR_VARIABLE, str(shm if trouble != "no shared memory" else tmp_path / "missing"))
    if trouble != "no shared memory":  # stage 2's workers: step 1 is the encoding, 4 the first round
        monkeypatch.setenv(KILL_HOOK, "encode:1" if trouble == "killed while encoding" else "encode:4")
    status = main(["train", str(corpus), "--vocab-size", "700", "--superbpe-transition", "0.6", "--out",
                   str(tmp_path / "o"), "--workers", "2", "--progress", "none"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1, err
    if trouble == "no shared memory":
        assert "cannot make shared memory in" in err and "PARBPE_SHM_DIR" in err, err
    else:
        assert "merge worker" in err and "died (signal 9" in err, err
    assert list(shm.iterdir()) == []  # and --out holds only the run directory, which --resume continues
    assert [p.name for p in (tmp_path / "o").iterdir()] == [".parbpe-run"]
