"""Reading text inputs: one place that turns a file's bytes into lines or reports where it is not text.

An undecodable byte is an error at `file:line:col`, never a silent replacement character.
"""

from __future__ import annotations

from pathlib import Path

from ..diagnostics import InputError, at

BOM = b"\xef\xbb\xbf"


def read_lines(path: Path) -> list[str]:
    """The file's lines; undecodable bytes are an error at their line and column."""
    return decode(read_bytes(path), str(path)).splitlines()


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None


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
