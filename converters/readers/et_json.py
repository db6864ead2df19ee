"""Read an et-json dump (see writers/et_json.py) back into the model.

The trace is marked verbatim: the Chakra writer then writes every rank exactly as the dump
describes it (original ids, deps, attribute order and kinds, IOInfo, metadata), which makes
`.et -> et-json -> .et` byte-identical. Wrong JSON types are reported with their JSON path.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path

import orjson

from .._proto import et_def_pb2 as pb
from .._proto.wire import ATTR_KINDS, int_range
from ..diagnostics import Diagnostics, InputError
from ..model import ExecutionTrace, Group, Node, Rank, WireAttr
from ..options import Options
from .chakra import apply_our_metadata, apply_parallel_options, decide_timing, model_node

FORMAT = "et-convert.et-json"
NODE_TYPES = {v.name: v.number for v in pb.NodeType.DESCRIPTOR.values}
UINT64 = (0, (1 << 64) - 1)
FLOAT_WORDS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
SNIFF = re.compile(rb'^\s*\{[^{}]{0,200}"format"\s*:\s*"et-convert\.et-json"')


def sniff(head: bytes, path: Path) -> bool:
    """A JSON object whose "format" key names this dump (the writer puts it first)."""
    return SNIFF.match(head) is not None


def load(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    if len(paths) != 1:
        raise InputError(str(paths[1]), "an et-json dump is one file; give only the dump")
    path = paths[0]
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None
    except orjson.JSONDecodeError as e:
        raise InputError(str(path), f"not valid JSON ({e})") from None
    return Dump(str(path), options).trace(doc)


class Dump:
    """Checks types while converting; every complaint names the JSON path."""

    def __init__(self, file: str, options: Options):
        self.file = file
        self.options = options

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
        trace = ExecutionTrace()
        trace.source.format = "et-json"
        trace.units = {"duration": "us (Chakra duration_micros)", "comm_size": "bytes"}
        trace.metadata["chakra.verbatim"] = True
        trace.metadata["chakra.wire"] = True
        ranks = self.expect(doc.get("ranks"), dict, "$.ranks", "an object of ranks")
        for key in list(ranks):
            body = ranks.pop(key)  # let each rank's JSON go once it is converted
            where = f"$.ranks.{key}"
            if not (key.isascii() and key.isdigit()):
                self.fail(where, "rank keys must be decimal rank numbers")
            trace.ranks[int(key)] = self.rank(int(key), body, where)
        trace.ranks = dict(sorted(trace.ranks.items()))
        for key, body in self.expect(doc.get("groups", {}), dict, "$.groups", "an object of groups").items():
            trace.groups[self.integer(key, f"$.groups.{key}", (1, UINT64[1]))] = self.group(key, body)
        decide_timing(trace)
        apply_our_metadata(trace)
        apply_parallel_options(trace, self.options)
        return trace

    def group(self, key: str, body) -> Group:
        where = f"$.groups.{key}"
        body = self.expect(body, dict, where, "an object")
        members = self.expect(body.get("members"), list, f"{where}.members", "a list of ranks")
        members = tuple(self.integer(m, f"{where}.members[{i}]") for i, m in enumerate(members))
        kind = self.expect(body.get("kind", ""), str, f"{where}.kind", "a string")
        name = self.expect(body.get("name", ""), str, f"{where}.name", "a string")
        return Group(int(key), kind, members, name)

    def rank(self, rank_id: int, body, where: str) -> Rank:
        body = self.expect(body, dict, where, "an object")
        file = self.expect(body.get("file", ""), str, f"{where}.file", "a string")
        meta = self.expect(body.get("metadata", {}), dict, f"{where}.metadata", "an object")
        version = self.expect(meta.get("version", ""), str, f"{where}.metadata.version", "a string")
        attrs = self.attrs(meta.get("attr", []), f"{where}.metadata.attr")
        rank = Rank(rank_id, source=file or None, wire_metadata=(version, attrs))
        nodes = self.expect(body.get("nodes", []), list, f"{where}.nodes", "a list of nodes")
        rank.nodes = [self.node(n, f"{where}.nodes[{i}]") for i, n in enumerate(nodes)]
        return rank

    def node(self, body, where: str) -> Node:
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
        return model_node(
            self.integer(body.get("id", 0), f"{where}.id"), name, node_type, ctrl, data,
            self.integer(body.get("start_time_micros", 0), f"{where}.start_time_micros"),
            self.integer(body.get("duration_micros", 0), f"{where}.duration_micros"),
            self.io(body, "inputs", where), self.io(body, "outputs", where),
            self.attrs(body.get("attr", []), f"{where}.attr"), f"{self.file}: {where}",
        )

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
        return [self.attr(item, f"{where}[{i}]") for i, item in enumerate(items)]

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
