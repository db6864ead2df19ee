"""The one model every reader builds and every writer, the scheduler and the validator read.

Time is integer nanoseconds everywhere in here; writers convert to µs.

Ranks that play the same role (same pipeline stage, same position in their groups) may share
one `nodes` list: the graph is then written for a representative rank, and each rank maps
the representative's group ids and peers to its own through `Rank.group_map` and
`Rank.peer_map`. Always read a node's group and peer through `Rank.group_of` / `Rank.peer_of`
so shared graphs resolve correctly; never store per-rank data (such as scheduled times) on a
shared node. Measured times (`Node.start_ns`) only appear on graphs that are not shared.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Iterable, Iterator, Sequence


class NodeKind(enum.IntEnum):
    """What a node does; the values are Chakra's `NodeType` numbers."""

    METADATA = 1
    MEM_LOAD = 2
    MEM_STORE = 3
    COMPUTE = 4
    SEND = 5
    RECV = 6
    COLLECTIVE = 7


class CollType(enum.IntEnum):
    """Collective kinds; the values are Chakra's `CollectiveCommType` numbers."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


COMM_KINDS = (NodeKind.SEND, NodeKind.RECV, NodeKind.COLLECTIVE)
# What keeps a rank busy in the per-rank breakdowns (the scheduler's summary, `stats` of
# measured times, the report): compute and memory operations.
BUSY_KINDS = (NodeKind.COMPUTE, NodeKind.MEM_LOAD, NodeKind.MEM_STORE)

# Collectives ASTRA-sim's network backends really simulate (FORMATS.md §1).
SIMULATED_COLLECTIVES = frozenset(
    {CollType.ALL_REDUCE, CollType.ALL_GATHER, CollType.REDUCE_SCATTER, CollType.ALL_TO_ALL}
)


class SharedArgs(dict):
    """`Node.args` that many nodes share (a log's sub-operations repeat the same few): read-only.
    To change one node's args, give it its own: `node.args = {**node.args, "key": value}`."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("these node args are shared by many nodes; give the node its own dict to change them")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = _refuse

    def __reduce__(self):
        return SharedArgs, (dict(self),)


class SharedDeps(list):
    """Dependencies that many nodes share, read-only: the skeletons of ranks of one role
    (`rank_files.Skeleton`) give their nodes of equal dependencies one list. Like SharedArgs: to
    change a node's, give it its own list."""

    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError("this list of dependencies is shared by many nodes; give the node its own list to change it")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __reduce__(self):
        return SharedDeps, (list(self),)


class _NoDeps(SharedDeps):
    """The empty, read-only `ctrl_deps` that many nodes share (a log's hundreds of thousands of
    sub-operations: one empty list each held 16 MB of benchmark 7's 156); also the empty `deps`
    of a communication skeleton's nodes."""

    __slots__ = ()

    def __reduce__(self):  # unpickles as the one shared instance
        return "NO_CTRL_DEPS"


NO_CTRL_DEPS = _NoDeps()


@dataclass(slots=True)
class WireAttr:
    """One Chakra `AttributeProto` exactly as a file carried it.

    `kind` is the name of the oneof member that was set (`int64_val`, `uint64_list`, ...);
    `value` is a Python scalar, or a list for the `*_list` kinds (bytes stay bytes).
    """

    name: str
    kind: str
    value: Any
    doc: str = ""


@dataclass(slots=True)
class Node:
    """One unit of work on one rank.

    `deps` are the nodes that must finish before this one starts (Chakra `data_deps`);
    `ctrl_deps` exists only to keep what a Chakra file said (writers fold it into `deps`
    unless asked to copy a file verbatim).
    """

    id: int
    name: str
    kind: NodeKind
    duration_ns: int = 0
    deps: list[int] = field(default_factory=list)
    ctrl_deps: list[int] = field(default_factory=list)
    # communication
    coll: CollType | None = None  # for COLLECTIVE
    size: int = 0  # bytes (ALL_GATHER: the per-rank input, as ASTRA-sim reads it)
    group: int | None = None  # Group.id; None = all ranks
    peer: int | None = None  # SEND: destination rank; RECV: source rank
    tag: int | None = None
    # timing and display
    start_ns: int | None = None  # measured start (logs); None when the input has no times
    stream: str = ""  # thread to draw it on; "" = derived from kind and group kind
    parent: int | None = None  # id of the node this one ran inside (sub-operations of a step)
    microbatch: int | None = None
    source: str | None = None  # "file:line" it came from
    args: dict[str, Any] = field(default_factory=dict)  # extra facts for display (stage, shape, ...)
    # Chakra fidelity: every attribute and IOInfo as a Chakra file carried them (None for
    # nodes that did not come from a Chakra file). Writers re-emit the attributes they do not
    # themselves produce; the validator checks their oneof kinds.
    attrs: list[WireAttr] | None = None
    inputs: tuple[str, str, str] | None = None  # IOInfo (values, shapes, types)
    outputs: tuple[str, str, str] | None = None

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS


def field_values(nodes: Sequence[Node], name: str, places: Sequence[int] | None = None) -> Iterable:
    """Every node's `name`, in order, or the `name` of the nodes at `places`: from the columns
    of a node list that keeps them (a skeleton's, `rank_files.SkeletonNodes`, whose nodes are
    made when read), else read node after node (by `map`, in C). (`scheduler.columns` reads
    several names at once; this is for code that does not import the scheduler.)"""
    if places is None:
        column = getattr(nodes, "column", None)
        return map(attrgetter(name), nodes) if column is None else column(name)
    column_at = getattr(nodes, "column_at", None)
    return map(attrgetter(name), map(nodes.__getitem__, places)) if column_at is None else column_at(name, places)


def plain(node) -> Node:
    """`node` as a `Node` of its own: a read-only node (`rank_files.SkeletonNode`) gives its
    values to a new one."""
    if type(node) is Node:
        return node
    return Node(**{f.name: getattr(node, f.name) for f in fields(Node)})


@dataclass(slots=True)
class Group:
    """A communicator group: `id` is the positive integer written as Chakra `pg_name`."""

    id: int
    kind: str  # tp, dp, pp, ep, dp_ep, embedding, world, or "" when unknown
    members: tuple[int, ...]
    name: str = ""  # label for people, e.g. "tp#13"

    @property
    def label(self) -> str:
        return self.name or (f"{self.kind}#{self.id}" if self.kind else f"group#{self.id}")


@dataclass(slots=True)
class DisplaySpan:
    """A slice drawn on timelines only (the Chrome and Perfetto writers), never a node.

    What a measured input shows beside the work the model simulates, e.g. the CPU op of a
    profiler trace that launched a communication kernel. It lives in `Rank.display`, apart
    from `Rank.nodes`, so Chakra, the scheduler, the validator and stats never see it.
    """

    thread: str  # the thread it is drawn on, in the rank's process
    name: str
    start_ns: int  # measured, on the same origin as Node.start_ns
    duration_ns: int
    args: dict[str, Any] = field(default_factory=dict)
    node: int | None = None  # id of the node it launched, when it launched one


@dataclass(slots=True)
class Rank:
    """One rank's program: its nodes in program order and where it sits in the job."""

    rank: int
    nodes: list[Node] = field(default_factory=list)
    coords: dict[str, int] = field(default_factory=dict)  # e.g. {"tp": 4, "dp": 4, "pp": 1}
    source: str | None = None  # the file this rank came from, when there is one
    # When `nodes` is shared with other ranks: representative group id -> this rank's id,
    # representative peer rank -> this rank's peer. None means identity.
    group_map: dict[int, int] | None = None
    peer_map: dict[int, int] | None = None
    # Chakra GlobalMetadata as read (version, attributes), kept for verbatim rewrites.
    wire_metadata: tuple[str, list[WireAttr]] | None = None
    # Drawn only, never simulated or checked (see DisplaySpan); only on graphs that are not shared.
    display: list[DisplaySpan] = field(default_factory=list)

    def group_of(self, node: Node) -> int | None:
        if node.group is None or self.group_map is None:
            return node.group
        return self.group_map.get(node.group, node.group)

    def peer_of(self, node: Node) -> int | None:
        return self.real_peer(node.peer)

    def real_peer(self, raw: int | None) -> int | None:
        """The rank a node's raw `peer` names on this rank (through `peer_map`, when it has one)."""
        if raw is None or self.peer_map is None:
            return raw
        return self.peer_map.get(raw, raw)

    @property
    def stage(self) -> int | None:
        return self.coords.get("pp")

    @property
    def label(self) -> str:
        stage = self.stage
        return f"rank {self.rank}" if stage is None else f"rank {self.rank} · stage {stage}"


@dataclass(slots=True)
class NodeColumns:
    """One rank's nodes as columns instead of Nodes: what `stats` reads of every node of a
    measured Chakra set (readers/chakra.load_measured_columns), without an object per node.
    Native int64 arrays, index i = the rank's i-th node as `Rank.nodes` would hold it."""

    start_ns: Any  # memoryview of int64 (format "q")
    duration_ns: Any
    parent: Any  # Node.parent; -1 for None
    template: Any  # a row of MeasuredColumns.facts: what the node's message tail gives
    offset: Any  # where the node's message (its length first) starts in its file: its name is read from there


@dataclass(slots=True)
class MeasuredColumns:
    """A measured set's nodes as columns: `ranks` (rank -> NodeColumns) beside a model whose
    ranks have no nodes, and `facts`, per template: (kind, size, group, Node.args' wait_ns or
    0), as Node.kind, Node.size, Node.group and Node.args would hold them."""

    ranks: dict[int, NodeColumns] = field(default_factory=dict)
    facts: list[tuple[NodeKind, int, int | None, int]] = field(default_factory=list)


@dataclass(slots=True)
class Parallel:
    """The job's parallel configuration, as far as the input says or the user told us."""

    world: int = 0
    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1
    vpp: int = 1
    microbatches: int = 1

    def as_dict(self) -> dict[str, int]:
        return {
            "world": self.world, "tp": self.tp, "dp": self.dp, "pp": self.pp,
            "ep": self.ep, "cp": self.cp, "vpp": self.vpp, "microbatches": self.microbatches,
        }


@dataclass(slots=True)
class SourceInfo:
    format: str = ""
    files: list[str] = field(default_factory=list)  # base names
    sha256: str = ""  # of the input bytes (all files, in the order given)


@dataclass
class ExecutionTrace:
    """Ranks, their node graphs, communicator groups and everything known about the job."""

    ranks: dict[int, Rank] = field(default_factory=dict)
    groups: dict[int, Group] = field(default_factory=dict)
    parallel: Parallel = field(default_factory=Parallel)
    source: SourceInfo = field(default_factory=SourceInfo)
    units: dict[str, str] = field(default_factory=dict)  # what the input's numbers meant
    timing: str = "none"  # "measured" or "modelled" (node.start_ns set), "scheduled", or "none"
    time_origin_ns: int = 0  # absolute time of the input subtracted from measured times
    assumptions: list[str] = field(default_factory=list)  # plain sentences
    metadata: dict[str, Any] = field(default_factory=dict)  # anything else worth keeping
    _group_index: dict[tuple[str, tuple[int, ...]], int] = field(default_factory=dict, repr=False)

    def sorted_ranks(self) -> list[Rank]:
        return [self.ranks[r] for r in sorted(self.ranks)]

    def add_group(self, kind: str, members: list[int] | tuple[int, ...], name: str = "") -> Group:
        """Create a group with the next free id, or return the existing one of that kind and members."""
        members = tuple(sorted(members))
        key = (kind, members)
        gid = self._group_index.get(key)
        if gid is not None and gid in self.groups:
            return self.groups[gid]
        gid = max(self.groups, default=0) + 1
        group = Group(gid, kind, members, name)
        self.groups[gid] = group
        self._group_index[key] = gid
        return group

    def group_kind(self, gid: int | None) -> str:
        if gid is None:
            return "world"
        g = self.groups.get(gid)
        return g.kind if g else ""

    def group_size(self, gid: int | None) -> int | None:
        """Members of group `gid` (None: every rank of the job), or None for a group not defined."""
        if gid is None:
            return max(self.parallel.world, len(self.ranks))
        group = self.groups.get(gid)
        return len(group.members) if group is not None else None

    def node_count(self) -> int:
        return sum(len(r.nodes) for r in self.ranks.values())

    def assume(self, sentence: str) -> None:
        """Record an assumption once."""
        if sentence not in self.assumptions:
            self.assumptions.append(sentence)


def iter_nodes(trace: ExecutionTrace) -> Iterator[tuple[Rank, Node]]:
    for rank in trace.sorted_ranks():
        for node in rank.nodes:
            yield rank, node
