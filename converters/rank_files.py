"""A Chakra set from per-rank inputs, written where the ranks were built (--jobs, --cluster, or 32 MB of input).

The workers (`builders/per_rank.py`) build their files' ranks and keep them (or, past a budget,
none of them: each is built again for each step, `per_rank.LetGo`); this process joins
only what crosses ranks (the format's `join`: groups, assumptions, where sends start) and the
workers finish their ranks with it. The checks of `converters.api.write` are split by what
they need:

- on each worker, per rank, on the whole rank: the one-member-collective pass
  (`builders/one_rank.py`, which needs only the trace's groups) and the validator's per-rank
  checks (graph, attributes, nodes, pipeline, timing);
- here, on every rank's communication skeleton (its sends, receives and collectives, each
  depending on the communication nodes it waits for through compute: `skeleton`): the
  cross-rank checks (rank set, groups, collective sequences, send/receive matching, clocks
  between ranks, the deadlock dry run).

While this process checks, the workers already write their ranks' `.et` files (the writer's
code, into the temporary folder `atomic_set` renames only when the whole set is there); this
process writes comm_group.json. When memory is short (the workers let go of their ranks,
`per_rank.LetGo`), a worker writes each rank's file in the step that checks it instead: the
rank is built once for both, and this process's peak (the deadlock dry run) comes after the
workers' (building a rank), not with it. The metadata every rank carries is known only once
every rank is checked (the ranks, the one-member-collective pass's assumption, the inputs'
sha256): this process then writes it into each file (`chakra.rewrite_common_metadata`).

Any error or warning `api.write` would report discards those files and brings every rank here,
where the set is gated and written as a local run does, so the messages are the same too. A
log's partial rank set (some ranks of a job: the note I024) keeps them: the note names only
the ranks present and the job's size, so this process warns as the gate does (W025). A worker
lost on the way fails the run with one error and nothing written.
"""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from itertools import chain, repeat
from operator import attrgetter
from pathlib import Path

from . import progress
from .builders import per_rank
from .builders.one_rank import demote_in_rank, record_demoted, warn_if_kept
from .diagnostics import Diagnostics
from .model import (COMM_KINDS, NO_CTRL_DEPS, CollType, ExecutionTrace, Node, NodeKind, Rank, SharedArgs,
                    SharedDeps)
from .options import Options
from .validate import warn_partial_set
from .validate.findings import ERROR, WARNING, Finding
from .writers import chakra
from .writers.atomic import atomic_set

# The validator's checks (validate/__init__.py), by where they run.
PER_RANK_CHECKS = ("graph", "attributes", "nodes", "pipeline", "timing")
CROSS_RANK_CHECKS = ("rank-set", "groups", "collectives", "p2p", "timing", "deadlock")


class Reported(Exception):
    """The checks found what `api.write` reports: the set is written the local way."""


def convert(fmt: per_rank.PerRankFormat, paths: list[Path], output: Path, options: Options,
            diagnostics: Diagnostics, finish_read) -> ExecutionTrace:
    """Read `paths` and write the Chakra set `output`; returns the model (each rank's
    communication skeleton when the workers wrote the files). `finish_read(trace)` does what
    `api.read` does after a load, but the one-member-collective pass (done on the workers);
    `finish_read.workers_started()` is called once the workers run (`api._AfterWorkersLoad`)."""
    # (the workers keep every file or none: a clean set's ranks kept are checked, then written
    # while this process checks the set; those let go of are built once to be checked and written)
    with per_rank.start_workers(fmt, paths, options, streaming=True, all_or_none=True) as workers:
        finish_read.workers_started()
        trace = _trace_of(workers, paths, diagnostics)
        try:
            with _set_folder(output) as tmpdir:
                if workers.holding:
                    checked = _checked(trace, workers, options, finish_read)
                    job = chakra.rank_file_job(trace, output, tmpdir)
                    with progress.bar(f"checking the set, the workers writing {output} (chakra)"):
                        written = workers.each_rank_later(chakra.write_rank_file, job, "writing")
                        notes = _set_notes(trace, options, checked)
                        counts = written()
                else:  # memory is short: built once, each rank's file is written in the step that checks it
                    # (with the metadata every rank carries as known before: set again once it is known)
                    job = chakra.rank_file_job(trace, output, tmpdir)
                    checked = _checked(trace, workers, options, finish_read, job)
                    with progress.bar(f"checking the set {output} (chakra)"):
                        notes = _set_notes(trace, options, checked)
                    counts = [facts.counts for facts in checked]
                    if notes is not None:  # the metadata every rank carries, as it is now known
                        chakra.rewrite_common_metadata(trace, tmpdir, Path(output).name, job)
                if notes is None:
                    raise Reported
                warn_if_kept(trace, diagnostics)
                for note in notes:  # as the gate says them, in the same place among the warnings
                    warn_partial_set(note, diagnostics)
                chakra.finish_set(trace, tmpdir, Path(output).name, counts, diagnostics)
            return trace
        except Reported:
            trace.ranks = dict(zip(trace.ranks, workers.each_rank(per_rank.whole, None, "sending")))
    from .api import write

    write(trace, output, "chakra", options, diagnostics)
    return trace


def _trace_of(workers: per_rank.Workers, paths: list[Path], diagnostics: Diagnostics) -> ExecutionTrace:
    """The model the workers' files join into (no ranks yet: they stay on the workers)."""
    with progress.bar(f"reading {paths[0].name} and {len(paths) - 1} more on the workers"):
        return workers.keep_parts(diagnostics).trace


def _checked(trace: ExecutionTrace, workers: per_rank.Workers, options: Options, finish_read,
             job: tuple | None = None) -> list[RankFacts]:
    """What the workers found of each rank once they finished and checked it (and wrote its
    file with `job`, when given: `chakra.rank_file_job`); `trace` then holds each rank's skeleton."""
    with progress.bar("checking each rank on the workers" + (", writing its file" if job else "")):
        # each skeleton's ids and dependencies taken in here as it comes in, while the workers go on
        shell = replace(trace, ranks={})
        checked = workers.each_rank(_finish_and_check, (shell, options, job), "checking",
                                    change=(demote_in_rank, shell), each=partial(from_skeleton, shared=SharedValues()))
    record_demoted(trace, checked)
    trace.ranks = {facts.rank.rank: facts.rank for facts in checked}
    finish_read(trace)
    return checked


def _set_notes(trace: ExecutionTrace, options: Options, checked: list[RankFacts]) -> list[Finding] | None:
    """`_cross_rank_notes` when every rank's own checks were clean, else None."""
    return _cross_rank_notes(trace, options) if all(facts.clean for facts in checked) else None


@contextlib.contextmanager
def _set_folder(output: Path):
    """`atomic_set`'s temporary folder; a refused or failed set leaves no folder behind either."""
    parent = Path(output).parent
    made = [d for d in (parent, *parent.parents) if not d.exists()]  # by atomic_set, deepest first
    try:
        with atomic_set(Path(output)) as tmpdir:
            yield tmpdir
    except BaseException:
        for directory in made:
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


class RankFacts:
    """What a worker tells about one finished rank: its skeleton (`skeleton`), whether its
    per-rank checks are clean, the one-member collectives it turned into compute, and when it
    wrote the rank's file, what the writer counted (`chakra.write_rank_file`)."""

    def __init__(self, rank: Rank, skeleton: "Skeleton", clean: bool, demoted: int, first: str,
                 counts: tuple | None = None):
        self.rank, self.skeleton, self.clean, self.demoted, self.first = rank, skeleton, clean, demoted, first
        self.counts = counts


def _finish_and_check(rank: Rank, shell_options_job) -> RankFacts:
    """A rank finished (the one-member-collective pass) and checked; with a job, its file
    written too when it is clean."""
    shell, options, job = shell_options_job
    one, demoted, first = demote_in_rank(rank, shell)
    clean = not _reported_by(one, options, PER_RANK_CHECKS)
    facts = RankFacts(replace(rank, nodes=[]), skeleton(rank), clean, demoted, first)
    if job is not None and clean:
        facts.counts = chakra.write_rank_file(rank, job)
    return facts


def _cross_rank_notes(trace: ExecutionTrace, options: Options) -> list[Finding] | None:
    """None when the cross-rank checks on the skeletons in `trace` find an error or a warning
    (the set then goes the local way, whose messages name what skeletons leave out); else the
    partial-set notes (I024) they find, which name only the ranks present and the job's size:
    the same words as on the whole ranks, so the workers' files are kept."""
    from .validate.timing import check_timing_across_ranks

    # timing's overlaps and steps were checked on each whole rank by its worker (PER_RANK_CHECKS)
    with _columns_kept(trace):
        found = _reported(trace, options, CROSS_RANK_CHECKS, {"timing": check_timing_across_ranks})
    return None if any(finding.code != PARTIAL_SET for finding in found) else found


@contextlib.contextmanager
def _columns_kept(trace: ExecutionTrace):
    """While the cross-rank checks run, the skeletons of `trace` keep the columns the checks
    read again and again (`Skeleton.kept`); after, they let go of them, and this process
    gives its heap's free pages back (`per_rank.give_back_freed_memory`: the checks' lists
    leave 122 MB of benchmark 6's client held, 88 MB so)."""
    skeletons = [rank.nodes.skeleton for rank in trace.ranks.values() if isinstance(rank.nodes, SkeletonNodes)]
    for skeleton in skeletons:
        skeleton.kept = {}
    try:
        yield
    finally:
        for skeleton in skeletons:
            skeleton.kept = None
        per_rank.give_back_freed_memory()


def _reported_by(trace: ExecutionTrace, options: Options, names: tuple[str, ...]) -> bool:
    """True when a check of `names` finds what `validate.gate` reports (an error, a warning,
    a partial rank set)."""
    return bool(_reported(trace, options, names))


PARTIAL_SET = "I024"  # a log's partial rank set: the gate warns (W025) and writes the set


def _reported(trace: ExecutionTrace, options: Options, names: tuple[str, ...], parts: dict | None = None) -> list[Finding]:
    """What the checks of `names` find that `validate.gate` reports: the first error or warning
    (the checks stop there), else every partial-set note. The checks are taken from the
    validator's own list, by name; `parts` gives, by name, the part of a check to run instead."""
    from .validate import _checks
    from .validate.context import build_context

    ctx = build_context(trace, options)
    notes = []
    for name, check in _checks():
        if name in names:
            check = (parts or {}).get(name, check)
            for finding in check(ctx) or ():
                if finding.severity in (ERROR, WARNING):
                    return [finding]
                if finding.code == PARTIAL_SET:
                    notes.append(finding)
    return notes


# The args the cross-rank checks read: collectives' dtype, p2p's shape and dtype, timing's fused
# halves. A skeleton keeps only these; what the others (a log's step, function, stage, wait...)
# would only name in a message comes from the whole ranks (`Reported`).
CHECKED_ARGS = ("dtype", "shape", "fused")  # in this order in `_checked_args`


def skeleton(rank: Rank) -> "Skeleton":
    """The rank's sends, receives and collectives (the fields other ranks and the dry run read,
    args only `CHECKED_ARGS`) as columns (`Skeleton`), each depending on the communication
    nodes its dependencies reach through compute: the nearest ones (`_nearest_comm`), or where
    compute joins many streams, the latest of each stream (`_latest_comm_per_stream`). Either
    keeps which communication nodes wait for which, all the checks here need."""
    comm = [node for node in rank.nodes if node.kind in COMM_KINDS]
    deps = _nearest_comm(rank.nodes, NEAREST_LIMIT)
    if deps is None:
        deps = _latest_comm_per_stream(rank.nodes)
    if deps is None:
        deps = _nearest_comm(rank.nodes)
    return Skeleton(comm, deps)


# Past this many nearest communication nodes for one node, the latest of each stream stand for
# them. In profiler traces compute joins the streams, so the nearest grow to every earlier
# collective (1.2 M dependencies for 2,224 collectives); in logs no node has more than 2.
NEAREST_LIMIT = 64


def _nearest_comm(nodes: list[Node], limit: int | None = None) -> list[list[int]] | None:
    """Each communication node's nearest communication nodes: its own dependencies, with each
    compute node among them replaced by the nearest ones it waits for. None when some node
    waits for more than `limit` of them."""
    through: dict[int, list[int]] = {}  # compute node -> the comm nodes it waits for
    comm: set[int] = set()
    deps_of = []
    for node in nodes:
        if node.ctrl_deps or not comm.issuperset(node.deps):
            deps = []
            for dep in chain(node.deps, node.ctrl_deps):
                deps.extend((dep,) if dep in comm else through.get(dep, (dep,)))
            if len(deps) > 1:
                deps = list(dict.fromkeys(deps))
                if limit is not None and len(deps) > limit:
                    return None
        else:  # the common case: it waits for comm nodes only
            deps = node.deps
        if node.kind in COMM_KINDS:
            comm.add(node.id)
            deps_of.append(deps)
        else:
            through[node.id] = deps
    return deps_of


def _latest_comm_per_stream(nodes: list[Node]) -> list[list[int]] | None:
    """Each communication node's dependencies as the latest communication node of each stream
    that it reaches (a vector clock per node: per stream, how many of its communication nodes
    the node waits for). The latest of a stream stands for the earlier ones only when each
    communication node of a stream waits for the one before it: None otherwise, and for a
    dependency on a node not (yet) in the list."""
    slots = {stream: k for k, stream in enumerate(dict.fromkeys(n.stream for n in nodes if n.kind in COMM_KINDS))}
    order: list[list[int]] = [[] for _ in slots]  # per stream: its communication nodes' ids
    none = (0,) * len(slots)
    clock: dict[int, tuple[int, ...]] = {}
    deps_of = []
    for node in nodes:
        seen = none
        for dep in chain(node.deps, node.ctrl_deps):
            other = clock.get(dep)
            if other is None:
                return None
            if other is not seen:
                seen = other if seen is none else tuple(map(max, seen, other))
        if node.kind in COMM_KINDS:
            k = slots[node.stream]
            if seen[k] != len(order[k]):  # it does not wait for its stream's previous one
                return None
            deps_of.append([ids[count - 1] for ids, count in zip(order, seen) if count])
            order[k].append(node.id)
            seen = (*seen[:k], seen[k] + 1, *seen[k + 1:])
        clock[node.id] = seen
    return deps_of


def _checked_args(nodes: list[Node]) -> list[tuple | None]:
    """Each node's values of `CHECKED_ARGS`, None for each it has not (spelled out: one pass
    over every communication node)."""
    return [(args.get("dtype"), args.get("shape"), args.get("fused")) if args else None
            for args in map(attrgetter("args"), nodes)]


NONE = -128  # None in an int column: the least value of the smallest array type, held by every type
# A skeleton's kind and coll columns' codes (NONE for None; None itself where a column is a list)
KINDS_BY_CODE = {int(kind): kind for kind in NodeKind}
COLLS_BY_CODE = {None: None, NONE: None, **{int(coll): coll for coll in CollType}}
_DECODED = {"kind": KINDS_BY_CODE, "coll": COLLS_BY_CODE}
# The fields the cross-rank checks read again and again (in most checks, and the dry run's
# programs and quotient), kept decoded while they run (`_columns_kept`): 0.14 s of benchmark 6's
# 1.03; the others as well would take 29 MB more for nothing measurable
_KEPT = ("kind", "coll", "group", "size", "tag", "peer")
# Int fields whose values repeat within a rank (a log's durations: the deadlock dry run holds them)
_FEW_VALUES = ("duration_ns", "size")
# The fields a skeleton keeps in tables of distinct values: (table, index) attributes
_TABLED = {"name": ("names", "name_at"), "stream": ("streams", "stream_at"), "args": ("args", "args_at")}


class Skeleton:
    """A rank's communication nodes as columns: the int fields in arrays, dependencies flat
    with a count per node, names, streams and args as indices into tables of their distinct
    values. A worker sends it to this process in a few buffers instead of a tuple of objects
    per node: about 35 B a node instead of 470 (a 184 MB set of 16 logs has 1.07 M of them;
    the client's peak went from 752 to 535 MB)."""

    INTS = ("id", "kind", "duration_ns", "coll", "size", "group", "peer", "tag", "start_ns", "parent", "microbatch")

    def __init__(self, nodes: list[Node], deps: list[list[int]]):
        """`nodes` and the dependencies each keeps (`skeleton`); every column is one pass in C."""
        self.ints = [_int_column(map(attrgetter(name), nodes)) for name in self.INTS]
        self.dep_counts = _int_column(map(len, deps))
        self.deps = _int_column(chain.from_iterable(deps))
        self.tables, self.indices = [], []
        for column in (list(map(attrgetter("name"), nodes)), list(map(attrgetter("stream"), nodes)),
                       _checked_args(nodes)):
            table = list(dict.fromkeys(column))
            self.tables.append(table)
            self.indices.append(_int_column(map({value: i for i, value in enumerate(table)}.__getitem__, column)))

    def nodes(self, shared: "SharedValues | None" = None) -> "SkeletonNodes":
        """The nodes again, as `SkeletonNode`s made when read, that read their fields from these
        columns (no sources, attributes or IO info: the checks here read none of them). Here,
        their ids and dependencies are made once (the ids as ints of one object per value, the
        dependencies as one read-only `SharedDeps` per distinct list: with `shared`, across the
        skeletons that use it), and their distinct args once (read-only `SharedArgs`)."""
        shared = shared or SharedValues()
        one = shared.ints.setdefault
        self.node_ids = [one(v, v) for v in _values(self.ints[0])]
        self.node_deps = shared.deps_of([one(d, d) for d in _values(self.deps)], self.dep_counts)
        # (an int column of a rank is a list where no array holds it: there None is None)
        self.none_coded = [isinstance(column, array) and NONE in column for column in self.ints]
        self.kept: dict[str, list] | None = None  # columns of `_KEPT`, kept while the checks run
        self.names, self.streams = self.tables[:2]
        self.name_at, self.stream_at, self.args_at = self.indices
        self.args = [SharedArgs((key, value) for key, value in zip(CHECKED_ARGS, values or ()) if value is not None)
                     for values in self.tables[2]]
        return SkeletonNodes(self)

    def column(self, name: str) -> list:
        """Every node's value of the field `name`, as `[getattr(node, name) for node in nodes]`
        gives them but read from the columns (`scheduler.columns.columns` asks for them)."""
        return list(self._values(name))

    def column_at(self, name: str, places: list[int]) -> list:
        """`column(name)` at `places` (positions of nodes), in that order."""
        return list(map(self._values(name).__getitem__, places))

    def _values(self, name: str) -> list:
        """`name`'s column, not to be changed: while the checks run, those they read again and
        again (`_KEPT`) decoded once (`kept`)."""
        if self.kept is None or name not in _KEPT:
            return self._decoded(name)
        values = self.kept.get(name)
        if values is None:
            values = self.kept[name] = self._decoded(name)
        return values

    def _decoded(self, name: str) -> list:
        if name == "id":
            return self.node_ids
        if name == "deps":
            return self.node_deps
        if name in _TABLED:
            table, index = (getattr(self, attribute) for attribute in _TABLED[name])
            return list(map(table.__getitem__, index))
        if name not in Skeleton.INTS:
            return [getattr(SkeletonNode, name)] * len(self.node_ids)  # a constant (ctrl_deps, source...)
        k = Skeleton.INTS.index(name)
        values = _values(self.ints[k], self.none_coded[k])  # (not to be changed: a list column is itself)
        if name in _FEW_VALUES and not self.none_coded[k]:  # one int per value, not per node, while the caller holds them
            values = list(map({}.setdefault, values, values))
        decoded = _DECODED.get(name)
        return values if decoded is None else list(map(decoded.__getitem__, values))


class SkeletonNodes(Sequence):
    """A skeleton's nodes (`Skeleton.nodes`), each made when it is read: the checks read most
    fields a column at a time (`column`, which `scheduler.columns.columns` asks for), and a
    few nodes at a time."""

    __slots__ = ("skeleton", "column", "column_at", "count")

    def __init__(self, skeleton: Skeleton):
        self.skeleton, self.count = skeleton, len(skeleton.node_ids)
        self.column, self.column_at = skeleton.column, skeleton.column_at

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, at):
        if isinstance(at, slice):
            return list(map(SkeletonNode, repeat(self.skeleton), range(*at.indices(self.count))))
        if at < 0:
            at += self.count
        if not 0 <= at < self.count:
            raise IndexError("skeleton node index out of range")
        return SkeletonNode(self.skeleton, at)

    def __iter__(self):
        return map(SkeletonNode, repeat(self.skeleton, self.count), range(self.count))


def _int_field(k: int, decoded=None) -> property:
    """A `SkeletonNode`'s field read from its skeleton's k-th int column (`Skeleton.INTS`),
    None where the column holds `NONE` for it, then through `decoded` (a dict) if given."""
    def read(node):
        of = node.of
        value = of.ints[k][node.at]
        if value == NONE and of.none_coded[k]:
            value = None
        return value if decoded is None else decoded[value]
    return property(read)


class SkeletonNode:
    """A communication node of a rank's skeleton (`Skeleton.nodes`: what the cross-rank checks
    read of a Chakra set the workers write; the model `api.convert` returns then): a `Node`'s
    fields, read-only, each read from the skeleton's columns when asked for. The fields a
    skeleton node never has are constants (no control dependencies, source, attributes or IO
    info). It holds only its skeleton and its position, and is made when read: benchmark 6's
    client held 119 MB for its 538,000 skeleton nodes as objects with a slot per field and the
    ints they hold, 26 MB so (ids and dependencies)."""

    __slots__ = ("of", "at")

    def __init__(self, of: Skeleton, at: int):
        self.of, self.at = of, at

    _, kind, duration_ns, coll, size, group, peer, tag, start_ns, parent, microbatch = (
        _int_field(k, _DECODED.get(name)) for k, name in enumerate(Skeleton.INTS))
    id = property(lambda node: node.of.node_ids[node.at])
    deps = property(lambda node: node.of.node_deps[node.at])
    name = property(lambda node: node.of.names[node.of.name_at[node.at]])
    stream = property(lambda node: node.of.streams[node.of.stream_at[node.at]])
    args = property(lambda node: node.of.args[node.of.args_at[node.at]])
    ctrl_deps = NO_CTRL_DEPS
    source = attrs = inputs = outputs = None
    is_comm = Node.is_comm

    FIELDS = ("id", "name", "kind", "duration_ns", "deps", "coll", "size", "group", "peer", "tag", "start_ns",
              "stream", "parent", "microbatch", "args")

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other):
        if type(other) is not SkeletonNode:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # (equal by value, as a Node is)

    def __repr__(self) -> str:
        return "SkeletonNode(" + ", ".join(f"{name}={value!r}" for name, value in zip(self.FIELDS, self._values())) + ")"


class SharedValues:
    """What the skeletons of all ranks share in this process. Ranks of one role have the same
    ids and dependencies (measured ranks differ in times, not in structure): one int per id and
    one read-only list per distinct dependencies instead of one per node. Benchmark 8's client
    held 444 MB once its 1.07 M skeleton nodes were made, 339 MB so (98 bytes a node, when each
    was an object with a slot per field)."""

    def __init__(self):
        self.ints: dict[int, int] = {}
        self._single: dict[int, SharedDeps] = {}  # most nodes wait for one communication node
        self._several: dict[tuple[int, ...], SharedDeps] = {}

    def deps_of(self, flat: list[int], counts) -> list[list[int]]:
        """Each node's dependencies, `counts[k]` of `flat` for node k, as shared lists."""
        single, several, out = self._single, self._several, []
        end = 0
        for n in counts:
            end += n
            if n == 1:
                d = flat[end - 1]
                deps = single.get(d)
                if deps is None:
                    deps = single[d] = SharedDeps((d,))
            elif n == 0:
                deps = NO_CTRL_DEPS
            else:
                key = tuple(flat[end - n:end])
                deps = several.get(key)
                if deps is None:
                    deps = several[key] = SharedDeps(key)
            out.append(deps)
        return out


def _int_column(values) -> "array | list":
    """Ints and Nones in the smallest array type that holds them: the arrays of a 184 MB set's
    skeletons stay in this process's heap once freed. A list (None as None) for values no int64
    holds, and for the rare column that holds -128 itself."""
    values = list(values)
    if NONE in values:
        return values
    column = _smallest_array(values)
    if column is None and None in values:
        column = _smallest_array([NONE if v is None else v for v in values])
    return values if column is None else column


def _smallest_array(values: list) -> array | None:
    for code in "bhiq":
        try:
            return array(code, values)
        except OverflowError:
            continue
        except TypeError:  # a None, a float
            return None
    return None


_NONE_AS_NONE = {NONE: None}


def _values(column: "array | list", none_coded: bool | None = None) -> list:
    """A column's values, None for `NONE` in an array; `none_coded`: whether it holds `NONE`,
    when known (`Skeleton.none_coded`: the column is not scanned again)."""
    if not isinstance(column, array):
        return column
    values = column.tolist()
    if none_coded is None:
        none_coded = NONE in column
    return list(map(_NONE_AS_NONE.get, values, values)) if none_coded else values  # (in C: a column is 100,000s)


def from_skeleton(facts: RankFacts, shared: SharedValues | None = None) -> Rank:
    """The rank with its skeleton's nodes (sharing `shared`'s values with other ranks')."""
    facts.rank.nodes = facts.skeleton.nodes(shared)
    facts.skeleton = None
    return facts.rank
