"""Bytes of a text file, checked as UTF-8, and the archives text tables come in.

:func:`read_text_bytes` reads a file (``.gz`` decompressed) and :func:`check_utf8` finds every
byte sequence that is not UTF-8 (RFC 3629): it returns the bytes with each one replaced by U+FFFD
(so the lines still line up with the file's) and, per bad sequence, its line and byte offset,
so that a reader rejects those lines naming ``file:line`` and the offset instead of failing on the
whole file. :func:`refuse_utf16` stops a UTF-16 file first (every line of it would be rejected,
or, without a byte-order mark, read as text with a NUL byte between the characters).
:func:`local_source` gives a path Polars can read for a ``.tar.gz`` archive (its one
CSV member, extracted).
"""

from __future__ import annotations

import codecs
import gzip
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def is_tar_gz(path: Path) -> bool:
    """Whether the name ends in ``.tar.gz`` or ``.tgz``."""
    name = path.name.lower()
    return name.endswith((".tar.gz", ".tgz"))


def read_text_bytes(path: str | Path, label: str | None = None) -> bytes:
    """The bytes of ``path``, a ``.gz`` file (not ``.tar.gz``) decompressed.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a damaged ``.gz`` file (naming ``label``, default the path).
    """
    path = Path(path)
    label = label or str(path)
    if not path.exists():
        raise FileNotFoundError(f"{label}: no such file")
    data = path.read_bytes()
    if path.name.lower().endswith(".gz") and not is_tar_gz(path):
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{label}: not a readable .gz file: {exc}") from exc
    return data


@dataclass(frozen=True)
class Utf8Problem:
    """One byte sequence that is not UTF-8.

    Attributes:
        line: 1-based line of the file holding it.
        offset: 0-based byte offset in the file.
        column: 1-based byte of the line where it starts.
        bad: the offending bytes (hex, e.g. ``ff``).
    """

    line: int
    offset: int
    column: int
    bad: str

    def describe(self) -> str:
        """``byte 1235 of the file (byte 5 of the line): 0xff is not UTF-8``: both counts 1-based, as
        editors and ``cmp`` count (:attr:`offset` is 0-based)."""
        return f"byte {self.offset + 1} of the file (byte {self.column} of the line): 0x{self.bad} is not UTF-8"


def check_utf8(data: bytes) -> tuple[bytes, list[Utf8Problem]]:
    """``data`` with every invalid UTF-8 sequence replaced by U+FFFD, and the problems found.

    A valid file costs one decode pass and is returned as is. Newlines are ASCII and never part of
    a multi-byte sequence, so the repaired bytes have the same lines as ``data``.
    """
    try:
        data.decode("utf-8")
        return data, []
    except UnicodeDecodeError:
        pass
    view = memoryview(data)
    parts: list[str] = []
    found: list[tuple[int, int]] = []
    pos = 0
    while pos < len(data):
        try:
            text, _ = codecs.utf_8_decode(view[pos:], "strict", True)
            parts.append(text)
            break
        except UnicodeDecodeError as exc:
            parts.append(codecs.utf_8_decode(view[pos: pos + exc.start], "strict", True)[0])
            parts.append("\ufffd")
            found.append((pos + exc.start, pos + exc.end))
            pos += exc.end
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.array([s for s, _ in found], dtype=np.int64)
    before = np.searchsorted(newlines, starts, side="left")
    problems = []
    for (start, end), n in zip(found, before.tolist(), strict=True):
        line_start = int(newlines[n - 1]) + 1 if n > 0 else 0
        problems.append(Utf8Problem(line=n + 1, offset=start, column=start - line_start + 1,
                                    bad=data[start:end].hex()))
    return "".join(parts).encode("utf-8"), problems


UTF16_PROBE_BYTES = 64
"""How many leading bytes :func:`utf16_encoding` looks at."""


def utf16_encoding(data: bytes) -> str | None:
    """``"UTF-16 LE"`` / ``"UTF-16 BE"`` with why (``"byte-order mark"``, or ``"a NUL byte after
    every character"`` / ``"before"``) when ``data`` is UTF-16 text, ``"UTF-32 LE/BE (byte-order
    mark)"`` for a UTF-32 byte-order mark (checked first: it starts as UTF-16's does), else None.

    Without a byte-order mark (the Unicode Standard, section 3.10, "Unicode Encoding Schemes"), text of the ASCII range
    encodes to a 0x00 byte beside each character: among the first :data:`UTF16_PROBE_BYTES` bytes
    (at least 4 and an even count), every odd-positioned byte 0 and no even-positioned one
    (little-endian), or the reverse (big-endian). UTF-8 text never holds NUL bytes so regularly.
    """
    if data.startswith(b"\xff\xfe\x00\x00"):
        return "UTF-32 LE (byte-order mark)"
    if data.startswith(b"\x00\x00\xfe\xff"):
        return "UTF-32 BE (byte-order mark)"
    if data.startswith(b"\xff\xfe"):
        return "UTF-16 LE (byte-order mark)"
    if data.startswith(b"\xfe\xff"):
        return "UTF-16 BE (byte-order mark)"
    head = data[:UTF16_PROBE_BYTES]
    head = head[: len(head) - len(head) % 2]
    if len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    if not odd.strip(b"\x00") and b"\x00" not in even:
        return "UTF-16 LE (a NUL byte after every character)"
    if not even.strip(b"\x00") and b"\x00" not in odd:
        return "UTF-16 BE (a NUL byte before every character)"
    return None


def refuse_utf16(data: bytes, label: str) -> None:
    """Raise if ``data`` is UTF-16 text, or starts with a UTF-32 byte-order mark (:func:`utf16_encoding`).

    Raises:
        ValueError: ``LABEL:1: the file is UTF-16 LE (byte-order mark), not UTF-8: save it as
            UTF-8`` (Excel's "Unicode Text" export writes UTF-16 LE).
    """
    enc = utf16_encoding(data)
    if enc is not None:
        raise ValueError(f"{label}:1: the file is {enc}, not UTF-8: save it as UTF-8 (Excel's \"Unicode Text\" "
                         "export writes UTF-16)")


@contextmanager
def local_source(path: str | Path) -> Iterator[Path]:
    """A path Polars can read for ``path``: the file itself, or, for a ``.tar.gz``/``.tgz``
    archive, its one CSV member (or the one named after the archive) extracted to a temporary
    file (removed afterwards).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: an archive without exactly one CSV member to read.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if not is_tar_gz(path):
        yield path
        return
    name = path.name.lower()
    stem = path.name[: -len(".tar.gz")] if name.endswith(".tar.gz") else path.name[: -len(".tgz")]
    try:
        archive = tarfile.open(path, "r:gz")  # noqa: SIM115 - closed by the with-block below
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: not a readable .tar.gz archive: {exc}") from exc
    with archive:
        try:
            members = [m for m in archive.getmembers() if m.isfile() and ".csv" in Path(m.name).name.lower()]
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: not a readable .tar.gz archive: {exc}") from exc
        named = [m for m in members if Path(m.name).name.split(".csv")[0] == stem]
        chosen = named or members
        if len(chosen) != 1:
            found = ", ".join(m.name for m in members) or "none"
            raise ValueError(f"{path}: expected one CSV member ({stem}.csv) in the archive, found {found}")
        member = chosen[0]
        tmpdir = Path(tempfile.mkdtemp(prefix="ddlscope-tables-"))
        try:
            target = tmpdir / Path(member.name).name
            try:
                src = archive.extractfile(member)
                if src is None:
                    raise ValueError(f"{path}: cannot extract {member.name}")
                with src, target.open("wb") as out:
                    shutil.copyfileobj(src, out, length=1 << 22)
            except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
                raise ValueError(f"{path}: cannot extract {member.name}: {exc}") from exc
            yield target
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
