"""Write the model as a Chakra set: `<prefix>.<rank>.et` per rank and `<prefix>.comm_group.json`.

What ASTRA-sim needs (FORMATS.md §1) decides every byte: GlobalMetadata first with a version
and our provenance, node ids 0..n-1 in program order per rank, every ordering edge in
`data_deps`, durations in whole µs (≥ 1 for compute), and each attribute in the one oneof
member the simulator reads.

Speed: ranks that share a `nodes` list differ only in group ids and peers, so each shared list
is turned once into a template of ready-made bytes; per rank only the few attributes that
name a group, a peer or the rank itself are filled in (from small caches of encoded
attributes). A Node's encoding is its fields 1-9 followed by one entry per attribute, so
joined parts are what protobuf would write: fields 1-9 are written here (varints; the name,
type and IOInfo encoded by protobuf once per distinct value), the attribute entries by
protobuf once per distinct value, and a node's entries once per distinct combination of the
values they depend on (tests/test_chakra_fast_encode.py compares them with protobuf's).
On big sets forked workers encode and write the ranks while this process runs the
validator's gate (`write(..., check=)`).

A trace read from an et-json dump (`trace.metadata["chakra.verbatim"]`) is written back
exactly as its files were: same ids, deps, attributes and metadata.
"""

from __future__ import annotations

import contextlib
import operator
import os
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

import orjson

from .. import progress
from .._proto import et_def_pb2 as pb
from .._proto.wire import ATTR_KINDS, KEPT_ARGS, MEASURED_FACTS, attr_to_proto, int_range, length_prefix, varint
from ..diagnostics import Diagnostics, InputError
from ..model import COMM_KINDS, ExecutionTrace, Node, NodeKind, Rank, WireAttr, field_values
from ..options import Options
from ..ranks import compact_ranks
from .atomic import atomic_set
from .forked import run_in_children, workers_for

SCHEMA_VERSION = "0.0.4"

# Attributes whose oneof member ASTRA-sim's feeders read; re-emitted attributes with these names
# are moved to this member when their value fits.
TABLE_KINDS = {
    "comm_type": "int64_val", "comm_size": "int64_val", "comm_src": "int32_val", "comm_dst": "int32_val",
    "comm_tag": "int32_val", "comm_priority": "int32_val", "is_cpu_op": "bool_val", "num_ops": "int64_val",
    "tensor_size": "uint64_val", "pg_name": "string_val", "involved_dim": "bool_list",
}
MEM_KINDS = (NodeKind.MEM_LOAD, NodeKind.MEM_STORE)
SEND, RECV = NodeKind.SEND, NodeKind.RECV
# Length prefixes of node messages up to this size, made once: a measured log's sub-operation
# (its step kept as an attribute) passes 127 bytes, where a prefix takes two.
VARINTS = [varint(i) for i in range(1024)]
MAX_UINT64 = (1 << 64) - 1


def write(trace: ExecutionTrace, output_prefix: Path, options: Options, diagnostics: Diagnostics,
          check: Callable[[], None] | None = None) -> None:
    """Write every rank's file and, when nodes use groups, the comm_group.json.

    `check()` (the validator's gate, `converters.api.write`) runs before anything is kept: on a
    set big enough for forked workers, while they already encode and write the ranks into the
    temporary folder, which its exception discards (with any folder made for the set, as if
    nothing had started); otherwise before anything is written.
    """
    output_prefix = Path(output_prefix)
    name = output_prefix.name
    verbatim = bool(trace.metadata.get("chakra.verbatim"))
    ranks = trace.sorted_ranks()  # gaps in the rank numbers are the validator's to report (api.write)
    jobs = 1 if verbatim else worker_count(options, trace)
    if check is not None and jobs <= 1:
        check()
        check = None
    parent = output_prefix.parent
    made = [d for d in (parent, *parent.parents) if not d.exists()] if check is not None else []
    try:
        with atomic_set(output_prefix) as tmpdir:
            if verbatim:
                _write_comm_groups(trace, sorted(trace.groups), tmpdir / f"{name}.comm_group.json")
                for rank in ranks:
                    write_file(tmpdir / f"{name}.{rank.rank}.et", verbatim_rank_chunks(rank))
                return
            encoder = RankEncoder(trace, diagnostics)
            with progress.bar("writing ranks", total=len(ranks)) as bar:
                if jobs <= 1:
                    counts = write_ranks(encoder, ranks, tmpdir, name, bar)
                else:
                    encode_shared_lists(encoder, ranks)
                    counts = write_ranks_in_parallel(encoder, ranks, tmpdir, name, jobs, bar, check)
            _write_comm_groups(trace, used_groups(trace, diagnostics), tmpdir / f"{name}.comm_group.json")
            # each distinct node list counted once, whoever encoded it: the warnings do not depend on --jobs
            report_counts(diagnostics, *map(sum, zip(*counts.values())))
    except BaseException:
        for directory in made:  # deepest first: made by atomic_set
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


def rank_file_job(trace: ExecutionTrace, output_prefix: Path, tmpdir: Path) -> tuple:
    """What `write_rank_file` needs beside the rank, for a worker that holds only some ranks of
    `trace`: an encoder of the trace without its ranks (with the metadata every rank carries),
    where to write. The job is one object on a worker, so its ranks share the encoder's caches
    of names, attributes and IO info (made again for each rank, they cost a third more)."""
    name = Path(output_prefix).name
    encoder = RankEncoder(replace(trace, ranks={}), Diagnostics(), common_metadata_attrs(trace))
    return encoder, str(Path(tmpdir).resolve() / name), str(output_prefix)


def write_rank_file(rank: Rank, job: tuple) -> tuple[int, int, int, int]:
    """One rank's `.et` file, encoded as `write` does, where the rank is (`converters/rank_files.py`);
    the counts `report_counts` reports."""
    encoder, prefix, output_prefix = job
    before = encoder.counts()
    try:
        write_file(Path(f"{prefix}.{rank.rank}.et"), encoder.rank_chunks(rank))
    except OSError as e:  # a worker elsewhere may not see the output folder
        raise InputError(output_prefix, f"cannot write rank {rank.rank}'s file on a worker: {e.strerror or e} "
                                        "(the output folder must be writable by every worker under this path)") from None
    finally:
        encoder.forget(rank.nodes)  # (a rank let go of is built again for each step: its nodes must go)
    return tuple(map(operator.sub, encoder.counts(), before))


def rewrite_common_metadata(trace: ExecutionTrace, tmpdir: Path, name: str, job: tuple) -> None:
    """Give each rank file of `trace` in `tmpdir`, written by `write_rank_file` with `job`
    before what every rank carries was known (`rank_files`: a rank's file written where it is
    checked), the metadata `trace` now has: each file's GlobalMetadata, the common attributes
    replaced and its own kept, then the nodes as they are (copied by the kernel)."""
    encoder = job[0]
    common = [attr_to_proto(attr) for attr in common_metadata_attrs(trace)]
    for rank in sorted(trace.ranks):
        path = tmpdir / f"{name}.{rank}.et"
        with open(path, "rb") as old, open(path.with_name(path.name + ".new"), "wb") as new:
            head = old.read(16)
            length, start = length_prefix(head, 0)
            old.seek(start)
            metadata = pb.GlobalMetadata.FromString(old.read(length))
            own = metadata.attr[len(encoder.common_metadata):]
            new.write(framed(pb.GlobalMetadata(version=metadata.version, attr=[*common, *own]).SerializeToString()))
            new.flush()
            _copy_rest(old, new, start + length)
        os.replace(path.with_name(path.name + ".new"), path)


def _copy_rest(source, target, offset: int) -> None:
    """The bytes of the file `source` from `offset` on, appended to `target`: in the kernel
    where it can (copy_file_range), else through a buffer."""
    size = os.fstat(source.fileno()).st_size
    try:
        while offset < size:
            copied = os.copy_file_range(source.fileno(), target.fileno(), size - offset, offset)
            if copied == 0:
                break
            offset += copied
    except (AttributeError, OSError):  # no copy_file_range here, or not between these files
        pass
    if offset < size:
        source.seek(offset)
        target.seek(0, os.SEEK_END)
        shutil.copyfileobj(source, target, 1 << 20)


def finish_set(trace: ExecutionTrace, tmpdir: Path, name: str, counts: list[tuple], diagnostics: Diagnostics) -> None:
    """The rest of a set whose rank files workers wrote: comm_group.json (from every rank's
    communication nodes, all `trace` needs to hold) and the writer's warnings, counted."""
    _write_comm_groups(trace, used_groups(trace, diagnostics), tmpdir / f"{name}.comm_group.json")
    report_counts(diagnostics, *map(sum, zip(*counts)))


def _write_comm_groups(trace: ExecutionTrace, groups: list[int], path: Path) -> None:
    if groups:
        table = {str(gid): list(trace.groups[gid].members) for gid in groups}
        path.write_bytes(orjson.dumps(table) + b"\n")


def write_file(path: Path, chunks: Iterable[bytes]) -> None:
    with open(path, "wb", buffering=1 << 20) as f:
        f.writelines(chunks)


def write_ranks(encoder: "RankEncoder", ranks: list[Rank], tmpdir: Path, name: str, bar=None) -> dict[int, tuple]:
    """Write the ranks' files; returns the counts of each node list encoded, by the list's id."""
    for rank in ranks:
        write_file(tmpdir / f"{name}.{rank.rank}.et", encoder.rank_chunks(rank))
        if bar is not None:
            bar.advance()
    return {key: template.counts for key, template in encoder.templates.items()}


_shared_state: tuple | None = None  # what forked workers inherit (encoder, ranks, tmpdir, name, jobs)


def worker_count(options: Options, trace: ExecutionTrace) -> int:
    """--jobs, or all cores for big sets (`forked.PARALLEL_MIN_NODES`); 1 where fork is not available."""
    return workers_for(options, trace.node_count())


def encode_shared_lists(encoder: "RankEncoder", ranks: list[Rank]) -> None:
    """Encode here the node lists several ranks share (the workers inherit them; each would
    encode them again otherwise); a rank's own list is encoded by the worker that writes it."""
    users = Counter(id(rank.nodes) for rank in ranks)
    for rank in ranks:
        if users[id(rank.nodes)] > 1:
            encoder.template(rank.nodes)


def write_ranks_in_parallel(encoder: "RankEncoder", ranks: list[Rank], tmpdir: Path, name: str, jobs: int,
                            bar=None, meanwhile: Callable[[], None] | None = None) -> dict[int, tuple]:
    """Forked workers encode and write every jobs-th rank each; each file's bytes do not depend
    on who wrote it. Returns the counts of each node list encoded, by the list's id (the
    parent's: forked workers see the same ids); a list two workers encoded is counted once.

    The parent runs `meanwhile()` once they have started (its exception stops them), then
    counts the finished files for the progress line (workers never draw).
    """
    global _shared_state
    _shared_state = (encoder, ranks, tmpdir, name, jobs)

    def files_written() -> bool:
        bar.update(sum(1 for _ in tmpdir.glob("*.et")))
        return bar.live

    try:
        shares = run_in_children(_write_share, jobs, "a worker writing the Chakra set", meanwhile,
                                 files_written if bar is not None and bar.live else None)
    finally:
        _shared_state = None
    counts = {}
    for share in shares:
        counts.update(share)
    return counts


def _write_share(worker: int) -> dict[int, tuple]:
    encoder, ranks, tmpdir, name, jobs = _shared_state
    return write_ranks(encoder, ranks[worker::jobs], tmpdir, name)


def used_groups(trace: ExecutionTrace, diagnostics: Diagnostics) -> list[int]:
    """Ids of the groups some node of some rank uses (the comm_group.json lists only these)."""
    used: set[int] = set()
    per_list: dict[int, set[int]] = {}
    for rank in trace.ranks.values():
        key = id(rank.nodes)
        local = per_list.get(key)
        if local is None:
            local = per_list[key] = comm_groups(rank.nodes)
        if rank.group_map is None:
            used |= local
        else:
            used.update(rank.group_map.get(g, g) for g in local)
    unknown = sorted(g for g in used if g not in trace.groups)
    if unknown:
        diagnostics.warn(
            "chakra-unknown-group",
            "chakra: nodes use {count} group ids that have no members (first: {first}); "
            "they are missing from comm_group.json", str(unknown[0]), count=len(unknown),
        )
    return sorted(g for g in used if g in trace.groups)


def comm_groups(nodes: list[Node]) -> set[int]:
    """The groups of the communication nodes (the attributes read in C, the nodes in one pass)."""
    kinds, groups = field_values(nodes, "kind"), field_values(nodes, "group")
    return {group for kind, group in zip(kinds, groups) if group is not None and kind in COMM_KINDS}


def framed(message_bytes: bytes) -> bytes:
    return varint(len(message_bytes)) + message_bytes


# ---------------------------------------------------------------------------------------------
# normal writing: our ids, our metadata, ASTRA-sim's attribute kinds


class Template:
    """A node list as bytes: complete framed nodes (runs joined), and holes for comm nodes.

    A hole is (fields, slot): the node's encoding is its fields 1-9, then the attribute
    entries of `rests[slot]` = (entries before, (group, peer, role), entries after, counts)
    with this rank's pg_name (for `group`), comm_src and comm_dst (for SEND/RECV `role`) in
    between. `rests` holds each distinct rest and `holes` each distinct hole (by id: they are
    shared by many nodes), so that a rank makes each one's bytes once. `nodes` is kept so that
    its id() stays unique while the template is cached.
    """

    __slots__ = ("nodes", "items", "rests", "holes", "counts")

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.items: list = []
        self.rests: list[tuple] = []
        self.holes: dict[int, tuple] = {}  # the distinct holes of `rests`, by id
        self.counts = (0, 0, 0, 0)  # what encoding the list added to `RankEncoder.counts`


class RankEncoder:
    """Encodes ranks; caches templates per shared node list and encoded attributes by value."""

    def __init__(self, trace: ExecutionTrace, diagnostics: Diagnostics, common_metadata: list[WireAttr] | None = None):
        self.trace = trace
        self.diagnostics = diagnostics
        self.templates: dict[int, Template] = {}
        self.attr_cache: dict[tuple, bytes] = {}
        # given when `trace` holds only some ranks of the set (a worker's)
        self.common_metadata = common_metadata if common_metadata is not None else common_metadata_attrs(trace)
        self.dropped_deps = 0
        self.zero_size = 0
        self.no_peer = 0
        self.untyped = 0
        self.local_groups: dict[int, set[int]] = {}
        # encoded per-rank attributes: group id -> pg_name entry, rank -> comm_src / comm_dst entry
        self.pg_cache: dict[int, bytes] = {}
        self.src_cache: dict[int | None, bytes] = {}
        self.dst_cache: dict[int | None, bytes] = {}
        # encoded once per distinct value: (name, kind) -> fields 2-3; IOInfo; the attributes of a
        # node without Chakra attributes, by (kind, coll, size, group, peer, tag, microbatch)
        self.names: dict[tuple, bytes] = {}
        self.io_cache: dict[tuple, bytes] = {}
        self.attr_parts: dict[tuple, tuple] = {}
        self.holes: dict[tuple, tuple] = {}
        self.measured = trace.timing == "measured"

    # -- attributes ---------------------------------------------------------------------------

    def attr_entry(self, name: str, kind: str, value) -> bytes:
        """The encoded `attr` entry of a Node (field 10 key, length, AttributeProto)."""
        key = (name, kind, tuple(value) if isinstance(value, list) else value)
        if ATTR_KINDS[kind][0] == "float":
            key = (key, repr(value))
        entry = self.attr_cache.get(key)
        if entry is None:
            entry = pb.Node(attr=[attr_to_proto(WireAttr(name, kind, value))]).SerializeToString()
            self.attr_cache[key] = entry
        return entry

    def wire_attr_entry(self, attr: WireAttr) -> bytes:
        if attr.doc or not attr.kind:
            return pb.Node(attr=[attr_to_proto(attr)]).SerializeToString()
        kind = table_kind(attr)
        return self.attr_entry(attr.name, kind, attr.value)

    # -- templates ----------------------------------------------------------------------------

    def template(self, nodes: list[Node]) -> "Template":
        """The node list encoded once, with holes for the attributes that differ per rank."""
        cached = self.templates.get(id(nodes))
        if cached is not None and cached.nodes is nodes:
            return cached
        index = {}
        for i, node in enumerate(nodes):
            index.setdefault(node.id, i)
        template = Template(nodes)
        items, rests = template.items, template.rests
        slot_of: dict[int, int] = {}  # id of a rest -> its position in `rests`
        before = self.counts()
        run: list[bytes] = []
        encode = self.encode_node
        for i, node in enumerate(nodes):
            fields, rest = encode(i, node, index)
            if rest[1] is None:
                body = fields + rest[0] + rest[2]
                run.append(varint(len(body)) + body)
                continue
            if run:
                items.append(b"".join(run))
                run = []
            slot = slot_of.get(id(rest))
            if slot is None:
                slot = slot_of[id(rest)] = len(rests)
                rests.append(rest)
            items.append((fields, slot))
        if run:
            items.append(b"".join(run))
        template.counts = tuple(map(operator.sub, self.counts(), before))
        template.holes = {id(rest[1]): rest[1] for rest in rests}
        self.templates[id(nodes)] = template
        return template

    def encode_node(self, new_id: int, node: Node, index: dict[int, int]) -> tuple[bytes, tuple]:
        """(fields, rest) of one node: its fields 1-9, then `rest` = (attribute entries before the
        hole, hole or None, entries after it, what they added to the counts); the hole is
        (group, peer, role).

        The fields are written here (`node_fields`); the rest depends only on a few node values,
        so it is made once per distinct combination (a measured log repeats a handful of them).
        """
        fields = self.node_fields(new_id, node, index)
        parent = stream = kept = None
        if self.measured:  # the facts `node_attrs` keeps (inline: a log's sub-operations are nearly every node)
            parent, stream, args = node.parent, node.stream, node.args
            if parent is not None:
                parent = index.get(parent)
            if args and not args.keys().isdisjoint(KEPT_ARGS):
                kept = tuple(map(args.get, KEPT_ARGS))
        if node.attrs:  # attributes from a Chakra file: rare, and not worth a cache key
            return fields, (*self.node_attrs(node, _facts(parent, stream, kept)), (0, 0, 0, 0))
        key = (node.kind, node.coll, node.size, node.group, node.peer, node.tag, node.microbatch, parent, stream, kept)
        rest = self.attr_parts.get(key)
        if rest is None:
            before = self.counts()
            rest = self.attr_parts[key] = (*self.node_attrs(node, _facts(parent, stream, kept)),
                                           tuple(map(operator.sub, self.counts(), before)))
        else:  # the warnings count nodes, not combinations
            self.count(rest[3])
        return fields, rest

    def node_fields(self, new_id: int, node: Node, index: dict[int, int]) -> bytes:
        """Node fields 1-9 (id .. outputs) as protobuf writes them: in field order, each field's
        tag byte then its value, fields holding 0 (or nothing) left out. Called for every node,
        hence written out flat."""
        name_and_type = self.names.get((node.name, node.kind)) or self.name_and_type(node.name, node.kind)
        deps = node.deps
        only = index.get(deps[0]) if len(deps) == 1 and not node.ctrl_deps else None
        if only is not None:  # the common case: one dependency, in the list
            packed = varint(only)
        else:
            deps = self.new_deps(node, index)
            packed = b"".join(map(varint, deps))
        start = node.start_ns
        start = start // 1000 if start is not None and start > 0 and self.measured else 0
        duration = node.duration_ns
        micros = -(-duration // 1000) if duration > 0 else 0
        if micros < 1 and node.kind == NodeKind.COMPUTE:
            micros = 1  # the old feeder skips a compute node of 0 µs (duration_micros)
        if start > MAX_UINT64 or micros > MAX_UINT64:
            return self.node_message(new_id, node, self.new_deps(node, index), start, micros).SerializeToString()
        out = b"\x08" + varint(new_id) + name_and_type if new_id else name_and_type
        if packed:
            out += b"\x2a" + varint(len(packed)) + packed
        if start:
            out += b"\x30" + varint(start)
        if micros:
            out += b"\x38" + varint(micros)
        if node.inputs is not None:
            out += self.io_field(b"\x42", node.inputs)
        if node.outputs is not None:
            out += self.io_field(b"\x4a", node.outputs)
        return out

    def node_message(self, new_id: int, node: Node, deps: list[int], start: int, micros: int) -> pb.Node:
        """Fields 1-9 as a protobuf message: what `node_fields` writes by hand (tests compare them)."""
        message = pb.Node(id=new_id, name=node.name, type=int(node.kind), data_deps=deps, duration_micros=micros)
        if node.start_ns is not None and self.measured:
            message.start_time_micros = start
        if node.inputs is not None:
            message.inputs.CopyFrom(io_info(node.inputs))
        if node.outputs is not None:
            message.outputs.CopyFrom(io_info(node.outputs))
        return message

    def name_and_type(self, name: str, kind: NodeKind) -> bytes:
        """Fields 2 and 3, encoded by protobuf once per distinct pair (it checks the UTF-8)."""
        encoded = self.names.get((name, kind))
        if encoded is None:
            encoded = self.names[(name, kind)] = pb.Node(name=name, type=int(kind)).SerializeToString()
        return encoded

    def io_field(self, key: bytes, values: tuple[str, str, str]) -> bytes:
        """An IOInfo field (inputs: key 0x42, outputs: 0x4a), once per distinct value."""
        encoded = self.io_cache.get(values)
        if encoded is None:
            encoded = self.io_cache[values] = io_info(values).SerializeToString()
        return key + varint(len(encoded)) + encoded

    def node_attrs(self, node: Node, facts: tuple | None = None):
        """(attribute entries before the hole, hole or None, entries after it) of one node.

        `facts` (a measured set's, `encode_node`): what the run's checks, numbers and timelines
        read besides its times, kept as attributes (`MEASURED_FACTS`) so that the set reads back
        as the run did (`readers/chakra.decide_timing`): the new id of the node it ran inside
        (a log's step; None when that node is not in the list), its stream, its args of
        `KEPT_ARGS` (or None). (A step's id, not how far back it is: a step's sub-operations
        then share their entries, as they share their microbatch.)"""
        kind = node.kind
        if kind is NodeKind.COMPUTE and node.microbatch is None and facts is None and not node.attrs:
            return b"", None, b""  # the common case: nothing more to add
        entry = self.attr_entry
        head_attrs: list[bytes] = []
        tail: list[bytes] = []
        produced: set[str] = set()
        hole = None
        if kind in COMM_KINDS:
            if kind is NodeKind.COLLECTIVE:
                if node.coll is None:
                    self.untyped += 1
                head_attrs.append(entry("comm_type", "int64_val", int(node.coll or 0)))
            if node.size <= 0:
                self.zero_size += 1
            head_attrs.append(entry("comm_size", "int64_val", node.size))
            role = kind if kind is not NodeKind.COLLECTIVE else None
            if role is not None:
                tail.append(entry("comm_tag", "int32_val", node.tag or 0))
                produced.update(("comm_src", "comm_dst", "comm_tag"))
                if node.peer is None:
                    self.no_peer += 1
            tail.append(entry("is_cpu_op", "bool_val", False))
            produced.update(("comm_type", "comm_size", "is_cpu_op"))
            if node.group is not None:
                produced.add("pg_name")
            if node.group is not None or role is not None:
                hole = (node.group, node.peer, role)
                hole = self.holes.setdefault(hole, hole)  # one tuple per distinct hole: rank_chunks keys them by id
        elif kind in MEM_KINDS:
            head_attrs.append(entry("tensor_size", "uint64_val", node.size))
            produced.add("tensor_size")
        if node.microbatch is not None:
            tail.append(entry("microbatch", "int64_val", node.microbatch))
            produced.add("microbatch")
        if self.measured:  # (what a file read carried under these names is made anew, or left out)
            produced.update(MEASURED_FACTS)
        if facts is not None:
            parent, stream, kept = facts
            for name, value in (("parent", parent), ("stream", stream), *zip(KEPT_ARGS, kept or ())):
                if value is None or value == "":
                    continue
                kind = MEASURED_FACTS[name]
                usable = isinstance(value, str) if kind == "string_val" else type(value) is int and fits(value, kind)
                if usable:  # (an arg of another type is left out: the reader would not take it)
                    tail.append(entry(name, kind, value))
        for attr in node.attrs or ():
            if attr.name not in produced:
                tail.append(self.wire_attr_entry(attr))
        return b"".join(head_attrs), hole, b"".join(tail)

    def new_deps(self, node: Node, index: dict[int, int]) -> list[int]:
        """deps and ctrl_deps as new ids, each once; edges to nodes not in the list are dropped."""
        try:
            deps = list(map(index.__getitem__, node.deps))
            if node.ctrl_deps:
                deps += map(index.__getitem__, node.ctrl_deps)
        except KeyError:
            deps = [index[d] for d in (*node.deps, *node.ctrl_deps) if d in index]
            self.dropped_deps += len(node.deps) + len(node.ctrl_deps) - len(deps)
        if len(deps) > 1:
            deps = list(dict.fromkeys(deps))
        return deps

    # -- ranks --------------------------------------------------------------------------------

    def rank_chunks(self, rank: Rank) -> Iterator[bytes]:
        """The rank's file as byte chunks: metadata, then nodes with its own groups and peers."""
        yield framed(self.metadata(rank).SerializeToString())
        template = self.template(rank.nodes)
        # this rank's bytes for each distinct hole (a few), then for each distinct rest
        between = {key: self.hole_bytes(rank, hole) for key, hole in template.holes.items()}
        middles = [before + between[id(hole)] + after for before, hole, after, _ in template.rests]
        out: list[bytes] = []
        append, extend = out.append, out.extend
        for item in template.items:
            if item.__class__ is bytes:
                append(item)
                continue
            fields, slot = item
            middle = middles[slot]
            size = len(fields) + len(middle)
            extend((VARINTS[size] if size < 1024 else varint(size), fields, middle))
            if len(out) > 8192:
                yield b"".join(out)
                out.clear()
        yield b"".join(out)

    def hole_bytes(self, rank: Rank, hole: tuple) -> bytes:
        """A hole's attribute entries on this rank: its own pg_name, comm_src and comm_dst."""
        group, peer, role = hole
        if peer is not None and rank.peer_map:
            peer = rank.peer_map.get(peer, peer)
        pg = b""
        if group is not None:
            pg = self.encoded(self.pg_cache, "pg_name", rank.group_map.get(group, group) if rank.group_map else group)
        if role is None:
            return pg
        if role is SEND:
            src = self.encoded(self.src_cache, "comm_src", rank.rank)
            dst = self.encoded(self.dst_cache, "comm_dst", peer)
        else:
            src = self.encoded(self.src_cache, "comm_src", peer)
            dst = self.encoded(self.dst_cache, "comm_dst", rank.rank)
        return pg + src + dst

    def encoded(self, cache: dict, name: str, value: int | None) -> bytes:
        """A per-rank attribute (group id or rank), encoded once and then taken from `cache`."""
        entry = cache.get(value)
        if entry is None:
            if name == "pg_name":
                entry = self.attr_entry(name, "string_val", str(value))
            else:
                entry = self.attr_entry(name, "int32_val", -1 if value is None else value)
            cache[value] = entry
        return entry

    def metadata(self, rank: Rank) -> pb.GlobalMetadata:
        attrs = list(self.common_metadata)
        attrs.append(WireAttr("rank", "int64_val", rank.rank))
        for key, value in rank.coords.items():
            attrs.append(WireAttr(f"coords.{key}", "int64_val", int(value)))
        kinds = self.group_kinds(rank)
        if kinds:
            attrs.append(WireAttr("group_kinds", "string_list", kinds))
        return pb.GlobalMetadata(version=SCHEMA_VERSION, attr=[attr_to_proto(a) for a in attrs])

    def group_kinds(self, rank: Rank) -> list[str]:
        """"<id>=<kind>" for the groups this rank's nodes use, so a reader can name them."""
        local = self.local_groups.get(id(rank.nodes))
        if local is None:  # templates keep every node list alive, so its id is not reused
            # the groups of the template's holes: every comm node with a group has one
            holes = self.template(rank.nodes).holes.values()
            local = self.local_groups[id(rank.nodes)] = {group for group, _, _ in holes} - {None}
        gmap = rank.group_map or {}
        out = []
        for gid in sorted({gmap.get(g, g) for g in local}):
            group = self.trace.groups.get(gid)
            if group is not None and group.kind:
                out.append(f"{gid}={group.kind}")
        return out

    def forget(self, nodes: list[Node]) -> None:
        """Drop what is kept of a node list (its template holds it alive) once its ranks are written."""
        self.templates.pop(id(nodes), None)
        self.local_groups.pop(id(nodes), None)

    def counts(self) -> tuple[int, int, int, int]:
        return self.dropped_deps, self.zero_size, self.untyped, self.no_peer

    def count(self, more: tuple[int, int, int, int]) -> None:
        """Add to the counts (`more` in the order of `counts`)."""
        if any(more):
            self.dropped_deps += more[0]
            self.zero_size += more[1]
            self.untyped += more[2]
            self.no_peer += more[3]

    def report(self) -> None:
        report_counts(self.diagnostics, *self.counts())


def report_counts(diagnostics: Diagnostics, dropped_deps: int = 0, zero_size: int = 0, untyped: int = 0,
                  no_peer: int = 0) -> None:
    """Warnings about what the encoder had to change, once per kind with the count."""
    warn = diagnostics.warn
    if dropped_deps:
        warn("chakra-dropped-deps", "chakra: dropped {count} dependencies on nodes that are not in the same rank",
             count=dropped_deps)
    if zero_size:
        warn("chakra-zero-size", "chakra: wrote {count} comm nodes with comm_size <= 0 (ASTRA-sim needs > 0)",
             count=zero_size)
    if untyped:
        warn("chakra-untyped", "chakra: wrote {count} collectives without a type as ALL_REDUCE", count=untyped)
    if no_peer:
        warn("chakra-no-peer", "chakra: wrote {count} sends/receives without a peer rank (peer written as -1)",
             count=no_peer)


def _facts(parent: int | None, stream: str | None, kept: tuple | None) -> tuple | None:
    """`RankEncoder.node_attrs`' facts, None when there are none."""
    return (parent, stream, kept) if parent is not None or stream or kept is not None else None


def duration_micros(node: Node) -> int:
    """Whole µs, rounded up; a compute node lasts at least 1 µs (the old feeder skips 0)."""
    micros = -(-max(node.duration_ns, 0) // 1000)
    if node.kind == NodeKind.COMPUTE and micros < 1:
        return 1
    return micros


def io_info(values: tuple[str, str, str]) -> pb.IOInfo:
    return pb.IOInfo(values=values[0], shapes=values[1], types=values[2])


def table_kind(attr: WireAttr) -> str:
    """The oneof member ASTRA-sim reads for this name, when the value fits it; else the original."""
    wanted = TABLE_KINDS.get(attr.name)
    if wanted is None or wanted == attr.kind:
        return attr.kind
    have, wanted_type = ATTR_KINDS[attr.kind], ATTR_KINDS[wanted]
    if have == ("int", False) and wanted_type == ("int", False) and fits(attr.value, wanted):
        return wanted
    return attr.kind


def fits(value: int, kind: str) -> bool:
    low, high = int_range(kind)
    return low <= value <= high


def file_names(files: list[str], limit: int = 16) -> list[str]:
    """The input's file names; a long list (one file per rank) is cut so every rank stays small."""
    if len(files) <= limit:
        return list(files)
    return [*files[:limit], f"... and {len(files) - limit} more"]


def common_metadata_attrs(trace: ExecutionTrace) -> list[WireAttr]:
    """Provenance shared by every rank's GlobalMetadata (STYLE.md "Output metadata")."""
    from .. import __version__

    attrs = [
        WireAttr("et_convert.version", "string_val", __version__),
        WireAttr("source.format", "string_val", trace.source.format),
        WireAttr("source.files", "string_list", file_names(trace.source.files)),
        WireAttr("source.sha256", "string_val", trace.source.sha256),
        # The ranks the source held ("0-4,6,7"): a log may record only some ranks of a job, and
        # the validator must tell those apart from a rank file later lost from the set.
        WireAttr("source.ranks", "string_val", compact_ranks(trace.ranks)),
    ]
    for key, value in trace.units.items():
        attrs.append(WireAttr(f"units.{key}", "string_val", str(value)))
    for key, value in trace.parallel.as_dict().items():
        attrs.append(WireAttr(f"parallel.{key}", "int64_val", int(value)))
    attrs.append(WireAttr("timing", "string_val", trace.timing))
    if trace.timing == "measured":
        attrs.append(WireAttr("time_origin_ns", "int64_val", int(trace.time_origin_ns)))
        if trace.metadata.get("scaling_mode"):  # ranks ran one after another: no cross-rank timeline
            attrs.append(WireAttr("scaling_mode", "bool_val", True))
    attrs.append(WireAttr("assumptions", "string_list", list(trace.assumptions)))
    return attrs


# ---------------------------------------------------------------------------------------------
# verbatim writing: exactly what the original files held


def verbatim_rank_chunks(rank: Rank) -> Iterable[bytes]:
    version, attrs = rank.wire_metadata or ("", [])
    meta = pb.GlobalMetadata(version=version, attr=[attr_to_proto(a) for a in attrs])
    yield framed(meta.SerializeToString())
    out = []
    for node in rank.nodes:
        out.append(framed(verbatim_node(node).SerializeToString()))
    yield b"".join(out)


def verbatim_node(node: Node) -> pb.Node:
    message = pb.Node(
        id=node.id, name=node.name, type=int(node.kind), ctrl_deps=node.ctrl_deps, data_deps=node.deps,
        start_time_micros=(node.start_ns or 0) // 1000, duration_micros=node.duration_ns // 1000,
        attr=[attr_to_proto(a) for a in node.attrs or ()],
    )
    if node.inputs is not None:
        message.inputs.CopyFrom(io_info(node.inputs))
    if node.outputs is not None:
        message.outputs.CopyFrom(io_info(node.outputs))
    return message
