"""Reading text inputs: one place that turns a file's bytes into lines or reports where it is not text.

An undecodable byte is an error at `file:line:col`, never a silent replacement character.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from ..diagnostics import InputError, at

BOM = b"\xef\xbb\xbf"
GZIP_MAGIC = b"\x1f\x8b"


def read_lines(path: Path) -> list[str]:
    """The file's lines; undecodable bytes are an error at their line and column."""
    return decode(read_bytes(path), str(path)).splitlines()


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None


def head_gunzipped(head: bytes) -> bytes | None:
    """The first bytes of a file for sniffing, inflated when gzip (up to 64 KiB); None when the
    gzip data is broken."""
    if not head.startswith(GZIP_MAGIC):
        return head
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 1 << 16)
    except zlib.error:
        return None


def gunzipped(data: bytes, path: Path) -> bytes:
    """`data` decompressed when it is gzip (a cut-off stream is named as such, at its length)."""
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except EOFError:
        raise InputError(f"{path}: byte {len(data)}", "gzip data cut off (the file is truncated)") from None
    except (OSError, zlib.error) as e:
        raise InputError(str(path), f"broken gzip data: {e}") from None


def decode(data: bytes, path: str) -> str:
    """`data` as text; a leading byte-order mark is dropped, a byte that is not UTF-8 is an InputError."""
    skip = len(BOM) if data.startswith(BOM) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise not_utf8(data, skip + e.start, path) from None


def not_utf8(data: bytes, offset: int, path: str, first_line: int = 1) -> InputError:
    """The error for the undecodable byte at `offset` of `data` (which starts at line `first_line`).

    The column counts characters, as an editor shows them.
    """
    line_start = data.rfind(b"\n", 0, offset) + 1
    line = first_line + data.count(b"\n", 0, offset)
    column = len(data[line_start:offset].decode("utf-8", errors="replace")) + 1
    return InputError(at(path, line, column), f"not UTF-8 text (byte 0x{data[offset]:02x})")


def json_error(path: Path, error: ValueError) -> InputError:
    """A JSON syntax error at its place, `file:line:col`, like every other reader's errors."""
    line, col = getattr(error, "lineno", None), getattr(error, "colno", None)
    message = getattr(error, "msg", str(error))
    return InputError(at(str(path), line, col), f"not valid JSON ({message})")
