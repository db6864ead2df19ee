"""Per-node facts ASTRA-sim relies on: attribute kinds, comm sizes and types, send/recv fields.

Checked once per distinct node list; each kind of problem is reported once per list with the
first node and a count.
"""

from __future__ import annotations

from itertools import chain, compress, repeat
from operator import le

from ..model import CollType, Node, NodeKind
from ..scheduler.columns import columns
from .context import Context
from .findings import Finding

# FORMATS.md §1: the one oneof member ASTRA-sim's old feeder reads for each attribute.
WIRE_KINDS = {
    "comm_type": "int64_val",
    "comm_size": "int64_val",
    "comm_src": "int32_val",
    "comm_dst": "int32_val",
    "comm_tag": "int32_val",
    "comm_priority": "int32_val",
    "pg_name": "string_val",
    "is_cpu_op": "bool_val",
    "num_ops": "int64_val",
    "tensor_size": "uint64_val",
    "involved_dim": "bool_list",
}
REQUIRED = {
    NodeKind.COLLECTIVE: ("comm_type", "comm_size"),
    NodeKind.SEND: ("comm_size", "comm_src", "comm_dst", "comm_tag"),
    NodeKind.RECV: ("comm_size", "comm_src", "comm_dst", "comm_tag"),
}
UNSUPPORTED = frozenset({CollType.REDUCE, CollType.GATHER, CollType.SCATTER,
                         CollType.REDUCE_SCATTER_BLOCK, CollType.BARRIER})


class _Tally:
    """First node and count per problem key, in the order problems were first seen."""

    def __init__(self) -> None:
        self.first: dict[tuple, Node] = {}
        self.count: dict[tuple, int] = {}

    def add(self, key: tuple, node: Node) -> None:
        if key not in self.first:
            self.first[key] = node
            self.count[key] = 0
        self.count[key] += 1

    def items(self):
        for key, node in self.first.items():
            yield key, node, self.count[key]


def _on(count: int) -> str:
    return "on 1 node" if count == 1 else f"on {count} nodes (first shown)"


def check_attributes(ctx: Context) -> list[Finding]:
    """Attribute kinds and required attributes of nodes read from Chakra files."""
    findings: list[Finding] = []
    for shared in ctx.shared:
        tally = _Tally()
        nodes = shared.nodes
        attr_column, = columns(nodes, ("attrs",))
        index = _AttrIndex(attr_column)
        if index.bad:
            for node in nodes:
                for attr in node.attrs or ():
                    if id(attr) in index.bad:
                        tally.add(("E010", attr.name, attr.kind, WIRE_KINDS[attr.name]), node)
        name_of, cpu_true = index.name_of.__getitem__, index.cpu_true
        # Nodes read from one message tail share one attrs list, so what a list lacks is found
        # once per (list, kind): (missing required names, marked is_cpu_op=true)
        found_for: dict[tuple[int, NodeKind], tuple[tuple[str, ...], bool]] = {}
        for kind, where in ((NodeKind.COLLECTIVE, shared.colls), (NodeKind.SEND, shared.sends),
                            (NodeKind.RECV, shared.recvs)):
            for key in set(map(id, map(attr_column.__getitem__, where))):  # (the kind's lists, in C)
                attrs = index.lists.get(key)
                if attrs is not None:
                    names = set(map(name_of, map(id, attrs)))
                    missing = tuple(name for name in REQUIRED.get(kind, ()) if name not in names)
                    found_for[key, kind] = (missing, bool(cpu_true) and not cpu_true.isdisjoint(map(id, attrs)))
        # (the usual case: no list lacks anything, so no node is looked at)
        for i in (*shared.colls, *shared.sends, *shared.recvs) if _any_lacking(found_for) else ():
            node = nodes[i]
            attrs = node.attrs
            if attrs is None:
                continue
            found = found_for[id(attrs), node.kind]
            for name in found[0]:
                tally.add(("E011", name, node.kind.name), node)
            if found[1]:
                tally.add(("E017",), node)
        who, ranks, rank = shared.who(), shared.rank_ids, shared.ranks[0]
        for key, node, count in tally.items():
            code = key[0]
            if code == "E010":
                _, name, kind, expected = key
                message = (f"{who}: {name} is stored as {kind} {_on(count)}; ASTRA-sim reads only "
                           f"{expected} and sees {_default_of(expected)}")
            elif code == "E011":
                _, name, kind = key
                message = f"{who}: {kind} node has no {name} attribute {_on(count)}; ASTRA-sim reads 0"
            else:
                message = f"{who}: communication node marked is_cpu_op=true {_on(count)}; it would do no communication"
            findings.append(ctx.find(code, "attributes", message, ranks=ranks, node=node, rank=rank))
    return findings


class _AttrIndex:
    """The distinct attribute objects of a node list's `attrs` column, looked at once each, and
    its distinct lists by id (`lists`; None is not one).

    Readers intern equal attributes, so there are few distinct objects; collecting them by
    identity is C-level iteration, which keeps a 1024-rank set fast.
    """

    def __init__(self, attr_column: list):
        self.lists = dict(zip(map(id, attr_column), attr_column))  # id -> list; lists shared by nodes once
        self.lists.pop(id(None), None)
        attr_lists = list(filter(None, self.lists.values()))
        distinct = dict(zip(map(id, chain.from_iterable(attr_lists)), chain.from_iterable(attr_lists)))
        self.name_of = {key: attr.name for key, attr in distinct.items()}
        self.bad = {key for key, attr in distinct.items()
                    if WIRE_KINDS.get(attr.name, attr.kind) != attr.kind}
        self.cpu_true = {key for key, attr in distinct.items() if attr.name == "is_cpu_op" and attr.value is True}


def _any_lacking(found_for: dict) -> bool:
    """Whether some attrs list of check_attributes' lacks a required name or is marked is_cpu_op=true."""
    return any(missing or marked for missing, marked in found_for.values())


def _default_of(kind: str) -> str:
    if kind == "string_val":
        return "an empty string"
    if kind.endswith("_list"):
        return "an empty list"
    return "false" if kind == "bool_val" else "0"


def check_nodes(ctx: Context) -> list[Finding]:
    """Comm sizes, collective types, send/recv fields, and zero-length compute."""
    findings: list[Finding] = []
    for shared in ctx.shared:
        tally = _Tally()
        nodes = shared.nodes
        for i in () if _collectives_clean(nodes, shared.colls) else shared.colls:
            node = nodes[i]
            if node.coll is None:
                if node.attrs is None:  # a Chakra node without comm_type is reported by "attributes"
                    tally.add(("E018",), node)
            elif node.coll in UNSUPPORTED:
                tally.add(("E013", node.coll.name), node)
            elif node.coll == CollType.BROADCAST:
                tally.add(("W014",), node)
            if node.size <= 0:
                tally.add(("E012", node.size, "collective"), node)
        users = {rank.rank for rank in shared.ranks}
        for i in (*shared.sends, *shared.recvs):
            node = nodes[i]
            if node.size <= 0:
                tally.add(("E012", node.size, node.kind.name.lower()), node)
            if node.attrs is None and (node.peer is None or node.tag is None):
                missing = "peer" if node.peer is None else "tag"
                tally.add(("E015", node.kind.name.lower(), missing), node)
            elif node.tag is not None and node.tag < 0:
                tally.add(("E015", node.kind.name.lower(), "tag >= 0"), node)
            # A shared list holds the attributes of the rank it was read for, one of its users
            # (readers share only when every user's own end is its rank; writers write each rank's).
            own = _own_end(node)
            if own is not None and own not in users:
                tally.add(("E016", node.kind.name.lower(), own), node)
        for rank in shared.ranks:  # ASTRA-sim aborts on a message to oneself (NCCL copies it)
            for i in (*shared.sends, *shared.recvs):
                if rank.peer_of(nodes[i]) == rank.rank:
                    tally.add(("E038", nodes[i].kind.name.lower()), nodes[i])
        # Only nodes read from Chakra files: the writer rounds model durations up to 1 µs.
        if nodes and nodes[0].attrs is not None:
            kinds, durations = columns(nodes, ("kind", "duration_ns"))
            for i in compress(range(len(nodes)), map(le, durations, repeat(0))):  # (few: C-level)
                node = nodes[i]
                if kinds[i] == NodeKind.COMPUTE and not _has(node, "num_ops"):
                    tally.add(("W019",), node)
        who, ranks, rank = shared.who(), shared.rank_ids, shared.ranks[0]
        for key, node, count in tally.items():
            findings.append(ctx.find(key[0], "nodes", _node_message(who, key, count), ranks=ranks, node=node, rank=rank))
    return findings


def _collectives_clean(nodes: list[Node], colls: list[int]) -> bool:
    """Whether none of these collectives has a problem check_nodes reports, told by C-level
    passes over their columns (a log's collectives are most of its nodes). False when one may
    have: check_nodes then looks at each."""
    types, sizes = columns(list(map(nodes.__getitem__, colls)), ("coll", "size"))
    kinds = set(types)
    return (None not in kinds and kinds.isdisjoint(UNSUPPORTED) and CollType.BROADCAST not in kinds
            and min(sizes, default=1) > 0)


def _node_message(who: str, key: tuple, count: int) -> str:
    code = key[0]
    if code == "E012":
        return f"{who}: {key[2]} of size {key[1]} B {_on(count)}; sizes must be > 0"
    if code == "E013":
        return f"{who}: {key[1]} {_on(count)}; ASTRA-sim simulates only ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL"
    if code == "W014":
        return f"{who}: BROADCAST {_on(count)}; ASTRA-sim only replays its duration, it does not simulate it"
    if code == "E015":
        what = key[2]
        if what == "tag >= 0":
            return f"{who}: {key[1]} with a negative tag {_on(count)}"
        return f"{who}: {key[1]} without a {what} {_on(count)}; it can never be paired"
    if code == "E016":
        end = "comm_src" if key[1] == "send" else "comm_dst"
        return f"{who}: {key[1]} has {end}={key[2]}, not its own rank, {_on(count)}"
    if code == "E038":
        return (f"{who}: {key[1]} addressed to its own rank {_on(count)}; ASTRA-sim aborts on it "
                "(its network asserts src != dest), where NCCL would copy locally")
    if code == "E018":
        return f"{who}: collective without a type {_on(count)}"
    return f"{who}: compute node with duration 0 and no num_ops {_on(count)}; ASTRA-sim's old feeder skips it"


def _has(node: Node, name: str) -> bool:
    return node.attrs is not None and any(a.name == name for a in node.attrs)


def _own_end(node: Node) -> int | None:
    """A send's comm_src or a recv's comm_dst as the Chakra file carried it (must be the own rank)."""
    if node.attrs is None:
        return None
    wanted = "comm_src" if node.kind == NodeKind.SEND else "comm_dst"
    for attr in node.attrs:
        if attr.name == wanted and isinstance(attr.value, int):
            return attr.value
    return None
