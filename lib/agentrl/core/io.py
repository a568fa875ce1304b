"""File I/O shared by every phase: validated JSONL reading, atomic appends and writes, staged directories.

Two guarantees the rest of the library relies on:
- a bad input line is reported as ``DataError("path:line: what is wrong")``;
- outputs are never half-written: records are appended one ``write()`` per line, whole files are written
  to a temporary name and renamed, and directories are built in a staging folder and renamed at the end.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """Bad user input: a malformed file, a missing field, an empty set. The CLI prints it and exits 2."""


def iter_jsonl(path: str | Path, *, allow_torn_tail: bool = False) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for each non-blank line of a JSONL file.

    Raises DataError naming the file and line for invalid JSON or a line that is not an object. With
    ``allow_torn_tail`` a malformed *final* line without a trailing newline (a write cut off by a crash)
    is skipped with a warning instead.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    with path.open("rb") as fh:
        yield from _iter_lines(path, fh, allow_torn_tail)


def _iter_lines(path: Path, fh, allow_torn_tail: bool) -> Iterator[tuple[int, dict]]:
    for lineno, raw in enumerate(fh, start=1):
        if not raw.strip():
            continue
        try:
            record = loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            # Only the final line can lack its newline; that is the signature of a write cut off by a crash.
            torn = not raw.endswith(b"\n")
            if allow_torn_tail and torn:
                warnings.warn(f"{path}:{lineno}: skipping torn final line ({len(raw)} bytes)", stacklevel=2)
                continue
            raise DataError(f"{path}:{lineno}: invalid JSON ({exc})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        yield lineno, record


def read_jsonl(path: str | Path, *, required: Iterable[str] = (), allow_torn_tail: bool = False) -> list[dict]:
    """Return all records of a JSONL file, checking that each has the ``required`` fields.

    A missing field raises DataError naming file, line and field.
    """
    required = tuple(required)
    out = []
    for lineno, rec in iter_jsonl(path, allow_torn_tail=allow_torn_tail):
        for field in required:
            if field not in rec:
                raise DataError(f"{path}:{lineno}: missing field '{field}'")
        out.append(rec)
    return out


def dumps(record: Any) -> str:
    """Return the compact one-line JSON used for every JSONL record."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=_json_default)


def loads(raw: bytes | str) -> Any:
    """Return the JSON value of ``raw``, as ``json.loads`` returns it; raise what ``json.loads`` raises.

    msgspec parses first (3x faster on trajectory lines and reply bodies, integers of any size exact); whatever
    it refuses (NaN and Infinity literals, numbers beyond a double, escaped lone surrogates, UTF-16 input,
    invalid JSON) goes through ``json.loads``, so the value, or the error and its message, are the standard
    library's.
    """
    msgspec, _, decoder = _msgspec()
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError:  # ValidationError (a number out of range) included
        return json.loads(raw)


def encode_line(record: Any) -> bytes:
    """Return the record as one UTF-8 JSON line; lone surrogates (a model may emit ``\\ud800``) become U+FFFD.

    Without the replacement the encode raises and the record could never be written, on every resume again.
    msgspec encodes (~10x faster than ``json.dumps`` on a trajectory: a tenth of the batch runner's CPU per
    question), with numpy values and paths through ``_json_default`` as :func:`dumps` does; what it refuses (lone
    surrogates, keys that are no strings or numbers, an object ``_json_default`` cannot convert) goes through
    :func:`dumps`, which writes it or raises its own error. Non-finite floats become ``null``: JSON has no NaN,
    and every reader of a line (polars, jq, other languages) then accepts it.
    """
    try:
        return _msgspec()[1].encode(record) + b"\n"
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        pass
    line = dumps(record) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return line.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


@functools.cache
def _msgspec():
    # imported on first use (a C extension, ~1 ms): agentrl.colab runs on this module with the standard library alone,
    # in a fresh clone before anything is installed
    import msgspec

    return msgspec, msgspec.json.Encoder(enc_hook=_json_default), msgspec.json.Decoder()


class JsonlAppender:
    """Append records to a JSONL file, one ``os.write`` per record on an O_APPEND descriptor.

    A single write of a whole line is what makes a record atomic: a crash leaves either the full line or,
    at worst on a full disk, a torn final line that readers with ``allow_torn_tail`` skip. If the file ends
    in a torn line when it is opened, the file is truncated back to its last complete line (with a warning):
    terminating the fragment instead would leave an invalid line mid-file, which no reader accepts. A final
    line that is valid JSON and only lacks its newline is kept and terminated.
    """

    def __init__(self, path: str | Path, *, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        # O_RDWR so the torn tail can be read and cut off through the same descriptor
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._drop_torn_tail()

    def _drop_torn_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if not size or os.pread(self._fd, 1, size - 1) == b"\n":
            return
        keep = size
        while keep > 0:  # scan back in blocks for the last newline
            start = max(0, keep - 65536)
            block = os.pread(self._fd, keep - start, start)
            nl = block.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            keep = start
        try:  # a complete record that merely lacks its newline (a hand-written file) is kept
            if isinstance(json.loads(os.pread(self._fd, size - keep, keep)), dict):
                os.write(self._fd, b"\n")
                return
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
        warnings.warn(f"{self.path}: dropping a torn final line ({size - keep} bytes) left by an interrupted write",
                      stacklevel=3)
        os.ftruncate(self._fd, keep)

    def write(self, record: dict) -> None:
        """Append one record as one line; raise OSError when the line could not be written whole."""
        line = encode_line(record)
        written = os.write(self._fd, line)
        if written != len(line):
            # a full disk can take part of a line without an error: cut it back, so that the file still ends at a
            # complete line and a later append cannot turn the fragment into a malformed line mid-file
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)", str(self.path))
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically; return the path."""
    return write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n")


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write all records to a JSONL file atomically (temporary file + rename); return the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    n = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            for rec in records:
                fh.write(encode_line(rec))
                n += 1
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return n


def read_json(path: str | Path) -> Any:
    """Return the parsed JSON document at ``path``; DataError if missing or invalid."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


@contextlib.contextmanager
def staged_dir(final: str | Path, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a fresh staging directory next to ``final``; on success it replaces ``final`` by rename.

    On any exception the staging directory is removed and ``final`` is left as it was, so a failed
    build never leaves a half-written output behind.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not overwrite:
        raise DataError(f"{final}: already exists")
    stage = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.staging."))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if final.exists():
        trash = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.old."))
        os.replace(final, trash / "old")
        os.replace(stage, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(stage, final)
