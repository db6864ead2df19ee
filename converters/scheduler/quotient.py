"""Schedule one representative per role when ranks of one role are bound to behave alike.

Ranks that run the same program (the same node list, or node lists equal in everything that
decides timing) and interact with the same roles have identical timelines. Then simulating the
lowest rank of each class (its *representative*) gives every rank's timeline: 16 programs
instead of 1024 for the SimAI sample.

Classes start as "same program" and are split (partition refinement) until the ranks of a
class have their peers in the same classes and their groups' members in the same classes. The
result is exact when these hold (checked here in time linear in ranks x distinct groups/peers
per program; any failure falls back to scheduling every rank):

- Group classes: the groups that the same collective node resolves to on the ranks of one
  class are merged into one group class. All groups of a group class have the same kind and
  size and the same set of member classes, and a rank uses at most one group of each group
  class (so "the k-th collective of my group" is the same node on every rank of a class).
  Every rank is a member of the groups it issues collectives in.
- Peers: the peer of a send or receive node lies in the same class on every rank of a class; a
  rank talks to one rank per (peer class, tag) and direction, and the pairing is mutual (if r
  sends to p with tag t, p's receives with tag t from r's class come from r).

A collective instance in the representatives' run waits for one representative per member
class and costs what the real group (its real size) costs; a send meets the receive of the
representative of its peer's class.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from operator import lt
from typing import Any

from ..model import ExecutionTrace, NodeKind, Rank
from .columns import columns as read_columns
from .columns import columns_at
from .network import ring_distance, ring_hops

WORLD = ("world",)


@dataclass
class Quotient:
    reps: list[Rank]  # one per class, by rank
    classes: list[list[int]]  # class index -> its rank ids (rep first)
    class_of: dict[int, int]  # rank id -> class index
    group_class: dict[Any, Any]  # real group id (None = world) -> group-class key
    needed: dict[Any, int]  # group-class key -> member classes that must issue
    size: dict[Any, int]  # group-class key -> members of each real group


# NodeKind value -> 1 for collectives, for sends and receives (`bytes.translate` tables).
_IS_COLL = bytes(v == NodeKind.COLLECTIVE for v in range(256))
_IS_P2P = bytes(v in (NodeKind.SEND, NodeKind.RECV) for v in range(256))


def _talk_places(nodes) -> tuple[list[int], list[int]]:
    """Places of the collectives and of the sends and receives, ascending (C-level scans of
    one byte per node when the kinds are NodeKind values)."""
    try:
        kinds = bytes(read_columns(nodes, ("kind",))[0])
    except (ValueError, TypeError):  # a kind that is no NodeKind
        comm = [i for i, node in enumerate(nodes) if node.is_comm]
        return ([i for i in comm if nodes[i].kind == NodeKind.COLLECTIVE],
                [i for i in comm if nodes[i].kind != NodeKind.COLLECTIVE])
    places = range(len(kinds))
    return list(compress(places, kinds.translate(_IS_COLL))), list(compress(places, kinds.translate(_IS_P2P)))


class _Unions:
    def __init__(self):
        self.parent: dict[Any, Any] = {}

    def find(self, x):
        parent = self.parent
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # Keep the smallest key as the root so the result does not depend on order.
            lo, hi = sorted((ra, rb), key=_order)
            self.parent[hi] = lo


def _order(key):
    return (0, 0) if key == WORLD else (1, key)


def find_quotient(trace: ExecutionTrace, ring_size: int | None = None) -> Quotient | None:
    """The classes and group classes, or None when ranks of one class may behave differently.

    `ring_size`: when messages pay latency per hop of a ring of that many ranks, the groups of
    a group class must also lie alike on the ring, and the peers of a class's ranks at the
    same distance."""
    ranks = trace.sorted_ranks()
    classes_of_ranks = _classes(ranks)
    if len(classes_of_ranks) == len(ranks):
        return None  # every rank is different: no gain
    classes = [[rank.rank for rank in members] for members in classes_of_ranks]
    class_of = {r: c for c, members in enumerate(classes) for r in members}
    reps = [members[0] for members in classes_of_ranks]
    world = tuple(sorted(trace.ranks))

    # What each rank sees where its class's representative program says group x or peer p:
    # gview[rank][x] = real group id (WORLD for all ranks), pview[rank][(kind, p, tag)] = real peer.
    gview: dict[int, dict[Any, Any]] = {}
    pview: dict[int, dict[tuple, Any]] = {}
    raw_groups: list[list[Any]] = []
    raw_peers: list[list[tuple]] = []
    for members in classes_of_ranks:
        rep = members[0]
        colls, p2ps = _talk_places(rep.nodes)
        rep_groups, = columns_at(rep.nodes, ("group",), colls)
        kinds, peers, tags = columns_at(rep.nodes, ("kind", "peer", "tag"), p2ps)
        rep_peers = list(zip(map(int, kinds), peers, tags))  # a send's or receive's (kind, peer, tag)
        groups = set(rep_groups)
        peers = set(rep_peers)
        raw_groups.append(sorted(groups, key=_raw_order))
        raw_peers.append(sorted(peers, key=lambda e: tuple(_raw_order(v) for v in e)))
        for rank in members:
            if rank.nodes is rep.nodes:
                gview[rank.rank] = {x: _real_group(rank, x) for x in groups}
                pview[rank.rank] = {e: rank.real_peer(e[1]) for e in peers}
                continue
            views = _zip_views(rank, colls, rep_groups, p2ps, rep_peers)
            if views is None:
                return None
            gview[rank.rank], pview[rank.rank] = views

    # Every group a rank issues in must exist and include the rank.
    member_sets: dict[Any, frozenset[int]] = {}
    for r, view in gview.items():
        for gid in view.values():
            if gid not in member_sets:
                if gid == WORLD:
                    member_sets[gid] = frozenset(world)
                elif gid in trace.groups:
                    member_sets[gid] = frozenset(trace.groups[gid].members)
                else:
                    return None
            if r not in member_sets[gid]:
                return None
    if any(m not in trace.ranks for members in member_sets.values() for m in members):
        return None

    # Equal programs may still play different roles (the middle stages of a pipeline talk to
    # different neighbours): split classes until ranks of one class see the same classes.
    classes, raw_groups, raw_peers = _refine(classes, raw_groups, raw_peers, gview, pview, member_sets)
    if len(classes) == len(ranks):
        return None
    class_of = {r: c for c, members in enumerate(classes) for r in members}
    reps = [trace.ranks[members[0]] for members in classes]

    unions = _Unions()
    for c, members in enumerate(classes):
        rep = reps[c]
        for raw in raw_groups[c]:
            rep_gid = gview[rep.rank][raw]
            for r in members:
                unions.union(rep_gid, gview[r][raw])

    group_class = {gid: unions.find(gid) for gid in member_sets}
    # Same kind, size and member classes within a group class.
    shape: dict[Any, tuple] = {}
    for gid in sorted(member_sets, key=_order):
        members = member_sets[gid]
        kind = "world" if gid == WORLD else trace.groups[gid].kind
        this = (kind, len(members), frozenset(class_of.get(m, -1) for m in members),
                ring_hops(tuple(members), ring_size) if ring_size else None)
        if -1 in this[2]:
            return None
        key = group_class[gid]
        if shape.setdefault(key, this) != this:
            return None
    # One group per group class on every rank.
    for c, members in enumerate(classes):
        if len(raw_groups[c]) < 2:
            continue
        for r in members:
            used: dict[Any, Any] = {}
            for raw in raw_groups[c]:
                gid = gview[r][raw]
                if used.setdefault(group_class[gid], gid) != gid:
                    return None

    if not _peers_consistent(classes, class_of, reps, raw_peers, pview):
        return None
    if ring_size and not _peers_equally_far(classes, raw_peers, pview, ring_size):
        return None
    needed = {key: len(s[2]) for key, s in shape.items()}
    size = {key: s[1] for key, s in shape.items()}
    return Quotient(reps, classes, class_of, group_class, needed, size)


def _refine(classes, raw_groups, raw_peers, gview, pview, member_sets):
    """Split classes until every rank of a class has peers in the same classes and groups whose
    members lie in the same classes (partition refinement; a few rounds)."""
    while True:
        class_of = {r: c for c, members in enumerate(classes) for r in members}
        member_classes = {gid: tuple(sorted({class_of[m] for m in members})) for gid, members in member_sets.items()}
        split = []
        for c, members in enumerate(classes):
            buckets: dict[tuple, list[int]] = {}
            for r in members:
                signature = (tuple(class_of.get(pview[r][e], -1) for e in raw_peers[c]),
                             tuple(member_classes[gview[r][x]] for x in raw_groups[c]))
                buckets.setdefault(signature, []).append(r)
            split.extend((sub, raw_groups[c], raw_peers[c]) for sub in buckets.values())
        if len(split) == len(classes):
            return classes, raw_groups, raw_peers
        split.sort(key=lambda entry: entry[0][0])
        classes = [entry[0] for entry in split]
        raw_groups = [entry[1] for entry in split]
        raw_peers = [entry[2] for entry in split]


def _peers_consistent(classes, class_of, reps, raw_peers, pview) -> bool:
    talk: dict[int, tuple[dict, dict]] = {}  # rank -> (sends_to, recvs_from): (peer class, tag) -> peer
    for c, members in enumerate(classes):
        if not raw_peers[c]:
            continue
        rep_view = pview[reps[c].rank]
        rep_class = {}
        for entry in raw_peers[c]:
            p = rep_view[entry]
            if p not in class_of:
                return False
            rep_class[entry] = class_of[p]
        for r in members:
            view = pview[r]
            sends, recvs = {}, {}
            for entry in raw_peers[c]:
                p = view[entry]
                pc = class_of.get(p)
                if pc is None or pc != rep_class[entry]:
                    return False
                table = sends if entry[0] == NodeKind.SEND else recvs
                if table.setdefault((pc, entry[2]), p) != p:
                    return False
            talk[r] = (sends, recvs)
    for r, (sends, recvs) in talk.items():
        c = class_of[r]
        for (_pc, tag), p in sends.items():
            other = talk.get(p, ({}, {}))[1].get((c, tag))
            if other is not None and other != r:
                return False
        for (_pc, tag), s in recvs.items():
            other = talk.get(s, ({}, {}))[0].get((c, tag))
            if other is not None and other != r:
                return False
    return True


def _peers_equally_far(classes, raw_peers, pview, ring_size: int) -> bool:
    """Every rank of a class is as many ring hops from its peer as its representative."""
    for c, members in enumerate(classes):
        for entry in raw_peers[c]:
            distances = {ring_distance(r, pview[r][entry], ring_size) for r in members}
            if len(distances) > 1:
                return False
    return True


# ---------------------------------------------------------------- classes of ranks


def _classes(ranks: list[Rank]) -> list[list[Rank]]:
    """Ranks grouped by program: the same node list object, or node lists equal in everything
    that decides timing (kinds, durations, dependencies, collective types, sizes, tags, issue
    order), node ids allowed to differ by a constant (sets written with one id counter for all
    ranks). Each class is sorted by rank; classes by their first rank."""
    by_list: dict[int, list[Rank]] = {}
    for rank in ranks:
        by_list.setdefault(id(rank.nodes), []).append(rank)
    lists = list(by_list.values())
    if len(lists) > 1:
        lists = _merge_equal_programs(lists)
    for members in lists:
        members.sort(key=lambda rank: rank.rank)
    return sorted(lists, key=lambda members: members[0].rank)


def _merge_equal_programs(lists: list[list[Rank]]) -> list[list[Rank]]:
    """Merge the rank lists whose node lists are equal in timing (`_columns`). Lists are first
    bucketed by length and the durations of their first nodes, then of all nodes, which
    separates every-rank-distinct programs (measured logs) without building their other
    columns, and mostly without reading every node."""
    merged: list[list[Rank]] = []
    by_head: dict[tuple, list[list[Rank]]] = {}
    for members in lists:
        nodes = members[0].nodes
        by_head.setdefault((len(nodes), tuple(read_columns(nodes[:_HEAD], ("duration_ns",))[0])), []).append(members)
    for alike in by_head.values():
        if len(alike) == 1:
            merged.extend(alike)
            continue
        by_durations: dict[tuple, list[list[Rank]]] = {}
        for members in alike:
            by_durations.setdefault(tuple(read_columns(members[0].nodes, ("duration_ns",))[0]), []).append(members)
        for candidates in by_durations.values():
            if len(candidates) == 1:
                merged.extend(candidates)
            else:
                _merge_equal_columns(candidates, merged)
    return merged


_HEAD = 32  # nodes whose durations make the first bucket


def _merge_equal_columns(candidates: list[list[Rank]], merged: list[list[Rank]]) -> None:
    """Append to `merged` the candidates (equal in length and durations) merged by equal columns.
    Programs whose ids start alike compare their columns as they are; others with their ids
    taken relative to the first one (`_rebased`: a step per node and dependency)."""
    kept: list[tuple[Any, tuple, list[Rank]]] = []
    for members in candidates:
        base, columns = _columns(members[0].nodes)
        for target_base, target_columns, target in kept:
            if (target_columns == columns if target_base == base
                    else _rebased(target_base, target_columns) == _rebased(base, columns)):
                target.extend(members)
                break
        else:
            kept.append((base, columns, members))
            merged.append(members)


def _columns(nodes) -> tuple[Any, tuple]:
    """(the first id, what decides a program's timing besides the durations (the caller compares
    those), column by column); (None, a column only this list matches) when the ids are not
    ascending. A list of dependency lists compares as the flat list and the lengths did."""
    ids, kinds, deps, sizes, colls, tags = read_columns(nodes, ("id", "kind", "deps", "size", "coll", "tag"))
    if not all(map(lt, ids, ids[1:])):
        return None, (id(nodes),)
    # A tuple of deps does not equal the list it holds; lists of any kind (the shared, read-only
    # ones of logs and skeletons) do, and are compared as they are.
    if not all(issubclass(kind, list) for kind in set(map(type, deps))):
        deps = [list(dl) for dl in deps]
    return (ids[0] if ids else 0), (ids, kinds, deps, sizes, colls, tags)  # NodeKind members compare as their values


def _rebased(base, columns: tuple) -> tuple:
    """`_columns`' columns with node ids taken relative to `base` (sets written with one id
    counter for all ranks number each rank's nodes from where the last rank's ended)."""
    if base is None:
        return columns
    ids, kinds, deps, *rest = columns
    # Ascending and spanning len - 1: the ids are base, base + 1, ... (one id counter per rank).
    contiguous = not ids or ids[-1] - base == len(ids) - 1
    relative = range(len(ids)) if contiguous else [i - base for i in ids]
    return (relative, kinds, [[d - base for d in dl] for dl in deps] if base else deps, *rest)




def _zip_views(rank: Rank, colls: list[int], rep_groups: list, p2ps: list[int], rep_peers: list[tuple]):
    """Group and peer views of a rank whose node list only looks like its representative's;
    None when one value of the representative maps to two values on the rank.

    `colls` and `p2ps`: the places of the representative's collectives and sends/receives;
    `rep_groups` and `rep_peers` what it says there. Each distinct pair (the representative's
    value, the rank's raw value) is looked at once, in the order the pairs first appear."""
    nodes = rank.nodes
    groups: dict[Any, Any] = {}
    for raw, mine in dict.fromkeys(zip(rep_groups, columns_at(nodes, ("group",), colls)[0])):
        gid = _real_group(rank, mine)
        if groups.setdefault(raw, gid) != gid:
            return None
    peers: dict[tuple, Any] = {}
    for key, mine in dict.fromkeys(zip(rep_peers, columns_at(nodes, ("peer",), p2ps)[0])):
        real = rank.real_peer(mine)
        if peers.setdefault(key, real) != real:
            return None
    return groups, peers


def _raw_order(value):
    return (value is not None, value if isinstance(value, int) else 0)


def _real_group(rank: Rank, raw):
    if raw is None:
        return WORLD
    return rank.group_map.get(raw, raw) if rank.group_map else raw
