"""Reading text inputs: one place that turns a file's bytes into lines or reports where it is not text."""

from __future__ import annotations

from pathlib import Path

from ..diagnostics import InputError, at


def read_lines(path: Path) -> list[str]:
    """The file's lines; undecodable bytes are an error at their line."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is not part of the text
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(at(str(path), line), f"byte {e.start} is not UTF-8 text (0x{data[e.start]:02x})") from None
    return text.splitlines()
