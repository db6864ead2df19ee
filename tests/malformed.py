"""Generators of bad inputs: each takes good bytes (usually a sample) and breaks them one way.

The malformed-input corpus (tests/test_malformed.py) is built from these at test time, so
it follows the samples and needs no checked-in broken files. Every function is deterministic.

Text: `line_of`, `set_line`, `cut_mid_line`, `set_cell`, `drop_cells`, `add_cells`.
Binary: `garbage`, `et_frames`, `cut_mid_message`, `bad_varint`, `oversized_frame`,
`bad_node_body`, `replace_node`. JSON: `json_edit`.
"""

from __future__ import annotations

import random
from typing import Callable

import orjson

from converters._proto import et_def_pb2 as pb
from converters._proto.wire import frames, varint

# ------------------------------------------------------------------------------------ text


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def line_of(data: bytes, number: int) -> bytes:
    """Line `number` (1-based) without its newline."""
    return _lines(data)[number - 1]


def set_line(data: bytes, number: int, new: bytes | Callable[[bytes], bytes]) -> bytes:
    """Replace line `number` (1-based) by `new` (bytes, or a function of the old line)."""
    lines = _lines(data)
    lines[number - 1] = new(lines[number - 1]) if callable(new) else new
    return b"\n".join(lines)


def cut_mid_line(data: bytes, number: int, keep: int | None = None) -> bytes:
    """Everything before line `number`, then only its first `keep` bytes (default: half) and no newline."""
    lines = _lines(data)
    line = lines[number - 1]
    keep = len(line) // 2 if keep is None else keep
    return b"".join(part + b"\n" for part in lines[: number - 1]) + line[:keep]


def set_cell(data: bytes, number: int, column: int, value: bytes, sep: bytes | None = None) -> bytes:
    """Line `number` with cell `column` (0-based) set to `value`; cells split at `sep` (default: whitespace)."""

    def edit(line: bytes) -> bytes:
        cells = line.split(sep)
        cells[column] = value
        return (sep or b"\t").join(cells)

    return set_line(data, number, edit)


def drop_cells(data: bytes, number: int, count: int, sep: bytes | None = None) -> bytes:
    """Line `number` without its last `count` cells."""
    return set_line(data, number, lambda line: (sep or b"\t").join(line.split(sep)[:-count]))


def add_cells(data: bytes, number: int, cells: list[bytes], sep: bytes | None = None) -> bytes:
    """Line `number` with `cells` appended."""
    return set_line(data, number, lambda line: (sep or b"\t").join(line.split(sep) + cells))


# ------------------------------------------------------------------------------------ binary


def garbage(size: int = 4096, seed: int = 8) -> bytes:
    """Random bytes that are neither UTF-8 text nor a valid Chakra stream (deterministic)."""
    data = bytearray(random.Random(seed).randbytes(size))
    data[0:2] = b"\xff\xfe"  # never valid UTF-8, never a plausible first varint of a small message
    return bytes(data)


def et_frames(data: bytes) -> list[tuple[int, int, int]]:
    """(prefix offset, body start, body end) of every message; index 0 is the GlobalMetadata."""
    return list(frames(data))


def cut_mid_message(data: bytes, index: int) -> tuple[bytes, int, int, int]:
    """`data` cut in the middle of message `index`'s body.

    Returns (bytes, prefix offset, the body's length, bytes of it left).
    """
    offset, start, end = et_frames(data)[index]
    keep = (end - start) // 2
    return data[: start + keep], offset, end - start, keep


def bad_varint(data: bytes, index: int) -> tuple[bytes, int]:
    """Message `index`'s length prefix replaced by 11 continuation bytes; returns (bytes, its offset)."""
    offset, start, _ = et_frames(data)[index]
    return data[:offset] + b"\xff" * 11 + data[start:], offset


def oversized_frame(data: bytes, index: int, length: int = 1 << 62) -> tuple[bytes, int, int]:
    """Message `index` announced as `length` bytes; returns (bytes, prefix offset, bytes left after the prefix)."""
    offset, start, _ = et_frames(data)[index]
    prefix = varint(length)
    return data[:offset] + prefix + data[start:], offset, len(data) - start


def bad_node_body(data: bytes, index: int) -> tuple[bytes, int]:
    """Message `index`'s body replaced by bytes protobuf cannot decode (a field with wire type 7)."""
    offset, start, end = et_frames(data)[index]
    body = b"\x0f" + b"\x00" * (end - start - 1)  # field 1, wire type 7: no such wire type
    return data[:start] + body + data[end:], offset


def replace_node(data: bytes, index: int, edit: Callable[[pb.Node], None]) -> tuple[bytes, int]:
    """Message `index` decoded as a Node, changed by `edit`, and framed again; returns (bytes, offset)."""
    offset, start, end = et_frames(data)[index]
    node = pb.Node.FromString(data[start:end])
    edit(node)
    body = node.SerializeToString()
    return data[:offset] + varint(len(body)) + body + data[end:], offset


# ------------------------------------------------------------------------------------ JSON


def json_edit(data: bytes, path: list[str | int], value) -> bytes:
    """The JSON document with the value at `path` (keys and list indices) replaced."""
    doc = orjson.loads(data)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return orjson.dumps(doc)
