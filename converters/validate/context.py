"""What every check needs, computed once: the distinct node lists and who shares them."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from pathlib import Path

from ..model import ExecutionTrace, Node, NodeKind, Rank
from ..options import Options
from ..positions import positions
from ..ranks import parse_rank_list
from ..scheduler.columns import columns
from .findings import Finding, format_ranks, group_ref, node_ref

# Inputs that record some ranks of a real run: having only some of them is normal.
LOG_FORMATS = ("megatron-log", "optimus-log", "kineto")
# Inputs a simulator runs as they are (a Chakra set, or its JSON dump).
SIMULATOR_FORMATS = ("chakra", "et-json")


@dataclass
class SharedList:
    """One node list and the ranks that run it (one rank unless graphs are shared)."""

    nodes: list[Node]
    ranks: list[Rank]
    sends: list[int] = field(default_factory=list)  # indices of SEND nodes
    recvs: list[int] = field(default_factory=list)
    colls: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # node ids in list order
    in_id_order: bool = True  # ids strictly ascending in list order
    # (one-member collectives, too-small all-gathers): positions ASTRA-sim never completes,
    # found once for the groups and deadlock checks (`groups.never_completing`)
    stuck: tuple[list[int], list[int]] | None = None

    @property
    def rank_ids(self) -> list[int]:
        return [r.rank for r in self.ranks]

    def who(self) -> str:
        """`rank 3` or `ranks 0-7 (one shared graph)`."""
        ids = self.rank_ids
        if len(ids) == 1:
            return f"rank {ids[0]}"
        return f"ranks {format_ranks(ids)} (one shared graph)"


@dataclass
class Context:
    trace: ExecutionTrace
    options: Options
    shared: list[SharedList]
    world: list[int]  # the ranks present, sorted
    expected: list[int]  # every rank the job has (world size, group members, gaps in the numbering)
    # The ranks the input's source held when it may hold only some ranks of a job (logs, and
    # Chakra sets converted from logs); None when the source should hold every rank.
    source_ranks: frozenset[int] | None

    @property
    def missing(self) -> list[int]:
        present = set(self.world)
        return [r for r in self.expected if r not in present]

    def never_held(self, rank_id: int) -> bool:
        """True for a rank the source never had: its absence is not a fault of the input."""
        return self.source_ranks is not None and rank_id not in self.source_ranks

    @property
    def absent_by_design(self) -> list[int]:
        """Missing ranks the source never had (a log of some ranks), as opposed to lost ones."""
        return [r for r in self.missing if self.never_held(r)]

    def find(self, code: str, check: str, message: str, *, ranks=(), node: Node | None = None,
             group=None, microbatch: int | None = None, source: str | None = None,
             rank: Rank | None = None) -> Finding:
        """Build a finding; the source defaults to the node's, then the rank's file."""
        if source is None and node is not None:
            source = node.source
        if source is None and rank is not None:
            source = rank.source
        if microbatch is None and node is not None:
            microbatch = node.microbatch
        return Finding(code, check, message, sorted(set(ranks)), group, node_ref(node), microbatch, source)

    def group_field(self, gid: int | None):
        return group_ref(self.trace.groups.get(gid) if gid is not None else None, gid, self.world)

    def group_label(self, gid: int | None) -> str:
        if gid is None:
            return "all ranks"
        group = self.trace.groups.get(gid)
        return group.label if group else f"pg {gid}"

    def rank_label(self, rank_id: int) -> str:
        rank = self.trace.ranks.get(rank_id)
        stage = rank.stage if rank else None
        return f"rank {rank_id}" if stage is None else f"rank {rank_id} (stage {stage})"

    def rank_file(self, rank_id: int) -> str | None:
        """The file a rank would come from, by analogy with the other ranks' files (`w.5.et`)."""
        for rank in self.trace.sorted_ranks():
            if rank.source:
                name = Path(rank.source.split(":")[0]).name
                match = re.fullmatch(rf"(.*\.){rank.rank}(\.et(?:\.gz)?)", name)
                if match:
                    return f"{match.group(1)}{rank_id}{match.group(2)}"
        return None


def build_context(trace: ExecutionTrace, options: Options) -> Context:
    by_list: dict[int, SharedList] = {}
    for rank in trace.sorted_ranks():
        entry = by_list.get(id(rank.nodes))
        if entry is None:
            entry = by_list[id(rank.nodes)] = SharedList(rank.nodes, [])
        entry.ranks.append(rank)
    shared = list(by_list.values())
    for entry in shared:
        _index_comm(entry)
    present = sorted(trace.ranks)
    expected = set(present)
    if present:
        expected.update(range(present[-1] + 1))
    if trace.parallel.world > 0:
        expected.update(range(trace.parallel.world))
    for group in trace.groups.values():
        expected.update(group.members)
    return Context(trace, options, shared, present, sorted(expected), held_ranks(trace))


def origin_format(trace: ExecutionTrace) -> str:
    """The format the data first came in: a Chakra set we wrote records it in its metadata."""
    if trace.source.format in SIMULATOR_FORMATS:
        recorded = recorded_metadata(trace, "source.format")
        if isinstance(recorded, str):
            return recorded
    return trace.source.format


def held_ranks(trace: ExecutionTrace) -> frozenset[int] | None:
    """The ranks the source held, when it is a log that may hold only some ranks of a job.

    A log holds what it holds. A Chakra set converted from logs records the logged ranks in
    `source.ranks`: a rank missing from the set but not from that record was lost on the way
    (a deleted file), which a simulator stalls on. Sets written before that record existed
    cannot tell, and are taken to hold what their source held.
    """
    if origin_format(trace) not in LOG_FORMATS:
        return None
    present = frozenset(trace.ranks)
    if trace.source.format not in SIMULATOR_FORMATS:
        return present
    recorded = recorded_metadata(trace, "source.ranks")
    held = _rank_list_or_none(recorded)
    return present if held is None else present | held  # ranks put together from two sets are held too


def recorded_metadata(trace: ExecutionTrace, name: str):
    """An attribute of the first rank's GlobalMetadata (our writer gives every rank the same)."""
    for rank in trace.sorted_ranks()[:1]:
        for attr in (rank.wire_metadata or ("", []))[1]:
            if attr.name == name:
                return attr.value
    return None


def _index_comm(entry: SharedList) -> None:
    """Indices of the comm nodes, in the order a simulator issues them (ascending node id)."""
    nodes = entry.nodes
    ids, kinds = columns(nodes, ("id", "kind"))
    in_id_order = all(map(operator.lt, ids, islice(ids, 1, None)))
    entry.ids, entry.in_id_order = ids, in_id_order
    if not in_id_order:
        order = sorted(positions(len(nodes)), key=lambda i: (ids[i], i))
        kinds = [kinds[i] for i in order]
    else:
        order = positions(len(nodes))  # the same int objects in every list of positions
    # a pass in C per kind (compared by value, as a dict lookup would): no step per node in Python
    entry.sends, entry.recvs, entry.colls = (list(compress(order, map(operator.eq, kinds, repeat(kind))))
                                             for kind in (NodeKind.SEND, NodeKind.RECV, NodeKind.COLLECTIVE))


def _rank_list_or_none(recorded) -> frozenset[int] | None:
    """The ranks of a `source.ranks` attribute; None when it is absent or not a rank list."""
    if not isinstance(recorded, str):
        return None
    try:
        return frozenset(parse_rank_list(recorded))
    except ValueError:
        return None
