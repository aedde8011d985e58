"""Paths and URIs: local files, `file://`, `s3://`, `gs://` (pyarrow's own filesystems) and `hf://`
(fsspec's Hugging Face filesystem), behind one set of functions.

Every reader and writer goes through these: resolve a path to a `pyarrow.fs` filesystem, list files
under a directory or glob, open random-access files (parquet footers and row groups are ranged
reads: only the text column's pages are fetched) and streams, and write outputs atomically. Local
paths take the plain local calls. Object stores have no rename, so an output is written to a local
temporary file and uploaded to its final key only when complete: a reader never sees half a file.
Remote errors become one line naming the URI (missing bucket, missing key, refused credentials).
"""

from __future__ import annotations

import fnmatch
import functools
import io
import os
import re
import tempfile
from collections.abc import Callable
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

REMOTE_SCHEMES = ("s3", "gs", "gcs", "hf")
_GLOB_CHARS = re.compile(r"[*?\[]")
_CREDENTIAL_ERRORS = ("ACCESS_DENIED", "SIGNATURE_DOES_NOT_MATCH", "INVALID_ACCESS_KEY_ID", "AccessDenied",
                      "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "Unauthorized")


def is_remote(path: str) -> bool:
    """True for a URI of an object store or the Hub (s3://, gs://, hf://); file:// and plain paths are local."""
    scheme = urlparse(path).scheme.lower() if "://" in path else ""
    return scheme in REMOTE_SCHEMES


def local_path(path: str) -> str:
    """A plain path for file:// URIs; other paths as given."""
    return urlparse(path).path if path.startswith("file://") else path


def check_scheme(path: str) -> None:
    """Refuse a URI scheme parbpe cannot read, naming the ones it can."""
    if "://" in path and not path.startswith("file://") and not is_remote(path):
        raise ValueError(f"{path}: unsupported URI scheme {urlparse(path).scheme!r}; "
                         "use a local path, file://, s3://, gs:// or hf://")


def resolve(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding path and the path on it (bucket/key for object stores)."""
    if not is_remote(path):
        return pafs.LocalFileSystem(), os.path.abspath(local_path(path))
    parsed = urlparse(path)
    scheme = parsed.scheme.lower()
    inner = (parsed.netloc + parsed.path).rstrip("/") or parsed.netloc
    return _filesystem(scheme, parsed.netloc, _credential_env()), inner


def _credential_env() -> tuple[tuple[str, str], ...]:
    """The environment that chooses endpoints and credentials (a cache key: changing it makes a new client)."""
    return tuple(sorted((k, v) for k, v in os.environ.items()
                        if k.startswith(("AWS_", "GOOGLE_", "HF_", "STORAGE_EMULATOR"))))


@functools.lru_cache(maxsize=16)
def _filesystem(scheme: str, netloc: str, env: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    if scheme == "hf":
        try:
            from huggingface_hub import HfFileSystem
        except ImportError:
            raise ValueError("hf:// paths need huggingface_hub and fsspec: pip install 'parbpe[cloud]'") from None
        return pafs.PyFileSystem(pafs.FSSpecHandler(HfFileSystem()))
    try:
        fs, _ = pafs.FileSystem.from_uri(f"{'gs' if scheme == 'gcs' else scheme}://{netloc}")
    except (pa.ArrowNotImplementedError, ImportError) as exc:
        raise ValueError(f"{scheme}:// paths need a pyarrow built with {scheme.upper()} support "
                         f"(pip install 'parbpe[cloud]'): {exc}") from None
    except (OSError, pa.ArrowInvalid) as exc:
        raise ValueError(f"{scheme}://{netloc}: cannot connect ({_first_line(exc)})") from None
    return fs


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def remote_error(uri: str, exc: BaseException) -> Exception:
    """A one-line error naming uri for a failed remote call: refused credentials, or what the store said."""
    text = _first_line(exc)
    if any(marker in text for marker in _CREDENTIAL_ERRORS):
        return ValueError(f"{uri}: access denied ({text}); check the credentials "
                          "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS or HF_TOKEN)")
    if isinstance(exc, FileNotFoundError):
        return FileNotFoundError(f"{uri}: no such file")
    return ValueError(f"{uri}: cannot read ({text})")


def _not_found(uri: str, fs: pafs.FileSystem, path: str) -> FileNotFoundError:
    """No file at uri: say whether its bucket is missing, or the key."""
    bucket = path.split("/", 1)[0]
    if is_remote(uri) and bucket != path:
        try:
            missing_bucket = fs.get_file_info(bucket).type == pafs.FileType.NotFound
        except OSError:
            missing_bucket = False
        if missing_bucket:
            return FileNotFoundError(f"{uri}: bucket {bucket!r} does not exist (or these credentials cannot see it)")
    return FileNotFoundError(f"{uri}: no such file, directory or glob match")


def file_info(uri: str) -> tuple[pafs.FileSystem, str, pafs.FileInfo]:
    """The filesystem, path and FileInfo of uri (remote errors as one line naming it)."""
    fs, path = resolve(uri)
    try:
        return fs, path, fs.get_file_info(path)
    except OSError as exc:
        raise remote_error(uri, exc) from None


def expand_remote(item: str, readable: Callable[[str], object]) -> list[str]:
    """The files named by a remote path, directory (recursively) or glob: URIs of files that
    readable() accepts (for directories and globs), sorted. Errors name the URI."""
    scheme = urlparse(item).scheme
    fs, path = resolve(item)
    match = _GLOB_CHARS.search(path)
    try:
        if match is None:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.File:
                return [item]
            if info.type == pafs.FileType.NotFound:
                raise _not_found(item, fs, path)
            infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
            found = sorted(f"{scheme}://{i.path}" for i in infos if i.type == pafs.FileType.File and readable(i.path))
            if not found:
                raise FileNotFoundError(f"directory {item!r} holds no readable input (.parquet, .txt, .jsonl, .csv)")
            return found
        base = path[: match.start()].rpartition("/")[0]
        if "/" not in path[: match.start()]:
            raise ValueError(f"{item}: a glob in the bucket name is not supported; put it in the key")
        if fs.get_file_info(base).type == pafs.FileType.NotFound:
            raise _not_found(item, fs, path)
        recursive = "**" in path or "/" in path[match.start():]
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=recursive))
        pattern = path.replace("**/", "*")  # fnmatch's * already crosses '/'
        found = sorted(f"{scheme}://{i.path}" for i in infos
                       if i.type == pafs.FileType.File and fnmatch.fnmatchcase(i.path, pattern))
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and str(exc).startswith((item, "directory")):
            raise
        raise remote_error(item, exc) from None
    if not found:
        raise FileNotFoundError(f"no such file, directory or glob match: {item!r}")
    return found


def open_input_file(path: str) -> pa.NativeFile:
    """A random-access file (seek + ranged reads): for parquet and for finding cuts in text files."""
    if not is_remote(path):
        return pa.OSFile(local_path(path), "rb")
    fs, inner = resolve(path)
    try:
        return fs.open_input_file(inner)
    except FileNotFoundError:
        raise _not_found(path, fs, inner) from None
    except OSError as exc:
        raise remote_error(path, exc) from None


def open_input_stream(path: str, compression: str | None = None) -> pa.NativeFile:
    """A sequential stream, decompressed if compression is given."""
    if not is_remote(path):
        return pa.input_stream(local_path(path), compression=compression)
    stream = open_input_file(path)
    return pa.CompressedInputStream(stream, compression) if compression else stream


def exists(path: str) -> bool:
    """True if a file or directory is at path."""
    if not is_remote(path):
        return os.path.exists(local_path(path))
    return file_info(path)[2].type != pafs.FileType.NotFound


def open_text(path: str) -> io.TextIOBase:
    """A UTF-8 text file for reading (local, or fetched from a store)."""
    if not is_remote(path):
        return open(local_path(path), encoding="utf-8")
    return io.TextIOWrapper(open_input_file(path), encoding="utf-8")


def file_size(path: str) -> int:
    if not is_remote(path):
        return os.path.getsize(local_path(path))
    fs, inner, info = file_info(path)
    if info.type != pafs.FileType.File:
        raise _not_found(path, fs, inner)
    return info.size


def makedirs(path: str) -> None:
    """Create a local directory (object stores have none to create)."""
    if not is_remote(path):
        os.makedirs(local_path(path), exist_ok=True)


def upload(local: str, uri: str) -> None:
    """Copy a complete local file to uri in one upload: the key appears only when it is whole."""
    fs, inner = resolve(uri)
    try:
        pafs.copy_files(local, inner, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    except FileNotFoundError:
        raise _not_found(uri, fs, inner) from None
    except OSError as exc:
        text = _first_line(exc)
        if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
            raise FileNotFoundError(f"{uri}: bucket {inner.split('/', 1)[0]!r} does not exist") from None
        raise remote_error(uri, exc) from None


def write_remote(uri: str, write: Callable[[str], None]) -> None:
    """Call write(local temporary path), then upload the finished file to uri."""
    fd, tmp = tempfile.mkstemp(prefix=".parbpe-upload-", suffix=os.path.basename(uri))
    os.close(fd)
    try:
        write(tmp)
        upload(tmp, uri)
    finally:
        os.unlink(tmp)
