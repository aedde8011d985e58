"""Inputs and outputs on object storage: a real S3 server (moto in server mode, on 127.0.0.1) read and
written through pyarrow's S3 filesystem, with results byte-identical to local files."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import parbpe
from parbpe.cli import main
from parbpe.config import TrainConfig
from parbpe.io import filesystems
from parbpe.io.plan import plan
from parbpe.io.readers import ReadStats, iter_text_batches

moto_server = pytest.importorskip("moto.server", reason="needs moto[server] (pip install -e '.[test]')")
boto3 = pytest.importorskip("boto3", reason="needs boto3 (installed with moto[server])")

pytestmark = pytest.mark.cloud

BUCKET = "corpus"
WORDS = ["the", "tokenizer", "counts", "chunks", "of", "text", "élan", "中文", "don't", "1999", "x.y", "\n", "  ",
         "Ärger", "naïve", "(see", "below)", "—", "😀"]


def _documents(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 300))) for _ in range(n)]


@pytest.fixture(scope="module")
def local_corpus(tmp_path_factory) -> Path:
    """Realmix-like parquet (FineWeb-Edu's text column among others, several row groups), jsonl and text."""
    d = tmp_path_factory.mktemp("s3corpus")
    rng = random.Random(13)
    for k in range(2):
        texts = _documents(rng, 60)
        table = pa.table({"text": texts, "id": [f"doc-{k}-{i}" for i in range(len(texts))],
                          "score": [rng.random() for _ in texts]})
        pq.write_table(table, d / f"train-{k:05d}-of-00002.parquet", row_group_size=25)
    (d / "notes.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in _documents(rng, 30)))
    (d / "book.txt").write_text("\n".join(f"Line{i} " + " ".join(rng.choice(WORDS) for _ in range(20))
                                          for i in range(400)))
    return d


@pytest.fixture(scope="module")
def s3(local_corpus):
    """A moto S3 server on 127.0.0.1 that checks credentials, the corpus uploaded under s3://corpus/data/,
    and the environment pyarrow reads its endpoint and credentials from. Yields the endpoint URL."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # The first three requests (IAM: user, policy, key) are free; every later one must be signed with that key.
    ActionAuthenticatorMixin.request_count = 0
    old_count, settings.INITIAL_NO_AUTH_ACTION_COUNT = settings.INITIAL_NO_AUTH_ACTION_COUNT, 3
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="parbpe")
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="parbpe", PolicyName="all", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="parbpe")["AccessKey"]
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
           "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"], "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
        client.create_bucket(Bucket=BUCKET)
        for path in sorted(local_corpus.iterdir()):
            client.upload_file(str(path), BUCKET, f"data/{path.name}")
        yield client
    settings.INITIAL_NO_AUTH_ACTION_COUNT = old_count
    server.stop()


def _get(client, uri: str) -> bytes:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_globs_and_directories_plan_as_locally(s3, local_corpus):
    local = plan([str(local_corpus)], range_bytes=4096)
    for spec in ("s3://corpus/data", "s3://corpus/data/", "s3://corpus/data/*"):
        remote = plan([spec], range_bytes=4096)
        assert [(u.path.replace("s3://corpus/data", str(local_corpus)), u.kind, u.row_group, u.start, u.end)
                for u in remote] == [(u.path, u.kind, u.row_group, u.start, u.end) for u in local]
    assert [u.path for u in plan(["s3://corpus/data/train-*.parquet"])] == \
        ["s3://corpus/data/train-00000-of-00002.parquet"] * 3 + ["s3://corpus/data/train-00001-of-00002.parquet"] * 3


def test_every_unit_reads_the_same_text_as_locally(s3, local_corpus):
    # Parquet row groups (ranged reads of one column), jsonl and text byte ranges snapped to the same cuts.
    local = plan([str(local_corpus)], range_bytes=4096)
    remote = plan(["s3://corpus/data/"], range_bytes=4096)
    assert any(u.kind == "text" and u.start > 0 for u in remote) and any(u.kind == "jsonl" and u.start for u in remote)
    for a, b in zip(local, remote, strict=True):
        texts_a = [t for batch in iter_text_batches(a, "text", ReadStats()) for t in batch.to_pylist()]
        texts_b = [t for batch in iter_text_batches(b, "text", ReadStats()) for t in batch.to_pylist()]
        assert texts_a == texts_b, b.describe()


def test_count_from_and_to_s3_is_byte_identical(s3, local_corpus, tmp_path):
    config = TrainConfig(workers=2, memory_budget="2GB")
    parbpe.count_to_file([str(local_corpus)], str(tmp_path / "counts.parquet"), config)
    summary = parbpe.count_to_file(["s3://corpus/data/"], "s3://corpus/out/counts.parquet", config)
    assert summary["rows_written"] > 100
    assert _get(s3, "s3://corpus/out/counts.parquet") == (tmp_path / "counts.parquet").read_bytes()
    # A counts file on S3 is a training input too.
    assert parbpe.count_to_file(["s3://corpus/out/counts.parquet"], str(tmp_path / "again.parquet"),
                                config)["rows_written"] == summary["rows_written"]
    assert (tmp_path / "again.parquet").read_bytes() == (tmp_path / "counts.parquet").read_bytes()


def test_train_from_and_to_s3_writes_the_same_files(s3, local_corpus, tmp_path):
    args = ["--vocab-size", "400", "--workers", "1", "--progress", "none"]
    assert main(["train", str(local_corpus), "--out", str(tmp_path / "tok"), *args]) == 0
    assert main(["train", "s3://corpus/data/*", "--out", "s3://corpus/tok", *args]) == 0
    for name in ("parbpe.json", "tokenizer.json", "vocab.json", "merges.txt", "tokenizer.tiktoken"):
        assert _get(s3, f"s3://corpus/tok/{name}") == (tmp_path / "tok" / name).read_bytes(), name
    assert json.loads(_get(s3, "s3://corpus/tok/stats.json"))["merges"] == 400 - 256
    # A tokenizer on S3 loads as it does from disk.
    text = "the tokenizer counts naïve chunks 中文"
    local = parbpe.Tokenizer.load(str(tmp_path / "tok"))
    assert parbpe.Tokenizer.load("s3://corpus/tok").encode(text) == local.encode(text)


def test_an_upload_leaves_no_partial_object(s3, tmp_path):
    def write(path: str) -> None:
        Path(path).write_bytes(b"half")
        raise RuntimeError("the writer failed")

    with pytest.raises(RuntimeError):
        filesystems.write_remote("s3://corpus/out/partial.bin", write)
    fs, path = filesystems.resolve("s3://corpus/out/partial.bin")
    assert fs.get_file_info(path).type == pafs.FileType.NotFound


@pytest.mark.parametrize("uri, message", [
    ("s3://no-such-bucket/data/x.parquet",
     "s3://no-such-bucket/data/x.parquet: bucket 'no-such-bucket' does not exist"),
    ("s3://corpus/data/missing.parquet", "s3://corpus/data/missing.parquet: no such file"),
    ("s3://corpus/nothing-here/*.parquet", "s3://corpus/nothing-here/*.parquet"),
])
def test_missing_bucket_or_key_is_one_line_naming_the_uri(s3, tmp_path, capsys, uri, message):
    assert main(["count", uri, "--out", str(tmp_path / "c.parquet"), "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parbpe count: error: {message}") and err.count("\n") == 1, err


def test_bad_credentials_are_one_line_naming_the_uri(s3, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    assert main(["count", "s3://corpus/data/", "--out", str(tmp_path / "c.parquet"), "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("parbpe count: error: s3://corpus/data/: access denied") and err.count("\n") == 1, err
    assert "AWS_SECRET_ACCESS_KEY" in err


def test_writing_to_a_missing_bucket_is_one_line(s3, local_corpus, capsys):
    out = "s3://no-such-bucket/counts.parquet"
    assert main(["count", str(local_corpus), "--out", out, "--workers", "1", "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parbpe count: error: {out}: bucket 'no-such-bucket' does not exist") and \
        err.count("\n") == 1, err


def test_unknown_scheme_and_hub_paths(tmp_path):
    with pytest.raises(ValueError, match="unsupported URI scheme 'ftp'"):
        plan(["ftp://host/file.parquet"])
    assert plan([f"file://{tmp_path}/*.txt"] if (tmp_path / "a.txt").write_text("hi there") else []) == \
        plan([str(tmp_path / "a.txt")])
    pytest.importorskip("huggingface_hub", reason="hf:// needs huggingface_hub")
    fs, path = filesystems.resolve("hf://datasets/HuggingFaceFW/fineweb-edu/sample/10BT")
    assert isinstance(fs, pafs.PyFileSystem) and path == "datasets/HuggingFaceFW/fineweb-edu/sample/10BT"


def test_missing_extras_are_named(monkeypatch):
    # Without huggingface_hub (or Ray), the error names the extra that brings it.
    from parbpe.run.ray_executor import import_ray

    filesystems._filesystem.cache_clear()
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(ValueError, match=r"pip install 'parbpe\[cloud\]'"):
        filesystems.resolve("hf://datasets/org/name/data.parquet")
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ValueError, match=r"pip install 'parbpe\[ray\]'"):
        import_ray()
    filesystems._filesystem.cache_clear()
