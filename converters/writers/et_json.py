"""Write a readable, valid JSON dump of a Chakra set (the `et-json` format).

    {"format": "et-convert.et-json", "version": 1,
     "ranks": {"0": {"file": "w.0.et", "metadata": {"version": "", "attr": [...]}, "nodes": [...]}},
     "groups": {"1": {"kind": "tp", "name": "", "members": [0, 1]}}}

Each attribute is {"name", "kind" (its oneof member, e.g. "int64_val"), "value"} (plus
"doc_string" when set). Values that JSON cannot hold exactly are strings: integers beyond
±2^53 as decimal text, bytes as base64, non-finite floats as "nan", "inf", "-inf".
A trace read from Chakra files is dumped exactly as the files held it, so that the et-json
reader and the Chakra writer give back byte-identical files; any other trace is dumped as the
Chakra writer would write it.
"""

from __future__ import annotations

import base64
import math
from collections import Counter
from pathlib import Path

import orjson

from .._proto import et_def_pb2 as pb
from .._proto.wire import ATTR_KINDS, attr_from_proto, frames, per_rank_role
from ..diagnostics import Diagnostics
from ..model import ExecutionTrace, Node, Rank, WireAttr
from ..options import Options
from .atomic import atomic_file
from .chakra import RankEncoder

FORMAT = "et-convert.et-json"
VERSION = 1
SAFE_INT = 1 << 53
NODE_TYPE_NAMES = {v.number: v.name for v in pb.NodeType.DESCRIPTOR.values}


def write(trace: ExecutionTrace, output: Path, options: Options, diagnostics: Diagnostics) -> None:
    """Stream the dump rank by rank (one rank's nodes in memory at a time)."""
    verbatim = all(rank.wire_metadata is not None for rank in trace.ranks.values())
    encoder = None if verbatim else RankEncoder(trace, diagnostics)
    if verbatim and trace.metadata.get("chakra.noncanonical"):
        diagnostics.warn(
            "et-json-noncanonical",
            "et-json: {count} distinct messages are not in protobuf's own encoding (unknown fields, unpacked "
            "lists, repeated fields); .et files made from this dump will hold the same values but not the same bytes",
            count=trace.metadata["chakra.noncanonical"],
        )
    with atomic_file(Path(output)) as f:
        f.write(b'{"format":"%s","version":%d,"ranks":{' % (FORMAT.encode(), VERSION))
        users = Counter(id(rank.nodes) for rank in trace.ranks.values())
        for i, rank in enumerate(trace.sorted_ranks()):
            if encoder is None:
                body = verbatim_rank(rank, shared=users[id(rank.nodes)] > 1)
            else:
                body = encoded_rank(encoder, rank)
            f.write(b"%s%s:" % (b"," if i else b"", orjson.dumps(str(rank.rank))))
            f.write(orjson.dumps(body))
        f.write(b'},"groups":')
        f.write(orjson.dumps(groups_json(trace)))
        f.write(b"}\n")
    if encoder is not None:
        encoder.report()


def groups_json(trace: ExecutionTrace) -> dict:
    return {
        str(gid): {"kind": g.kind, "name": g.name, "members": list(g.members)}
        for gid, g in sorted(trace.groups.items())
    }


def verbatim_rank(rank: Rank, shared: bool) -> dict:
    """A rank as its file held it; on a shared node list, with this rank's own per-rank values."""
    version, attrs = rank.wire_metadata or ("", [])
    return {
        "file": Path(rank.source).name if rank.source else "",
        "metadata": {"version": version, "attr": [attr_json(a) for a in attrs]},
        "nodes": [node_json(n, rank if shared else None) for n in rank.nodes],
    }


def own_attrs(rank: Rank, node: Node) -> list[WireAttr]:
    """The node's attributes with pg_name / comm_src / comm_dst values of `rank` (see wire.per_rank_role)."""
    out = []
    for attr in node.attrs or ():
        role = per_rank_role(int(node.kind), attr)
        if role == "group":
            attr = WireAttr(attr.name, attr.kind, str(rank.group_of(node)), attr.doc)
        elif role == "own":
            attr = WireAttr(attr.name, attr.kind, rank.rank, attr.doc)
        elif role == "peer":
            attr = WireAttr(attr.name, attr.kind, rank.peer_of(node), attr.doc)
        out.append(attr)
    return out


def node_json(node: Node, rank: Rank | None = None) -> dict:
    out = {
        "id": int_json(node.id),
        "name": node.name,
        "type": NODE_TYPE_NAMES.get(int(node.kind), int(node.kind)),
        "ctrl_deps": [int_json(d) for d in node.ctrl_deps],
        "data_deps": [int_json(d) for d in node.deps],
        "start_time_micros": int_json((node.start_ns or 0) // 1000),
        "duration_micros": int_json(node.duration_ns // 1000),
    }
    if node.inputs is not None:
        out["inputs"] = dict(zip(("values", "shapes", "types"), node.inputs))
    if node.outputs is not None:
        out["outputs"] = dict(zip(("values", "shapes", "types"), node.outputs))
    attrs = node.attrs or () if rank is None else own_attrs(rank, node)
    out["attr"] = [attr_json(a) for a in attrs]
    return out


def encoded_rank(encoder, rank: Rank) -> dict:
    """A trace from another format: dump what the Chakra writer would write for this rank."""
    data = b"".join(encoder.rank_chunks(rank))
    messages = [data[start:end] for _, start, end in frames(data)]
    meta = pb.GlobalMetadata.FromString(messages[0])
    nodes = []
    for body in messages[1:]:
        wire = pb.Node.FromString(body)
        nodes.append(wire_node_json(wire))
    return {
        "file": "",
        "metadata": {"version": meta.version, "attr": [attr_json(attr_from_proto(a)) for a in meta.attr]},
        "nodes": nodes,
    }


def wire_node_json(wire: pb.Node) -> dict:
    out = {
        "id": int_json(wire.id),
        "name": wire.name,
        "type": NODE_TYPE_NAMES.get(wire.type, wire.type),
        "ctrl_deps": [int_json(d) for d in wire.ctrl_deps],
        "data_deps": [int_json(d) for d in wire.data_deps],
        "start_time_micros": int_json(wire.start_time_micros),
        "duration_micros": int_json(wire.duration_micros),
    }
    for field in ("inputs", "outputs"):
        if wire.HasField(field):
            io = getattr(wire, field)
            out[field] = {"values": io.values, "shapes": io.shapes, "types": io.types}
    out["attr"] = [attr_json(attr_from_proto(a)) for a in wire.attr]
    return out


def attr_json(attr: WireAttr) -> dict:
    out = {"name": attr.name}
    if attr.doc:
        out["doc_string"] = attr.doc
    if not attr.kind:
        return out
    out["kind"] = attr.kind
    element, is_list = ATTR_KINDS[attr.kind]
    encode = VALUE_ENCODERS[element]
    out["value"] = [encode(v) for v in attr.value] if is_list else encode(attr.value)
    return out


def int_json(value: int) -> int | str:
    """Integers JSON readers hold exactly stay numbers; larger ones become decimal strings."""
    return value if -SAFE_INT <= value <= SAFE_INT else str(value)


def float_json(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


VALUE_ENCODERS = {
    "int": int_json,
    "float": float_json,
    "bool": bool,
    "str": str,
    "bytes": lambda v: base64.b64encode(v).decode("ascii"),
}
