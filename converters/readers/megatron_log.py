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
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from collections.abc import Mapping

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

_LINE = re.compile(r"rank:(\d+):([A-Za-z_]\w*)\((.*)\)\s*$")
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
    sub_ops: list[SubOp]
    file: str
    line: int
    extras: Mapping[str, str] = field(default_factory=dict)  # keys the reader does not know
    raw_stamp: str = ""  # timestamp and duration text as logged: fused exchanges share them
    raw_duration: str = ""

    @property
    def start_ns(self) -> int:
        return self.end_ns - self.duration_ns

    @property
    def where(self) -> str:
        return at(self.file, self.line)


def sniff(head: bytes, path: Path | None = None) -> bool:
    """True when the first non-empty line looks like `rank:<r>:<op>(`."""
    for raw in head.splitlines():
        if raw.strip():
            return _LINE_START.match(raw) is not None
    return False


def read_file(path: Path, diagnostics: Diagnostics, strict: bool = False, bar=None, name: str | None = None) -> list[OpRecord]:
    """The records of one log, read line by line (a log may be larger than memory allows twice).

    Each line is parsed once the next non-blank line is seen, so the last one is known: only the
    last line may be cut off (the run crashed while the tracer wrote it). `name` is what records
    and messages call the file (default: the path).
    """
    name = name or str(path)
    records: list[OpRecord] = []
    held: tuple[int, bytes] | None = None  # the latest non-blank line, not yet known to be the last
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if bar is not None:
                    bar.advance(len(raw))
                if not raw.strip():
                    continue
                if held is not None:
                    records.append(parse_line(_decode(held[1], name, held[0]), name, held[0]))
                held = (number, raw)
    except OSError as e:
        raise InputError(name, f"cannot read: {e.strerror}") from None
    if held is not None:
        record = _last_line(held[1], name, held[0], len(records), diagnostics, strict)
        if record is not None:
            records.append(record)
    return records


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
    where = at(file, line)
    match = _LINE.match(text.strip())
    if match is None:
        raise InputError(where, f"expected rank:<r>:<op>(key=value,...), found {_excerpt(text)}")
    rank_text, op, body = match.groups()
    fields = _op_fields(body)
    extras = {k: v for k, v in fields.items() if k not in OP_KEYS} or NO_EXTRAS
    for key in REQUIRED_OP_KEYS:
        if key not in fields:
            raise InputError(where, f"{op}: missing {key}= (expected keys {', '.join(OP_KEYS)})")
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


def parse_sub_operations(text: str, where: str) -> list[SubOp]:
    """The `sub_operations=[...]` value: a list literal of 'key=value,...' strings."""
    items = _plain_string_list(text)
    if items is not None:
        return [_sub_op_like_before(item, index, where) for index, item in enumerate(items)]
    try:
        items = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InputError(where, f"cannot parse sub_operations: {_SUBOPS_SHAPE}") from None
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise InputError(where, f"cannot parse sub_operations: {_SUBOPS_SHAPE}")
    return [_parse_sub_op(item, index, where) for index, item in enumerate(items)]


# A step's sub-operations differ only in their times: the rest of the text (shape, dtype, group,
# names) repeats across a log. Each distinct rest is parsed once; its SubOp is the template.
# Times as the tracer prints them (at most 13 digits, at most 6 decimals: exact in integer ns).
_SUB_TIMES = re.compile(r"(?:^|,)duration=(\d{1,13})(?:\.(\d{1,6}))?,timestamp=(\d{1,13})(?:\.(\d{1,6}))?(?=,|$)", re.ASCII)
_SUB_TEMPLATES: dict[str, SubOp] = {}
_MAX_TEMPLATES = 4096
_MAX_NS = MAX_MS * 1_000_000


def _sub_op_like_before(text: str, index: int, where: str) -> SubOp:
    """The sub-operation, from the template of a text that differed only in its two times."""
    times = _SUB_TIMES.search(text)
    if times is None:
        return _parse_sub_op(text, index, where)
    duration_end = times.end(2) if times.group(2) else times.end(1)
    rest = text[:times.start(1)] + "," + text[duration_end:times.start(3)] + "," + text[times.end():]
    template = _SUB_TEMPLATES.get(rest)
    if template is None:
        sub = _parse_sub_op(text, index, where)
        # a key names its text's fields only when no second duration= or timestamp= hides in it
        if rest.count("duration=") == 1 and rest.count("timestamp=") == 1:
            if len(_SUB_TEMPLATES) >= _MAX_TEMPLATES:
                _SUB_TEMPLATES.clear()
            _SUB_TEMPLATES[rest] = sub
        return sub
    whole, fraction, stamp_whole, stamp_fraction = times.groups()
    duration = int(whole) * 1_000_000 + (int(fraction.ljust(6, "0")) if fraction else 0)
    stamp = int(stamp_whole) * 1_000_000 + (int(stamp_fraction.ljust(6, "0")) if stamp_fraction else 0)
    if duration > _MAX_NS or stamp > _MAX_NS:
        return _parse_sub_op(text, index, where)  # its error
    return SubOp(duration, stamp, template.shape, template.dtype, template.group, template.comm_func,
                 template.func_name, template.trace_src_func, template.extras)


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


def _op_fields(body: str) -> dict[str, str]:
    """An op line's fields. Its long `sub_operations` list (the last field) is cut off first when the
    rest is plain, so the general splitter never walks the list's characters."""
    cut = body.rfind(_SUBOPS_TAIL)
    if cut >= 0 and _PLAIN_LIST.fullmatch(body, cut + len(_SUBOPS_TAIL) - 1) is not None:
        head = _plain_fields(body[:cut])
        # only known keys: an unknown one may belong to a description with commas (split_fields)
        if head is not None and all(key in _HEAD_KEYS for key in head):
            head["sub_operations"] = body[cut + len(_SUBOPS_TAIL) - 1:]
            return head
    return split_fields(body, OP_KEYS, free_text=("description",))


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


def parse_int(text: str, key: str, where: str) -> int:
    value = text.strip()
    if not re.fullmatch(r"-?\d+", value):
        raise InputError(where, f"{key}: expected an integer, found {_excerpt(value)}")
    return int(value)


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


def _none(text: str | None) -> str | None:
    """The value, or None for `None`; interned, since a log repeats the same few (millions of records)."""
    if text is None:
        return None
    value = text.strip()
    return None if value in ("None", "") else sys.intern(value)


def _excerpt(text: str, limit: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")
