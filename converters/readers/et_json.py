"""Read an et-json dump (see writers/et_json.py) back into the model.

The trace is marked verbatim: the Chakra writer then writes every rank exactly as the dump
describes it (original ids, deps, attribute order and kinds, IOInfo, metadata), which makes
`.et -> et-json -> .et` byte-identical. Wrong JSON types are reported with their JSON path.

Memory and speed: the file is mapped, not read. A dump laid out as the writer lays it out
(compact JSON, format and version first) is parsed one rank at a time; any other layout is
parsed whole. A node or attribute seen before (the same JSON) is converted once, and its
nodes share the converted attribute list and strings. Python's cyclic garbage collector is
paused while the objects pile up (it would scan them again and again; nothing here forms
cycles). Ranks still get node lists of their own: the Chakra writer writes a verbatim trace's
attributes as they are, so lists shared with per-rank maps would lose the per-rank values.
"""

from __future__ import annotations

import base64
import binascii
import mmap
import os
import re
from pathlib import Path
from typing import Iterable, Iterator

import orjson

from .._proto import et_def_pb2 as pb
from .._proto.wire import ATTR_KINDS, int_range
from ..diagnostics import Diagnostics, InputError
from ..gc_pause import paused_gc
from ..model import ExecutionTrace, Group, Node, Rank, WireAttr
from ..options import Options
from .chakra import apply_our_metadata, apply_parallel_options, decide_timing, model_fields
from .text import json_error

FORMAT = "et-convert.et-json"
NODE_TYPES = {v.name: v.number for v in pb.NodeType.DESCRIPTOR.values}
UINT64 = (0, (1 << 64) - 1)
FLOAT_WORDS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
SNIFF = re.compile(rb'^\s*\{[^{}]{0,200}"format"\s*:\s*"et-convert\.et-json"')


def sniff(head: bytes, path: Path) -> bool:
    """A JSON object whose "format" key names this dump (the writer puts it first)."""
    return SNIFF.match(head) is not None


# The writer's layout: the head of the document, where each rank's body may end (the next
# rank's key or the groups follow), and a rank key.
WRITER_HEAD = re.compile(rb'\{"format":"et-convert\.et-json","version":1,"ranks":\{')
BODY_END = re.compile(rb'\}(?=,"\d+":\{|\},"groups":)')
RANK_KEY = re.compile(rb'"(\d+)":')


def load(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    if len(paths) != 1:
        raise InputError(str(paths[1]), "an et-json dump is one file; give only the dump")
    path = paths[0]
    data = mapped(path)
    with paused_gc():
        dump = Dump(str(path), options)
        layout = WriterLayout(data)
        if layout.matches:
            return dump.trace_in_parts(layout)
        return dump.trace(parse_json(path, data))


def mapped(path: Path):
    """The file's bytes, mapped rather than read (WriterLayout gives back what it has parsed)."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None


def parse_json(path: Path, data) -> object:
    try:
        with memoryview(data) as view:
            return orjson.loads(view)
    except orjson.JSONDecodeError as e:
        raise json_error(path, e) from None


class WriterLayout:
    """A dump as the writer lays it out, cut into ranks without parsing the whole document.

    A rank's body ends at a `}` that is followed by the next rank's key or by the groups.
    Strings cannot hold these bytes (their quote would be escaped), but an object inside a
    rank may be followed by a numbered key, so each candidate end is tried in turn: the first
    at which the body parses is its real end (a JSON value has no shorter valid prefix).
    The pages of the ranks read are given back to the system as the reading goes on.
    """

    def __init__(self, data):
        self.data = data  # bytes or a read-only mmap
        head = WRITER_HEAD.match(data)
        self.matches = head is not None
        self.ranks_at = head.end() - 1 if head else 0  # the `{` of the ranks object
        self.tail = None  # where the ranks object ends, once every rank was read
        self.released = 0

    def ranks(self) -> Iterator[tuple[str, object]]:
        data = self.data
        pos = self.ranks_at + 1
        while data[pos:pos + 1] != b"}":
            key = RANK_KEY.match(data, pos)
            if key is None:
                return self.broken()
            start = key.end()
            for end in BODY_END.finditer(data, start):
                try:
                    with memoryview(data)[start:end.end()] as body_bytes:
                        body = orjson.loads(body_bytes)
                except orjson.JSONDecodeError:
                    continue
                break
            else:
                return self.broken()
            yield key.group(1).decode(), body
            pos = end.end() + (data[end.end():end.end() + 1] == b",")
            self.release(pos)
        self.tail = pos + 1

    def release(self, upto: int) -> None:
        """Let the system drop the mapped pages of the ranks already read."""
        if isinstance(self.data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            upto -= upto % mmap.PAGESIZE
            if upto > self.released:
                self.data.madvise(mmap.MADV_DONTNEED, self.released, upto - self.released)
                self.released = upto

    def rest(self) -> bytes:
        """The document without its ranks: format, version, an empty ranks object, groups."""
        return self.data[:self.ranks_at] + b"{}" + self.data[self.tail:]

    def broken(self):
        raise orjson.JSONDecodeError("unexpected content", "", 0)


class Dump:
    """Checks types while converting; every complaint names the JSON path."""

    def __init__(self, file: str, options: Options):
        self.file = file
        self.options = options
        self.nodes: dict[bytes, tuple[dict, list, list]] = {}  # node JSON -> (fields, data deps, ctrl deps)
        self.attr_cache: dict[bytes, WireAttr] = {}  # attribute JSON -> attribute

    def fail(self, where: str, message: str):
        raise InputError(self.file, f"{where}: {message}")

    def expect(self, value, types, where: str, what: str):
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
            self.fail(where, f"expected {what}, found {type_name(value)}")
        return value

    def integer(self, value, where: str, bounds=UINT64) -> int:
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected an integer (or its decimal string), found {type_name(value)}")
        if not bounds[0] <= value <= bounds[1]:
            self.fail(where, f"{value} is out of range [{bounds[0]}, {bounds[1]}]")
        return value

    # -- document -----------------------------------------------------------------------------

    def trace(self, doc) -> ExecutionTrace:
        self.expect(doc, dict, "$", "a JSON object")
        if doc.get("format") != FORMAT:
            self.fail("$.format", f"expected {FORMAT!r}, found {doc.get('format')!r}")
        if doc.get("version") != 1:
            self.fail("$.version", f"this et-convert reads version 1, found {doc.get('version')!r}")
        ranks = self.expect(doc.get("ranks"), dict, "$.ranks", "an object of ranks")
        trace = self.new_trace()
        self.add_ranks(trace, ((key, ranks.pop(key)) for key in list(ranks)))  # each rank's JSON goes once converted
        return self.finish(trace, doc)

    def trace_in_parts(self, layout: WriterLayout) -> ExecutionTrace:
        """The same as `trace`, reading one rank's JSON at a time (the head was matched)."""
        trace = self.new_trace()
        try:
            self.add_ranks(trace, layout.ranks())
            rest = orjson.loads(layout.rest())
        except orjson.JSONDecodeError:  # not quite the writer's layout, or not JSON: parse it whole
            return self.trace(parse_json(Path(self.file), layout.data))
        return self.finish(trace, rest)

    def new_trace(self) -> ExecutionTrace:
        trace = ExecutionTrace()
        trace.source.format = "et-json"
        trace.units = {"duration": "us (Chakra duration_micros)", "comm_size": "bytes"}
        trace.metadata["chakra.verbatim"] = True
        trace.metadata["chakra.wire"] = True
        return trace

    def add_ranks(self, trace: ExecutionTrace, ranks: Iterable[tuple[str, object]]) -> None:
        for key, body in ranks:
            where = f"$.ranks.{key}"
            if not (key.isascii() and key.isdigit()):
                self.fail(where, "rank keys must be decimal rank numbers")
            trace.ranks[int(key)] = self.rank(int(key), body, where)

    def finish(self, trace: ExecutionTrace, doc: dict) -> ExecutionTrace:
        trace.ranks = dict(sorted(trace.ranks.items()))
        for key, body in self.expect(doc.get("groups", {}), dict, "$.groups", "an object of groups").items():
            gid = self.integer(key, f"$.groups.{key}", (1, UINT64[1]))  # checked before group() uses it
            trace.groups[gid] = self.group(gid, key, body)
        decide_timing(trace)
        apply_our_metadata(trace, lambda rank, k: f"{self.file}: $.ranks.{rank.rank}.metadata.attr[{k}]")
        apply_parallel_options(trace, self.options)
        return trace

    def group(self, gid: int, key: str, body) -> Group:
        where = f"$.groups.{key}"
        body = self.expect(body, dict, where, "an object")
        members = self.expect(body.get("members"), list, f"{where}.members", "a list of ranks")
        members = tuple(self.integer(m, f"{where}.members[{i}]") for i, m in enumerate(members))
        kind = self.expect(body.get("kind", ""), str, f"{where}.kind", "a string")
        name = self.expect(body.get("name", ""), str, f"{where}.name", "a string")
        return Group(gid, kind, members, name)

    def rank(self, rank_id: int, body, where: str) -> Rank:
        body = self.expect(body, dict, where, "an object")
        file = self.expect(body.get("file", ""), str, f"{where}.file", "a string")
        meta = self.expect(body.get("metadata", {}), dict, f"{where}.metadata", "an object")
        version = self.expect(meta.get("version", ""), str, f"{where}.metadata.version", "a string")
        attrs = self.attrs(meta.get("attr", []), f"{where}.metadata.attr")
        rank = Rank(rank_id, source=file or None, wire_metadata=(version, attrs))
        nodes = self.expect(body.get("nodes", []), list, f"{where}.nodes", "a list of nodes")
        rank.nodes = [self.node(n, where, i) for i, n in enumerate(nodes)]
        return rank

    def node(self, body, rank_where: str, index: int) -> Node:
        key = orjson.dumps(body) if isinstance(body, dict) else None
        known = self.nodes.get(key) if key is not None else None
        if known is None:
            known = self.convert_node(body, f"{rank_where}.nodes[{index}]")
            if key is not None:
                self.nodes[key] = known
        fields, deps, ctrl_deps = known
        return Node(**fields, deps=list(deps), ctrl_deps=list(ctrl_deps))

    def convert_node(self, body, where: str) -> tuple[dict, list, list]:
        body = self.expect(body, dict, where, "an object")
        node_type = body.get("type")
        if isinstance(node_type, str):
            if node_type not in NODE_TYPES:
                self.fail(f"{where}.type", f"unknown node type {node_type!r}; expected one of {', '.join(NODE_TYPES)}")
            node_type = NODE_TYPES[node_type]
        else:
            node_type = self.integer(node_type, f"{where}.type", (0, (1 << 31) - 1))
        name = self.expect(body.get("name", ""), str, f"{where}.name", "a string")
        ctrl = [self.integer(d, f"{where}.ctrl_deps[{i}]") for i, d in enumerate(self.list(body, "ctrl_deps", where))]
        data = [self.integer(d, f"{where}.data_deps[{i}]") for i, d in enumerate(self.list(body, "data_deps", where))]
        fields = model_fields(
            self.integer(body.get("id", 0), f"{where}.id"), name, node_type, ctrl, data,
            self.integer(body.get("start_time_micros", 0), f"{where}.start_time_micros"),
            self.integer(body.get("duration_micros", 0), f"{where}.duration_micros"),
            self.io(body, "inputs", where), self.io(body, "outputs", where),
            self.attrs(body.get("attr", []), f"{where}.attr"), f"{self.file}: {where}",
        )
        return fields, fields.pop("deps"), fields.pop("ctrl_deps")

    def list(self, body: dict, key: str, where: str) -> list:
        return self.expect(body.get(key, []), list, f"{where}.{key}", "a list")

    def io(self, body: dict, key: str, where: str):
        if key not in body:
            return None
        io = self.expect(body[key], dict, f"{where}.{key}", "an object with values, shapes, types")
        return tuple(self.expect(io.get(k, ""), str, f"{where}.{key}.{k}", "a string") for k in ("values", "shapes", "types"))

    # -- attributes ---------------------------------------------------------------------------

    def attrs(self, items, where: str) -> list[WireAttr]:
        items = self.expect(items, list, where, "a list of attributes")
        out = []
        for i, item in enumerate(items):
            key = orjson.dumps(item)
            attr = self.attr_cache.get(key)
            if attr is None:
                attr = self.attr_cache[key] = self.attr(item, f"{where}[{i}]")
            out.append(attr)
        return out

    def attr(self, body, where: str) -> WireAttr:
        body = self.expect(body, dict, where, "an object with name, kind, value")
        name = self.expect(body.get("name", ""), str, f"{where}.name", "a string")
        doc = self.expect(body.get("doc_string", ""), str, f"{where}.doc_string", "a string")
        kind = body.get("kind")
        if kind is None:
            return WireAttr(name, "", None, doc)
        if not isinstance(kind, str) or kind not in ATTR_KINDS:
            self.fail(f"{where}.kind", f"unknown attribute kind {kind!r}; expected e.g. int64_val, string_val, bool_list")
        element, is_list = ATTR_KINDS[kind]
        base = kind.rsplit("_", 1)[0]
        if is_list:
            values = self.expect(body.get("value"), list, f"{where}.value", "a list")
            value = [self.scalar(element, base, v, f"{where}.value[{i}]") for i, v in enumerate(values)]
        else:
            value = self.scalar(element, base, body.get("value"), f"{where}.value")
        return WireAttr(name, kind, value, doc)

    def scalar(self, element: str, base: str, value, where: str):
        if element == "int":
            return self.integer(value, where, int_range(base + "_val"))
        if element == "bool":
            return self.expect(value, bool, where, "true or false")
        if element == "str":
            return self.expect(value, str, where, "a string")
        if element == "bytes":
            text = self.expect(value, str, where, "a base64 string")
            try:
                return base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                self.fail(where, "expected a base64 string")
        if isinstance(value, str) and value in FLOAT_WORDS:
            return FLOAT_WORDS[value]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"expected a number (or \"nan\", \"inf\", \"-inf\"), found {type_name(value)}")
        return float(value)


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)
