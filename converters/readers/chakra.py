"""Read a Chakra execution-trace set (`<prefix>.<rank>.et`, optionally gzipped) into the model.

Every node keeps what its file said (attributes with their oneof kind, IOInfo, original ids,
ctrl_deps) so that the et-json dump can reproduce the files byte for byte; the model fields
(kind, deps, duration, collective, size, group, peer, tag) are derived from it. Producers
differ: ids may come from a counter shared by all ranks, and integer attributes may use
another oneof kind than ASTRA-sim reads. Both are accepted here; the validator reports kinds.
`comm_group.json` beside the files (`<prefix>.comm_group.json` or `comm_group.json`) gives
the groups; et-convert's own GlobalMetadata adds their kinds, the rank coordinates and the
parallel configuration.

Speed and memory: ranks whose files differ only in their own rank, group ids and peers share
one node list (see NodeDecoder), so a 1024-rank set written from per-stage graphs is held as
a few graphs, not 1024; a file like one read before is compared as bytes and only its
per-rank fields are read. Files are read in the order given (the representative of a shared
list is the first of its ranks in that order), each with one read. Where every rank differs
(measured times), each message is read by hand up to its start time and its tail (duration,
IOInfo, attributes) is decoded by protobuf once per distinct tail (NodeDecoder.recipe_by_head);
a message protobuf would not write byte for byte goes through protobuf whole. A message with a
start time can never be shared, so a file whose first nodes have start times is not split at
its per-rank fields (no template can match it), and its Nodes are made at once, in C, from
their heads and their tails' templates (NodeDecoder.read_measured_nodes).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from .._proto import et_def_pb2 as pb
from .._proto.wire import (
    COLUMNS, KEPT_ARGS, MEASURED_ARG_COUNT, MEASURED_ARG_POSITIONS, MEASURED_FACTS, PER_RANK_FIELD, FramingError,
    attr_from_proto, attr_to_proto, frames, in_per_rank_form, leading_duration, measured_columns, measured_key,
    measured_node, measured_nodes, node_head, per_rank_field, per_rank_role, short_frame,
)
from ..diagnostics import Diagnostics, InputError
from ..gc_pause import paused_gc
from ..model import CollType, ExecutionTrace, Group, MeasuredColumns, Node, NodeColumns, NodeKind, Rank, WireAttr
from ..options import Options
from .text import GZIP_MAGIC, gunzipped, head_gunzipped, json_error, read_bytes

RANK_NAME = re.compile(r"^(?P<prefix>.*)\.(?P<rank>\d+)\.et(?:\.gz)?$")
NODE_KINDS = {kind.value: kind for kind in NodeKind}
COLL_TYPES = {coll.value: coll for coll in CollType}


# ---------------------------------------------------------------------------------------------
# sniffing


# A GlobalMetadata larger than the sniffed head is read from the file up to this size
# (chakra_converter copies its whole input text into every rank's metadata).
SNIFF_MAX_METADATA = 64 << 20


def sniff(head: bytes, path: Path) -> bool:
    """True when `head` starts like a Chakra file: a framed GlobalMetadata, then Nodes."""
    head = head_gunzipped(head)
    if head is None:
        return False
    messages = frames_in_head(head)
    if not messages:
        messages = frames_in_head(longer_head(head, path))
    if not messages:
        return False
    meta = pb.GlobalMetadata()
    if not parses_cleanly(meta, messages[0]):
        return False
    for body in messages[1:3]:
        node = pb.Node()
        if not parses_cleanly(node, body) or node.type not in NODE_KINDS:
            return False
    return True


def longer_head(head: bytes, path: Path) -> bytes:
    """The file's start up to the end of its first message plus a little, when that is plausible."""
    length, shift = 0, 0
    for used, byte in enumerate(head[:10], 1):
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    else:
        return b""
    if length <= len(head) - used or length > SNIFF_MAX_METADATA:
        return b""
    wanted = used + length + (1 << 16)
    try:
        with open(path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                f.seek(0)
                return gzip.GzipFile(fileobj=f).read(wanted)
            f.seek(0)
            return f.read(wanted)
    except (OSError, EOFError, zlib.error):
        return b""


def frames_in_head(head: bytes) -> list[bytes]:
    """The complete framed messages at the start of `head` (a prefix of the file)."""
    found = []
    try:
        for _, start, end in frames(head):
            found.append(head[start:end])
            if len(found) == 3:
                break
    except FramingError:
        pass  # the head may end inside a message
    return found


def parses_cleanly(message, body: bytes) -> bool:
    """`body` decodes as `message` with no fields the schema does not know (text rarely does)."""
    try:
        message.ParseFromString(body)
    except DecodeError:
        return False
    return len(UnknownFieldSet(message)) == 0


# ---------------------------------------------------------------------------------------------
# loading


def load(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    """Read every rank file and the comm_group.json beside them."""
    trace = ExecutionTrace()
    trace.source.format = "chakra"
    trace.units = {"duration": "us (Chakra duration_micros)", "comm_size": "bytes"}
    trace.metadata["chakra.wire"] = True
    decoder = NodeDecoder()
    read_ranks(trace, paths, decoder)
    if decoder.facts_given and _declared_measured(trace) is None:
        # the templates gave their nodes what only a set declared measured by every rank
        # holds (a set mixing files of two runs, say): read it again without
        decoder = NodeDecoder(give_facts=False)
        read_ranks(trace, paths, decoder)
    if decoder.shared_ranks:
        diagnostics.note(f"chakra: {decoder.shared_ranks} ranks share the node list of a rank with the same graph")
    if decoder.noncanonical:
        trace.metadata["chakra.noncanonical"] = decoder.noncanonical
    read_groups(trace, paths)
    apply_our_metadata(trace)
    decide_timing(trace, decoder.pending)
    apply_parallel_options(trace, options)
    return trace


def read_ranks(trace: ExecutionTrace, paths: list[Path], decoder: "NodeDecoder") -> None:
    """Every rank file into trace.ranks (in rank order) and the input's hash into trace.source."""
    # Files are read once each, in the order given, so the input's hash comes for free. The
    # cyclic garbage collector is paused meanwhile: it would rescan the growing caches and
    # nodes again and again, and nothing read here forms cycles.
    digest = hashlib.sha256()
    ranks = {}
    with paused_gc():
        for rank_id, path in ranks_of(paths):
            raw = read_bytes(path)
            digest.update(raw)
            ranks[rank_id] = read_rank(path, rank_id, gunzipped(raw, path), decoder)
    trace.ranks = dict(sorted(ranks.items()))
    trace.source.sha256 = digest.hexdigest()


def load_measured_columns(paths: list[Path], options: Options) -> tuple[ExecutionTrace, MeasuredColumns] | None:
    """A set every rank of which declares measured times (et-convert wrote it from a run), as a
    model whose ranks have no nodes and their nodes as columns (what `stats` reads of them);
    None for any other set, or one with a message wire.measured_columns does not take, a tail
    that gives no template, an error or a scaling-mode log's times: `load` then reads it as
    Nodes, and says what is wrong. Every node it gives is the Node `load` would give, in the
    columns' terms (tests/test_stats_columns.py holds `stats` of the two to each other). The
    input's hash is not taken: `stats` does not show it."""
    trace = ExecutionTrace()
    trace.source.format = "chakra"
    decoder = NodeDecoder()
    found = MeasuredColumns()
    keys: dict[tuple[int, bytes], int] = {}  # (node type, tail) -> its row of found.facts
    try:
        for rank_id, path in ranks_of(paths):
            data = gunzipped(read_bytes(path), path)
            rank = trace.ranks[rank_id] = Rank(rank_id, source=str(path))
            offset, start, end = next(frames(data))
            rank.wire_metadata = decoder.metadata(data[start:end], path, offset)
            if _declared_by(rank) is None or not decoder.starts_measured(data, end):
                return None  # (a file not measured from its first messages is read as Nodes, maybe shared)
            columns = [bytearray() for _ in COLUMNS]
            pos = end
            while (stop := measured_columns(data, pos, keys, *columns))[1] is not None:
                facts = template_facts(decoder, *stop[1])
                if facts is None:
                    return None
                keys[stop[1]] = len(found.facts)
                found.facts.append(facts)
                pos = stop[0]
            if stop[0] != len(data):
                return None
            found.ranks[rank_id] = NodeColumns(*(memoryview(column).cast("q") for column in columns))
        declared = _declared_measured(trace)
        if declared is None or declared[1] or not any(len(c.start_ns) for c in found.ranks.values()):
            return None
        trace.ranks = dict(sorted(trace.ranks.items()))
        read_groups(trace, paths)
        apply_our_metadata(trace)
        apply_parallel_options(trace, options)
    except (InputError, FramingError, StopIteration):
        return None
    trace.timing, trace.time_origin_ns = "measured", declared[0]
    found.ranks = dict(sorted(found.ranks.items()))
    return trace, found


def template_facts(decoder: "NodeDecoder", node_type: int, tail: bytes) -> tuple | None:
    """MeasuredColumns.facts' row of the messages with this type and tail (wire.measured_scan's):
    what their Nodes get from the tail's measured template; None when there is none, or when it
    gives a parent (an attribute in a form the scan did not cut out)."""
    template = decoder.measured_template(node_type, tail)
    if template is None or template[_PARENT_AT] is not None:
        return None
    args = template[MEASURED_ARG_POSITIONS["args"]] or {}
    return template[2], template[_SIZE_AT], template[_GROUP_AT], args.get("wait_ns", 0)


def apply_parallel_options(trace: ExecutionTrace, options: Options) -> None:
    """--tp/--dp/--pp/--ep override what the files said; a plain set's world is its highest rank + 1.

    A set without our metadata (ASTRA-sim's own converter writes none) does not say how many
    ranks the job had, but a simulator runs one rank per file, ranks 0..N-1, so the highest
    rank + 1 is the world (a gap in the file numbers is then a missing rank the validator names).
    Data parallelism fills what --tp/--pp leave of it, so that world = tp · cp · dp · pp holds,
    and the sentence saying so goes into the assumptions.
    """
    given = {k: getattr(options, k) for k in ("tp", "dp", "pp", "ep") if getattr(options, k)}
    for key, value in given.items():
        setattr(trace.parallel, key, value)
    parallel = trace.parallel
    if parallel.world or not trace.ranks:
        return
    parallel.world = max(trace.ranks) + 1
    rest, left = divmod(parallel.world, parallel.tp * parallel.cp * parallel.pp)
    if "dp" not in given and not left:
        parallel.dp = rest
        trace.assume(f"world = {parallel.world} ranks, one per .et file up to the highest rank (the set does not "
                     f"say its layout); dp = {rest}, what tp {parallel.tp} · cp {parallel.cp} · pp {parallel.pp} leave")


def ranks_of(paths: list[Path]) -> list[tuple[int, Path]]:
    """(rank, file) pairs in the order given; the rank comes from the `<prefix>.<rank>.et` name."""
    if len(paths) == 1 and not RANK_NAME.match(paths[0].name):
        return [(0, paths[0])]  # a single file without a rank number: rank 0
    found: dict[int, Path] = {}
    for path in paths:
        match = RANK_NAME.match(path.name)
        if not match:
            raise InputError(str(path), "cannot tell the rank: expected a name like <prefix>.<rank>.et")
        rank = int(match["rank"])
        if rank in found:
            raise InputError(str(path), f"rank {rank} is given twice (also {found[rank]})")
        found[rank] = path
    return list(found.items())


def read_rank(path: Path, rank_id: int, data: bytes, decoder: "NodeDecoder") -> Rank:
    """One file: GlobalMetadata then Nodes (see NodeDecoder for how repeated content is skipped)."""
    if not data:
        raise InputError(str(path), "file is empty (expected a GlobalMetadata message)")
    rank = Rank(rank_id, source=str(path))
    try:
        messages = frames(data)
        for offset, start, end in messages:
            rank.wire_metadata = decoder.metadata(data[start:end], path, offset)
            break
        if _declared_by(rank) is None:
            decoder.give_facts = False  # the set is not declared measured: its nodes keep their attributes only
        nodes_at = end
        fields = None
        if decoder.starts_measured(data, nodes_at):
            rank.nodes = decoder.read_measured_nodes(data, nodes_at, path)
            if rank.nodes is not None:
                return rank  # measured times: no other rank can share this list, nor can it be a template
        else:
            fields = PER_RANK_FIELD.split(data[nodes_at:])
            if decoder.share_by_template(rank, fields):
                decoder.pending.append(rank.nodes)
                return rank
        recipes, starts = decoder.read_recipes(data, messages, nodes_at, path)
    except FramingError as e:
        raise InputError(f"{path}: byte {e.offset}", e.message) from None
    if not decoder.share(rank, recipes):
        build = decoder.build
        rank.nodes = [build(r) for r in recipes]
    decoder.pending.append(rank.nodes)
    if fields is None:
        fields = PER_RANK_FIELD.split(data[nodes_at:])
    decoder.learn_template(rank, recipes, starts, fields)
    return rank


def read_metadata(body: bytes, path: Path, offset: int) -> pb.GlobalMetadata:
    meta = decode(pb.GlobalMetadata, body, path, offset, "GlobalMetadata")
    if len(UnknownFieldSet(meta)):
        raise InputError(
            f"{path}: byte {offset}",
            "not a Chakra file: the first message is no GlobalMetadata (fields the schema does not know)",
        )
    return meta


def decode(message_type, body, path: Path, offset: int, what: str):
    try:
        return message_type.FromString(body)
    except DecodeError:
        message = f"cannot decode {what} message: the protobuf wire format is corrupt"
        if offset == 0 and looks_like_text(body):
            message += "; the file looks like text, not a Chakra trace"
        raise InputError(f"{path}: byte {offset}", message) from None


def looks_like_text(data) -> bool:
    sample = bytes(data[:256])
    return bool(sample) and all(32 <= b < 127 or b in b"\t\r\n" for b in sample)


@dataclass(slots=True)
class Template:
    """A file's Node messages with their per-rank fields cut out, and what those fields were.

    `keys` holds one entry per cut-out field: (role, value on the shared nodes, length), where
    the role is per_rank_role's or "fixed" (a field in per-rank form whose value must not
    change, e.g. a collective's comm_src), and the value is the raw group or peer the shared
    nodes carry (the field's bytes for "fixed", None for "own").
    """

    nodes: list[Node]
    keys: tuple[tuple[str, Any, int], ...]


class NodeDecoder:
    """Turns Node messages into model Nodes, decoding as little as the repetition allows.

    Ranks of one role write the same node messages except for their per-rank fields
    (`wire.PER_RANK_FIELD`: pg_name, comm_src, comm_dst). So a file's node bytes are split
    at those fields: when the pieces between them equal those of a file read before (a
    *template*), the rank shares the template's node list and only its per-rank fields are
    read, into `group_map` / `peer_map`; no message is decoded. A file without a template is
    decoded message by message: each distinct message is converted once into a recipe (a
    repeated one costs a dict lookup), and ranks whose messages differ only in per-rank values
    still share the first such rank's list (`share`). Such a file then becomes a template when
    every per-rank field the split found is one protobuf decoded, in the same place.
    A file whose first messages carry measured start times shares with no other rank (their
    times differ), so its messages become Nodes at once (`read_measured_nodes`).
    Nodes built from one message, or by hand from messages with one tail, share their `attrs`
    list (read-only, like everything a file carried).
    """

    MAX_TRIES = 4  # representatives with the same graph tried before a rank gets its own list
    # a file is taken as measured when one of its first this many messages has a start time
    # (protobuf leaves a start of 0 out: a rank's first operations may show none)
    MEASURED_LOOKAHEAD = 8

    def __init__(self, give_facts: bool = True):
        # message bytes -> (Node positional arguments, deps, ctrl_deps, shape id or None,
        # per-rank values, per-rank fields (start, end, role) or None)
        self.recipes: dict[bytes, tuple] = {}
        # wire.measured_key (node type, message tail after its duration) -> the Node arguments a measured
        # message with it gets, or None (measured_template; read_measured_nodes)
        self.measured_templates: dict[tuple[int, bytes], tuple | None] = {}
        self.names: dict[str, str] = {}  # one str per distinct node name of read_measured_nodes
        self.attrs: dict[tuple[int, bytes], tuple] = {}  # (node type, attribute bytes) -> attr_info
        self.tails: dict[tuple[int, bytes], tuple | None] = {}  # (node type, message tail) -> tail_of
        # (node type, a tail after its duration_micros) -> tail_of of the first tail with it: measured
        # nodes repeat their attributes with other durations (benchmark 7's jittered set: 18,829
        # tails, 8,333 without their durations)
        self.rests: dict[tuple[int, bytes], tuple | None] = {}
        self.dependencies: dict[bytes, tuple[int, ...]] = {}  # a packed dependency list's bytes -> its ids
        self.meta_attrs: dict[bytes, tuple[WireAttr, bool]] = {}
        self.shapes: dict[tuple, int] = {}  # a message without its per-rank values -> shape id
        self.representatives: dict[tuple, list[tuple[Rank, list]]] = {}  # shape ids of a file -> ranks
        self.templates: dict[tuple[bytes, ...], Template] = {}  # pieces between per-rank fields -> template
        self.noncanonical = 0  # distinct messages (and metadata) protobuf would encode differently
        self.shared_ranks = 0
        # Whether measured templates give their nodes what decide_timing gives the nodes of a set
        # declared measured (_measured_facts: parent, stream, kept args), so that it need not
        # visit them; off from the first rank whose metadata does not declare so. `facts_given`
        # counts the templates that gave some (load reads the set again without them when a
        # later rank does not declare it).
        self.give_facts = give_facts
        self.facts_given = 0
        self.pending: list[list[Node]] = []  # the nodes not made from a measured template, for decide_timing

    # -- metadata --------------------------------------------------------------------------

    def metadata(self, body: bytes, path: Path, offset: int) -> tuple[str, list[WireAttr]]:
        meta = read_metadata(body, path, offset)
        attrs = []
        canonical = meta.SerializeToString() == body
        for attr in meta.attr:
            key = attr.SerializeToString()
            known = self.meta_attrs.get(key)
            if known is None:
                item = attr_from_proto(attr)
                known = self.meta_attrs[key] = (item, reencodes(attr, item))
            attrs.append(known[0])
            canonical = canonical and known[1]
        if not canonical:
            self.noncanonical += 1
        return meta.version, attrs

    # -- ranks like a template -------------------------------------------------------------

    def share_by_template(self, rank: Rank, fields: list[bytes]) -> bool:
        """Share the node list of the template whose pieces equal this file's; False when none fits.

        `fields` is the node section split at its per-rank fields: pieces at even indices.
        """
        template = self.templates.get(tuple(fields[0::2]))
        if template is None:
            return False
        maps = self.maps_from_fields(template.keys, fields[1::2], rank.rank)
        if maps is None:
            return False
        rank.nodes = template.nodes
        rank.group_map, rank.peer_map = maps
        self.shared_ranks += 1
        return True

    @staticmethod
    def maps_from_fields(keys: tuple, fields: list[bytes], rank_id: int):
        """(group_map, peer_map) giving this rank's fields from the shared nodes, or None.

        A field of another length than the template's would move the message bounds the
        pieces fix, so it does not fit; neither does a value two fields disagree on.
        """
        group_map: dict[int, int] = {}
        peer_map: dict[int, int] = {}
        for (role, raw, length), field in set(zip(keys, fields)):  # few distinct pairs per file
            if len(field) != length:
                return None
            if role == "fixed":
                if field != raw:
                    return None
                continue
            found = per_rank_field(field)
            if found is None:
                return None
            value = found[1]
            if role == "own":
                fits = value == rank_id
            elif role == "group":
                fits = group_map.setdefault(raw, value) == value
            else:
                fits = peer_map.setdefault(raw, value) == value
            if not fits:
                return None
        return changed(group_map), changed(peer_map)

    def learn_template(self, rank: Rank, recipes: list[tuple], starts: list[int], fields: list[bytes]) -> None:
        """Make a decoded file a template when its split is exactly its per-rank attributes."""
        if any(recipe[3] is None or recipe[5] is None for recipe in recipes):
            return  # measured times, per-rank values in another form, not canonical, ...
        pieces = tuple(fields[0::2])
        if pieces in self.templates:
            return
        found, at = [], 0
        for piece, field in zip(pieces, fields[1::2]):
            at += len(piece)
            found.append((at, at + len(field)))
            at += len(field)
        decoded, keys = [], []
        nodes = rank.nodes
        for index, (recipe, start) in enumerate(zip(recipes, starts)):
            for begin, end, role in recipe[5]:
                decoded.append((start + begin, start + end))
                node = nodes[index]
                raw = node.group if role == "group" else node.peer if role == "peer" else None
                keys.append((role, raw, end - begin))
        if decoded != found:
            return  # a match that is no attribute (it spans two messages)
        fields_found = fields[1::2]
        for i, ((role, raw, length), field) in enumerate(zip(keys, fields_found)):
            if role == "fixed":
                keys[i] = (role, field, length)
            elif role == "own" and per_rank_field(field)[1] != rank.rank:
                return  # other ranks' dumps would show their own rank where this file has another
        self.templates[pieces] = Template(nodes, tuple(keys))

    # -- message by message ----------------------------------------------------------------

    def read_recipes(self, data: bytes, messages, nodes_at: int, path: Path) -> tuple[list, list]:
        """(recipes, their starts relative to `nodes_at`) of a file's Node messages (`messages`:
        the frames after the metadata)."""
        recipe = self.recipe
        recipes, starts = [], []
        for offset, start, end in messages:
            recipes.append(recipe(data[start:end], path, offset))
            starts.append(start - nodes_at)
        return recipes, starts

    def read_measured_nodes(self, data: bytes, nodes_at: int, path: Path) -> list[Node] | None:
        """The nodes of a file whose first messages have measured start times (starts_measured),
        or None when no message took the measured route (read_recipes then reads the file).

        Such a file shares no node list: its times are its own. So its messages become Nodes at
        once: in C (wire.measured_nodes) while each has a measured start and a tail whose
        template is known. Where that loop stops at a new tail, the tail gets its template here
        and the loop starts again at that message; where it stops otherwise (a message too long
        for it too), the message is read here (`measured_node`, or the general route, `recipe`)
        and the loop goes on after it.
        """
        nodes: list[Node] = []
        built: list[Node] = []  # by the general route
        pos, size = nodes_at, len(data)
        known, templates, names = self.dependencies, self.measured_templates, self.names
        while (pos := measured_nodes(data, pos, known, templates, Node, names, nodes)) < size:
            offset, start, end = next(frames(data, pos))
            body = data[start:end]
            if self.learn_measured_template(body):
                continue  # the loop makes this message's node with its new template (or stops again)
            node = measured_node(body, known, templates, Node)
            if node is None:
                node = self.build(self.recipe(body, path, offset))
                built.append(node)
            nodes.append(node)
            pos = end
        if len(built) == len(nodes):
            return None
        self.pending.append(built)
        return nodes

    def learn_measured_template(self, body: bytes) -> bool:
        """Make the template of a measured message's tail if it has none yet; True when it made
        one that is not None."""
        head = node_head(body, self.dependencies)
        if head is None or not head[5]:
            return False
        tail = body[head[6]:]
        key, _ = measured_key(head[2], tail)
        if key in self.measured_templates:
            return False
        template = self.measured_templates[key] = self.measured_template(head[2], tail)
        return template is not None

    def measured_template(self, node_type: int, body_tail: bytes) -> tuple | None:
        """A Node's positional arguments for measured messages whose tails are this one but for
        their durations, as tail_of reads it; those each message gives are None
        (wire.MEASURED_ARG_POSITIONS), but for `args` when the tail gives facts (give_facts:
        then parent, stream and args are decide_timing's). None when recipe_by_head would not
        read such messages."""
        # (not through kind_and_tail's caches: a measured message's new tail is seldom seen again)
        kind = NODE_KINDS.get(node_type)
        found = None if kind is None else self.decoded_tail(node_type, kind, body_tail)
        if found is None:
            return None
        _, _, _, between, after = found
        arguments = [None, None, kind, *between, None, *after]
        for position in MEASURED_ARG_POSITIONS.values():
            arguments[position] = None
        attrs = arguments[_ATTRS_AT]
        if self.give_facts and attrs:
            parent, stream, kept = _measured_facts(attrs)
            if parent is not None or stream is not None or kept:
                self.facts_given += 1
                arguments[_PARENT_AT] = arguments[_PARENT_AT] if parent is None else parent
                arguments[_STREAM_AT] = arguments[_STREAM_AT] if stream is None else stream
                arguments[MEASURED_ARG_POSITIONS["args"]] = dict(kept)
        return tuple(arguments)

    def starts_measured(self, data: bytes, nodes_at: int) -> bool:
        """Whether one of the first node messages (MEASURED_LOOKAHEAD) has a measured start time
        in a head read by hand: such a file matches no template (a template's heads carry no
        start time, and the pieces that must equal the template's hold every head), nor shares
        a list with another rank."""
        pos, size = nodes_at, len(data)
        for _ in range(self.MEASURED_LOOKAHEAD):
            frame = short_frame(data, pos) if pos < size else None
            if frame is None:
                return False  # the end, a long message or a cut one: let the general route look
            start, pos = frame
            head = node_head(data[start:pos], self.dependencies)
            if head is not None and head[5]:
                return True
        return False

    def recipe(self, body: bytes, path: Path, offset: int) -> tuple:
        known = self.recipes.get(body)
        if known is None:
            known = self.recipes[body] = self.recipe_by_head(body) or self.recipe_by_protobuf(body, path, offset)
        return known

    def recipe_by_protobuf(self, body: bytes, path: Path, offset: int) -> tuple:
        wire = decode(pb.Node, body, path, offset, "Node")
        canonical = not (len(UnknownFieldSet(wire)) or wire.SerializeToString() != body or io_has_unknown_fields(wire))
        if not canonical:
            self.noncanonical += 1  # unknown fields, unpacked lists, ...: a dump cannot repeat these bytes
        return self.convert(wire, body, canonical, path, offset)

    def recipe_by_head(self, body: bytes) -> tuple | None:
        """The recipe of a message protobuf would write exactly so, from its head (read by hand)
        and its tail (decoded once per distinct tail); None when either is unusual or the node
        has an error to report (recipe_by_protobuf then decodes it and says what is wrong)."""
        found = self.head_and_tail(body)
        if found is None:
            return None
        (node_id, name, node_type, ctrl_deps, data_deps, start, _), kind, tail = found
        duration, fields, infos, between, after = tail
        values = (node_id, name, kind, *between, start * 1000 if start else None, *after)
        identity = (node_id, name, node_type, duration)
        shape, per_rank = self.shape_of(start, identity, fields, data_deps, ctrl_deps, infos)
        spans = per_rank_fields(body, infos) if shape is not None else None
        return values, data_deps, ctrl_deps, shape, per_rank, spans

    def head_and_tail(self, body: bytes) -> tuple | None:
        """(node_head's head, kind, tail_of's tail) of a message; None when either is unusual."""
        head = node_head(body, self.dependencies)
        if head is None:
            return None
        found = self.kind_and_tail(head[2], body[head[6]:])
        return None if found is None else (head, *found)

    def kind_and_tail(self, node_type: int, body_tail: bytes) -> tuple | None:
        """(kind, tail_of's tail) of a message's tail, decoded once per distinct (type, tail);
        None when either is unusual."""
        kind = NODE_KINDS.get(node_type)
        if kind is None:
            return None
        key = (node_type, body_tail)
        tail = self.tails.get(key, False)
        if tail is False:
            tail = self.tails[key] = self.tail_of(node_type, kind, body_tail)
        return None if tail is None else (kind, tail)

    def tail_of(self, node_type: int, kind: NodeKind, tail: bytes) -> tuple | None:
        """What a head's tail gives its nodes: (duration_micros, the Node fields it sets, attribute
        infos, the Node's positional values between kind and start_ns, and after start_ns). The
        tail holds fields 7 on (duration_micros, inputs, outputs, attributes), each written as
        protobuf writes it; None otherwise, or when an attribute's value cannot be used (the node
        must be named). Nodes with one tail share its `attrs` list (read-only), and so do tails
        that differ only in their duration: the rest is decoded once."""
        duration, rest_at = leading_duration(tail)
        if not rest_at:
            return self.decoded_tail(node_type, kind, tail)
        key = (node_type, tail[rest_at:])
        like = self.rests.get(key, False)
        if like is False:
            like = self.rests[key] = self.decoded_tail(node_type, kind, tail)
            return like
        return like and with_duration(like, duration)

    def decoded_tail(self, node_type: int, kind: NodeKind, tail: bytes) -> tuple | None:
        """tail_of, its parts found by known_attributes or else by protobuf (protobuf_tail)."""
        parts = self.known_attributes(node_type, tail) or self.protobuf_tail(node_type, kind, tail)
        if parts is None:
            return None
        micros, inputs, outputs, infos = parts
        effects = {}
        for info in infos:
            if not info[2] or info[1] is not None and info[1][0] == "error":
                return None
            if info[1] is not None:
                effects[info[1][0]] = info[1][1]
        fields = {"duration_ns": micros * 1000, "inputs": inputs, "outputs": outputs, **effects,
                  "attrs": [info[0] for info in infos]}
        values = node_values(fields)
        return micros, fields, infos, values[3:_START_AT], values[_START_AT + 1:]

    def protobuf_tail(self, node_type: int, kind: NodeKind, tail: bytes) -> tuple | None:
        """(duration_micros, inputs, outputs, attribute infos) of a tail protobuf decodes and
        would write exactly so, holding no field before duration_micros; None otherwise."""
        try:
            wire = pb.Node.FromString(tail)
        except DecodeError:
            return None
        if (wire.id or wire.name or wire.type or wire.ctrl_deps or wire.data_deps or wire.start_time_micros
                or len(UnknownFieldSet(wire)) or wire.SerializeToString() != tail or io_has_unknown_fields(wire)):
            return None
        infos = [self.attrs.get((node_type, attr.SerializeToString())) or self.attr_info(node_type, kind, attr)
                 for attr in wire.attr]
        return wire.duration_micros, io_of(wire, "inputs"), io_of(wire, "outputs"), infos

    def known_attributes(self, node_type: int, tail: bytes) -> tuple | None:
        """protobuf_tail's parts of a tail that holds a duration_micros as protobuf writes it (or
        none) and then attributes only, each below 128 bytes and decoded before (`attrs` holds
        only what protobuf would write so: the tail is then as protobuf writes it); None for
        any other tail. A measured run's tails repeat their attributes in new combinations
        (a step's sub-operations name it as their parent): most need no protobuf."""
        micros, pos = leading_duration(tail)
        if not pos and tail[:1] == b"\x38":
            return None  # a duration protobuf would not write
        known, size, infos = self.attrs, len(tail), []
        while pos < size:
            if tail[pos] != _ATTR_TAG or pos + 1 == size or tail[pos + 1] >= 0x80:
                return None
            end = pos + 2 + tail[pos + 1]
            info = known.get((node_type, tail[pos + 2:end])) if end <= size else None
            if info is None:
                return None
            infos.append(info)
            pos = end
        return micros, None, None, infos

    @staticmethod
    def build(recipe: tuple) -> Node:
        node = Node(*recipe[0])
        node.deps, node.ctrl_deps = list(recipe[1]), list(recipe[2])
        for name, make in _MADE_PER_NODE:
            setattr(node, name, make())
        return node

    def convert(self, wire: pb.Node, body: bytes, canonical: bool, path: Path, offset: int) -> tuple:
        where = f"{path}: byte {offset}"
        node_type = wire.type
        kind = node_kind(node_type, wire.id, wire.name, where)
        fields = {
            "id": wire.id, "name": wire.name, "kind": kind, "duration_ns": wire.duration_micros * 1000,
            "start_ns": wire.start_time_micros * 1000 if wire.start_time_micros else None,
            "inputs": io_of(wire, "inputs"), "outputs": io_of(wire, "outputs"),
        }
        infos = []
        for attr in wire.attr:
            info = self.attrs.get((node_type, attr.SerializeToString()))
            if info is None:
                info = self.attr_info(node_type, kind, attr)
            infos.append(info)
            canonical = canonical and info[2]
            if info[1] is not None:
                apply_effect(fields, info[1], wire.id, wire.name, where)
        fields["attrs"] = [info[0] for info in infos]
        deps, ctrl_deps = tuple(wire.data_deps), tuple(wire.ctrl_deps)
        shape, per_rank = self.shape_of(wire.start_time_micros, (wire.id, wire.name, node_type, wire.duration_micros),
                                        fields, deps, ctrl_deps, infos)
        # Where the per-rank fields lie matters only to a file that may become a template.
        spans = per_rank_fields(body, infos) if canonical and shape is not None else None
        return node_values(fields), deps, ctrl_deps, shape, per_rank, spans

    def attr_info(self, node_type: int, kind: NodeKind, attr: pb.AttributeProto) -> tuple:
        """(attr, model effect, encodes back to its bytes, per-rank role, in per-rank form), cached."""
        item = attr_from_proto(attr)
        same = reencodes(attr, item)
        if not same:
            self.noncanonical += 1
        info = (item, attr_effect(kind, item), same, per_rank_role(node_type, item), in_per_rank_form(item))
        self.attrs[(node_type, attr.SerializeToString())] = info
        return info

    def shape_of(self, start: int, identity: tuple, fields: dict, deps: tuple, ctrl_deps: tuple, infos: list[tuple]):
        """(shape id, per-rank values): equal shapes differ at most in the per-rank values.

        `start` is the node's start_time_micros, `identity` its (id, name, type, duration_micros).

        Shape None keeps the node's rank on a list of its own: measured times, or a group or
        peer that comes from an attribute not in ASTRA-sim's form (a map could not rebuild it).
        """
        if start:
            return None, ()
        roles = [info[3] for info in infos]
        names = [info[0].name for info in infos if info[3]]
        if (
            len(set(names)) != len(names)
            or fields.get("group") is not None and "group" not in roles
            or fields.get("peer") is not None and "peer" not in roles
        ):
            return None, ()
        key = (
            *identity, deps, ctrl_deps, fields["inputs"], fields["outputs"],
            tuple((i, role) if role else id(info[0]) for i, (info, role) in enumerate(zip(infos, roles))),
        )
        per_rank = tuple((info[3], int(info[0].value)) for info in infos if info[3])
        return self.shapes.setdefault(key, len(self.shapes)), per_rank

    def share(self, rank: Rank, recipes: list[tuple]) -> bool:
        """Give `rank` the node list of an earlier rank with the same graph; False when none fits."""
        signature = tuple(r[3] for r in recipes)
        if None in signature:
            return False
        candidates = self.representatives.setdefault(signature, [])
        for representative, their_recipes in candidates[: self.MAX_TRIES]:
            maps = self.maps_between(their_recipes, recipes, rank.rank)
            if maps is not None:
                rank.nodes = representative.nodes
                rank.group_map, rank.peer_map = maps
                self.shared_ranks += 1
                return True
        if all(value == rank.rank for r in recipes for role, value in r[4] if role == "own"):
            candidates.append((rank, recipes))  # its own rank in every own-rank attribute: shareable
        return False

    @staticmethod
    def maps_between(theirs: list[tuple], ours: list[tuple], rank_id: int):
        """(group_map, peer_map) turning the representative's values into ours, or None."""
        group_map: dict[int, int] = {}
        peer_map: dict[int, int] = {}
        for a, b in zip(theirs, ours):
            if a is b and not a[4]:
                continue
            for (role, mine), (_, yours) in zip(a[4], b[4]):
                if role == "own":
                    if yours != rank_id:
                        return None
                elif role == "group":
                    if group_map.setdefault(mine, yours) != yours:
                        return None
                elif peer_map.setdefault(mine, yours) != yours:
                    return None
        return changed(group_map), changed(peer_map)


# Node's fields in order with their defaults; those made per node are None here (build sets them).
_NODE_DEFAULTS = {f.name: None if f.default is dataclasses.MISSING else f.default for f in dataclasses.fields(Node)}
# Fields whose default is made per node (args: {}), apart from the dependencies build() copies.
_MADE_PER_NODE = tuple((f.name, f.default_factory) for f in dataclasses.fields(Node)
                       if f.default_factory is not dataclasses.MISSING and f.name not in ("deps", "ctrl_deps"))
assert list(_NODE_DEFAULTS)[:3] == ["id", "name", "kind"]  # a tail's values go between kind and start_ns
_START_AT = list(_NODE_DEFAULTS).index("start_ns")
_ATTRS_AT, _PARENT_AT, _STREAM_AT, _SIZE_AT, _GROUP_AT = map(list(_NODE_DEFAULTS).index,
                                                            ("attrs", "parent", "stream", "size", "group"))
assert [name for name, _ in _MADE_PER_NODE] == ["args"]  # (measured_node makes `args` per node too)
# read_measured_nodes' templates are Node's arguments by position, those each message gives put in by C
assert {name: list(_NODE_DEFAULTS).index(name) for name in MEASURED_ARG_POSITIONS} == MEASURED_ARG_POSITIONS
assert len(_NODE_DEFAULTS) == MEASURED_ARG_COUNT


def with_duration(tail: tuple, micros: int) -> tuple:
    """tail_of's tail with another duration_micros (the positional values' first is duration_ns)."""
    _, fields, infos, between, after = tail
    duration_ns = micros * 1000
    return micros, {**fields, "duration_ns": duration_ns}, infos, (duration_ns, *between[1:]), after


def node_values(fields: dict) -> tuple:
    """The positional arguments of `Node` for these keyword arguments (every one a Node field):
    building a node from positions is 3x faster."""
    return tuple({**_NODE_DEFAULTS, **fields}.values())


def changed(mapping: dict[int, int]) -> dict[int, int] | None:
    """The entries that change a value, in key order; None when there are none (identity)."""
    return dict(sorted((k, v) for k, v in mapping.items() if k != v)) or None


def per_rank_fields(body: bytes, infos: list[tuple]) -> tuple | None:
    """Where a message's per-rank attributes lie: ((start, end, role), ...), role "fixed" for
    an attribute in per-rank form that per_rank_role gives no role on this node.

    `infos` are the message's attributes as NodeDecoder.attr_info describes them. None when
    the PER_RANK_FIELD matches are not exactly these attributes, or when an attribute with a
    role is not in that form (its value would hide in the pieces).
    """
    expected = [info for info in infos if info[4]]
    if not expected and b"comm_" not in body and b"pg_name" not in body:
        return ()
    matches = list(PER_RANK_FIELD.finditer(body))
    if len(matches) != len(expected) or any(info[3] and not info[4] for info in infos):
        return None
    found = []
    for match, (attr, _, _, role, _) in zip(matches, expected):
        if per_rank_field(match.group()) != (attr.name, int(attr.value)):
            return None
        found.append((match.start(), match.end(), role or "fixed"))
    return tuple(found)


def reencodes(attr: pb.AttributeProto, item: WireAttr) -> bool:
    """Whether the WireAttr gives back the attribute's bytes (no unknown fields inside it)."""
    return attr_to_proto(item).SerializeToString() == attr.SerializeToString()


_ATTR_TAG = 0x52  # Node.attr (field 10, length-delimited)


def io_of(wire: pb.Node, field: str) -> tuple[str, str, str] | None:
    """An IOInfo as the model keeps it: (values, shapes, types), None when the node has none."""
    if not wire.HasField(field):
        return None
    io = getattr(wire, field)
    return io.values, io.shapes, io.types


def io_has_unknown_fields(wire: pb.Node) -> bool:
    return any(wire.HasField(f) and len(UnknownFieldSet(getattr(wire, f))) for f in ("inputs", "outputs"))


def node_kind(node_type: int, node_id: int, name: str, where: str) -> NodeKind:
    kind = NODE_KINDS.get(node_type)
    if kind is None:
        raise InputError(where, f"node {node_id} {name!r} has type {node_type}; expected 1-7 (METADATA_NODE..COMM_COLL_NODE)")
    return kind


def model_fields(
    node_id: int, name: str, node_type: int, ctrl_deps: list[int], data_deps: list[int],
    start_micros: int, duration_micros: int, inputs, outputs, attrs: list[WireAttr], where: str,
) -> dict:
    """The keyword arguments of `Node` for a node with these Chakra fields."""
    kind = node_kind(node_type, node_id, name, where)
    fields = {
        "id": node_id, "name": name, "kind": kind, "duration_ns": duration_micros * 1000,
        "start_ns": start_micros * 1000 if start_micros else None, "inputs": inputs, "outputs": outputs,
        "deps": data_deps, "ctrl_deps": ctrl_deps, "attrs": attrs,
    }
    for attr in attrs:
        effect = attr_effect(kind, attr)
        if effect is not None:
            apply_effect(fields, effect, node_id, name, where)
    return fields


def int_value(attr: WireAttr) -> int | None:
    """The attribute's integer value whatever integer kind holds it; None if it is no integer."""
    value = attr.value
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def attr_effect(kind: NodeKind, attr: WireAttr) -> tuple[str, object] | None:
    """The model field an ASTRA-sim attribute stands for on a node of `kind`: (field, value).

    A value that cannot be used gives ("error", message) so the caller can name the node.
    """
    name = attr.name
    if name == "comm_type" and kind == NodeKind.COLLECTIVE:
        value = int_value(attr)
        if value not in COLL_TYPES:
            return ("error", f"comm_type {attr.value!r} is not a CollectiveCommType (0-9)")
        return ("coll", COLL_TYPES[value])
    if name == "comm_size" or (name == "tensor_size" and kind in (NodeKind.MEM_LOAD, NodeKind.MEM_STORE)):
        value = int_value(attr)
        return None if value is None else ("size", value)
    if name == "pg_name":
        text = attr.value if isinstance(attr.value, str) else ""
        if text.isascii() and text.isdigit():
            return ("group", int(text))
        if text:
            return ("error", f"pg_name {text!r} is not a decimal group id")
        return None
    if name == "comm_dst" and kind == NodeKind.SEND or name == "comm_src" and kind == NodeKind.RECV:
        return ("peer", int_value(attr))
    if name == "comm_tag":
        return ("tag", int_value(attr))
    if name == "microbatch":
        return ("microbatch", int_value(attr))
    return None


def apply_effect(fields: dict, effect: tuple, node_id: int, name: str, where: str) -> None:
    field, value = effect
    if field == "error":
        raise InputError(where, f"node {node_id} {name!r}: {value}")
    fields[field] = value


def read_groups(trace: ExecutionTrace, paths: list[Path]) -> None:
    """Groups from `<prefix>.comm_group.json` or `comm_group.json` beside the first file."""
    path = group_file_for(paths[0])
    if path is None:
        return
    for gid, members in parse_group_file(path).items():
        trace.groups[gid] = Group(gid, "", members)
    trace.source.files = [p.name for p in paths] + [path.name]


def parse_group_file(path: Path) -> dict[int, tuple[int, ...]]:
    """A comm_group.json: `{"<positive group id>": [rank, ...], ...}`."""
    try:
        table = orjson.loads(Path(path).read_bytes())
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None
    except orjson.JSONDecodeError as e:
        raise json_error(path, e) from None
    if not isinstance(table, dict):
        raise InputError(str(path), 'expected an object {"<group id>": [rank, ...], ...}')
    groups: dict[int, tuple[int, ...]] = {}
    for key, members in table.items():
        if not (key.isascii() and key.isdigit()) or int(key) <= 0:
            raise InputError(str(path), f"group id {key!r} is not a positive integer")
        if not isinstance(members, list) or not all(isinstance(m, int) and not isinstance(m, bool) for m in members):
            raise InputError(str(path), f"group {key}: expected a list of ranks, found {members!r}"[:200])
        groups[int(key)] = tuple(members)
    return groups


def group_file_for(first: Path) -> Path | None:
    match = RANK_NAME.match(first.name)
    candidates = []
    if match:
        candidates.append(first.with_name(f"{match['prefix']}.comm_group.json"))
    candidates.append(first.with_name("comm_group.json"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def apply_our_metadata(trace: ExecutionTrace, where: Callable[[Rank, int], str] | None = None) -> None:
    """Take back what et-convert's own GlobalMetadata records (parallel, coords, group kinds).

    A layout size below 1 (world below 0) is an error; `where(rank, k)` names the place of a
    rank's k-th attribute (default: the rank's file and the attribute's index).
    """
    for rank in trace.ranks.values():
        if rank.wire_metadata is None:
            continue
        for k, attr in enumerate(rank.wire_metadata[1]):
            name, value = attr.name, attr.value
            if name.startswith("coords.") and isinstance(value, int):
                rank.coords[name[len("coords."):]] = value
            elif name.startswith("parallel.") and isinstance(value, int):
                key = name[len("parallel."):]
                if not hasattr(trace.parallel, key):
                    continue
                least = 0 if key == "world" else 1
                if value < least:  # a divisor of the world later: say where, not ZeroDivisionError
                    place = where(rank, k) if where else f"{rank.source}: GlobalMetadata attribute {k}"
                    raise InputError(place, f"{name} is {value}; expected at least {least}")
                setattr(trace.parallel, key, value)
            elif name == "group_kinds" and isinstance(value, list):
                for entry in value:
                    gid, _, kind = str(entry).partition("=")
                    group = trace.groups.get(int(gid)) if gid.isascii() and gid.isdigit() else None
                    if group is not None:
                        group.kind = kind
            elif name == "assumptions" and isinstance(value, list):
                for sentence in value:
                    trace.assume(str(sentence))


def decide_timing(trace: ExecutionTrace, pending: list[list[Node]] | None = None) -> None:
    """Measured only when every node has a start time; Chakra usually carries durations only.

    protobuf leaves out a start of 0 µs, so the first op of a measured run reads as having
    none. A set et-convert wrote from measured times says so in every rank's metadata
    (`timing`, `time_origin_ns`): there a node without a start time started at 0, and what
    its writer kept as attributes (`RankEncoder.node_attrs`: its step, `stream`, the args
    of `KEPT_ARGS`) is the node's again. Such a set reads back as measured: its `stats`,
    checks and timelines are the run's, not a schedule's.

    `pending`: the lists of nodes to visit, when the others already have a start time and what
    this would give them (NodeDecoder.give_facts); None: every rank's."""
    ranks = trace.ranks.values()
    if pending is None:
        pending = [rank.nodes for rank in ranks]
    declared = _declared_measured(trace)
    if declared is not None:
        facts_of: dict[int, tuple] = {}  # id of an attrs list (nodes of one message tail share theirs) -> its facts
        for nodes in pending:
            for node in nodes:
                if node.start_ns is None:
                    node.start_ns = 0
                attrs = node.attrs
                if attrs:
                    facts = facts_of.get(id(attrs))
                    if facts is None:
                        facts = facts_of[id(attrs)] = _measured_facts(attrs)
                    parent, stream, kept = facts
                    if parent is not None:
                        node.parent = parent
                    if stream is not None:
                        node.stream = stream
                    if kept:
                        node.args.update(kept)  # (each node read has args of its own: NodeDecoder.build, measured_node)
    if any(r.nodes for r in ranks) and all(n.start_ns is not None for nodes in pending for n in nodes):
        trace.timing = "measured"
        if declared is not None:
            trace.time_origin_ns, scaling_mode = declared
            if scaling_mode:  # a scaling-mode log's: each rank on a timeline of its own
                trace.metadata["scaling_mode"] = True
    else:
        trace.timing = "none"


def _measured_facts(attrs: list[WireAttr]) -> tuple:
    """(parent, stream, args of `KEPT_ARGS`) that attributes of `MEASURED_FACTS` give a node:
    only those of the kind the writer gives them; None (or no args) for those absent."""
    found = {attr.name: attr.value for attr in attrs if MEASURED_FACTS.get(attr.name) == attr.kind}
    return found.get("parent"), found.get("stream"), [(name, found[name]) for name in KEPT_ARGS if name in found]


def _declared_measured(trace: ExecutionTrace) -> tuple[int, bool] | None:
    """(time origin, scaling mode) that every rank's et-convert metadata gives for measured
    times; None when some rank's metadata does not say `timing` "measured" (or has none:
    another tool's file), or the ranks disagree."""
    declared = set()
    for rank in trace.ranks.values():
        said = _declared_by(rank)
        if said is None:
            return None
        declared.add(said)
    return declared.pop() if len(declared) == 1 else None


def _declared_by(rank: Rank) -> tuple[int, bool] | None:
    """(time origin, scaling mode) when this rank's et-convert metadata says its times are measured."""
    said = {attr.name: attr.value for attr in rank.wire_metadata[1]} if rank.wire_metadata else {}
    origin = said.get("time_origin_ns")
    if said.get("timing") != "measured" or type(origin) is not int:
        return None
    return origin, said.get("scaling_mode") is True
