"""Reader for Megatron per-rank op logs (FORMATS.md §2): text lines -> `OpRecord`s.

One op per line:

    rank:4:forward_step(stage_id=2,batch_id=0,...,timestamp=4509232418.87,sub_operations=['...', ...])

Values may hold commas and brackets (`input__shape=[2048, 2, 5120]`, a `description` with
commas), so a line is split into fields at top-level commas that start a `key=`, never at every
comma. `sub_operations` is a Python list literal of strings, read with `ast.literal_eval`
(literals only, never code); each string is split into fields the same way.

The reader knows nothing of ranks' layout, groups or Chakra: times stay as they were logged
(converted exactly from ms to integer ns) and every record keeps its `file:line`.
"""

from __future__ import annotations

import ast
import functools
import itertools
import operator
import re
import sys
from array import array
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from collections.abc import Mapping, Sequence

from ..diagnostics import Diagnostics, InputError, at
from .text import not_utf8

# The keys the tracer writes on an op line and inside a sub-operation string.
OP_KEYS = (
    "stage_id", "batch_id", "mg_state", "duration", "description", "group_kind",
    "input__shape", "input__dtype", "timestamp", "sub_operations",
)
SUB_KEYS = (
    "trace_src_func", "duration", "timestamp", "input__shape", "input__dtype",
    "func_name", "group", "comm_func",
)
REQUIRED_OP_KEYS = ("stage_id", "batch_id", "duration", "timestamp")
REQUIRED_SUB_KEYS = ("duration", "timestamp")
_OP_KEY_SET, _REQUIRED_OP_KEY_SET = frozenset(OP_KEYS), frozenset(REQUIRED_OP_KEYS)

_LINE = re.compile(r"rank:(\d+):([A-Za-z_]\w*)\((.*)\)\s*$")
_LINE_HEAD = re.compile(r"rank:(\d+):([A-Za-z_]\w*)\(")  # _LINE's start: what a line without spaces around needs
_LINE_START = re.compile(rb"\s*rank:\d+:[A-Za-z_]\w*\(")
_KEY = re.compile(r"\s*([A-Za-z_]\w*)=")
_SUBOPS_SHAPE = "expected a list of quoted 'key=value,...' strings"


class _NoExtras(Mapping):
    """The empty, read-only extras shared by the many records without unknown keys. Unlike a
    MappingProxyType it can be pickled (surveys cross processes), and unpickles as the one instance."""

    def __getitem__(self, key):
        raise KeyError(key)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __reduce__(self):
        return "NO_EXTRAS"


NO_EXTRAS: Mapping[str, str] = _NoExtras()
MAX_MS = ((1 << 63) - 1) // 1_000_000  # times become int64 nanoseconds


@dataclass(slots=True)
class SubOp:
    """One communication call logged inside a step (a TP all-reduce, an expert all-to-all)."""

    duration_ns: int
    stamp_ns: int  # as logged: an end or a start time (the builder decides per file)
    shape: tuple[int, ...] | None
    dtype: str | None
    group: str | None  # tp, exp, ...
    comm_func: str | None  # allreduce, all_to_all, allgather, ...
    func_name: str | None
    trace_src_func: str | None
    extras: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.func_name or self.trace_src_func or self.comm_func or "sub_operation"

    @property
    def kind(self) -> SubOpKind:
        return SubOpKind(self.shape, self.dtype, self.group, self.comm_func, self.func_name, self.trace_src_func,
                         self.extras)


class SubOpKind:
    """What a sub-operation is, without its times: a log repeats a few kinds in every step, so each
    is made once and shared. Hashed once (the builder looks kinds and their sequences up per step)."""

    __slots__ = ("shape", "dtype", "group", "comm_func", "func_name", "trace_src_func", "extras", "name", "_hash")

    def __init__(self, shape, dtype, group, comm_func, func_name, trace_src_func, extras):
        self.shape, self.dtype, self.group, self.comm_func = shape, dtype, group, comm_func
        self.func_name, self.trace_src_func, self.extras = func_name, trace_src_func, extras
        self.name = func_name or trace_src_func or comm_func or "sub_operation"
        self._hash = hash(self._fields())

    def _fields(self) -> tuple:
        return (self.shape, self.dtype, self.group, self.comm_func, self.func_name, self.trace_src_func,
                tuple(self.extras.items()))

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, SubOpKind) and self._fields() == other._fields())

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):  # string hashes differ between processes: hash again where unpickled
        return SubOpKind, (self.shape, self.dtype, self.group, self.comm_func, self.func_name,
                           self.trace_src_func, self.extras)

    def __repr__(self) -> str:
        return f"SubOpKind({self.name!r}, group={self.group!r}, comm_func={self.comm_func!r}, shape={self.shape})"

    def with_times(self, duration_ns: int, stamp_ns: int) -> SubOp:
        return SubOp(duration_ns, stamp_ns, self.shape, self.dtype, self.group, self.comm_func, self.func_name,
                     self.trace_src_func, self.extras)


class SubOps(Sequence):
    """A step's sub-operations as columns: their kinds (one tuple shared by every step that logs
    the same sequence) and two int64 arrays of times. Items read as `SubOp`s, made on demand.

    `bounds` is (earliest stamp, latest stamp, longest duration), None when there are none: where
    they lie under either reading of the stamps, known without a pass over them (the builder
    judges a whole step by it; the reader finds two of the three anyway)."""

    __slots__ = ("kinds", "durations", "stamps", "bounds")

    def __init__(self, kinds: tuple[SubOpKind, ...] = (), durations: array | None = None, stamps: array | None = None,
                 bounds: tuple[int, int, int] | None = None):
        self.kinds = kinds
        self.durations = array("q") if durations is None else durations  # ns
        self.stamps = array("q") if stamps is None else stamps  # ns, as logged
        if bounds is None and self.stamps:
            bounds = (min(self.stamps), max(self.stamps), max(self.durations))
        self.bounds = bounds

    @classmethod
    def of(cls, subs) -> SubOps:
        """From SubOp items; a sequence of kinds seen before gets the tuple made then (shared)."""
        subs = list(subs)
        kinds = tuple(sub.kind for sub in subs)
        if len(_SEQUENCES) >= 1024:
            _SEQUENCES.clear()
        kinds = _SEQUENCES.setdefault(kinds, kinds)
        return cls(kinds, array("q", [sub.duration_ns for sub in subs]), array("q", [sub.stamp_ns for sub in subs]))

    def only(self, positions: list[int]) -> SubOps:
        """The sub-operations at these positions."""
        return SubOps(tuple(self.kinds[i] for i in positions), array("q", [self.durations[i] for i in positions]),
                      array("q", [self.stamps[i] for i in positions]))

    def __len__(self) -> int:
        return len(self.kinds)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.kinds[index].with_times(self.durations[index], self.stamps[index])

    def __eq__(self, other) -> bool:
        if not isinstance(other, SubOps):
            return NotImplemented
        return (self.kinds, self.durations, self.stamps) == (other.kinds, other.durations, other.stamps)

    def __repr__(self) -> str:
        return f"SubOps({list(self)!r})"


_SEQUENCES: dict[tuple[SubOpKind, ...], tuple[SubOpKind, ...]] = {}
NO_SUB_OPS = SubOps()  # shared by the many steps without sub-operations: never changed


@dataclass(slots=True)
class OpRecord:
    """One logged op of one rank."""

    rank: int
    op: str
    stage: int
    batch: int
    mg_state: str | None
    duration_ns: int
    end_ns: int  # the logged timestamp: the op's end (host clock after a device sync)
    description: str | None
    group_kind: str | None
    shape: tuple[int, ...] | None
    dtype: str | None
    sub_ops: SubOps
    file: str
    line: int
    extras: Mapping[str, str] = field(default_factory=dict)  # keys the reader does not know
    raw_stamp: str = ""  # timestamp and duration text as logged: fused exchanges share them
    raw_duration: str = ""

    @property
    def start_ns(self) -> int:
        return self.end_ns - self.duration_ns

    def with_sub_ops(self, sub_ops: SubOps) -> OpRecord:
        """The record with other sub-operations (dataclasses.replace, at a fifth of its cost: the
        survey keeps thousands of such headers)."""
        return OpRecord(self.rank, self.op, self.stage, self.batch, self.mg_state, self.duration_ns, self.end_ns,
                        self.description, self.group_kind, self.shape, self.dtype, sub_ops, self.file, self.line,
                        self.extras, self.raw_stamp, self.raw_duration)

    @property
    def where(self) -> str:
        return at(self.file, self.line)


def sniff(head: bytes, path: Path | None = None) -> bool:
    """True when the first non-empty line looks like `rank:<r>:<op>(`."""
    for raw in head.splitlines():
        if raw.strip():
            return _LINE_START.match(raw) is not None
    return False


def read_file(path: Path, diagnostics: Diagnostics, strict: bool = False, bar=None, name: str | None = None,
              share: tuple[int, int] | None = None) -> list[OpRecord]:
    """The records of one log, read line by line (a log may be larger than memory allows twice).

    Each line is parsed once the next non-blank line is seen, so the last one is known: only the
    last line may be cut off (the run crashed while the tracer wrote it). `name` is what records
    and messages call the file (default: the path).

    `share` (k, n): the records of the ranks r with r % n == k, for n workers sharing one log.
    A line that starts with another share's `rank:<r>:` is left to that share unparsed, so each
    share parses its own lines (its first bad one is its error); every share parses the last
    line and any line that does not start so, and the caller keeps its own ranks' records.
    """
    name = name or str(path)
    records: list[OpRecord] = []
    held: tuple[int, bytes] | None = None  # the latest non-blank line, not yet known to be the last
    before = 0  # the complete lines before the held one (parsed here or left to another share)
    theirs = None if share is None else _of_other_shares(*share)
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if bar is not None:
                    bar.advance(len(raw))
                if raw.isspace():  # blank (a line read from a file is never empty)
                    continue
                if held is not None:
                    before += 1
                    if theirs is None or not theirs(held[1]):
                        records.append(parse_line(_decode(held[1], name, held[0]), name, held[0]))
                held = (number, raw)
    except OSError as e:
        raise InputError(name, f"cannot read: {e.strerror}") from None
    if held is not None:
        record = _last_line(held[1], name, held[0], before, diagnostics, strict)
        if record is not None:
            records.append(record)
    return records


_RANK_PREFIX = re.compile(rb"rank:(\d+):")


def _of_other_shares(k: int, n: int):
    """Whether a raw line starts with the `rank:<r>:` of a rank r with r % n != k."""
    match = _RANK_PREFIX.match

    def theirs(raw: bytes) -> bool:
        found = match(raw)
        return found is not None and int(found[1]) % n != k

    return theirs


def _last_line(raw: bytes, name: str, number: int, before: int, diagnostics: Diagnostics, strict: bool) -> OpRecord | None:
    """The last line's record, or None (with a warning) when the line is cut off."""
    complete = raw.endswith(b"\n")
    try:
        return parse_line(_decode(raw, name, number), name, number)
    except InputError:
        text = raw.decode("utf-8", errors="replace")
        # A crash while the tracer wrote its last line leaves it unfinished (even mid-character).
        if not (_is_cut_off(text) or (not complete and text.lstrip().startswith("rank:"))):
            raise
        if complete and "\ufffd" in text:
            raise  # a whole line with bytes that are not text is garbled, not cut off
    if strict:
        raise InputError(at(name, number), "last line is cut off (no closing ')'); the run may have crashed while writing it")
    diagnostics.warn(
        f"megatron-cut-off:{name}",
        f"{at(name, number)}: last line is cut off; converted the {before} complete lines before it",
    )
    return None


def _is_cut_off(text: str) -> bool:
    """A line the tracer started but did not finish: it begins like an op and never closes."""
    stripped = text.rstrip()
    return stripped.startswith("rank:") and not stripped.endswith(")")


def _decode(raw: bytes, name: str, number: int) -> str:
    line = raw.rstrip(b"\n")
    try:
        return line.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as e:
        raise not_utf8(line, e.start, name, number) from None


def parse_line(text: str, file: str, line: int) -> OpRecord:
    """One `rank:<r>:<op>(key=value,...)` line -> OpRecord, or InputError at file:line."""
    head = _LINE_HEAD.match(text)
    if head is not None and text.endswith(")") and "\n" not in text:
        # what _LINE finds in such a line, without its regex walking the whole line: the body ends at the last ")"
        (rank_text, op), body = head.groups(), text[head.end():-1]
    else:
        match = _LINE.match(text.strip())
        if match is None:
            raise InputError(at(file, line), f"expected rank:<r>:<op>(key=value,...), found {_excerpt(text)}")
        rank_text, op, body = match.groups()
    record = _templated_record(rank_text, op, body, file, line)
    if record is not None:
        return record
    where = at(file, line)
    fields, sub_ops = _op_fields(body)
    keys = fields.keys()
    extras = NO_EXTRAS if keys <= _OP_KEY_SET else {k: v for k, v in fields.items() if k not in OP_KEYS} or NO_EXTRAS
    if not keys >= _REQUIRED_OP_KEY_SET:
        missing = next(key for key in REQUIRED_OP_KEYS if key not in fields)
        raise InputError(where, f"{op}: missing {missing}= (expected keys {', '.join(OP_KEYS)})")
    if sub_ops is None:
        sub_ops = parse_sub_operations(fields.get("sub_operations", "[]"), where)
    return OpRecord(
        rank=int(rank_text),
        op=sys.intern(op),
        stage=parse_int(fields["stage_id"], "stage_id", where),
        batch=parse_int(fields["batch_id"], "batch_id", where),
        mg_state=_none(fields.get("mg_state")),
        duration_ns=parse_ms(fields["duration"], "duration", where),
        end_ns=parse_ms(fields["timestamp"], "timestamp", where),
        description=_none(fields.get("description")),
        group_kind=_none(fields.get("group_kind")),
        shape=parse_shape(fields.get("input__shape"), "input__shape", where),
        dtype=_none(fields.get("input__dtype")),
        sub_ops=sub_ops,
        file=file,
        line=line,
        extras=extras,
        raw_stamp=fields["timestamp"].strip(),
        raw_duration=fields["duration"].strip(),
    )


# An op line's head as the tracer writes it: only batch_id=, duration= and timestamp= change from
# line to line; the rest (stage, state, description, group, shape, dtype: the head's "template")
# repeats. So the head is split at those three values and the template looked up: a log has a
# few. A new template is read once by the path below (_plain_fields and the value parsers) and
# kept only when that read is surely the same for every head of the template; the three values
# are taken only when plain (else the general parser reads the line, and finds any error).
_VARYING = re.compile(r"(?<![^,])(batch_id|duration|timestamp)=([^,\[\]()'\"\\=]*)")
_TEMPLATES: dict[tuple[str, ...], object] = {}  # template -> its constant fields, or _NOT_TIMED


def _templated_record(rank_text: str, op: str, body: str, file: str, line: int) -> OpRecord | None:
    """The line's record from its head's template, or None when the general path must read it.

    The general path cuts the list at the last `,sub_operations=[`; this one at the first, near the
    line's start, instead of searching back through the whole list. They differ only when the list
    holds another, and then _timed_sub_ops reads no list (no structure holds one)."""
    cut = body.find(_SUBOPS_TAIL)
    if cut < 0:
        return None
    head = body[:cut]
    pieces = _VARYING.split(head)
    template = tuple(pieces[0::3]) + tuple(pieces[1::3])
    constant = _TEMPLATES.get(template)
    if constant is None:
        constant = _new_template(template, head, pieces)
    if constant is _NOT_TIMED:
        return None
    values = dict(zip(pieces[1::3], pieces[2::3]))
    batch = _int(values["batch_id"])
    duration_text, stamp_text = values["duration"], values["timestamp"]
    duration, stamp = _plain_ms(duration_text), _plain_ms(stamp_text)
    if batch is None or duration is None or stamp is None:
        return None
    sub_ops = _timed_sub_ops(body[cut + len(_SUBOPS_TAIL) - 1:])  # unstripped, as _op_fields reads it
    if sub_ops is None:
        return None
    stage, mg_state, description, group_kind, shape, dtype = constant
    return OpRecord(int(rank_text), sys.intern(op), stage, batch, mg_state, duration, stamp, description, group_kind,
                    shape, dtype, sub_ops, file, line, NO_EXTRAS, stamp_text, duration_text)


def _new_template(template: tuple[str, ...], head: str, pieces: list[str]):
    """A template's constant fields, parsed as parse_line would; _NOT_TIMED unless the head is plain,
    has only known keys, each changing key once with the value the split found, and reads cleanly."""
    constant = _NOT_TIMED
    fields = _plain_fields(head)
    values = dict(zip(pieces[1::3], pieces[2::3]))
    if (fields is not None and fields.keys() <= _HEAD_KEYS and fields.keys() >= _REQUIRED_OP_KEY_SET
            and len(values) == len(pieces) // 3 == 3 and all(fields[k] == v for k, v in values.items())):
        try:
            constant = (parse_int(fields["stage_id"], "stage_id", ""), _none(fields.get("mg_state")),
                        _none(fields.get("description")), _none(fields.get("group_kind")),
                        parse_shape(fields.get("input__shape"), "input__shape", ""), _none(fields.get("input__dtype")))
        except InputError:
            pass
    if len(_TEMPLATES) >= _MAX_CACHED:
        _TEMPLATES.clear()
    _TEMPLATES[template] = constant
    return constant


def parse_sub_operations(text: str, where: str) -> SubOps:
    """The `sub_operations=[...]` value: a list literal of 'key=value,...' strings."""
    timed = _timed_sub_ops(text.strip())
    if timed is not None:
        return timed
    items = _plain_string_list(text)
    if items is None:
        try:
            items = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise InputError(where, f"cannot parse sub_operations: {_SUBOPS_SHAPE}") from None
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise InputError(where, f"cannot parse sub_operations: {_SUBOPS_SHAPE}")
    return SubOps.of(_parse_sub_op(item, index, where) for index, item in enumerate(items))


# The tracer's lists, read at the speed of a few C loops. A step's sub-operations differ only in
# their times; the rest of the text (shape, dtype, group, names) repeats across a log. So a list is
# split at its items' `duration=D,timestamp=W.F` (times as the tracer prints them: at most 13 digits
# and 6 decimals, exact in integer ns; F is "" without decimals) and the text between the times,
# the list's "structure", is looked up: a log has a few. A new structure is checked once (a plain
# list: no quotes or backslashes inside its items) and each of its items' text around the times
# gets its kind from the general parser. Anything else (and every error) is the general parser's.
_TIMES = re.compile(r"duration=([0-9]{1,13}(?:\.[0-9]{1,6})?),timestamp=([0-9]{1,13})(?:\.(?=[0-9]))?((?<=\.)[0-9]{1,6}|)")
_SCALE = tuple(10 ** (6 - digits) for digits in range(7))  # ns per unit of a time's last decimal
_MAX_NS = MAX_MS * 1_000_000
_NOT_TIMED = object()  # a structure or an item the general parser must read
_STRUCTURES: dict[tuple[str, ...], object] = {}  # the texts between the times -> their kinds, or _NOT_TIMED
_KINDS: dict[tuple[str, str], object] = {}  # an item's text before and after its times -> SubOpKind, or _NOT_TIMED
_MAX_CACHED = 1024


class _DurationsNs(dict):
    """Duration text -> ns; a log repeats a few durations."""

    def __missing__(self, text: str) -> int:
        whole, _, fraction = text.partition(".")
        if len(self) >= _MAX_CACHED:
            self.clear()
        ns = self[text] = int(whole + fraction) * _SCALE[len(fraction)]
        return ns


_DURATIONS_NS = _DurationsNs()


class _FractionNs(dict):
    """A timestamp's decimals (text; "" for none) -> ns; a log prints a few hundred distinct."""

    def __missing__(self, text: str) -> int:
        if len(self) >= _MAX_CACHED:
            self.clear()
        ns = self[text] = int(text or "0") * _SCALE[len(text)]
        return ns


_FRACTION_NS = _FractionNs()


def _timed_sub_ops(text: str) -> SubOps | None:
    """A list as the tracer writes it, read without a Python step per item; None when the general
    parser must read it (it then finds any error)."""
    if text == "[]":
        return NO_SUB_OPS
    pieces = _TIMES.split(text)
    if len(pieces) == 1:
        return None  # no times to read: not the tracer's list
    structure = tuple(pieces[0::4])
    kinds = _STRUCTURES.get(structure)
    if kinds is None:
        kinds = _new_structure(structure, pieces)
    if kinds is _NOT_TIMED:
        return None
    wholes, fractions = pieces[2::4], pieces[3::4]
    try:
        durations = array("q", map(_DURATIONS_NS.__getitem__, pieces[1::4]))
        stamps = array("q", map(operator.add, map(operator.mul, map(int, wholes), itertools.repeat(1_000_000)),
                                map(_FRACTION_NS.__getitem__, fractions)))
    except OverflowError:
        return None
    longest, last = max(durations), max(stamps)
    if longest > _MAX_NS or last > _MAX_NS:
        return None
    return SubOps(kinds, durations, stamps, (min(stamps), last, longest))


def _new_structure(structure: tuple[str, ...], pieces: list[str]):
    """The kinds of a list's items (one shared tuple), or _NOT_TIMED; remembered either way."""
    kinds = _NOT_TIMED
    count = len(structure) - 1
    if (structure[0].startswith("['") and structure[-1].endswith("']")
            and not any(_SUBOPS_TAIL in between for between in structure)):  # see _templated_record
        # each item's text before its times, and the one after: "['<before>", "<after>', '<before>", "<after>']"
        between = [structure[0][2:]]
        for middle in structure[1:-1]:
            between.extend(middle.split("', '") if middle.count("', '") == 1 else ["'"])  # "'": not plain
        between.append(structure[-1][:-2])
        if not any(("'" in part or "\\" in part) for part in between):
            found = [_kind(between[2 * i], between[2 * i + 1], pieces[4 * i + 1:4 * i + 4], i) for i in range(count)]
            if _NOT_TIMED not in found:
                kinds = tuple(found)
    if len(_STRUCTURES) >= _MAX_CACHED:
        _STRUCTURES.clear()
    _STRUCTURES[structure] = kinds
    return kinds


def _kind(before: str, after: str, times: list[str], index: int):
    """The kind of the items that read `before` + times + `after`, from the general parser;
    _NOT_TIMED unless the times are surely the fields the general parser reads (duration= and
    timestamp= appear once, as fields, with these values) and the item reads without an error."""
    duration, whole, fraction = times
    stamp = f"{whole}.{fraction}" if fraction else whole
    key = (before, after)
    kind = _KINDS.get(key)
    if kind is not None:
        return kind
    kind = _NOT_TIMED
    text = f"{before}duration={duration},timestamp={stamp}{after}"
    if (before == "" or before.endswith(",")) and (after == "" or after.startswith(",")) and not any(
        name in part for part in (before, after) for name in ("duration=", "timestamp=")
    ):
        fields = _plain_fields(text) or split_fields(text, SUB_KEYS)
        if fields.get("duration") == duration and fields.get("timestamp") == stamp:
            try:
                kind = _parse_sub_op(text, index, "").kind
            except InputError:
                pass
    if len(_KINDS) >= _MAX_CACHED:
        _KINDS.clear()
    _KINDS[key] = kind
    return kind


def _parse_sub_op(text: str, index: int, where: str) -> SubOp:
    label = f"sub_operations[{index}]"
    fields = _plain_fields(text) or split_fields(text, SUB_KEYS)
    for key in REQUIRED_SUB_KEYS:
        if key not in fields:
            raise InputError(where, f"{label}: missing {key}= (found {_excerpt(text)})")
    return SubOp(
        duration_ns=parse_ms(fields["duration"], f"{label} duration", where),
        stamp_ns=parse_ms(fields["timestamp"], f"{label} timestamp", where),
        shape=parse_shape(fields.get("input__shape"), f"{label} input__shape", where),
        dtype=_none(fields.get("input__dtype")),
        group=_none(fields.get("group")),
        comm_func=_none(fields.get("comm_func")),
        func_name=_none(fields.get("func_name")),
        trace_src_func=_none(fields.get("trace_src_func")),
        extras={k: v for k, v in fields.items() if k not in SUB_KEYS} or NO_EXTRAS,
    )


# The shapes the tracer always writes, read without the general machinery below (which stays the
# reference for everything else): a list of single-quoted strings without quotes or escapes
# inside, and `key=value` pieces whose values hold no separators other than a flat list of ints.
_PLAIN_LIST = re.compile(r"\[(?:'[^'\\]*'(?:, '[^'\\]*')*)?\]")
_PLAIN_VALUE = r"(?:\[[\d, ]*\]|[^,\[\]()'\"\\=]*)"
_PLAIN_FIELDS = re.compile(rf"[A-Za-z_]\w*={_PLAIN_VALUE}(?:,[A-Za-z_]\w*={_PLAIN_VALUE})*")
_PLAIN_FIELD = re.compile(rf"([A-Za-z_]\w*)=({_PLAIN_VALUE})")
_SUBOPS_TAIL = ",sub_operations=["
_HEAD_KEYS = frozenset(OP_KEYS) - {"sub_operations"}


def _plain_string_list(text: str) -> list[str] | None:
    """`['a', 'b']` as the tracer writes it -> ["a", "b"]; None for anything literal_eval must read."""
    text = text.strip()
    if _PLAIN_LIST.fullmatch(text) is None:
        return None
    return text[2:-2].split("', '") if len(text) > 2 else []


def _plain_fields(body: str) -> dict[str, str] | None:
    """`k=v,...` with plain values and distinct keys -> {k: v}, as split_fields would; else None."""
    if _PLAIN_FIELDS.fullmatch(body) is None:
        return None
    pairs = _PLAIN_FIELD.findall(body)
    fields = dict(pairs)
    return fields if len(fields) == len(pairs) else None


def _op_fields(body: str) -> tuple[dict[str, str], SubOps | None]:
    """An op line's fields, and its sub-operations when they were read on the way. The long
    `sub_operations` list (the last field) is cut off first when it is plain, so the general
    splitter never walks the list's characters."""
    cut = body.rfind(_SUBOPS_TAIL)
    if cut >= 0:
        tail = body[cut + len(_SUBOPS_TAIL) - 1:]
        sub_ops = _timed_sub_ops(tail)
        if sub_ops is not None or _PLAIN_LIST.fullmatch(tail) is not None:
            head = _plain_fields(body[:cut])
            # only known keys: an unknown one may belong to a description with commas (split_fields)
            if head is not None and head.keys() <= _HEAD_KEYS:
                head["sub_operations"] = tail
                return head, sub_ops
    return split_fields(body, OP_KEYS, free_text=("description",)), None


def split_fields(body: str, known: tuple[str, ...], free_text: tuple[str, ...] = ()) -> dict[str, str]:
    """Split `k1=v1,k2=v2,...` at top-level commas that begin a new `key=`.

    A comma inside brackets (or inside quotes within brackets) never splits. A piece that does
    not start with `key=` belongs to the previous value (a description with commas). Inside a
    free-text field only a known key starts a new field, so "a, b=c" in a description stays.
    """
    fields: dict[str, str] = {}
    current: str | None = None
    for piece in _top_level_pieces(body):
        match = _KEY.match(piece)
        starts_field = match is not None and (
            match.group(1) in known or current is None or current not in free_text
        )
        if starts_field and match.group(1) not in fields:
            current = match.group(1)
            fields[current] = piece[match.end():]
        elif current is None:
            fields.setdefault("", piece)
        else:
            fields[current] += "," + piece
    return fields


_NESTING = re.compile(r"[\[\]()'\"\\]")  # what can hide a comma: brackets, quotes, escapes
_STRUCTURE = re.compile(r"[\[\]()'\"\\,]")


def _top_level_pieces(body: str) -> list[str]:
    """`body` split at commas outside brackets (and outside quotes inside brackets).

    Only the characters that matter are visited (a regex finds them), so long plain values
    cost nothing; a backslash inside quotes escapes the character after it, whatever it is.
    """
    if _NESTING.search(body) is None:
        return body.split(",")
    pieces, depth, quote, start, skip = [], 0, "", 0, -1
    for match in _STRUCTURE.finditer(body):
        i = match.start()
        ch = body[i]
        if quote:
            if i == skip:
                continue
            if ch == "\\":
                skip = i + 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"" and depth > 0:
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            pieces.append(body[start:i])
            start = i + 1
    pieces.append(body[start:])
    return pieces


_PLAIN_MS = re.compile(r"(\d{1,13})(?:\.(\d{1,6}))?")  # up to 10^13 ms, at most ns precision: exact in ints


def _plain_ms(text: str) -> int | None:
    """Digits with at most 6 decimals (what the tracer prints) -> ns; None (or 0) when parse_ms must
    look: 0 is returned as None's equal, so callers write `_plain_ms(t) or parse_ms(t, ...)`."""
    plain = _PLAIN_MS.fullmatch(text)
    if plain is None:
        return None
    whole, fraction = plain.groups()
    ns = int(whole) * 1_000_000 + (int(fraction.ljust(6, "0")) if fraction else 0)
    return ns if ns <= MAX_MS * 1_000_000 else None


def parse_ms(text: str, key: str, where: str) -> int:
    """Milliseconds as logged -> integer ns, exactly (decimal, no float rounding)."""
    plain = _plain_ms(text)
    if plain is not None:
        return plain
    value = text.strip()
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise InputError(where, f"{key}: expected milliseconds as a number, found {_excerpt(value)}") from None
    if not number.is_finite():
        raise InputError(where, f"{key}: expected a finite number of milliseconds, found {value}")
    if key.endswith("duration") and number < 0:
        raise InputError(where, f"{key}: expected a duration of at least 0 ms, found {value}")
    if abs(number) > MAX_MS:
        raise InputError(where, f"{key}: {value} ms is too large (at most {MAX_MS} ms)")
    return int((number * 1_000_000).to_integral_value())


_INT = re.compile(r"-?\d+")


def parse_int(text: str, key: str, where: str) -> int:
    number = _int(text)
    if number is None:
        raise InputError(where, f"{key}: expected an integer, found {_excerpt(text)}")
    return number


@functools.lru_cache(maxsize=4096)
def _int(text: str) -> int | None:
    """The integer, or None; cached: a log repeats a few stage and batch ids."""
    value = text.strip()
    return int(value) if _INT.fullmatch(value) else None


def parse_shape(text: str | None, key: str, where: str) -> tuple[int, ...] | None:
    if text is None or text.strip() in ("None", ""):
        return None
    shape = _shape(text.strip())
    if shape is None:
        raise InputError(where, f"{key}: expected a list of integers like [2048, 5120], found {_excerpt(text)}")
    return shape


@functools.lru_cache(maxsize=4096)
def _shape(value: str) -> tuple[int, ...] | None:
    """`[2048, 2, 5120]` -> (2048, 2, 5120), one shared tuple per distinct text; None if malformed."""
    if not re.fullmatch(r"\[\s*(\d+\s*(,\s*\d+\s*)*,?)?\]", value):
        return None
    return tuple(int(x) for x in re.findall(r"\d+", value))


@functools.lru_cache(maxsize=4096)
def _none(text: str | None) -> str | None:
    """The value, or None for `None`; interned, since a log repeats the same few (millions of records).
    Cached: a log's few values are looked up at C speed."""
    if text is None:
        return None
    value = text.strip()
    return None if value in ("None", "") else sys.intern(value)


def _excerpt(text: str, limit: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")
