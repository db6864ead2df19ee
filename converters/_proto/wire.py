"""Chakra file framing and attribute conversion shared by the Chakra and et-json readers/writers.

A Chakra file is `varint(length) || message` repeated: one `GlobalMetadata`, then `Node`s.
Messages themselves are encoded and decoded by protobuf; only the length prefix is ours.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Callable, Iterator

from ..model import WireAttr
from . import et_def_pb2 as pb
from .varint import varint

# oneof member -> element type ("int", "float", "bool", "str", "bytes"), and whether it is a list.
ATTR_KINDS: dict[str, tuple[str, bool]] = {}
for _field in pb.AttributeProto.DESCRIPTOR.oneofs_by_name["value"].fields:
    _list = _field.name.endswith("_list")
    _base = _field.name[: -len("_list")] if _list else _field.name[: -len("_val")]
    if _base in ("double", "float"):
        _type = "float"
    elif _base == "bool":
        _type = "bool"
    elif _base == "string":
        _type = "str"
    elif _base == "bytes":
        _type = "bytes"
    else:
        _type = "int"
    ATTR_KINDS[_field.name] = (_type, _list)

# Value range of each integer kind (by its base name, e.g. "sfixed32").
INT_RANGES = {
    "int32": (-(1 << 31), (1 << 31) - 1), "sint32": (-(1 << 31), (1 << 31) - 1),
    "sfixed32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1), "fixed32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1), "sint64": (-(1 << 63), (1 << 63) - 1),
    "sfixed64": (-(1 << 63), (1 << 63) - 1), "uint64": (0, (1 << 64) - 1), "fixed64": (0, (1 << 64) - 1),
}


def int_range(kind: str) -> tuple[int, int]:
    return INT_RANGES[kind.rsplit("_", 1)[0]]


class FramingError(Exception):
    """A file's message framing is broken at byte `offset`."""

    def __init__(self, offset: int, message: str):
        super().__init__(message)
        self.offset = offset
        self.message = message


def frames(data: bytes | memoryview, pos: int = 0) -> Iterator[tuple[int, int, int]]:
    """Yield (offset of the prefix, start, end) of every length-prefixed message in `data`, from
    the one at `pos` (0: the first) on.

    The first message is the GlobalMetadata, every later one a Node; a frame that runs past
    the end raises FramingError naming the message and the bytes wanted and left.
    """
    size = len(data)
    index = 0 if pos == 0 else 1
    while pos < size:
        frame = short_frame(data, pos)  # most messages: a length in one or two bytes, and all there
        if frame is None:
            length, start = length_prefix(data, pos)
            if start + length > size:
                what = "GlobalMetadata" if index == 0 else "Node"
                raise FramingError(pos, f"truncated {what} message (wanted {length} bytes, {size - start} left)")
            frame = (start, start + length)
        yield pos, *frame
        pos = frame[1]
        index += 1


def length_prefix(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(length, position after) of the varint length prefix at `pos`."""
    offset, size = pos, len(data)
    length = 0
    shift = 0
    while True:
        if pos >= size:
            raise FramingError(offset, "truncated length prefix at end of file")
        byte = data[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return length, pos
        shift += 7
        if shift > 63:
            raise FramingError(offset, "length prefix is not a varint (more than 10 bytes)")


def attr_from_proto(attr: pb.AttributeProto) -> WireAttr:
    """An AttributeProto as a WireAttr: the oneof member that is set and its Python value."""
    kind = attr.WhichOneof("value")
    if kind is None:
        return WireAttr(attr.name, "", None, attr.doc_string)
    value = getattr(attr, kind)
    if ATTR_KINDS[kind][1]:
        value = list(value.values)
    return WireAttr(attr.name, kind, value, attr.doc_string)


def attr_to_proto(attr: WireAttr) -> pb.AttributeProto:
    """The AttributeProto a WireAttr stands for (the kind decides the oneof member)."""
    out = pb.AttributeProto(name=attr.name, doc_string=attr.doc)
    if not attr.kind:
        return out
    if ATTR_KINDS[attr.kind][1]:
        getattr(out, attr.kind).SetInParent()  # an empty list is still the member that is set
        getattr(out, attr.kind).values.extend(attr.value)
    else:
        setattr(out, attr.kind, attr.value)
    return out


def attr_value_key(attr: WireAttr) -> Any:
    """A hashable stand-in for an attribute's value (lists become tuples)."""
    return tuple(attr.value) if isinstance(attr.value, list) else attr.value


def per_rank_role(node_kind: int, attr: WireAttr) -> str | None:
    """Which per-rank value an attribute holds, when it holds it in ASTRA-sim's own form.

    "group": a `pg_name` string that is a plain decimal id; "own": a send's `comm_src` or a
    receive's `comm_dst` (the node's own rank); "peer": the other end of a send/receive (all
    int32). Ranks whose files differ only in such values can share one node list (the reader
    does that), and their attributes are rebuilt from `Rank.group_of` / `peer_of` / the rank.
    """
    name = attr.name
    if name == "pg_name":
        value = attr.value
        if attr.kind == "string_val" and value.isascii() and value.isdigit() and value == str(int(value)) and value != "0":
            return "group"
        return None
    if attr.kind != "int32_val" or name not in ("comm_src", "comm_dst"):
        return None
    if node_kind == 5:  # COMM_SEND_NODE
        return "own" if name == "comm_src" else "peer"
    if node_kind == 6:  # COMM_RECV_NODE
        return "own" if name == "comm_dst" else "peer"
    return None


# ---------------------------------------------------------------------------------------------
# per-rank fields as bytes
#
# Producers write the per-rank attributes of a node (see per_rank_role) as one `Node.attr`
# field holding just a name and a value: `pg_name` as a canonical decimal `string_val`,
# `comm_src` / `comm_dst` as a non-negative `int32_val`. PER_RANK_FIELD finds such fields
# in their canonical encoding (minimal varints, no leading zeros), so the node bytes of two
# ranks with one role differ only inside its matches. The length byte is only checked by
# `per_rank_field` (a looser pattern scans faster). A match inside some other field's bytes is
# possible in principle; the Chakra reader checks the matches of every file it learns from
# against what protobuf decoded.


def _tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


_NODE_ATTR = _tag(pb.Node.DESCRIPTOR.fields_by_name["attr"].number, 2)
_ATTR_FIELDS = pb.AttributeProto.DESCRIPTOR.fields_by_name
_NAME = _tag(_ATTR_FIELDS["name"].number, 2)
_STRING_VAL = _tag(_ATTR_FIELDS["string_val"].number, 2)
_INT32_VAL = _tag(_ATTR_FIELDS["int32_val"].number, 0)
MAX_GROUP_DIGITS = 19  # longest pg_name value in per-rank form
_GROUP_HEAD = _NAME + varint(7) + b"pg_name" + _STRING_VAL
_PEER_HEADS = {name: _NAME + varint(len(name)) + name.encode() + _INT32_VAL for name in ("comm_src", "comm_dst")}
# After the field's tag and length byte: the name and value tag, then the value.
_DECIMALS = b"|".join(b"%s[1-9][0-9]{%d}" % (re.escape(varint(n)), n - 1) for n in range(1, MAX_GROUP_DIGITS + 1))
_INT32_VARINTS = b"[\x00-\x7f]|" + b"|".join(b"[\x80-\xff]{%d}[\x01-\x7f]" % n for n in range(1, 4)) + b"|[\x80-\xff]{4}[\x01-\x07]"
_PEER_NAMES = b"|".join(re.escape(head) for head in _PEER_HEADS.values())
PER_RANK_FIELD = re.compile(
    b"(" + re.escape(_NODE_ATTR) + b"[\x00-\x7f](?:" + re.escape(_GROUP_HEAD) + b"(?:" + _DECIMALS + b")"
    + b"|(?:" + _PEER_NAMES + b")(?:" + _INT32_VARINTS + b")))"
)
_LENGTH_AT = len(_NODE_ATTR)
_HEAD_AT = _LENGTH_AT + 1
_GROUP_VALUE_AT = _HEAD_AT + len(_GROUP_HEAD) + 1
_PEER_VALUE_AT = _HEAD_AT + len(_PEER_HEADS["comm_src"])
_PEER_BY_HEAD = {head: name for name, head in _PEER_HEADS.items()}


def per_rank_field(field: bytes) -> tuple[str, int] | None:
    """(attribute name, value) of a PER_RANK_FIELD match; None when its length byte is wrong."""
    if field[_LENGTH_AT] != len(field) - _HEAD_AT:
        return None
    name = _PEER_BY_HEAD.get(field[_HEAD_AT:_PEER_VALUE_AT])
    if name is None:
        return "pg_name", int(field[_GROUP_VALUE_AT:])
    value, shift = 0, 0
    for byte in field[_PEER_VALUE_AT:]:
        value |= (byte & 0x7F) << shift
        shift += 7
    return name, value


def in_per_rank_form(attr: WireAttr) -> bool:
    """Whether protobuf encodes the attribute as a PER_RANK_FIELD match."""
    if attr.doc:
        return False
    if attr.name == "pg_name":
        value = attr.value
        return (attr.kind == "string_val" and 0 < len(value) <= MAX_GROUP_DIGITS and value.isascii()
                and value.isdigit() and value[0] != "0")
    return attr.name in _PEER_HEADS and attr.kind == "int32_val" and 0 <= attr.value < 1 << 31


# What a measured run's checks, numbers and timelines read beside its times, which et-convert's
# Chakra writer keeps as attributes (ASTRA-sim reads none of them), by name: the attribute's
# kind. `parent` (the id of the step a log's sub-operation ran in) and `stream` are Node fields;
# the others Node.args (`KEPT_ARGS`): the fused exchange a send or a receive is half of (the
# validator's overlaps), a receive's wait before its data came (`stats`' pipeline bubble). A set
# it wrote from measured times gives them back (readers/chakra.py: decide_timing).
KEPT_ARGS = {"fused": "string_val", "wait_ns": "int64_val"}
MEASURED_FACTS = {"parent": "int64_val", "stream": "string_val", **KEPT_ARGS}


# ---------------------------------------------------------------------------------------------
# a Node's head by hand
#
# protobuf writes a Node's fields in number order: id, name, type, ctrl_deps, data_deps,
# start_time_micros (the *head*, different on almost every node), then duration_micros, inputs,
# outputs and the attributes (the *tail*, repeated by many nodes of a rank). Reading the head
# here and the tail once per distinct tail (with protobuf) avoids decoding every node.

_ID, _NAME_TAG, _TYPE, _CTRL_DEPS, _DATA_DEPS, _START = 0x08, 0x12, 0x18, 0x22, 0x2A, 0x30
_DURATION = 0x38  # the tail's first field, duration_micros


def _canonical_varint(b: bytes, pos: int) -> tuple[int, int]:
    """(value, position after) of a varint at `pos` in its shortest form, at most 9 bytes and
    not 0; ValueError otherwise (the caller then lets protobuf decode the message)."""
    x = b[pos]
    if x < 0x80:
        if not x:
            raise ValueError("a zero protobuf would not write")
        return x, pos + 1
    value, shift = x & 0x7F, 7
    while True:
        pos += 1
        x = b[pos]
        value |= (x & 0x7F) << shift
        if x < 0x80:
            if not x or shift > 56:
                raise ValueError("not the shortest form, or a value beyond 63 bits")
            return value, pos + 1
        shift += 7


def _packed(b: bytes, pos: int, known: dict[bytes, tuple[int, ...]]) -> tuple[tuple[int, ...], int]:
    """The packed varints of the field whose one-byte length is at `pos`, and the position after.

    `known` maps the field's bytes to its values: the same dependencies recur across ranks."""
    length = b[pos]
    if not 0 < length < 0x80:
        raise ValueError("empty, or a length of several bytes")
    pos += 1
    end = pos + length
    key = b[pos:end]
    found = known.get(key)
    if found is not None:
        return found, end
    values = []
    while pos < end:
        x = b[pos]
        if x < 0x80:
            values.append(x)
            pos += 1
        else:
            value, pos = _canonical_varint(b, pos)
            values.append(value)
    if pos != end:
        raise ValueError("a varint runs past the field")
    found = known[key] = tuple(values)
    return found, pos


# (id, name, type, ctrl_deps, data_deps, start_time_micros, where the tail starts)
Head = tuple[int, str, int, tuple[int, ...], tuple[int, ...], int, int]


def python_node_head(b: bytes, known: dict[bytes, tuple[int, ...]]) -> Head | None:
    """(id, name, type, ctrl_deps, data_deps, start_time_micros, where the tail starts) of a Node
    message whose head is written as protobuf writes it; None for anything else (a missing or
    an unusual head: the caller then decodes the whole message with protobuf, which also names
    what is wrong). Only the head is checked: the tail must be checked by the caller. `known`:
    the dependency lists read so far, by their bytes (the caller keeps it for a whole set)."""
    try:
        pos, node_id, name, node_type, ctrl_deps, data_deps, start = 0, 0, "", 0, (), (), 0
        if b[0] == _ID:
            x = b[1]
            if 0x80 <= x and 0 < b[2] < 0x80:  # ids 128 .. 16383, the most common
                node_id, pos = (x & 0x7F) | b[2] << 7, 3
            else:
                node_id, pos = _canonical_varint(b, 1)
        if b[pos] == _NAME_TAG:
            length = b[pos + 1]
            if not 0 < length < 0x80:
                return None
            pos += 2
            name = b[pos:pos + length].decode()
            pos += length
            if pos > len(b):
                return None
        if b[pos] == _TYPE:
            node_type = b[pos + 1]
            if not 0 < node_type < 0x80:
                return None
            pos += 2
        if b[pos] == _CTRL_DEPS:
            ctrl_deps, pos = _packed(b, pos + 1, known)
        if b[pos] == _DATA_DEPS:
            data_deps, pos = _packed(b, pos + 1, known)
        if b[pos] == _START:
            start, pos = _canonical_varint(b, pos + 1)
    except IndexError:  # the head ends the message
        if pos != len(b):
            return None
    except ValueError:  # UnicodeDecodeError too
        return None
    return node_id, name, node_type, ctrl_deps, data_deps, start, pos


# Node's positional arguments that a measured message's head gives (python_measured_nodes);
# _head.c has the same numbers, and readers/chakra.py checks them against Node's fields.
MEASURED_ARG_POSITIONS = {"id": 0, "name": 1, "duration_ns": 3, "deps": 4, "ctrl_deps": 5, "start_ns": 11, "args": 16}
MEASURED_ARG_COUNT = 20


def short_frame(data: bytes | memoryview, pos: int) -> tuple[int, int] | None:
    """(start, end) of the message at `pos` when its length prefix takes one or two bytes (a
    message below 16 KiB) and the message is all there; None otherwise (frames() says why)."""
    size, at, length = len(data), pos + 1, data[pos]
    if length >= 0x80:
        if at >= size or data[at] >= 0x80:
            return None
        length = (length & 0x7F) | data[at] << 7
        at += 1
    return (at, at + length) if at + length <= size else None


def measured_key(node_type: int, tail: bytes) -> tuple[tuple[int, bytes], int]:
    """((type, the tail after its duration), duration_micros) of a Node message's tail: measured
    messages share a template by that key whatever their durations."""
    micros, rest_at = leading_duration(tail)
    return (node_type, tail[rest_at:]), micros


def measured_node(body: bytes, known: dict, args_of: dict, make: Callable) -> Any:
    """make(*arguments) of a Node message with a measured start time: its tail's template
    (`args_of[measured_key]`, a Node's positional arguments) with what the message gives put in
    (MEASURED_ARG_POSITIONS: id, name, duration, fresh lists of the dependencies, start_ns, and
    args: a copy of the template's when it holds a dict, else a fresh one); None when the head
    is unusual, has no start time, or its tail has no template (missing or None)."""
    head = node_head(body, known)
    if head is None or not head[5]:
        return None
    key, micros = measured_key(head[2], body[head[6]:])
    template = args_of.get(key)
    if template is None:
        return None
    node_id, name, _, ctrl_deps, data_deps, start, _ = head
    arguments = list(template)
    arguments[0], arguments[1], arguments[3] = node_id, name, micros * 1000
    args = arguments[16]
    arguments[4], arguments[5], arguments[11] = [*data_deps], [*ctrl_deps], start * 1000
    arguments[16] = dict(args) if type(args) is dict else {}
    return make(*arguments)


def python_measured_nodes(data: bytes, pos: int, known: dict, args_of: dict, make: Callable,
                          names: dict, nodes: list) -> int:
    """Append to `nodes` the measured_node of each message from `pos` on, up to the end or the
    first message that has none or no short_frame; return where it stopped. `names` keeps one
    str per distinct name."""
    size = len(data)
    while pos < size:
        frame = short_frame(data, pos)
        if frame is None:
            return pos
        node = measured_node(data[frame[0]:frame[1]], known, args_of, make)
        if node is None:
            return pos
        node.name = names.setdefault(node.name, node.name)
        nodes.append(node)
        pos = frame[1]
    return pos


# ---------------------------------------------------------------------------------------------
# a measured file's nodes as columns (readers/chakra.load_measured_columns, for `stats`)
#
# What `stats` reads of a node of a set declared measured: its start, its duration, the `parent`
# attribute a step's sub-operations carry, and what its tail gives (kind, size, group, a
# receive's wait), the same for every message with that tail. The parent differs from step to
# step, so it is cut out of the tail, which readers/chakra.py decodes once per distinct one
# (benchmark 7's set: 7,309 tails instead of 8,333).

_PARENT_ATTR = b"\x0a\x06parent\x48"  # AttributeProto name "parent", then its int64_val's tag
COLUMNS = ("start_ns", "duration_ns", "parent", "template", "offset")  # the bytearrays, int64 each


def parent_value(attr: bytes) -> int | None:
    """The value of an attribute message (its tag and length included) that is exactly
    `parent` as an int64_val, as protobuf writes it (0 too: a oneof value is written); None for
    any other attribute."""
    at = 2 + len(_PARENT_ATTR)  # the value
    if attr[2:at] != _PARENT_ATTR or len(attr) <= at:
        return None
    if attr[at:] == b"\x00":
        return 0
    try:
        value, end = _canonical_varint(attr, at)
    except (ValueError, IndexError):
        return None
    return value if end == len(attr) else None


def measured_scan(body: bytes) -> tuple[int, int, int, int, bytes] | None:
    """(node type, start_time_micros, duration_micros, parent or -1, the tail after the duration
    without the parent attribute) of a Node message whose head python_node_head reads and whose
    tail is a duration as protobuf writes it (or none) and then attributes only, each below 128
    bytes, at most one of them the parent; None for anything else, or times beyond 64 bits in
    nanoseconds (`stats` then reads the set as Nodes)."""
    head = python_node_head(body, {})
    if head is None:
        return None
    tail = body[head[6]:]
    micros, rest_at = leading_duration(tail)
    if not rest_at and tail[:1] == bytes([_DURATION]):
        return None  # a duration protobuf would not write
    rest, pieces, parent, at = tail[rest_at:], [], -1, 0
    while at < len(rest):
        if rest[at] != 0x52 or at + 1 == len(rest) or rest[at + 1] >= 0x80 or at + 2 + rest[at + 1] > len(rest):
            return None
        end = at + 2 + rest[at + 1]
        value = parent_value(rest[at:end])
        if value is None:
            pieces.append(rest[at:end])
        elif parent >= 0:
            return None  # a second parent: left to the reader of Nodes
        else:
            parent = value
        at = end
    if max(head[5], micros) > INT_RANGES["int64"][1] // 1000:
        return None
    return head[2], head[5], micros, parent, b"".join(pieces)


def python_measured_columns(data: bytes, pos: int, keys: dict, *columns: bytearray) -> tuple[int, tuple | None]:
    """Append to the five `columns` (COLUMNS, native int64s) each message's values from `pos`
    on: start and duration in ns, parent (-1: none), the template's number (`keys`: (node type,
    measured_scan's tail) -> number) and where the message's frame starts in `data`. Stops at the end,
    at a message without a short_frame or a measured_scan, or at one whose key has no template;
    returns (where it stopped, that key or None)."""
    size = len(data)
    while pos < size:
        frame = short_frame(data, pos)
        scanned = None if frame is None else measured_scan(data[frame[0]:frame[1]])
        if scanned is None:
            return pos, None
        node_type, start, micros, parent, rest = scanned
        key = (node_type, rest)
        template = keys.get(key)
        if template is None:
            return pos, key
        for column, value in zip(columns, (start * 1000, micros * 1000, parent, template, pos)):
            column += value.to_bytes(8, sys.byteorder, signed=True)
        pos = frame[1]
    return pos, None


try:  # the same functions in C (_head.c, about 6x faster), which setup.py builds where it can
    from ._head import measured_columns, measured_nodes, node_head
except ImportError:  # installed without a C compiler: same nodes, slower
    node_head, measured_nodes, measured_columns = python_node_head, python_measured_nodes, python_measured_columns


def leading_duration(tail: bytes) -> tuple[int, int]:
    """(duration_micros, where the rest starts) of a tail that opens with its duration_micros as
    protobuf writes it; (0, 0) otherwise."""
    try:
        if tail[0] == _DURATION:
            return _canonical_varint(tail, 1)
    except (ValueError, IndexError):
        pass
    return 0, 0
